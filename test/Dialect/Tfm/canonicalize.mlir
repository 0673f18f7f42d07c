// RUN: loom-opt %s -canonicalize | FileCheck %s

// Folders: dropout with p = 0 and a cast to the same type are the identity.

// CHECK-LABEL: func.func @dropout_p0
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>)
// CHECK-NOT: tfm.dropout
// CHECK: return %[[X]]
func.func @dropout_p0(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %y = tfm.dropout %x p 0.0 seed 7 : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @dropout_kept
// CHECK: tfm.dropout %{{.*}} p 1.000000e-01 seed 7
func.func @dropout_kept(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %y = tfm.dropout %x p 0.1 seed 7 : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @cast_same_type
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xbf16>)
// CHECK-NOT: tfm.cast
// CHECK: return %[[X]]
func.func @cast_same_type(%x: tensor<2x4xbf16>) -> tensor<2x4xbf16> {
  %y = tfm.cast %x : tensor<2x4xbf16> to tensor<2x4xbf16>
  return %y : tensor<2x4xbf16>
}

// CHECK-LABEL: func.func @cast_kept
// CHECK: tfm.cast %{{.*}} : tensor<2x4xbf16> to tensor<2x4xf32>
func.func @cast_kept(%x: tensor<2x4xbf16>) -> tensor<2x4xf32> {
  %y = tfm.cast %x : tensor<2x4xbf16> to tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// Unused pure ops disappear, including whole parameter reads.
// CHECK-LABEL: func.func @dead_ops
// CHECK-NOT: tfm.
// CHECK: return
func.func @dead_ops(%x: tensor<2x4x8xf32>) {
  %y = tfm.silu %x : tensor<2x4x8xf32>
  %z = tfm.add %y, %x : tensor<2x4x8xf32>
  return
}
