// RUN: loom-opt %s -split-input-file --tfm-prepare-lowering -verify-diagnostics

// tfm-prepare-lowering verifies distributions after expanding the ring
// (and on its result, the lowering's input): sharded IR that breaks a rule
// fails there rather than lowering to wrong numbers.

// Test: a partial sum added to a replicated value reaches the lowering
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%p: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, %r: tensor<4xf32, #tfm.dist<@dense>>) -> tensor<4xf32, #tfm.dist<@dense>> {
    // expected-error @+1 {{the operands must be distributed alike, but lhs is a partial sum over tp and rhs is replicated}}
    %s = tfm.add %p, %r : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4xf32, #tfm.dist<@dense>> -> tensor<4xf32, #tfm.dist<@dense>>
    return %s : tensor<4xf32, #tfm.dist<@dense>>
  }
}

// -----

// Test: a ring hop of a contiguous split, as a wrong expansion could write
#c = #tfm.dist<@dense, [[], [cp]]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%k: tensor<1x4x16xf32, #c>) -> tensor<1x4x16xf32, #c> {
    // expected-error @+1 {{the ring over cp needs dim 1 split over it alone, in the load-balanced order of 2 chunks per rank}}
    %k1, %v1 = tfm.ring_shift %k, %k on @dense axis "cp" offset 1 : tensor<1x4x16xf32, #c>, tensor<1x4x16xf32, #c>
    return %k1 : tensor<1x4x16xf32, #c>
  }
}
