// RUN: loom-opt %s --tfm-differentiate | FileCheck %s

// A mixture-of-experts layer: the router's loss is read by no op, yet its
// gradient joins the objective: the layer's backward block takes the step's
// grad_scale as the seed of tfm.moe_router_loss, as the head's backward
// takes it for the model's loss. Gradients flow to the router through the
// probabilities and the loss (summed), to the experts through the grouped
// linears, and to the tokens through the combine and the dispatch.

tfm.param @router init(normal, std = 2.000000e-02) : tensor<4x8xf32>
tfm.param @experts init(normal, std = 2.000000e-02) : tensor<4x8x8xf32>
tfm.param @out init(normal, std = 2.000000e-02) : tensor<16x8xf32>

func.func @forward(%t: tensor<1x4xi32>, %l: tensor<1x4xi32>, %m: tensor<1x4xf32>) -> tensor<f32> {
  %h = tfm.block embedding ins(%t : tensor<1x4xi32>) -> tensor<1x4x8xf32> {
  ^bb0(%a: tensor<1x4xi32>):
    %w = tfm.get_param @out : tensor<16x8xf32>
    %e = tfm.embedding %a, %w : tensor<1x4xi32>, tensor<16x8xf32> -> tensor<1x4x8xf32>
    tfm.yield %e : tensor<1x4x8xf32>
  }
  %h1 = tfm.block layer 0 ins(%h : tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
  ^bb0(%x: tensor<1x4x8xf32>):
    %r = tfm.get_param @router : tensor<4x8xf32>
    %logits = tfm.linear %x, %r : tensor<1x4x8xf32>, tensor<4x8xf32> -> tensor<1x4x4xf32>
    %p, %e = tfm.moe_route %logits top_k 2 : tensor<1x4x4xf32> -> tensor<1x4x2xf32>, tensor<1x4x2xi32>
    %routed = tfm.moe_route_counts %e num_experts 4 : tensor<1x4x2xi32> -> tensor<4xf32>
    %aux, %z = tfm.moe_router_loss %logits, %routed top_k 2 aux_coeff 1.000000e-02 z_coeff 0.000000e+00
        : tensor<1x4x4xf32>, tensor<4xf32> -> tensor<f32>, tensor<f32>
    %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
        : tensor<1x4x8xf32>, tensor<1x4x2xi32> -> tensor<8x8xf32>, tensor<4xi32>, tensor<1x4x2xi32>
    %w = tfm.get_param @experts : tensor<4x8x8xf32>
    %y = tfm.grouped_linear %rows, %w, %counts : tensor<8x8xf32>, tensor<4x8x8xf32>, tensor<4xi32> -> tensor<8x8xf32>
    %o = tfm.moe_unpermute %y, %p, %map : tensor<8x8xf32>, tensor<1x4x2xf32>, tensor<1x4x2xi32> -> tensor<1x4x8xf32>
    tfm.yield %o : tensor<1x4x8xf32>
  }
  %loss = tfm.block head ins(%h1, %l, %m : tensor<1x4x8xf32>, tensor<1x4xi32>, tensor<1x4xf32>) -> tensor<f32> {
  ^bb0(%x: tensor<1x4x8xf32>, %y: tensor<1x4xi32>, %z: tensor<1x4xf32>):
    %w = tfm.get_param @out : tensor<16x8xf32>
    %o = tfm.linear %x, %w : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %o, %y, %z : tensor<1x4x16xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: %[[S:[a-z0-9]+]]: tensor<f32> {tfm.input = "grad_scale"}
// CHECK: tfm.block head backward ins(%[[S]],
// CHECK: tfm.block layer 0 backward ins({{.*}}%[[S]]
// CHECK: ^bb0(
// CHECK-DAG: %[[DROWS:.*]], %[[DP:.*]] = tfm.moe_unpermute_grad
// CHECK-DAG: tfm.grouped_linear_grad
// CHECK-DAG: tfm.moe_permute_grad
// CHECK-DAG: %[[DLOSS:.*]] = tfm.moe_router_loss_grad %{{.*}}, %{{.*}}, %{{.*}} top_k 2 aux_coeff 1.000000e-02
// CHECK-DAG: %[[DROUTE:.*]] = tfm.moe_route_grad %{{.*}}, %{{.*}}, %[[DP]] top_k 2
// CHECK: tfm.add
// CHECK: tfm.linear_grad
// CHECK: tfm.yield
