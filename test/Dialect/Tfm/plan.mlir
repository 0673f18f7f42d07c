// RUN: loom-opt %s -split-input-file --verify-roundtrip | FileCheck %s
// RUN: loom-opt %s -split-input-file --mlir-print-op-generic | loom-opt -split-input-file | FileCheck %s

// Sizes equal to their defaults are omitted when printed.
// CHECK: module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 2, pp = 2, sequence_parallel = true>}
module attributes {tfm.plan = #tfm.plan<tp = 2, cp = 1, dp = 2, pp = 2, sequence_parallel = true>} {}

// -----

// CHECK: #tfm.plan<cp = 8, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [4, 2]>
module attributes {tfm.plan = #tfm.plan<cp = 8, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [4, 2]>} {}

// -----

// Expert parallelism, virtual stages, per-layer cp communication and the
// tp-pp-dp order.
// CHECK: #tfm.plan<tp = 2, cp = 2, dp = 4, pp = 2, vpp = 2, ep = 4, etp = 1, cp_comm_type = ["p2p", "a2a"], order = "tp-cp-ep-pp-dp">
module attributes {tfm.plan = #tfm.plan<order = "tp-cp-ep-pp-dp", tp = 2, cp = 2, dp = 4, pp = 2, vpp = 2, ep = 4, etp = 1, cp_comm_type = ["p2p", "a2a"]>} {}

// -----

// CHECK: #tfm.plan<>
module attributes {tfm.plan = #tfm.plan<>} {}
