func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  %o, %l = tfm.attention %q, %k, %v heads 5 kv_heads 1 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}
