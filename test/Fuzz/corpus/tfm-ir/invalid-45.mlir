func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %dy: tensor<2x4x96xbf16>) {
  %dx, %dw = tfm.linear_grad %x, %w, %dy : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<2x4x96xbf16>
  return
}
