func.func @f(%x: tensor<2x4x8xbf16>, %w: tensor<8xf32>) {
  %y = tfm.layer_norm %x, %w eps 1.0e-5 : tensor<2x4x8xbf16>, tensor<8xf32>
  return
}
