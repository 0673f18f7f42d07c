// RUN: loom-opt %s -split-input-file --tfm-pair-ropes | FileCheck %s

// q and k rotated at the same positions: one rope_pair where q's rope
// stood (k is known there); their gradients: one rope_pair_grad.
// CHECK-LABEL: func.func @qk
// CHECK: %[[Q:.*]], %[[K:.*]] = tfm.rope_pair %arg0, %arg1, %arg2 head_dim 4 theta 1.000000e+04 : tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4xi32>
// CHECK: %[[DK:.*]], %[[DQ:.*]] = tfm.rope_pair_grad %[[K]], %[[Q]], %arg2 head_dim 4 theta 1.000000e+04 : tensor<2x4x4xf32>, tensor<2x4x8xf32>, tensor<2x4xi32>
// CHECK-NOT: tfm.rope
// CHECK: return %[[DQ]], %[[DK]]
func.func @qk(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>, %pos: tensor<2x4xi32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>) {
  %q2 = tfm.rope %q, %pos head_dim 4 theta 1.0e+04 : tensor<2x4x8xf32>, tensor<2x4xi32>
  %k2 = tfm.rope %k, %pos head_dim 4 theta 1.0e+04 : tensor<2x4x4xf32>, tensor<2x4xi32>
  %dk = tfm.rope_grad %k2, %pos head_dim 4 theta 1.0e+04 : tensor<2x4x4xf32>, tensor<2x4xi32>
  %dq = tfm.rope_grad %q2, %pos head_dim 4 theta 1.0e+04 : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %dq, %dk : tensor<2x4x8xf32>, tensor<2x4x4xf32>
}

// -----

// The second input computed after the first rope, which nothing reads
// before the second: the pair stands where the second stood.
// CHECK-LABEL: func.func @later
// CHECK: %[[K:.*]] = tfm.add
// CHECK-NEXT: tfm.rope_pair %arg0, %[[K]], %arg2
func.func @later(%q: tensor<2x4x8xf32>, %k: tensor<2x4x4xf32>, %pos: tensor<2x4xi32>) -> (tensor<2x4x8xf32>, tensor<2x4x4xf32>) {
  %q2 = tfm.rope %q, %pos head_dim 4 theta 1.0e+04 : tensor<2x4x8xf32>, tensor<2x4xi32>
  %k1 = tfm.add %k, %k : tensor<2x4x4xf32>
  %k2 = tfm.rope %k1, %pos head_dim 4 theta 1.0e+04 : tensor<2x4x4xf32>, tensor<2x4xi32>
  return %q2, %k2 : tensor<2x4x8xf32>, tensor<2x4x4xf32>
}

// -----

// Not paired: other positions, another theta, or the second input computed
// from the first's result.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: rope_pair
func.func @kept(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %p1: tensor<2x4xi32>, %p2: tensor<2x4xi32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %a = tfm.rope %q, %p1 head_dim 4 theta 1.0e+04 : tensor<2x4x8xf32>, tensor<2x4xi32>
  %b = tfm.rope %k, %p2 head_dim 4 theta 1.0e+04 : tensor<2x4x8xf32>, tensor<2x4xi32>
  %c = tfm.rope %k, %p1 head_dim 4 theta 5.0e+05 : tensor<2x4x8xf32>, tensor<2x4xi32>
  %d = tfm.add %a, %a : tensor<2x4x8xf32>
  %e = tfm.rope %d, %p1 head_dim 4 theta 1.0e+04 : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %b, %c, %e : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
