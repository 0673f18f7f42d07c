func.func @f(%x: tensor<2x4x8xf32>) {
  tfm.yield %x : tensor<2x4x8xf32>
}
