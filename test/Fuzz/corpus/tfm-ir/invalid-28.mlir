func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x1xf32>) {
  %y = tfm.layer_norm %x, %w eps 1.0e-5 : tensor<2x4x8xf32>, tensor<8x1xf32>
  return
}
