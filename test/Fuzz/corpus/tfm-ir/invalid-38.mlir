func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf16>) {
  %y = tfm.linear %x, %w : tensor<2x4x32xf32>, tensor<96x32xf16> -> tensor<2x4x96xf32>
  return
}
