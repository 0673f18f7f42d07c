// RUN: loom-opt %s -split-input-file --tfm-params-to-args -verify-diagnostics | FileCheck %s

// Parameters become trailing arguments in declaration order (not read
// order), each read once even if read twice, unused ones are not passed.

tfm.param @a init(ones) : tensor<8xf32>
tfm.param @unused init(zeros) : tensor<8xf32>
tfm.param @b init(normal, std = 0.02) : tensor<8x8xf32>

// CHECK-LABEL: func.func @f
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>, %[[A:.*]]: tensor<8xf32> {tfm.param = "a"}, %[[B:.*]]: tensor<8x8xf32> {tfm.param = "b"})
// CHECK-NOT: tfm.get_param
// CHECK: tfm.linear %[[X]], %[[B]], %[[A]]
// CHECK: tfm.linear %{{.*}}, %[[B]], %[[A]]
func.func @f(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %b = tfm.get_param @b : tensor<8x8xf32>
  %a = tfm.get_param @a : tensor<8xf32>
  %y = tfm.linear %x, %b, %a : tensor<2x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  %b2 = tfm.get_param @b : tensor<8x8xf32>
  %z = tfm.linear %y, %b2, %a : tensor<2x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  return %z : tensor<2x8xf32>
}

// A function without parameter reads keeps its signature.
// CHECK-LABEL: func.func @g(%{{.*}}: tensor<2x8xf32>) -> tensor<2x8xf32>
func.func @g(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  return %x : tensor<2x8xf32>
}

// -----

tfm.param @a init(ones) : tensor<8xf32>

// Blocks must be inlined first: their regions are isolated from the
// function's arguments.
func.func @blocked(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{inline tfm.block regions (tfm-inline-blocks) before tfm-params-to-args}}
  %y = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%v: tensor<2x4x8xf32>):
    %w = tfm.get_param @a : tensor<8xf32>
    %r = tfm.rms_norm %v, %w eps 1.0e-6 : tensor<2x4x8xf32>, tensor<8xf32>
    tfm.yield %r : tensor<2x4x8xf32>
  }
  return %y : tensor<2x4x8xf32>
}

// -----

// A caller passes the parameters its callee reads (a pipelined step calls
// one function per block): callees are rewritten first, then each call
// reads what its callee takes, which the caller takes in turn.
tfm.param @w init(ones) : tensor<8xf32>
// CHECK-LABEL: func.func private @block
// CHECK-SAME: (%{{.*}}: tensor<8xf32>, %{{.*}}: tensor<8xf32> {tfm.param = "w"})
func.func private @block(%x: tensor<8xf32>) -> tensor<8xf32> {
  %w = tfm.get_param @w : tensor<8xf32>
  %y = tfm.add %x, %w : tensor<8xf32>
  return %y : tensor<8xf32>
}
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[X:.*]]: tensor<8xf32>, %[[W:.*]]: tensor<8xf32> {tfm.param = "w"})
// CHECK: call @block(%[[X]], %[[W]])
// CHECK: call @block(%{{.*}}, %[[W]])
func.func @step(%x: tensor<8xf32>) -> tensor<8xf32> {
  %a = call @block(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %b = call @block(%a) : (tensor<8xf32>) -> tensor<8xf32>
  return %b : tensor<8xf32>
}
