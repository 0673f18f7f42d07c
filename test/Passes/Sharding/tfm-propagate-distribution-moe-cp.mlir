// RUN: loom-opt %s --tfm-propagate-distribution | FileCheck %s
// RUN: loom-opt %s --tfm-propagate-distribution --tfm-localize --tfm-reshard-to-collectives --tfm-verify-distribution | FileCheck %s --check-prefix=SHARD

// A mixture-of-experts layer at cp 2: each rank routes its own chunks of the
// sequence (the tokens stay split in the load-balanced order), its permuted
// rows are its own tokens' rows ([[cp]] on dim 0) and its expert counts
// those of its own rows, a partial sum over cp, which the grouped linears
// read as they are (no collective). The router's losses need the whole
// micro-batch's counts: tfm.moe_route_counts is summed over cp (the one
// all-reduce of the layer) and each rank computes its share of the losses.
// An expert weight's gradient is a sum over every rank's rows: partial over
// cp.

// CHECK-LABEL: func.func @forward
// CHECK: tfm.moe_route %{{.*}} top_k 2 : tensor<2x8x4xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>> -> tensor<2x8x2xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>, tensor<2x8x2xi32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>
// CHECK: %[[ROUTED:.*]] = tfm.moe_route_counts {{.*}} -> tensor<4xf32, #tfm.dist<@dense, partial = sum[cp]>>
// CHECK: %[[WHOLE:.*]] = tfm.reshard %[[ROUTED]] : tensor<4xf32, #tfm.dist<@dense, partial = sum[cp]>> -> tensor<4xf32, #tfm.dist<@dense>>
// CHECK: tfm.moe_router_loss %{{.*}}, %[[WHOLE]] top_k 2 {{.*}} -> tensor<f32, #tfm.dist<@dense, partial = sum[cp]>>, tensor<f32, #tfm.dist<@dense, partial = sum[cp]>>
// CHECK: tfm.moe_permute {{.*}} -> tensor<32x16xf32, #tfm.dist<@dense, {{\[\[}}cp]]>>, tensor<4xi32, #tfm.dist<@dense, partial = sum[cp]>>, tensor<2x8x2xi32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>
// CHECK-NOT: tfm.reshard
// CHECK: tfm.grouped_linear {{.*}} -> tensor<32x24xf32, #tfm.dist<@dense, {{\[\[}}cp]]>>
// CHECK: tfm.grouped_linear {{.*}} -> tensor<32x16xf32, #tfm.dist<@dense, {{\[\[}}cp]]>>
// CHECK: tfm.moe_unpermute {{.*}} -> tensor<2x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>
// CHECK: tfm.grouped_linear_grad {{.*}} grads(tensor<32x24xf32, #tfm.dist<@dense, {{\[\[}}cp]]>>, tensor<4x16x24xf32, #tfm.dist<@dense, partial = sum[cp]>>)
// CHECK-NOT: tfm.reshard

// SHARD-LABEL: func.func @forward
// SHARD: tfm.moe_route_counts {{.*}} : tensor<2x4x2xi32
// SHARD-NEXT: %[[SUM:.*]] = mesh.all_reduce %{{.*}} on @dense mesh_axes = [2] : tensor<4xf32
// SHARD-NEXT: tfm.moe_router_loss %{{.*}}, %[[SUM]] top_k 2
// SHARD: tfm.moe_permute {{.*}} -> tensor<16x16xf32
// SHARD-NOT: mesh.
// SHARD: return
module attributes {tfm.plan = #tfm.plan<cp = 2>} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x16xf32>
  tfm.param @router init(ones) : tensor<4x16xf32>
  tfm.param @w1 init(ones) : tensor<4x24x16xf32>
  tfm.param @w2 init(ones) : tensor<4x16x24xf32>
  func.func @forward(%t: tensor<2x8xi32> {tfm.input = "tokens"}) -> tensor<2x8x16xf32> {
    %wte = tfm.get_param @wte : tensor<32x16xf32>
    %x = tfm.embedding %t, %wte : tensor<2x8xi32>, tensor<32x16xf32> -> tensor<2x8x16xf32>
    %r = tfm.get_param @router : tensor<4x16xf32>
    %logits = tfm.linear %x, %r : tensor<2x8x16xf32>, tensor<4x16xf32> -> tensor<2x8x4xf32>
    %p, %e = tfm.moe_route %logits top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
    %routed = tfm.moe_route_counts %e num_experts 4 : tensor<2x8x2xi32> -> tensor<4xf32>
    %aux, %z = tfm.moe_router_loss %logits, %routed top_k 2 aux_coeff 1.000000e-02 z_coeff 0.000000e+00
        : tensor<2x8x4xf32>, tensor<4xf32> -> tensor<f32>, tensor<f32>
    %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
        : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
    %w1 = tfm.get_param @w1 : tensor<4x24x16xf32>
    %w2 = tfm.get_param @w2 : tensor<4x16x24xf32>
    %g = tfm.grouped_linear %rows, %w1, %counts : tensor<32x16xf32>, tensor<4x24x16xf32>, tensor<4xi32> -> tensor<32x24xf32>
    %a = tfm.silu %g : tensor<32x24xf32>
    %y = tfm.grouped_linear %a, %w2, %counts : tensor<32x24xf32>, tensor<4x16x24xf32>, tensor<4xi32> -> tensor<32x16xf32>
    %o = tfm.moe_unpermute %y, %p, %map : tensor<32x16xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x16xf32>
    %da, %dw2 = tfm.grouped_linear_grad %a, %w2, %counts, %rows : tensor<32x24xf32>, tensor<4x16x24xf32>, tensor<4xi32>, tensor<32x16xf32>
    return %o : tensor<2x8x16xf32>
  }
}
