func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) {
  %y = tfm.layer_norm %x, %w eps 0.0 : tensor<2x4x8xf32>, tensor<8xf32>
  return
}
