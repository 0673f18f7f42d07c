func.func @f(%x: tensor<?x4x8xf32>) {
  %y = tfm.gelu %x tanh : tensor<?x4x8xf32>
  return
}
