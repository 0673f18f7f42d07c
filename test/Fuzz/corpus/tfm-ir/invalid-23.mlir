func.func @f(%t: tensor<2x4xi32>, %g: tensor<2x5x8xf32>) {
  %d = tfm.embedding_grad %t, %g : tensor<2x4xi32>, tensor<2x5x8xf32> -> tensor<16x8xf32>
  return
}
