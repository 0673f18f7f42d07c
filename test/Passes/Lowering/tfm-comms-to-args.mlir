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

// A split dropout needs the group it is split over (to find its slice).
// CHECK-LABEL: func.func @split_dropout
// CHECK-SAME: (%{{.*}}: tensor<2x4xf32>, %{{.*}}: !llvm.ptr {tfm.comm = "tp"})
func.func @split_dropout(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %y = tfm.dropout %x p 0.1 seed 7 {split_axis = 3 : i64, split_dim = 1 : i64} : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// CHECK-LABEL: func.func @none(%{{.*}}: tensor<4xf32>) -> tensor<4xf32>
func.func @none(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// A mesh that tfm-materialize-mesh did not create has no axis names.
mesh.mesh @bare(shape = 2)
func.func @unnamed(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{mesh @bare has no tfm.mesh_axes; create it with tfm-materialize-mesh}}
  %a = mesh.all_reduce %x on @bare mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

mesh.mesh @dense(shape = 1x2x1x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// A collective over no axes has no group to run on.
func.func @no_axes(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{a collective over no mesh axes}}
  %a = mesh.all_reduce %x on @dense mesh_axes = [] : tensor<4xf32> -> tensor<4xf32>
  return %a : tensor<4xf32>
}
