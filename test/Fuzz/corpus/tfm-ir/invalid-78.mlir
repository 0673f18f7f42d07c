func.func @f(%x: tensor<2x4x8xf64>) {
  %y = tfm.silu %x : tensor<2x4x8xf64>
  return
}
