// RUN: loom-opt %s -split-input-file -verify-diagnostics --tfm-materialize-mesh="world-size=8"

// expected-error @+1 {{module has no tfm.plan; run --tfm-set-plan first}}
module {}

// -----

// expected-error @+1 {{plan world size 16 (tp*cp*dp*pp) does not match world size 8}}
module attributes {tfm.plan = #tfm.plan<tp = 4, dp = 2, pp = 2>} {}
