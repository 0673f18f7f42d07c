func.func @f(%x: tensor<2x4x8xf32>) {
  %y = tfm.cast %x : tensor<2x4x8xf32> to tensor<2x4x4xbf16>
  return
}
