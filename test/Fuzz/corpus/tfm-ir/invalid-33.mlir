func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<16xf32>) {
  %y = tfm.rms_norm %x, %w eps 1.0e-6 : tensor<2x4x8xf32>, tensor<16xf32>
  return
}
