func.func @f(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  %y = tfm.linear %x, %w : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  return
}
