func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<4xf32>) {
  %y = tfm.layer_norm %x, %w, %b eps 1.0e-5 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<4xf32>
  return
}
