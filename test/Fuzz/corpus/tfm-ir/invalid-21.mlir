func.func @f(%t: tensor<2x4xi32>) {
  %p = tfm.position_ids %t reset_at_eod -1 : tensor<2x4xi32>
  return
}
