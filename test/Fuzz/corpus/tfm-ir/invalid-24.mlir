func.func @f(%t: tensor<2x4xi32>, %g: tensor<2x4x8xf32>) {
  %d = tfm.embedding_grad %t, %g : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x6xf32>
  return
}
