func.func @dropout_p0(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %y = tfm.dropout %x p 0.0 seed 7 : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

func.func @dropout_kept(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %y = tfm.dropout %x p 0.1 seed 7 : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

func.func @cast_same_type(%x: tensor<2x4xbf16>) -> tensor<2x4xbf16> {
  %y = tfm.cast %x : tensor<2x4xbf16> to tensor<2x4xbf16>
  return %y : tensor<2x4xbf16>
}

func.func @cast_kept(%x: tensor<2x4xbf16>) -> tensor<2x4xf32> {
  %y = tfm.cast %x : tensor<2x4xbf16> to tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

func.func @dead_ops(%x: tensor<2x4x8xf32>) {
  %y = tfm.silu %x : tensor<2x4x8xf32>
  %z = tfm.add %y, %x : tensor<2x4x8xf32>
  return
}
