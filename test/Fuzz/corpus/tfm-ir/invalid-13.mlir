func.func @f(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) {
  %y = tfm.block embedding ins(%t : tensor<2x4xi32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4xi32>):
    tfm.yield %a : tensor<2x4xi32>
  }
  return
}
