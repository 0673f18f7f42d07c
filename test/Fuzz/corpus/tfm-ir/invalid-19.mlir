func.func @f(%t: tensor<2x4xi64>, %w: tensor<16x8xf32>) {
  %e = tfm.embedding %t, %w : tensor<2x4xi64>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return
}
