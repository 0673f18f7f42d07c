func.func @f(%x: tensor<8xf32, #tfm.dist<@dense, partial = mean[tp]>>) {
  return
}
