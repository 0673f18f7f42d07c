func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %t: tensor<2x4xi32>) {
  %o, %l = tfm.attention %q, %k, %v tokens %t heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal_document eod 0 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}
