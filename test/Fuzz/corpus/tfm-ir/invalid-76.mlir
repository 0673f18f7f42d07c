func.func @f(%x: tensor<2x4x8xf32>) {
  %y = tfm.dropout %x p -0.5 seed 0 : tensor<2x4x8xf32>
  return
}
