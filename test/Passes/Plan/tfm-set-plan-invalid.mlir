// RUN: loom-opt %s -split-input-file -verify-diagnostics --tfm-set-plan="tp=0"
// RUN: not loom-opt %s --tfm-set-plan="cp=2 cp-comm-type=p2p,a2a,p2p" 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: echo 'module {}' | not loom-opt --tfm-set-plan="cp=2 cp-comm-type=p2p,a2a" 2>&1 | FileCheck %s --check-prefix=NOMODEL
// RUN: echo 'module {}' | not loom-opt --tfm-set-plan="tp=2 order=tp-cp-ep-dp-dp" 2>&1 | FileCheck %s --check-prefix=ORDER

// A plan that does not verify is reported on the module.
// expected-error @+1 {{plan tp 0 must be at least 1}}
module attributes {tfm.model = {num_layers = 2 : i64}} {}

// COUNT: error: cp_comm_type has 3 entries but the model has 2 layers
// NOMODEL: error: a per-layer cp_comm_type list needs the module's tfm.model num_layers
// ORDER: error: plan: order 'tp-cp-ep-dp-dp' repeats token 'dp'
