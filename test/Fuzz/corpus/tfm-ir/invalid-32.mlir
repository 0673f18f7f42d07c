func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<6xf32>) {
  %a, %b, %c = tfm.layer_norm_grad %x, %w, %x eps 1.0e-5 : tensor<2x4x8xf32>, tensor<6xf32>
  return
}
