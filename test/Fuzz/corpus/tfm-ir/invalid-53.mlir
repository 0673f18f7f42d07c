func.func @f(%x: tensor<2x4x100xf32>, %p: tensor<2x4xi32>) {
  %y = tfm.rope_grad %x, %p head_dim 16 theta 1.0e4 : tensor<2x4x100xf32>, tensor<2x4xi32>
  return
}
