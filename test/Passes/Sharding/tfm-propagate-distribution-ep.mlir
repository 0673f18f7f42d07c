// RUN: loom-opt %s --tfm-propagate-distribution | FileCheck %s
// RUN: loom-opt %s --tfm-propagate-distribution --tfm-localize --tfm-verify-distribution | FileCheck %s --check-prefix=LOCAL

// A mixture-of-experts layer at dp 2 x ep 2 (as tfm-dispatch-experts leaves
// it): the dispatch splits its rows and counts over the expert mesh's ep
// axis, so the experts' weights are split the same way on their first dim,
// the expert layers run split, and the combine returns rows in token order.
// Per rank: 2 of the 4 experts, and 32 rows at most (2 ranks x 16 rows).

// CHECK-LABEL: func.func @layer
// CHECK: tfm.moe_dispatch {{.*}} -> tensor<64x16xf32, #tfm.dist<@expert, {{\[\[}}ep]]>>, tensor<4xi32, #tfm.dist<@expert, {{\[\[}}ep]]>>
// CHECK: tfm.get_param @w1 : tensor<4x24x16xf32, #tfm.dist<@expert, {{\[\[}}ep]]>>
// CHECK: tfm.grouped_linear {{.*}} -> tensor<64x24xf32, #tfm.dist<@expert, {{\[\[}}ep]]>>
// CHECK: tfm.get_param @w2 : tensor<4x16x24xf32, #tfm.dist<@expert, {{\[\[}}ep]]>>
// CHECK: tfm.moe_combine {{.*}} -> tensor<16x16xf32, #tfm.dist<@dense>>

// LOCAL-LABEL: func.func @layer
// LOCAL: tfm.moe_dispatch {{.*}} : tensor<16x16xf32, {{.*}}>, tensor<8xi32, {{.*}}> -> tensor<32x16xf32, {{.*}}>, tensor<2xi32, {{.*}}>
// LOCAL: tfm.grouped_linear {{.*}} : tensor<32x16xf32, {{.*}}>, tensor<2x24x16xf32, {{.*}}>, tensor<2xi32, {{.*}}> -> tensor<32x24xf32
// LOCAL: tfm.moe_combine {{.*}} : tensor<32x16xf32, {{.*}}>, tensor<8xi32, {{.*}}> -> tensor<16x16xf32

module attributes {tfm.plan = #tfm.plan<dp = 2, ep = 2>} {
  mesh.mesh @dense(shape = 1x2x1x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  mesh.mesh @expert(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "ep", "tp"]}
  tfm.param @w1 init(normal, std = 2.000000e-02) : tensor<4x24x16xf32>
  tfm.param @w2 init(normal, std = 2.000000e-02) : tensor<4x16x24xf32>
  func.func @layer(%x: tensor<1x8x16xf32>, %e: tensor<1x8x2xi32>, %p: tensor<1x8x2xf32>) -> tensor<1x8x16xf32> {
    %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
        : tensor<1x8x16xf32>, tensor<1x8x2xi32> -> tensor<16x16xf32>, tensor<4xi32>, tensor<1x8x2xi32>
    %all = tfm.moe_gather_counts %counts on @expert axis "ep" : tensor<4xi32> -> tensor<8xi32>
    %d, %local = tfm.moe_dispatch %rows, %all on @expert axis "ep"
        : tensor<16x16xf32>, tensor<8xi32> -> tensor<64x16xf32>, tensor<4xi32>
    %w1 = tfm.get_param @w1 : tensor<4x24x16xf32>
    %h = tfm.grouped_linear %d, %w1, %local : tensor<64x16xf32>, tensor<4x24x16xf32>, tensor<4xi32> -> tensor<64x24xf32>
    %a = tfm.silu %h : tensor<64x24xf32>
    %w2 = tfm.get_param @w2 : tensor<4x16x24xf32>
    %y = tfm.grouped_linear %a, %w2, %local : tensor<64x24xf32>, tensor<4x16x24xf32>, tensor<4xi32> -> tensor<64x16xf32>
    %back = tfm.moe_combine %y, %all on @expert axis "ep" : tensor<64x16xf32>, tensor<8xi32> -> tensor<16x16xf32>
    %o = tfm.moe_unpermute %back, %p, %map : tensor<16x16xf32>, tensor<1x8x2xf32>, tensor<1x8x2xi32> -> tensor<1x8x16xf32>
    return %o : tensor<1x8x16xf32>
  }
}
