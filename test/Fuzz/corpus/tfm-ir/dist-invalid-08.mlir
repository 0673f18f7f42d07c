func.func @f() attributes {tfm.mesh_axes = ["tp"]} {
  return
}
