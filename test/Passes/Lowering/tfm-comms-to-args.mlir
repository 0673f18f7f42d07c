// RUN: loom-opt %s -split-input-file --tfm-comms-to-args -verify-diagnostics | FileCheck %s

mesh.mesh @dense(shape = 1x2x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}

// One communicator argument per group kind, in first-use order; a kind used
// twice is passed once. Axis names are listed fastest first (tp, cp, dp).
// CHECK-LABEL: func.func @groups
// CHECK-SAME: (%{{.*}}: tensor<4xf32>, %{{.*}}: !llvm.ptr {tfm.comm = "tp"}, %{{.*}}: !llvm.ptr {tfm.comm = "cp-dp"})
func.func @groups(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = mesh.all_reduce %x on @dense mesh_axes = [3] : tensor<4xf32> -> tensor<4xf32>
  %b = mesh.all_reduce %a on @dense mesh_axes = [1, 2] : tensor<4xf32> -> tensor<4xf32>
  %c = mesh.all_reduce %b on @dense mesh_axes = [3] : tensor<4xf32> -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// A split dropout needs the group it is split over (to find its slice);
// split over several axes, the group of all of them.
// CHECK-LABEL: func.func @split_dropout
// CHECK-SAME: (%{{.*}}: tensor<2x4xf32, {{.*}}>, %{{.*}}: !llvm.ptr {tfm.comm = "tp"})
func.func @split_dropout(%x: tensor<2x4xf32, #tfm.dist<@dense, [[], [tp]]>>) -> tensor<2x4xf32, #tfm.dist<@dense, [[], [tp]]>> {
  %y = tfm.dropout %x p 0.1 seed 7 : tensor<2x4xf32, #tfm.dist<@dense, [[], [tp]]>>
  return %y : tensor<2x4xf32, #tfm.dist<@dense, [[], [tp]]>>
}
// CHECK-LABEL: func.func @split_two_axes
// CHECK-SAME: !llvm.ptr {tfm.comm = "tp-cp"}
func.func @split_two_axes(%x: tensor<2x4xf32, #tfm.dist<@dense, [[], [cp, tp]]>>) -> tensor<2x4xf32, #tfm.dist<@dense, [[], [cp, tp]]>> {
  %y = tfm.dropout %x p 0.1 seed 7 : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp, tp]]>>
  return %y : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp, tp]]>>
}

// A vocab-parallel embedding finds its rows in the group that splits the
// table; a whole one needs no communicator.
// CHECK-LABEL: func.func @vocab_parallel
// CHECK-SAME: !llvm.ptr {tfm.comm = "tp"})
func.func @vocab_parallel(%t: tensor<2x4xi32, #tfm.dist<@dense>>, %w: tensor<8x4xf32, #tfm.dist<@dense, [[tp]]>>) -> tensor<2x4x4xf32, #tfm.dist<@dense, partial = sum[tp]>> {
  %e = tfm.embedding %t, %w : tensor<2x4xi32, #tfm.dist<@dense>>, tensor<8x4xf32, #tfm.dist<@dense, [[tp]]>> -> tensor<2x4x4xf32, #tfm.dist<@dense, partial = sum[tp]>>
  return %e : tensor<2x4x4xf32, #tfm.dist<@dense, partial = sum[tp]>>
}
// CHECK-LABEL: func.func @whole_table
// CHECK-NOT: tfm.comm
// CHECK: return
func.func @whole_table(%t: tensor<2x4xi32>, %w: tensor<8x4xf32>) -> tensor<2x4x4xf32> {
  %e = tfm.embedding %t, %w : tensor<2x4xi32>, tensor<8x4xf32> -> tensor<2x4x4xf32>
  return %e : tensor<2x4x4xf32>
}

// CHECK-LABEL: func.func @none(%{{.*}}: tensor<4xf32>) -> tensor<4xf32>
func.func @none(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// A mesh that tfm-materialize-mesh did not create has no axis names.
mesh.mesh @bare(shape = 2)
func.func @unnamed(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{mesh @bare has no tfm.mesh_axes (create it with tfm-materialize-mesh)}}
  %a = mesh.all_reduce %x on @bare mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

mesh.mesh @dense(shape = 1x2x1x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// A collective over axes out of the mesh's order: the runtime's group orders
// its ranks by the mesh, so gathered pieces would come in another order.
func.func @out_of_order(%x: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{runs over mesh axes out of the mesh's order}}
  %a = mesh.all_gather %x on @dense mesh_axes = [1, 0] gather_axis = 0 : tensor<4xf32> -> tensor<8xf32>
  return %a : tensor<8xf32>
}

// -----

mesh.mesh @dense(shape = 1x2x1x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// A collective over no axes has no group to run on.
func.func @no_axes(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{a collective over no mesh axes}}
  %a = mesh.all_reduce %x on @dense mesh_axes = [] : tensor<4xf32> -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// A caller takes its callees' communicators and passes them along.
mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
func.func private @block(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = mesh.all_reduce %x on @dense mesh_axes = [3] : tensor<4xf32> -> tensor<4xf32>
  return %a : tensor<4xf32>
}
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[TP:.*]]: !llvm.ptr {tfm.comm = "tp"})
// CHECK: call @block(%[[X]], %[[TP]])
func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = call @block(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// Hierarchical context parallelism: the level-0 all-to-all and the level-1
// ring take the plan's hierarchical cp groups (RankGen's "hcp:<level>").
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [2, 2]>} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  // CHECK-LABEL: func.func @levels
  // CHECK-SAME: (%{{.*}}: tensor<1x4x32xf32>, %{{.*}}: !llvm.ptr {tfm.comm = "hcp:0"}, %{{.*}}: !llvm.ptr {tfm.comm = "hcp:1"})
  func.func @levels(%x: tensor<1x4x32xf32>) -> tensor<1x8x16xf32> {
    %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x4x32xf32> -> tensor<1x8x16xf32>
    %z = tfm.ring_shift %y on @dense axis "cp" level 1 offset 1 : tensor<1x8x16xf32>
    return %z : tensor<1x8x16xf32>
  }
}

// -----

// A level the plan has no hierarchical groups for.
module attributes {tfm.plan = #tfm.plan<cp = 4>} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @no_levels(%x: tensor<1x4x32xf32>) -> tensor<1x4x32xf32> {
    // expected-error @+1 {{runs over level 1 of the hierarchical groups of cp, which the plan does not have}}
    %z = tfm.ring_shift %x on @dense axis "cp" level 1 offset 1 : tensor<1x4x32xf32>
    return %z : tensor<1x4x32xf32>
  }
}
