// RUN: loom-opt %s -split-input-file --tfm-set-plan="tp=4 pp=2 dp=2 sp=true" | FileCheck %s --check-prefix=TP4
// RUN: loom-opt %s -split-input-file --tfm-set-plan="cp=4 cp-comm-type=a2a+p2p hierarchical-cp-sizes=2,2" | FileCheck %s --check-prefix=HCP
// RUN: loom-opt %s -split-input-file --tfm-set-plan="cp=2 cp-comm-type=p2p,a2a" | FileCheck %s --check-prefix=PERLAYER
// RUN: loom-opt %s -split-input-file --tfm-set-plan="tp=2 dp=4 pp=2 vpp=2 ep=2 etp=1 order=tp-cp-ep-pp-dp" | FileCheck %s --check-prefix=EXPERT

// TP4: module attributes {tfm.model = {num_layers = 2 : i64}, tfm.plan = #tfm.plan<tp = 4, dp = 2, pp = 2, sequence_parallel = true>}
// HCP: tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [2, 2]>
// PERLAYER: tfm.plan = #tfm.plan<cp = 2, cp_comm_type = ["p2p", "a2a"]>
// EXPERT: tfm.plan = #tfm.plan<tp = 2, dp = 4, pp = 2, vpp = 2, ep = 2, etp = 1, order = "tp-cp-ep-pp-dp">
module attributes {tfm.model = {num_layers = 2 : i64}} {}

// -----

// An existing plan is replaced.
// TP4: tfm.plan = #tfm.plan<tp = 4, dp = 2, pp = 2, sequence_parallel = true>
// TP4-NOT: cp = 8
module attributes {tfm.plan = #tfm.plan<cp = 8>, tfm.model = {num_layers = 2 : i64}} {}
