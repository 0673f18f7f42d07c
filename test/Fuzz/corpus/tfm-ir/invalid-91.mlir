func.func @f(%x: tensor<f32>, %b: tensor<8xf32>) {
  %y = tfm.bias_add %x, %b : tensor<f32>, tensor<8xf32>
  return
}
