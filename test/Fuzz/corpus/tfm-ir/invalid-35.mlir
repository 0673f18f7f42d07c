func.func @f(%x: tensor<8xf32>, %w: tensor<4x8xf32>) {
  %y = tfm.linear %x, %w : tensor<8xf32>, tensor<4x8xf32> -> tensor<4xf32>
  return
}
