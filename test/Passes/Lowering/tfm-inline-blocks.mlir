// RUN: loom-opt %s --pass-pipeline='builtin.module(func.func(tfm-inline-blocks))' | FileCheck %s

// Blocks disappear; their inputs replace the region arguments and the
// yielded values replace their results.

tfm.param @w init(ones) : tensor<8xf32>

// CHECK-LABEL: func.func @two_blocks
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>)
// CHECK-NOT: tfm.block
// CHECK: %[[W:.*]] = tfm.get_param @w
// CHECK: %[[N:.*]] = tfm.rms_norm %[[X]], %[[W]]
// CHECK: %[[S:.*]] = tfm.silu %[[N]]
// CHECK: %[[A:.*]] = tfm.add %[[S]], %[[X]]
// CHECK: return %[[A]], %[[N]]
func.func @two_blocks(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %n = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    %w = tfm.get_param @w : tensor<8xf32>
    %r = tfm.rms_norm %a, %w eps 1.0e-6 : tensor<2x4x8xf32>, tensor<8xf32>
    tfm.yield %r : tensor<2x4x8xf32>
  }
  %y = tfm.block head ins(%n, %x : tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>, %b: tensor<2x4x8xf32>):
    %s = tfm.silu %a : tensor<2x4x8xf32>
    %r = tfm.add %s, %b : tensor<2x4x8xf32>
    tfm.yield %r : tensor<2x4x8xf32>
  }
  return %y, %n : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// A block that passes its input through.
// CHECK-LABEL: func.func @passthrough
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xi32>)
// CHECK-NEXT: return %[[X]]
func.func @passthrough(%x: tensor<2x4xi32>) -> tensor<2x4xi32> {
  %y = tfm.block embedding ins(%x : tensor<2x4xi32>) -> tensor<2x4xi32> {
  ^bb0(%a: tensor<2x4xi32>):
    tfm.yield %a : tensor<2x4xi32>
  }
  return %y : tensor<2x4xi32>
}
