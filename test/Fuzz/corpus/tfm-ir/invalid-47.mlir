func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<8xi32>) {
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 : tensor<2x4x64xf32>, tensor<8xi32>
  return
}
