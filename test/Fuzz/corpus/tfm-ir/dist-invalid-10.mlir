func.func @f(%x: tensor<2x8xi32> {tfm.input = "ids"}) {
  return
}
