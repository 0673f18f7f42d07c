mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["dp", "cp", "tp"]}
