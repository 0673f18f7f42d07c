module attributes {tfm.plan = #tfm.plan<tp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<4x8xf32>
  func.func @f() {
    %w = tfm.get_param @w : tensor<4x4xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}
