module {
  mesh.mesh @a(shape = 2) {tfm.mesh_axes = ["tp"]}
  mesh.mesh @b(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<8xf32, #tfm.dist<@a>>) {
    %y = tfm.reshard %x : tensor<8xf32, #tfm.dist<@a>> -> tensor<8xf32, #tfm.dist<@b, [[tp]]>>
    return
  }
}
