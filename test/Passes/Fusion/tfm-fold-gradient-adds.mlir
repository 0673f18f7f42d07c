// RUN: loom-opt %s -split-input-file --tfm-fold-gradient-adds | FileCheck %s

// The q, k and v projections' input gradients: each later linear_grad adds
// onto the running sum, and both adds go.
// CHECK-LABEL: func.func @qkv
// CHECK: %[[DV:.*]], %{{.*}} = tfm.linear_grad %arg0, %arg3, %arg6 :
// CHECK: %[[DK:.*]], %{{.*}} = tfm.linear_grad %arg0, %arg2, %arg5 accumulate(%[[DV]] : tensor<2x4x8xf32>) :
// CHECK: %[[DQ:.*]], %{{.*}} = tfm.linear_grad %arg0, %arg1, %arg4 accumulate(%[[DK]] : tensor<2x4x8xf32>) :
// CHECK-NOT: tfm.add
// CHECK: return %[[DQ]]
func.func @qkv(%x: tensor<2x4x8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<8x8xf32>, %wv: tensor<8x8xf32>,
               %gq: tensor<2x4x8xf32>, %gk: tensor<2x4x8xf32>, %gv: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %dv, %dwv = tfm.linear_grad %x, %wv, %gv : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %dk, %dwk = tfm.linear_grad %x, %wk, %gk : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %s = tfm.add %dv, %dk : tensor<2x4x8xf32>
  %dq, %dwq = tfm.linear_grad %x, %wq, %gq : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %t = tfm.add %s, %dq : tensor<2x4x8xf32>
  return %t, %dwq, %dwk, %dwv : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// The residual stream's gradient %r is read first by the branch's backward
// (a linear_grad's output gradient), then summed with the norm's input
// gradient: the norm adds it in the same pass (its last reader).
// CHECK-LABEL: func.func @residual
// CHECK: %[[R:.*]], %{{.*}} = tfm.linear_grad
// CHECK: tfm.linear_grad %arg0, %arg2, %[[R]] :
// CHECK: %[[DX:.*]], %{{.*}}, %{{.*}} = tfm.layer_norm_grad %arg0, %arg3, %{{.*}} accumulate(%[[R]] : tensor<2x4x8xf32>) eps
// CHECK-NOT: tfm.add
// CHECK: return %[[DX]]
func.func @residual(%x: tensor<2x4x8xf32>, %w1: tensor<8x8xf32>, %w2: tensor<8x8xf32>, %nw: tensor<8xf32>,
                    %g: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>) {
  %r, %dw1 = tfm.linear_grad %x, %w1, %g : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %dh, %dw2 = tfm.linear_grad %x, %w2, %r : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %dn, %dnw, %dnb = tfm.layer_norm_grad %x, %nw, %dh eps 1.0e-05 : tensor<2x4x8xf32>, tensor<8xf32>
  %s = tfm.add %r, %dn : tensor<2x4x8xf32>
  return %s, %dw2 : tensor<2x4x8xf32>, tensor<8x8xf32>
}

// -----

// An RMSNorm's input gradient folds the same way.
// CHECK-LABEL: func.func @rms
// CHECK: tfm.rms_norm_grad %arg0, %arg2, %arg3 accumulate(%{{.*}} : tensor<2x4x8xf32>) eps
// CHECK-NOT: tfm.add
func.func @rms(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>, %nw: tensor<8xf32>, %g: tensor<2x4x8xf32>)
    -> tensor<2x4x8xf32> {
  %r, %dw = tfm.linear_grad %x, %w, %g : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %dn, %dnw = tfm.rms_norm_grad %x, %nw, %g eps 1.0e-06 : tensor<2x4x8xf32>, tensor<8xf32>
  %s = tfm.add %dn, %r : tensor<2x4x8xf32>
  return %s : tensor<2x4x8xf32>
}

// -----

// A norm reads its addend as an input: an argument (a pipeline block's
// incoming gradient) folds too.
// CHECK-LABEL: func.func @norm_argument
// CHECK: tfm.rms_norm_grad %arg0, %arg1, %arg2 accumulate(%arg3 : tensor<2x4x8xf32>) eps
// CHECK-NOT: tfm.add
func.func @norm_argument(%x: tensor<2x4x8xf32>, %nw: tensor<8xf32>, %g: tensor<2x4x8xf32>, %r: tensor<2x4x8xf32>)
    -> tensor<2x4x8xf32> {
  %dn, %dnw = tfm.rms_norm_grad %x, %nw, %g eps 1.0e-06 : tensor<2x4x8xf32>, tensor<8xf32>
  %s = tfm.add %r, %dn : tensor<2x4x8xf32>
  return %s : tensor<2x4x8xf32>
}

// -----

// Not folded into a linear_grad: the other addend is read after the
// producer (its buffer is still needed), is a function argument (the
// caller's buffer), or the producer's input gradient has another reader.
// CHECK-LABEL: func.func @kept
// CHECK-NOT: accumulate
// CHECK-COUNT-3: tfm.add
func.func @kept(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>, %g: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %a, %dwa = tfm.linear_grad %x, %w, %g : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %b, %dwb = tfm.linear_grad %x, %w, %g : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %later, %dwl = tfm.linear_grad %x, %w, %a : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %s = tfm.add %a, %b : tensor<2x4x8xf32>
  %c, %dwc = tfm.linear_grad %x, %w, %g : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %t = tfm.add %g, %c : tensor<2x4x8xf32>
  %d, %dwd = tfm.linear_grad %x, %w, %g : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x8xf32>
  %u = tfm.add %later, %d : tensor<2x4x8xf32>
  return %s, %t, %u, %d : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
