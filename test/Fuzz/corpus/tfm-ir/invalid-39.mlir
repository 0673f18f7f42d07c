func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %b: tensor<100xf32>) {
  %y = tfm.linear %x, %w, %b : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<100xf32> -> tensor<2x4x96xf32>
  return
}
