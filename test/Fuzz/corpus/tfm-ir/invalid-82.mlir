func.func @f(%l: tensor<2x4x64xf32>, %y: tensor<2x4xi32>, %m: tensor<4x2xf32>) {
  %loss:3 = tfm.cross_entropy %l, %y, %m : tensor<2x4x64xf32>, tensor<2x4xi32>, tensor<4x2xf32> -> tensor<f32>
  return
}
