// RUN: loom-opt %s -split-input-file --tfm-localize | FileCheck %s

// Localization: each type's shape becomes this rank's piece (a dim split
// over axes of sizes a, b divided by a * b), function signatures too, and
// attention's head counts follow its per-rank features.

// Test: a column- and a row-parallel linear around attention at tp 2.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @q init(ones) : tensor<16x16xf32>
  // CHECK: module attributes {tfm.local_shapes
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: (%{{.*}}: tensor<1x4x16xf32, #tfm.dist<@dense>>) -> tensor<1x4x8xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
  // CHECK: tfm.get_param @q : tensor<8x16xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
  // CHECK: tfm.linear {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
  // CHECK: tfm.attention {{.*}} heads 2 kv_heads 2 head_dim 4 {{.*}} -> tensor<1x4x8xf32, {{.*}}>, tensor<1x2x4xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
  func.func @forward(%x: tensor<1x4x16xf32, #tfm.dist<@dense>>) -> tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>> {
    %y = tfm.block layer 0 ins(%x : tensor<1x4x16xf32, #tfm.dist<@dense>>) -> tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>> {
    ^bb0(%h: tensor<1x4x16xf32, #tfm.dist<@dense>>):
      %w = tfm.get_param @q : tensor<16x16xf32, #tfm.dist<@dense, [[tp]]>>
      %q = tfm.linear %h, %w : tensor<1x4x16xf32, #tfm.dist<@dense>>, tensor<16x16xf32, #tfm.dist<@dense, [[tp]]>> -> tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>>
      %a, %l = tfm.attention %q, %q, %q heads 4 kv_heads 4 head_dim 4 scale 0.5 mask causal
          : tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>>
          -> tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<1x4x4xf32, #tfm.dist<@dense, [[], [tp]]>>
      tfm.yield %a : tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    }
    return %y : tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [tp]]>>
  }
}

// -----

// Test: a dim split over two axes is divided by both; a reordered dim keeps
// its size until it is split.
module attributes {tfm.plan = #tfm.plan<tp = 2, cp = 2>} {
  mesh.mesh @dense(shape = 1x1x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  // CHECK-LABEL: func.func @two_axes
  // CHECK-SAME: tensor<2x4x8xf32, #tfm.dist<@dense, {{\[\[}}], [cp, tp] zigzag(2)]>>
  // CHECK-SAME: tensor<2x16x8xf32, #tfm.dist<@dense, {{\[\[}}], [] zigzag(2)]>>
  func.func @two_axes(%a: tensor<2x16x8xf32, #tfm.dist<@dense, [[], [cp, tp] zigzag(2)]>>,
                      %b: tensor<2x16x8xf32, #tfm.dist<@dense, [[], [] zigzag(2)]>>) {
    return
  }
}
