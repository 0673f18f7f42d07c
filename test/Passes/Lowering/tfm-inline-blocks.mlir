// RUN: loom-opt %s --pass-pipeline='builtin.module(func.func(tfm-inline-blocks))' | FileCheck %s
// RUN: loom-opt %s --pass-pipeline='builtin.module(func.func(tfm-inline-blocks))' --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

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

// Each op keeps the block it came from in its location: the report tells a
// step's forward and backward apart by it.
// LOC-LABEL: func.func @from_blocks
// LOC: tfm.silu {{.*}} loc(#[[FWD:loc[0-9]+]])
// LOC: tfm.add {{.*}} loc(#[[BWD:loc[0-9]+]])
// LOC-DAG: #[[FWD]] = loc("layer 3"(
// LOC-DAG: #[[BWD]] = loc("layer 3 backward"(
func.func @from_blocks(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %y = tfm.block layer 3 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    %s = tfm.silu %a : tensor<2x4x8xf32>
    tfm.yield %s : tensor<2x4x8xf32>
  }
  %d = tfm.block layer 3 backward ins(%y : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    %r = tfm.add %a, %a : tensor<2x4x8xf32>
    tfm.yield %r : tensor<2x4x8xf32>
  }
  return %d : tensor<2x4x8xf32>
}
