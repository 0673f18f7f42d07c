// RUN: loom-opt %s -split-input-file --tfm-fuse-multi-linears | FileCheck %s

// Attention's q, k and v (GQA: k and v narrower) with biases: one op at q's
// place; their backward chain (v, then k and q accumulating onto it) one
// op at q's backward, the weight and bias gradients in the chain's order.
// CHECK-LABEL: func.func @qkv
// CHECK: %[[R:.*]]:3 = tfm.multi_linear %arg0[%arg1, %arg2, %arg3] bias[%arg4, %arg5, %arg6] : tensor<2x4x8xf32>[tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>] bias[tensor<8xf32>, tensor<4xf32>, tensor<4xf32>] -> tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>
// CHECK-NOT: tfm.linear
// CHECK: %[[DX:.*]], %[[DW:.*]]:3, %[[DB:.*]]:3 = tfm.multi_linear_grad %arg0[%arg3, %arg2, %arg1] [%[[R]]#2, %[[R]]#1, %[[R]]#0] accumulate(%arg7 : tensor<2x4x8xf32>) : tensor<2x4x8xf32>[tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>] [tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x8xf32>] -> tensor<2x4x8xf32>[tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x8xf32>] bias[tensor<4xf32>, tensor<4xf32>, tensor<8xf32>]
// CHECK-NOT: tfm.linear_grad
// CHECK: return %[[DX]], %[[DW]]#2, %[[DW]]#1, %[[DW]]#0, %[[DB]]#2
func.func @qkv(%x: tensor<2x4x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<4x8xf32>, %wv: tensor<4x8xf32>,
               %bq: tensor<8xf32>, %bk: tensor<4xf32>, %bv: tensor<4xf32>, %r: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) {
  %q = tfm.linear %x, %wq, %bq : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
  %k = tfm.linear %x, %wk, %bk : tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<2x4x4xf32>
  %v = tfm.linear %x, %wv, %bv : tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<2x4x4xf32>
  %dv, %dwv, %dbv = tfm.linear_grad %x, %wv, %v accumulate(%r : tensor<2x4x8xf32>) : tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<2x4x4xf32> -> tensor<4xf32>
  %dk, %dwk, %dbk = tfm.linear_grad %x, %wk, %k accumulate(%dv : tensor<2x4x8xf32>) : tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<2x4x4xf32> -> tensor<4xf32>
  %dq, %dwq, %dbq = tfm.linear_grad %x, %wq, %q accumulate(%dk : tensor<2x4x8xf32>) : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32> -> tensor<8xf32>
  return %dq, %dwq, %dwk, %dwv, %dbq : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// Not fused: a linear alone on its input, biases on some only, a weight
// computed after the first linear, a chain link whose weight gradient is
// read before the chain's end, and a link whose input gradient is read
// twice.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: multi_linear
func.func @kept(%x: tensor<2x4x8xf32>, %y: tensor<2x4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>,
                %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %a = tfm.linear %x, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  %c = tfm.linear %x, %w, %b : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
  %p = tfm.linear %y, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  %w2 = tfm.add %w, %w : tensor<8x8xf32>
  %q = tfm.linear %y, %w2 : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  %d1, %dw1 = tfm.linear_grad %x, %w, %dy : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %s = tfm.add %dw1, %dw1 : tensor<8x8xf32>
  %d2, %dw2 = tfm.linear_grad %x, %w, %dy accumulate(%d1 : tensor<2x4x8xf32>) : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %e1, %ew1 = tfm.linear_grad %y, %w, %dy : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %e2, %ew2 = tfm.linear_grad %y, %w, %dy accumulate(%e1 : tensor<2x4x8xf32>) : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  return %a, %c, %q, %s, %d2, %e1, %e2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
