// RUN: loom-opt %s -split-input-file -verify-diagnostics

// One case per #tfm.plan verifier message.

// Test: sizes are at least 1
// expected-error @+1 {{plan tp 0 must be at least 1}}
module attributes {tfm.plan = #tfm.plan<tp = 0>} {}

// -----

// Test: pp at least 1
// expected-error @+1 {{plan pp -2 must be at least 1}}
module attributes {tfm.plan = #tfm.plan<pp = -2>} {}

// -----

// Test: etp is at least 1, or 0 for "same as tp"
// expected-error @+1 {{plan etp -1 must be at least 1 (or 0 for tp)}}
module attributes {tfm.plan = #tfm.plan<etp = -1>} {}

// -----

// Test: virtual stages need a pipeline
// expected-error @+1 {{plan vpp 2 needs pipeline parallelism (pp > 1)}}
module attributes {tfm.plan = #tfm.plan<vpp = 2>} {}

// -----

// Test: an empty cp_comm_type list
// expected-error @+1 {{plan cp_comm_type is empty}}
module attributes {tfm.plan = #tfm.plan<cp = 2, cp_comm_type = []>} {}

// -----

// Test: an unknown cp_comm_type
// expected-error @+1 {{plan cp_comm_type "ring" is not one of "p2p", "a2a", "allgather", "a2a+p2p"}}
module attributes {tfm.plan = #tfm.plan<cp = 2, cp_comm_type = ["ring"]>} {}

// -----

// Test: hierarchical cp needs its sizes
// expected-error @+1 {{plan cp_comm_type "a2a+p2p" needs hierarchical_cp_sizes}}
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"]>} {}

// -----

// Test: hierarchical sizes multiply to cp (checked by the rank generator)
// expected-error @+1 {{plan: hierarchical context-parallel sizes [4,2] multiply to 8, not cp 4}}
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [4, 2]>} {}

// -----

// Test: a repeated order token (checked by the rank generator)
// expected-error @+1 {{plan: order 'tp-tp-cp-dp-pp' repeats token 'tp'}}
module attributes {tfm.plan = #tfm.plan<order = "tp-tp-cp-dp-pp">} {}

// -----

// Test: the expert world must tile the dense one
// expected-error @+1 {{plan: world size 2 is not divisible by etp*ep*pp = 4 (etp 1, ep 4, pp 1)}}
module attributes {tfm.plan = #tfm.plan<tp = 1, dp = 2, ep = 4>} {}

// -----

// Test: an unknown order token (checked by the rank generator)
// expected-error @+1 {{plan: unknown token 'xx' in order 'tp-xx-dp-pp'; expected tp, cp, ep, dp or pp}}
module attributes {tfm.plan = #tfm.plan<order = "tp-xx-dp-pp">} {}
