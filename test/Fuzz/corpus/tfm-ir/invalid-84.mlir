module attributes {tfm.plan = #tfm.plan<tp = 4>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x4) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<6x8xf32>
  func.func @f() {
    %w = tfm.get_param @w : tensor<1x8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}
