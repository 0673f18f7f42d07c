func.func @f(%k: tensor<2x8x32xf32>) {
  %r = tfm.repeat_kv_grad %k factor 0 head_dim 16 : tensor<2x8x32xf32> -> tensor<2x8x32xf32>
  return
}
