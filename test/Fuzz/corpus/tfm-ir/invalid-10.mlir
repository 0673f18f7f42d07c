func.func @f(%x: tensor<2x4x8xf32>) {
  %y = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf16>):
    tfm.yield %a : tensor<2x4x8xf16>
  }
  return
}
