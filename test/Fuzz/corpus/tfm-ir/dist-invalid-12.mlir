module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<8xf32, #tfm.dist<@dense>>) {
    %y = tfm.reshard %x : tensor<8xf32, #tfm.dist<@dense>> -> tensor<8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}
