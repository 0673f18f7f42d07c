func.func @f(%x: tensor<8xf32, #tfm.dist<@dense, [[] chunks(0, 0, 1, 2)]>>) {
  return
}
