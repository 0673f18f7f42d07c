// RUN: not loom-opt %s --tfm-set-expert-capacity="capacity-factor=1 drop-policy=random" 2>&1 | FileCheck %s --check-prefix=POLICY
// RUN: not loom-opt %s --tfm-set-expert-capacity="pad-to-capacity=true" 2>&1 | FileCheck %s --check-prefix=PAD
// RUN: not loom-opt %s --tfm-set-expert-capacity="capacity-factor=-1" 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not loom-opt %s -split-input-file --tfm-set-expert-capacity="capacity-factor=1" 2>&1 | FileCheck %s

// POLICY: error: drop-policy 'random' is not probs or position
// PAD: error: pad-to-capacity needs a capacity factor
// NEG: error: capacity-factor -1{{.*}} must be a finite number >= 0

// Experts not from a router: nothing to rank the pairs by.
func.func @f(%x: tensor<2x8x16xf32>, %e: tensor<2x8x2xi32>) -> tensor<32x16xf32> {
  // CHECK: error: 'tfm.moe_permute' op dispatches experts that do not come from a tfm.moe_route: no probabilities to drop by
  %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
      : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  return %rows : tensor<32x16xf32>
}

// -----

// The rows read by an op the pass cannot resize through.
func.func @g(%x: tensor<2x8x16xf32>, %l: tensor<2x8x4xf32>) -> tensor<32x16xf32> {
  %p, %e = tfm.moe_route %l top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
  %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
      : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  // CHECK: error: 'func.return' op reads the dispatched rows; tfm-set-expert-capacity cannot resize them through it
  return %rows : tensor<32x16xf32>
}
