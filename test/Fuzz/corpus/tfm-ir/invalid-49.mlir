func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  %y = tfm.rope %x, %p head_dim 0 theta 1.0e4 : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}
