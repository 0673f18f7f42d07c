func.func @f(%x: tensor<2x4x8xf32>, %b: tensor<4xf32>) {
  %y = tfm.bias_add %x, %b : tensor<2x4x8xf32>, tensor<4xf32>
  return
}
