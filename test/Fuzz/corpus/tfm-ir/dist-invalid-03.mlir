func.func @f(%x: tensor<2x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>) {
  return
}
