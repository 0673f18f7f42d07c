// RUN: loom-opt %s --tfm-set-plan="dp=2 ep=2" --tfm-materialize-mesh --tfm-dispatch-experts | FileCheck %s
// RUN: loom-opt %s --tfm-set-plan="dp=2" --tfm-materialize-mesh --tfm-dispatch-experts | FileCheck %s --check-prefix=EP1
// RUN: loom-opt %s --tfm-set-plan="dp=2 ep=2" --tfm-materialize-mesh --tfm-dispatch-experts \
// RUN:   --tfm-differentiate | FileCheck %s --check-prefix=GRAD

// One MoE layer: 4 tokens, top-2 of 4 experts, 8 rows. At ep 2 the counts
// are gathered over the expert mesh's ep axis (2 x 4), the rows dispatched
// to the ranks of their experts (global IR: 2 x 2 x 8 rows, split over ep;
// each rank's 16 rows bound what its 2 experts receive), the experts run on
// them with the dispatched counts, and a combine brings their output rows
// back to the combine of the tokens. ep 1 leaves the layer as it is. The
// backward is the adjoint: the output rows' gradient dispatched, the input
// rows' gradient combined.

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

// CHECK: mesh.mesh @expert(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "ep", "tp"]}
// CHECK: %[[ROWS:.*]], %[[COUNTS:.*]], %[[MAP:.*]] = tfm.moe_permute
// CHECK: %[[ALL:.*]] = tfm.moe_gather_counts %[[COUNTS]] on @expert axis "ep" : tensor<4xi32> -> tensor<8xi32>
// CHECK: %[[D:.*]], %[[LOCAL:.*]] = tfm.moe_dispatch %[[ROWS]], %[[ALL]] on @expert axis "ep"
// CHECK-SAME: tensor<8x8xf32>, tensor<8xi32> -> tensor<32x8xf32>, tensor<4xi32>
// CHECK: %[[Y:.*]] = tfm.grouped_linear %[[D]], %{{.*}}, %[[LOCAL]] : {{.*}} -> tensor<32x8xf32>
// CHECK: %[[BACK:.*]] = tfm.moe_combine %[[Y]], %[[ALL]] on @expert axis "ep" : tensor<32x8xf32>, tensor<8xi32> -> tensor<8x8xf32>
// CHECK: tfm.moe_unpermute %[[BACK]], %{{.*}}, %[[MAP]]

// EP1-NOT: mesh.mesh @expert
// EP1-NOT: tfm.moe_dispatch
// EP1: tfm.grouped_linear %rows, %{{.*}}, %counts

// GRAD-LABEL: func.func @train_step
// GRAD: tfm.block layer 0 backward
// GRAD: %[[DROWS:.*]], %{{.*}} = tfm.moe_unpermute_grad
// GRAD: %[[DY:.*]], %{{.*}} = tfm.moe_dispatch %[[DROWS]], %[[ALL:.*]] on @expert axis "ep" : tensor<8x8xf32>, tensor<8xi32> -> tensor<32x8xf32>, tensor<4xi32>
// GRAD: %[[DX:.*]], %{{.*}} = tfm.grouped_linear_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[DY]]
// GRAD: %[[BACK:.*]] = tfm.moe_combine %[[DX]], %[[ALL]] on @expert axis "ep" : tensor<32x8xf32>, tensor<8xi32> -> tensor<8x8xf32>
// GRAD: tfm.moe_permute_grad %[[BACK]]
