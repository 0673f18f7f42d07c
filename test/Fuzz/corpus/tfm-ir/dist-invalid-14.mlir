func.func @f(%x: tensor<6xf32>) {
  %y = tfm.permute_chunks %x dim 0 order [0, 2, 1, 3] : tensor<6xf32> -> tensor<6xf32>
  return
}
