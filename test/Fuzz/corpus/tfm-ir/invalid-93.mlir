func.func @f(%k: tensor<2x8x30xf32>) {
  %r = tfm.repeat_kv %k factor 2 head_dim 16 : tensor<2x8x30xf32> -> tensor<2x8x60xf32>
  return
}
