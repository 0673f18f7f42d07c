func.func @f(%t: tensor<4xi32>) {
  %p = tfm.position_ids %t : tensor<4xi32>
  return
}
