// RUN: loom-opt %s -split-input-file --tfm-materialize-mesh | FileCheck %s

// The mesh axes are the plan order reversed, so the row-major linear index of
// a process is its Megatron global rank: for tp-cp-ep-dp-pp,
// rank = tp + cp*TP + dp*TP*CP + pp*TP*CP*DP.

// CHECK-LABEL: module attributes {tfm.plan = #tfm.plan<tp = 4, dp = 2, pp = 2>}
// CHECK-NEXT: mesh.mesh @dense(shape = 2x2x1x4) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// CHECK-NOT: mesh.mesh @expert
module attributes {tfm.plan = #tfm.plan<tp = 4, dp = 2, pp = 2>} {}

// -----

// --use-tp-pp-dp-mapping: pp varies faster than dp.
// CHECK-LABEL: module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 2, pp = 2, order = "tp-cp-ep-pp-dp">}
// CHECK-NEXT: mesh.mesh @dense(shape = 2x2x1x2) {tfm.mesh_axes = ["dp", "pp", "cp", "tp"]}
module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 2, pp = 2, order = "tp-cp-ep-pp-dp">} {}

// -----

// MoE folding (seed example ETP1-PP2-EP4-EDP2 over TP2-DP4-PP2): the expert
// mesh covers the same 16 ranks with axes pp, edp, ep, etp.
// CHECK-LABEL: module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 4, pp = 2, ep = 4, etp = 1>}
// CHECK-NEXT: mesh.mesh @dense(shape = 2x4x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// CHECK-NEXT: mesh.mesh @expert(shape = 2x2x4x1) {tfm.mesh_axes = ["pp", "dp", "ep", "tp"]}
module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 4, pp = 2, ep = 4, etp = 1>} {}

// -----

// Running the pass again replaces the meshes instead of duplicating them.
// CHECK-LABEL: module attributes {tfm.plan = #tfm.plan<tp = 8, dp = 2>}
// CHECK-NEXT: mesh.mesh @dense(shape = 1x2x1x8)
// CHECK-NOT: mesh.mesh
module attributes {tfm.plan = #tfm.plan<tp = 8, dp = 2>} {
  mesh.mesh @dense(shape = 4)
}
