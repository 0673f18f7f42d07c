func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %l: tensor<2x4x8xf32>) {
  %dq, %dk, %dv = tfm.attention_grad %q, %k, %v, %q, %l, %q heads 4 kv_heads 3 head_dim 16 scale 0.25 mask causal
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4x8xf32>
  return
}
