// RUN: loom-opt %s --tfm-differentiate | FileCheck %s

// A two-block model: embedding, then a head with a tied output projection.

tfm.param @wte init(normal, std = 2.000000e-02) : tensor<16x8xf32>
tfm.param @ln.weight init(ones) : tensor<8xf32>

func.func @forward(%t: tensor<1x4xi32>, %l: tensor<1x4xi32>, %m: tensor<1x4xf32>) -> tensor<f32> {
  %h = tfm.block embedding ins(%t : tensor<1x4xi32>) -> tensor<1x4x8xf32> {
  ^bb0(%a: tensor<1x4xi32>):
    %w = tfm.get_param @wte : tensor<16x8xf32>
    %e = tfm.embedding %a, %w : tensor<1x4xi32>, tensor<16x8xf32> -> tensor<1x4x8xf32>
    tfm.yield %e : tensor<1x4x8xf32>
  }
  %loss = tfm.block head ins(%h, %l, %m : tensor<1x4x8xf32>, tensor<1x4xi32>, tensor<1x4xf32>) -> tensor<f32> {
  ^bb0(%x: tensor<1x4x8xf32>, %y: tensor<1x4xi32>, %z: tensor<1x4xf32>):
    %g = tfm.get_param @ln.weight : tensor<8xf32>
    %n = tfm.rms_norm %x, %g eps 1.0e-6 : tensor<1x4x8xf32>, tensor<8xf32>
    %w = tfm.get_param @wte : tensor<16x8xf32>
    %o = tfm.linear %n, %w : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %o, %y, %z : tensor<1x4x16xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// @forward is kept as it was.
// CHECK-LABEL: func.func @forward(
// CHECK-NOT: backward
// CHECK: return

// The step takes the loss scale and returns the loss and one gradient per
// parameter, in declaration order.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[T:.*]]: tensor<1x4xi32>, %[[L:.*]]: tensor<1x4xi32>, %[[M:.*]]: tensor<1x4xf32>, %[[S:.*]]: tensor<f32> {tfm.input = "grad_scale"})
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {tfm.grad = "wte"}, tensor<8xf32> {tfm.grad = "ln.weight"})
// CHECK-SAME: attributes {tfm.entry = "loom_train_step"}

// The forward blocks also yield what the backward reads (the
// cross-entropy's row statistics among them).
// CHECK: %[[E:.*]] = tfm.block embedding ins(%[[T]] : tensor<1x4xi32>) -> tensor<1x4x8xf32>
// CHECK: %[[H:.*]]:5 = tfm.block head ins(%[[E]], %[[L]], %[[M]] : {{.*}}) -> tensor<f32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4x16xf32>, tensor<1x4x8xf32>
// CHECK: tfm.yield %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<f32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4x16xf32>, tensor<1x4x8xf32>

// Head backward first: the seed is the loss scale.
// CHECK: %[[HB:.*]]:3 = tfm.block head backward ins(%[[S]], %[[H]]#1, %[[H]]#2, %[[M]], %[[L]], %[[H]]#3, %[[H]]#4, %[[E]] : {{.*}}) -> tensor<1x4x8xf32>, tensor<8xf32>, tensor<16x8xf32>
// CHECK: ^bb0(%[[DS:.*]]: tensor<f32>, %[[ST0:.*]]: tensor<1x4xf32>, %[[ST1:.*]]: tensor<1x4xf32>, %{{.*}}: tensor<1x4xf32>, %{{.*}}: tensor<1x4xi32>, %[[LOGITS:.*]]: tensor<1x4x16xf32>, %[[NORMED:.*]]: tensor<1x4x8xf32>, %[[X:.*]]: tensor<1x4x8xf32>):
// CHECK-DAG: tfm.get_param @ln.weight
// CHECK-DAG: tfm.get_param @wte
// CHECK: %[[DL:.*]] = tfm.cross_entropy_grad %[[LOGITS]], %{{.*}}, %{{.*}}, %[[ST1]], %[[ST0]], %[[DS]]
// CHECK: %[[DN:.*]], %[[DW:.*]] = tfm.linear_grad %[[NORMED]], %{{.*}}, %[[DL]]
// CHECK: %[[DX:.*]], %[[DG:.*]] = tfm.rms_norm_grad %[[X]], %{{.*}}, %[[DN]]
// CHECK: tfm.yield %[[DX]], %[[DG]], %[[DW]]

// Then the embedding's: the tied table's two gradients are summed.
// CHECK: %[[EB:.*]] = tfm.block embedding backward ins(%[[HB]]#0, %[[T]] : tensor<1x4x8xf32>, tensor<1x4xi32>) -> tensor<16x8xf32>
// CHECK: tfm.embedding_grad
// CHECK: %[[WSUM:.*]] = tfm.add %[[HB]]#2, %[[EB]] : tensor<16x8xf32>
// CHECK: return %[[H]]#0, %[[WSUM]], %[[HB]]#1 : tensor<f32>, tensor<16x8xf32>, tensor<8xf32>
