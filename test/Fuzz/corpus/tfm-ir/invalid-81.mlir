func.func @f(%l: tensor<2x4x64xf32>, %y: tensor<2x8xi32>, %m: tensor<2x4xf32>) {
  %loss:3 = tfm.cross_entropy %l, %y, %m : tensor<2x4x64xf32>, tensor<2x8xi32>, tensor<2x4xf32> -> tensor<f32>
  return
}
