module attributes {tfm.plan = #tfm.plan<tp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<4x8xf32>
  func.func @local() -> tensor<4x8xf32, #tfm.dist<@dense>> {
    %w = tfm.get_param @w : tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>>
    %r = tfm.reshard %w : tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>> -> tensor<4x8xf32, #tfm.dist<@dense>>
    return %r : tensor<4x8xf32, #tfm.dist<@dense>>
  }
}
