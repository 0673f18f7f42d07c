// RUN: loom-opt %s -split-input-file --tfm-differentiate | FileCheck %s

// One case per gradient rule: a head block applies the op to its input %x
// and takes the cross-entropy of the result; the backward block shows the
// rule.

// Test: linear with bias: input, weight and bias gradients
tfm.param @w init(normal, std = 0.02) : tensor<4x4xf32>
tfm.param @b init(zeros) : tensor<4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: tfm.block head backward
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = tfm.linear_grad %{{.*}}, %{{.*}}, %[[DY]] : tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<1x2x4xf32> -> tensor<4xf32>
// CHECK: tfm.yield %[[DX]], %[[DW]], %[[DB]]
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %w = tfm.get_param @w : tensor<4x4xf32>
    %b = tfm.get_param @b : tensor<4xf32>
    %y = tfm.linear %a, %w, %b : tensor<1x2x4xf32>, tensor<4x4xf32>, tensor<4xf32> -> tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: layer_norm: input, weight and bias gradients from one op
tfm.param @g init(ones) : tensor<4xf32>
tfm.param @b init(zeros) : tensor<4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DX:.*]], %[[DG:.*]], %[[DB:.*]] = tfm.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-05
// CHECK: tfm.yield %[[DX]], %[[DG]], %[[DB]]
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %g = tfm.get_param @g : tensor<4xf32>
    %b = tfm.get_param @b : tensor<4xf32>
    %y = tfm.layer_norm %a, %g, %b eps 1.0e-5 : tensor<1x2x4xf32>, tensor<4xf32>, tensor<4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: rms_norm
tfm.param @g init(ones) : tensor<4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: %{{.*}}, %[[DG:.*]] = tfm.rms_norm_grad
// CHECK: tfm.yield %{{.*}}, %[[DG]]
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %g = tfm.get_param @g : tensor<4xf32>
    %y = tfm.rms_norm %a, %g eps 1.0e-6 : tensor<1x2x4xf32>, tensor<4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: gelu reads its input

// CHECK-LABEL: func.func @train_step
// CHECK: ^bb0(%{{.*}}, %[[X:.*]]: tensor<1x2x4xf32>
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: tfm.gelu_grad %[[X]], %[[DY]] tanh
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %y = tfm.gelu %a tanh : tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: silu

// CHECK-LABEL: func.func @train_step
// CHECK: tfm.silu_grad
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %y = tfm.silu %a : tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: swiglu: gradients of gate and up, summed when they are one value

// CHECK-LABEL: func.func @train_step
// CHECK: %[[DG:.*]], %[[DU:.*]] = tfm.swiglu_grad
// CHECK: tfm.add %[[DG]], %[[DU]]
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %y = tfm.swiglu %a, %a : tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: add: the gradient flows to both operands

// CHECK-LABEL: func.func @train_step
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: %[[DS:.*]] = tfm.silu_grad %{{.*}}, %[[DY]]
// CHECK: tfm.add %[[DY]], %[[DS]]
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %s = tfm.silu %a : tensor<1x2x4xf32>
    %y = tfm.add %s, %a : tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: dropout: the same mask on the gradient

// CHECK-LABEL: func.func @train_step
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: tfm.dropout %[[DY]] p 2.500000e-01 seed 9
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %y = tfm.dropout %a p 0.25 seed 9 : tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: cast: the gradient is cast back

// CHECK-LABEL: func.func @train_step
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: %[[DH:.*]] = tfm.cast %[[DY]] : tensor<1x2x4xf32> to tensor<1x2x4xbf16>
// CHECK: tfm.cast %[[DH]] : tensor<1x2x4xbf16> to tensor<1x2x4xf32>
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %h = tfm.cast %a : tensor<1x2x4xf32> to tensor<1x2x4xbf16>
    %y = tfm.cast %h : tensor<1x2x4xbf16> to tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: rope: rotation by the opposite angles

// CHECK-LABEL: func.func @train_step
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: tfm.rope_grad %[[DY]], %{{.*}} head_dim 2 theta 1.000000e+04
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %p = tfm.position_ids %lab : tensor<1x2xi32>
    %y = tfm.rope %a, %p head_dim 2 theta 1.0e4 : tensor<1x2x4xf32>, tensor<1x2xi32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: rope with Llama 3.x scaling: the gradient rotates with the same
// scaled frequencies

// CHECK-LABEL: func.func @train_step
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: tfm.rope_grad %[[DY]], %{{.*}} head_dim 2 theta 1.000000e+04 scaling(#tfm.llama3_rope_scaling<factor = 8.000000e+00, low_freq_factor = 1.000000e+00, high_freq_factor = 4.000000e+00, original_max_position_embeddings = 32>)
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %p = tfm.position_ids %lab : tensor<1x2xi32>
    %y = tfm.rope %a, %p head_dim 2 theta 1.0e4 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 32>) : tensor<1x2x4xf32>, tensor<1x2xi32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: attention: saved output and log-sum-exp; gradients of q, k and v

// CHECK-LABEL: func.func @train_step
// CHECK: tfm.block head ins({{.*}}) -> tensor<f32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2x4xf32>, tensor<1x2x2xf32>
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = tfm.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[DY]] heads 2 kv_heads 2 head_dim 2 scale 5.000000e-01 mask causal
// CHECK: %[[S:.*]] = tfm.add %[[DQ]], %[[DK]]
// CHECK: tfm.add %[[S]], %[[DV]]
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %y, %lse = tfm.attention %a, %a, %a heads 2 kv_heads 2 head_dim 2 scale 0.5 mask causal : tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32> -> tensor<1x2x4xf32>, tensor<1x2x2xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: embedding: a scatter-add into the table
tfm.param @e init(normal, std = 0.02) : tensor<8x4xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DY:.*]] = tfm.cross_entropy_grad
// CHECK: %[[DE:.*]] = tfm.embedding_grad %{{.*}}, %[[DY]] : tensor<1x2xi32>, tensor<1x2x4xf32> -> tensor<8x4xf32>
// CHECK: tfm.yield %{{.*}}, %[[DE]]
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %lab: tensor<1x2xi32>, %mask: tensor<1x2xf32>):
    %e = tfm.get_param @e : tensor<8x4xf32>
    %v = tfm.embedding %lab, %e : tensor<1x2xi32>, tensor<8x4xf32> -> tensor<1x2x4xf32>
    %y = tfm.add %v, %a : tensor<1x2x4xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %y, %lab, %mask : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}
