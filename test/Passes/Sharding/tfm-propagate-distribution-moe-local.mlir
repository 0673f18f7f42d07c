// RUN: loom-opt %s --tfm-propagate-distribution | FileCheck %s
// RUN: loom-opt %s --tfm-propagate-distribution --tfm-localize --tfm-reshard-to-collectives --tfm-verify-distribution | FileCheck %s --check-prefix=SHARD

// Experts not split over tp (expert tensor parallel size 1) at tp 2 with
// sequence parallelism: each tp rank routes its own share of the sequence,
// as it comes out of the norm, to whole experts. The router is a replicated
// linear on those tokens, the permuted rows are the rank's own ([[tp]] on
// dim 0), its counts a partial sum over tp read as they are by the grouped
// linears (whole weights), and the unpermuted output is already in the
// residual stream's layout: the routed experts gather and reduce nothing.
// The router's losses take the micro-batch's counts, summed over tp (the
// layer's one all-reduce for routing). A shared expert stays tensor-parallel
// (gathered in, reduce-scattered out) with its gate on the gathered tokens.
// Backward: the router's weight gradient is a partial sum over tp, its
// input gradient the rank's own tokens'.

// CHECK-LABEL: func.func @forward
// CHECK: %[[X:.*]] = tfm.rms_norm {{.*}} : tensor<2x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK-NEXT: %[[R:.*]] = tfm.get_param @router : tensor<4x16xf32, #tfm.dist<@dense>>
// CHECK-NEXT: %[[LOGITS:.*]] = tfm.linear %[[X]], %[[R]] : {{.*}} -> tensor<2x8x4xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK-NEXT: tfm.moe_route %[[LOGITS]] top_k 2 : tensor<2x8x4xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK-NEXT: %[[ROUTED:.*]] = tfm.moe_route_counts {{.*}} -> tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>
// CHECK-NEXT: %[[WHOLE:.*]] = tfm.reshard %[[ROUTED]] : {{.*}} -> tensor<4xf32, #tfm.dist<@dense>>
// CHECK-NEXT: tfm.moe_router_loss %[[LOGITS]], %[[WHOLE]] {{.*}} -> tensor<f32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<f32, #tfm.dist<@dense, partial = sum[tp]>>
// CHECK-NEXT: tfm.moe_permute %[[X]], {{.*}} -> tensor<32x16xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>, tensor<4xi32, #tfm.dist<@dense, partial = sum[tp]>>
// CHECK-NEXT: tfm.get_param @w1 : tensor<4x24x16xf32, #tfm.dist<@dense>>
// CHECK-NEXT: tfm.get_param @w2 : tensor<4x16x24xf32, #tfm.dist<@dense>>
// CHECK-NEXT: tfm.grouped_linear {{.*}} -> tensor<32x24xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
// CHECK-NEXT: tfm.silu {{.*}} : tensor<32x24xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
// CHECK-NEXT: tfm.grouped_linear {{.*}} -> tensor<32x16xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
// CHECK-NEXT: %[[ROUTED_OUT:.*]] = tfm.moe_unpermute {{.*}} -> tensor<2x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK: %[[GATHERED:.*]] = tfm.reshard %[[X]] : {{.*}} -> tensor<2x8x16xf32, #tfm.dist<@dense>>
// CHECK-NEXT: tfm.linear %[[GATHERED]], {{.*}} -> tensor<2x8x24xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
// CHECK: tfm.linear %[[GATHERED]], {{.*}} -> tensor<2x8x1xf32, #tfm.dist<@dense>>
// CHECK-NEXT: %[[GATED:.*]] = tfm.sigmoid_gate {{.*}} : tensor<2x8x16xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<2x8x1xf32, #tfm.dist<@dense>>
// CHECK-NEXT: %[[SHARED:.*]] = tfm.reshard %[[GATED]] : {{.*}} -> tensor<2x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK-NEXT: tfm.add %[[ROUTED_OUT]], %[[SHARED]]
// CHECK: %[[DLOGITS:.*]] = tfm.moe_route_grad {{.*}} : tensor<2x8x4xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK-NEXT: tfm.linear_grad %[[X]], %[[R]], %[[DLOGITS]] : {{.*}} grads(tensor<2x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>, tensor<4x16xf32, #tfm.dist<@dense, partial = sum[tp]>>)
// CHECK-NEXT: tfm.grouped_linear_grad {{.*}} grads(tensor<32x24xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>, tensor<4x16x24xf32, #tfm.dist<@dense, partial = sum[tp]>>)

// Each rank's share: 4 of the 8 positions, 16 of the 32 rows; the only
// collectives of the routed path are the counts' all-reduce.
// SHARD-LABEL: func.func @forward
// SHARD: tfm.moe_route_counts {{.*}} : tensor<2x4x2xi32
// SHARD-NEXT: %[[SUM:.*]] = mesh.all_reduce %{{.*}} on @dense mesh_axes = [3] : tensor<4xf32
// SHARD-NEXT: tfm.moe_router_loss %{{.*}}, %[[SUM]] top_k 2
// SHARD-NEXT: tfm.moe_permute {{.*}} -> tensor<16x16xf32
// SHARD-NOT: mesh.
// SHARD: tfm.moe_unpermute {{.*}} -> tensor<2x4x16xf32
// SHARD: mesh.all_gather %{{.*}} on @dense mesh_axes = [3] gather_axis = 1 : tensor<2x4x16xf32
module attributes {tfm.plan = #tfm.plan<tp = 2, etp = 1, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x16xf32>
  tfm.param @norm init(ones) : tensor<16xf32>
  tfm.param @router init(ones) : tensor<4x16xf32>
  tfm.param @w1 init(ones) : tensor<4x24x16xf32>
  tfm.param @w2 init(ones) : tensor<4x16x24xf32>
  tfm.param @shared_up init(ones) : tensor<24x16xf32>
  tfm.param @shared_down init(ones) : tensor<16x24xf32>
  tfm.param @shared_gate init(ones) : tensor<1x16xf32>
  func.func @forward(%t: tensor<2x8xi32> {tfm.input = "tokens"}) -> tensor<2x8x16xf32> {
    %wte = tfm.get_param @wte : tensor<32x16xf32>
    %emb = tfm.embedding %t, %wte : tensor<2x8xi32>, tensor<32x16xf32> -> tensor<2x8x16xf32>
    %nw = tfm.get_param @norm : tensor<16xf32>
    %x = tfm.rms_norm %emb, %nw eps 1.0e-05 : tensor<2x8x16xf32>, tensor<16xf32>
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
    %su = tfm.get_param @shared_up : tensor<24x16xf32>
    %sd = tfm.get_param @shared_down : tensor<16x24xf32>
    %sg = tfm.get_param @shared_gate : tensor<1x16xf32>
    %h = tfm.linear %x, %su : tensor<2x8x16xf32>, tensor<24x16xf32> -> tensor<2x8x24xf32>
    %ha = tfm.silu %h : tensor<2x8x24xf32>
    %s = tfm.linear %ha, %sd : tensor<2x8x24xf32>, tensor<16x24xf32> -> tensor<2x8x16xf32>
    %gl = tfm.linear %x, %sg : tensor<2x8x16xf32>, tensor<1x16xf32> -> tensor<2x8x1xf32>
    %gs = tfm.sigmoid_gate %s, %gl : tensor<2x8x16xf32>, tensor<2x8x1xf32>
    %sum = tfm.add %o, %gs : tensor<2x8x16xf32>
    %out = tfm.add %sum, %emb : tensor<2x8x16xf32>
    %dlogits = tfm.moe_route_grad %logits, %e, %p top_k 2 : tensor<2x8x4xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>
    %dx, %dr = tfm.linear_grad %x, %r, %dlogits : tensor<2x8x16xf32>, tensor<4x16xf32>, tensor<2x8x4xf32>
    %da, %dw2 = tfm.grouped_linear_grad %a, %w2, %counts, %rows : tensor<32x24xf32>, tensor<4x16x24xf32>, tensor<4xi32>, tensor<32x16xf32>
    return %out : tensor<2x8x16xf32>
  }
}

