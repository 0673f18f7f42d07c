// RUN: loom-opt %s -split-input-file --tfm-localize -verify-diagnostics

// Test: a split that does not divide names the dim and the axes
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @a init(ones) : tensor<7x8xf32>
  func.func @forward() {
    // expected-error @+1 {{dim 0 of size 7 is not divisible by tp 2}}
    %w = tfm.get_param @a : tensor<7x8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}

// -----

// Test: several axes of one dim
module attributes {tfm.plan = #tfm.plan<tp = 2, cp = 2>} {
  mesh.mesh @dense(shape = 1x1x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  // expected-error @+1 {{dim 1 of size 6 is not divisible by cp 2 x tp 2}}
  func.func @f(%x: tensor<2x6xf32, #tfm.dist<@dense, [[], [cp, tp]]>>) {
    return
  }
}

// -----

// Test: chunks that do not divide
module attributes {tfm.plan = #tfm.plan<cp = 2>} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  // expected-error @+1 {{dim 0 of size 6 does not cut into 4 chunks}}
  func.func @f(%x: tensor<6xf32, #tfm.dist<@dense, [[cp] zigzag(2)]>>) {
    return
  }
}

// -----

// Test: a distribution over a mesh that does not exist
// expected-error @+1 {{distribution names mesh @dense, which is not a mesh.mesh}}
func.func @f(%x: tensor<6xf32, #tfm.dist<@dense, [[tp]]>>) {
  return
}

// -----

// Test: an axis the mesh does not have
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  // expected-error-re @+1 {{distribution {{.*}} names axis cp, which mesh @dense does not have}}
  func.func @f(%x: tensor<6xf32, #tfm.dist<@dense, [[cp]]>>) {
    return
  }
}

// -----

// Test: localizing twice
// expected-error @+1 {{shapes are already per-rank (tfm-localize ran)}}
module attributes {tfm.local_shapes} {
}
