func.func @f(%x: tensor<f32>, %w: tensor<8xf32>) {
  %y = tfm.layer_norm %x, %w eps 1.0e-5 : tensor<f32>, tensor<8xf32>
  return
}
