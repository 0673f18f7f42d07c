func.func @f(%x: tensor<2x4x64xf32>, %w: tensor<96x32xf32>) {
  %y = tfm.linear %x, %w : tensor<2x4x64xf32>, tensor<96x32xf32> -> tensor<2x4x96xf32>
  return
}
