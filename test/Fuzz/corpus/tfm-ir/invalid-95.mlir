func.func @f(%k: tensor<2x8x32xf32>) {
  %r = tfm.repeat_kv %k factor 2 head_dim 16 : tensor<2x8x32xf32> -> tensor<2x8x64xbf16>
  return
}
