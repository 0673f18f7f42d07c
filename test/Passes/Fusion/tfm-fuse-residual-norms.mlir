// RUN: loom-opt %s -split-input-file --tfm-fuse-residual-norms | FileCheck %s

// A block's residual adds and the norms of their sums: each pair becomes
// one op at the add, whose sum the other readers keep reading.
// CHECK-LABEL: func.func @block
// CHECK: %[[H:.*]], %[[N:.*]] = tfm.add_rms_norm %arg0, %arg1, %arg3 eps 9.9999999999999995E-7 : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK: %[[Y:.*]], %{{.*}} = tfm.linear_grad %[[N]], %arg5, %[[H]]
// CHECK: %[[H2:.*]], %[[N2:.*]] = tfm.add_layer_norm %[[H]], %[[Y]], %arg3, %arg4 eps 1.000000e-05 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NOT: tfm.add %
// CHECK-NOT: _norm %
// CHECK: return %[[H2]], %[[N2]]
func.func @block(%x: tensor<2x4x8xf32>, %a: tensor<2x4x8xf32>, %unused: tensor<8xf32>, %w: tensor<8xf32>,
                 %b: tensor<8xf32>, %lw: tensor<8x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %h = tfm.add %x, %a : tensor<2x4x8xf32>
  %n = tfm.rms_norm %h, %w eps 1.0e-06 : tensor<2x4x8xf32>, tensor<8xf32>
  %y, %dw = tfm.linear_grad %n, %lw, %h : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %h2 = tfm.add %h, %y : tensor<2x4x8xf32>
  %n2 = tfm.layer_norm %h2, %w, %b eps 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %h2, %n2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// Not fused: a norm weight computed after the add (the fused op would stand
// before it), and an add no norm reads.
// CHECK-LABEL: func.func @kept
// CHECK: tfm.add
// CHECK: tfm.layer_norm
// CHECK: tfm.add
// CHECK-NOT: add_layer_norm
func.func @kept(%x: tensor<2x4x8xf32>, %a: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %h = tfm.add %x, %a : tensor<2x4x8xf32>
  %w2 = tfm.add %w, %w : tensor<8xf32>
  %n = tfm.layer_norm %h, %w2 eps 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
  %s = tfm.add %x, %a : tensor<2x4x8xf32>
  return %n, %s : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
