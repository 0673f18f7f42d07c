func.func @f(%l: tensor<2x4x64xf32>, %y: tensor<2x8xi32>, %m: tensor<2x4xf32>, %s: tensor<2x8xf32>, %g: tensor<f32>) {
  %d = tfm.cross_entropy_grad %l, %y, %m, %s, %s, %g : tensor<2x4x64xf32>, tensor<2x8xi32>, tensor<2x4xf32>, tensor<f32>
  return
}
