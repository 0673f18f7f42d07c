// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Malformed distributions and tfm attributes are errors that name them.

// Test: an axis is used once
// expected-error @+1 {{mesh axis tp is used twice}}
func.func @f(%x: tensor<2x8xf32, #tfm.dist<@dense, [[tp], [tp]]>>) {
  return
}

// -----

// Test: an axis cannot be split and partial
// expected-error @+1 {{mesh axis tp is used twice}}
func.func @f(%x: tensor<2x8xf32, #tfm.dist<@dense, [[tp]], partial = sum[tp]>>) {
  return
}

// -----

// Test: a chunk order is a permutation
// expected-error @+1 {{chunk order of dim 0 is not a permutation}}
func.func @f(%x: tensor<8xf32, #tfm.dist<@dense, [[] chunks(0, 0, 1, 2)]>>) {
  return
}

// -----

// Test: more dims than the tensor has
// expected-error @+1 {{distribution of 3 dims on a tensor of rank 2}}
func.func @f(%x: tensor<2x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>) {
  return
}

// -----

// Test: partial values are sums or maxima
// expected-error @+1 {{partial values are sums or maxima, not min}}
func.func @f(%x: tensor<8xf32, #tfm.dist<@dense, partial = min[tp]>>) {
  return
}

// -----

// Test: an unknown reduction
// expected-error @+1 {{unknown reduction 'mean'}}
func.func @f(%x: tensor<8xf32, #tfm.dist<@dense, partial = mean[tp]>>) {
  return
}

// -----

// Test: tfm.mesh_axes names every axis of its mesh
// expected-error @+1 {{tfm.mesh_axes must name each of the 4 axes of the mesh}}
mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["dp", "cp", "tp"]}

// -----

// Test: tfm.mesh_axes names each axis once
// expected-error @+1 {{tfm.mesh_axes names axis tp twice}}
mesh.mesh @dense(shape = 1x2) {tfm.mesh_axes = ["tp", "tp"]}

// -----

// Test: tfm.mesh_axes belongs on a mesh
// expected-error @+1 {{tfm.mesh_axes belongs on a mesh.mesh}}
func.func @f() attributes {tfm.mesh_axes = ["tp"]} {
  return
}

// -----

// Test: an unknown tfm attribute
// expected-error @+1 {{unknown attribute tfm.mesh of the tfm dialect}}
func.func @f() attributes {tfm.mesh = @dense} {
  return
}

// -----

// Test: the batch inputs an entry argument can carry
// expected-error @+1 {{argument 0: tfm.input must be one of tokens, labels, loss_mask, grad_scale}}
func.func @f(%x: tensor<2x8xi32> {tfm.input = "ids"}) {
  return
}

// -----

// Test: a reshard stays on one mesh
module {
  mesh.mesh @a(shape = 2) {tfm.mesh_axes = ["tp"]}
  mesh.mesh @b(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<8xf32, #tfm.dist<@a>>) {
    // expected-error @+1 {{reshards from mesh @a to mesh @b}}
    %y = tfm.reshard %x : tensor<8xf32, #tfm.dist<@a>> -> tensor<8xf32, #tfm.dist<@b, [[tp]]>>
    return
  }
}

// -----

// Test: a reshard is one tensor (at per-rank shapes, its global shape)
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{input of global shape [8] and result of global shape [16] are not one tensor}}
    %y = tfm.reshard %x : tensor<8xf32, #tfm.dist<@dense>> -> tensor<8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}

// -----

// Test: permute_chunks takes a permutation
func.func @f(%x: tensor<8xf32>) {
  // expected-error @+1 {{order must be a permutation of two or more chunks}}
  %y = tfm.permute_chunks %x dim 0 order [0, 0] : tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

// Test: permute_chunks cuts the dim evenly
func.func @f(%x: tensor<6xf32>) {
  // expected-error @+1 {{dim 0 of size 6 does not cut into 4 chunks}}
  %y = tfm.permute_chunks %x dim 0 order [0, 2, 1, 3] : tensor<6xf32> -> tensor<6xf32>
  return
}

// -----

// Test: tfm.workspace names a function's last argument
// expected-error @+1 {{tfm.workspace names the last argument, but the function has none}}
func.func @no_workspace() attributes {tfm.workspace = 64 : i64} {
  return
}

// -----

// Test: a workspace's size is a byte count
// expected-error @+1 {{tfm.workspace must be a non-negative integer}}
func.func @bad_workspace(%ws: memref<64xi8>) attributes {tfm.workspace = "big"} {
  return
}
