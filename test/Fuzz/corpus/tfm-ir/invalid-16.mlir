func.func @f(%t: tensor<2x4xi32>, %w: tensor<16xf32>) {
  %e = tfm.embedding %t, %w : tensor<2x4xi32>, tensor<16xf32> -> tensor<2x4x8xf32>
  return
}
