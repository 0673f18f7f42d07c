// RUN: loom-opt %s -split-input-file --tfm-fuse-linear-gelu | FileCheck %s

// A GPT MLP forward and backward: fc1 and its GELU become one op at fc1;
// fc2's backward and the GELU's gradient of its input gradient one op at
// fc2's backward, whose weight and bias gradients keep their readers.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[H:.*]], %[[A:.*]] = tfm.linear_gelu %arg0, %arg1, %arg2 tanh : tensor<2x4x8xf32>, tensor<32x8xf32>, tensor<32xf32> -> tensor<2x4x32xf32>, tensor<2x4x32xf32>
// CHECK: %[[Y:.*]] = tfm.linear %[[A]], %arg3
// CHECK: %[[DH:.*]], %[[DW2:.*]] = tfm.linear_grad_gelu %[[A]], %arg3, %arg4 gelu(%[[H]]) tanh : tensor<2x4x32xf32>, tensor<8x32xf32>, tensor<2x4x8xf32>
// CHECK-NOT: tfm.gelu
// CHECK: tfm.linear_grad %arg0, %arg1, %[[DH]]
// CHECK: return %[[Y]], %[[DW2]]
func.func @mlp(%x: tensor<2x4x8xf32>, %w1: tensor<32x8xf32>, %b1: tensor<32xf32>, %w2: tensor<8x32xf32>,
               %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>) {
  %h = tfm.linear %x, %w1, %b1 : tensor<2x4x8xf32>, tensor<32x8xf32>, tensor<32xf32> -> tensor<2x4x32xf32>
  %a = tfm.gelu %h tanh : tensor<2x4x32xf32>
  %y = tfm.linear %a, %w2 : tensor<2x4x32xf32>, tensor<8x32xf32> -> tensor<2x4x8xf32>
  %da, %dw2 = tfm.linear_grad %a, %w2, %dy : tensor<2x4x32xf32>, tensor<8x32xf32>, tensor<2x4x8xf32>
  %dh = tfm.gelu_grad %h, %da tanh : tensor<2x4x32xf32>
  %dx, %dw1, %db1 = tfm.linear_grad %x, %w1, %dh : tensor<2x4x8xf32>, tensor<32x8xf32>, tensor<2x4x32xf32> -> tensor<32xf32>
  return %y, %dw2, %dw1 : tensor<2x4x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>
}

// -----

// Not fused: a linear's input gradient that something else reads too, an
// input gradient accumulated onto another, and a GELU of another
// approximation than the one whose gradient is taken.
// CHECK-LABEL: func.func @kept
// CHECK: tfm.linear_gelu %arg0, %arg1 none
// CHECK: tfm.linear_grad %
// CHECK: tfm.gelu_grad
// CHECK: tfm.linear_grad %{{.*}} accumulate
// CHECK: tfm.gelu_grad
// CHECK: tfm.linear_grad %
// CHECK: tfm.gelu_grad
// CHECK-NOT: linear_grad_gelu
func.func @kept(%x: tensor<2x4x8xf32>, %w1: tensor<32x8xf32>, %w2: tensor<8x32xf32>, %dy: tensor<2x4x8xf32>,
                %r: tensor<2x4x32xf32>) -> (tensor<2x4x32xf32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>) {
  %h = tfm.linear %x, %w1 : tensor<2x4x8xf32>, tensor<32x8xf32> -> tensor<2x4x32xf32>
  %a = tfm.gelu %h none : tensor<2x4x32xf32>
  %da, %dw = tfm.linear_grad %a, %w2, %dy : tensor<2x4x32xf32>, tensor<8x32xf32>, tensor<2x4x8xf32>
  %dh = tfm.gelu_grad %h, %da none : tensor<2x4x32xf32>
  %da2, %dw2 = tfm.linear_grad %a, %w2, %dy accumulate(%r : tensor<2x4x32xf32>) : tensor<2x4x32xf32>, tensor<8x32xf32>, tensor<2x4x8xf32>
  %dh2 = tfm.gelu_grad %h, %da2 none : tensor<2x4x32xf32>
  %da3, %dw3 = tfm.linear_grad %a, %w2, %dy : tensor<2x4x32xf32>, tensor<8x32xf32>, tensor<2x4x8xf32>
  %dh3 = tfm.gelu_grad %h, %da3 tanh : tensor<2x4x32xf32>
  return %da, %dh, %dh2, %dh3 : tensor<2x4x32xf32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>, tensor<2x4x32xf32>
}
