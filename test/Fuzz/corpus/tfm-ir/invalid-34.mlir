func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) {
  %a, %b = tfm.rms_norm_grad %x, %w, %x eps -1.0 : tensor<2x4x8xf32>, tensor<8xf32>
  return
}
