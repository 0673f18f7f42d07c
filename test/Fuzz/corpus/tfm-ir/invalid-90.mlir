func.func @f(%x: tensor<2x4x8xf32>, %b: tensor<8xbf16>) {
  %y = tfm.bias_add %x, %b : tensor<2x4x8xf32>, tensor<8xbf16>
  return
}
