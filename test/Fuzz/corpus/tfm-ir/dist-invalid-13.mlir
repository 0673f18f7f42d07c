func.func @f(%x: tensor<8xf32>) {
  %y = tfm.permute_chunks %x dim 0 order [0, 0] : tensor<8xf32> -> tensor<8xf32>
  return
}
