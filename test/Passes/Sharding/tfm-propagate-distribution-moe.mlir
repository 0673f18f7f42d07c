// RUN: loom-opt %s --tfm-propagate-distribution | FileCheck %s
// RUN: loom-opt %s --tfm-propagate-distribution --tfm-localize --tfm-reshard-to-collectives --tfm-verify-distribution | FileCheck %s --check-prefix=SHARD

// A mixture-of-experts layer at tp 2: the router reads the whole tokens with
// a replicated weight (its logits are routed, not split); every rank routes
// and dispatches every token; the experts are split as a dense MLP is, gate
// and up column-parallel ([experts, out, in] split on out), down
// row-parallel (split on in), so the combine is a partial sum over tp, and
// the residual add reduces it once.

// CHECK-LABEL: func.func @layer
// CHECK: %[[LOGITS:.*]] = tfm.linear %{{.*}}, %{{.*}} : tensor<2x8x16xf32, #tfm.dist<@dense>>, tensor<4x16xf32, #tfm.dist<@dense>> -> tensor<2x8x4xf32, #tfm.dist<@dense>>
// CHECK: tfm.moe_route %[[LOGITS]] top_k 2 : tensor<2x8x4xf32, #tfm.dist<@dense>>
// CHECK: tfm.moe_permute {{.*}} -> tensor<32x16xf32, #tfm.dist<@dense>>, tensor<4xi32, #tfm.dist<@dense>>, tensor<2x8x2xi32, #tfm.dist<@dense>>
// CHECK: tfm.get_param @w1 : tensor<4x24x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK: tfm.get_param @w2 : tensor<4x16x24xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
// CHECK: tfm.grouped_linear {{.*}} -> tensor<32x24xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK: tfm.swiglu {{.*}} : tensor<32x24xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
// CHECK: tfm.grouped_linear {{.*}} -> tensor<32x16xf32, #tfm.dist<@dense, partial = sum[tp]>>
// CHECK: %[[Y:.*]] = tfm.moe_unpermute {{.*}} -> tensor<2x8x16xf32, #tfm.dist<@dense, partial = sum[tp]>>
// CHECK: %[[R:.*]] = tfm.reshard %[[Y]] : tensor<2x8x16xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<2x8x16xf32, #tfm.dist<@dense>>
// CHECK: tfm.add %{{.*}}, %[[R]]

// SHARD-LABEL: func.func @layer
// SHARD: tfm.grouped_linear {{.*}} : tensor<32x16xf32, {{.*}}>, tensor<4x12x16xf32, {{.*}}>, tensor<4xi32, {{.*}}> -> tensor<32x12xf32
// SHARD: tfm.grouped_linear {{.*}} : tensor<32x12xf32, {{.*}}>, tensor<4x16x12xf32, {{.*}}>, tensor<4xi32, {{.*}}> -> tensor<32x16xf32
// SHARD: mesh.all_reduce %{{.*}} on @dense mesh_axes = [3] : tensor<2x8x16xf32

module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @router init(ones) : tensor<4x16xf32>
  tfm.param @w1 init(ones) : tensor<4x24x16xf32>
  tfm.param @w3 init(ones) : tensor<4x24x16xf32>
  tfm.param @w2 init(ones) : tensor<4x16x24xf32>
  func.func @layer(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    %r = tfm.get_param @router : tensor<4x16xf32>
    %logits = tfm.linear %x, %r : tensor<2x8x16xf32>, tensor<4x16xf32> -> tensor<2x8x4xf32>
    %p, %e = tfm.moe_route %logits top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
    %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
        : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
    %w1 = tfm.get_param @w1 : tensor<4x24x16xf32>
    %w3 = tfm.get_param @w3 : tensor<4x24x16xf32>
    %w2 = tfm.get_param @w2 : tensor<4x16x24xf32>
    %g = tfm.grouped_linear %rows, %w1, %counts : tensor<32x16xf32>, tensor<4x24x16xf32>, tensor<4xi32> -> tensor<32x24xf32>
    %u = tfm.grouped_linear %rows, %w3, %counts : tensor<32x16xf32>, tensor<4x24x16xf32>, tensor<4xi32> -> tensor<32x24xf32>
    %a = tfm.swiglu %g, %u : tensor<32x24xf32>
    %y = tfm.grouped_linear %a, %w2, %counts : tensor<32x24xf32>, tensor<4x16x24xf32>, tensor<4xi32> -> tensor<32x16xf32>
    %o = tfm.moe_unpermute %y, %p, %map : tensor<32x16xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x16xf32>
    %sum = tfm.add %x, %o : tensor<2x8x16xf32>
    return %sum : tensor<2x8x16xf32>
  }
}
