// RUN: loom-opt %s -split-input-file --tfm-fuse-linear-swiglu | FileCheck %s

// A Llama MLP forward and backward: gate, up and their SwiGLU become one op
// at the first of the linears; down's backward and the SwiGLU's gradient of
// its input gradient one op at down's backward.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[G:.*]], %[[U:.*]], %[[A:.*]] = tfm.linear_swiglu %arg0, %arg1, %arg2 : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
// CHECK: %[[Y:.*]] = tfm.linear %[[A]], %arg3
// CHECK: %[[DG:.*]], %[[DU:.*]], %[[DW:.*]] = tfm.linear_grad_swiglu %[[A]], %arg3, %arg4 swiglu(%[[G]], %[[U]]) : tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<2x4x8xf32>
// CHECK-NOT: tfm.swiglu
// CHECK: return %[[Y]], %[[DG]], %[[DU]], %[[DW]]
func.func @mlp(%x: tensor<2x4x8xf32>, %wg: tensor<16x8xf32>, %wu: tensor<16x8xf32>, %wd: tensor<8x16xf32>,
               %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<8x16xf32>) {
  %g = tfm.linear %x, %wg : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %u = tfm.linear %x, %wu : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %a = tfm.swiglu %g, %u : tensor<2x4x16xf32>
  %y = tfm.linear %a, %wd : tensor<2x4x16xf32>, tensor<8x16xf32> -> tensor<2x4x8xf32>
  %da, %dw = tfm.linear_grad %a, %wd, %dy : tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<2x4x8xf32>
  %dg, %du = tfm.swiglu_grad %g, %u, %da : tensor<2x4x16xf32>
  return %y, %dg, %du, %dw : tensor<2x4x8xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<8x16xf32>
}

// -----

// With biases on both (gate's first); the up linear written first.
// CHECK-LABEL: func.func @biased
// CHECK: tfm.linear_swiglu %arg0, %arg1, %arg2 bias(%arg3, %arg4) : tensor<2x4x8xf32>, tensor<16x8xf32> bias(tensor<16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
func.func @biased(%x: tensor<2x4x8xf32>, %wg: tensor<16x8xf32>, %wu: tensor<16x8xf32>, %bg: tensor<16xf32>,
                  %bu: tensor<16xf32>) -> tensor<2x4x16xf32> {
  %u = tfm.linear %x, %wu, %bu : tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
  %g = tfm.linear %x, %wg, %bg : tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
  %a = tfm.swiglu %g, %u : tensor<2x4x16xf32>
  return %a : tensor<2x4x16xf32>
}

// -----

// Not fused: gate and up of different inputs, a bias on one only, and a
// SwiGLU's gradient whose output gradient something else reads.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: linear_swiglu
// CHECK-NOT: linear_grad_swiglu
func.func @kept(%x: tensor<2x4x8xf32>, %x2: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>,
                %wd: tensor<8x16xf32>, %dy: tensor<2x4x8xf32>)
    -> (tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>) {
  %g = tfm.linear %x, %w : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %u = tfm.linear %x2, %w : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %a = tfm.swiglu %g, %u : tensor<2x4x16xf32>
  %u2 = tfm.linear %x, %w, %b : tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
  %a2 = tfm.swiglu %g, %u2 : tensor<2x4x16xf32>
  %da, %dw = tfm.linear_grad %a, %wd, %dy : tensor<2x4x16xf32>, tensor<8x16xf32>, tensor<2x4x8xf32>
  %dg, %du = tfm.swiglu_grad %g, %u, %da : tensor<2x4x16xf32>
  return %a2, %da, %dg, %du : tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
}
