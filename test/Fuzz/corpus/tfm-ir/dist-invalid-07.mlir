mesh.mesh @dense(shape = 1x2) {tfm.mesh_axes = ["tp", "tp"]}
