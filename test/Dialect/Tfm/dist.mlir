// RUN: loom-opt %s --verify-roundtrip | FileCheck %s
// RUN: loom-opt %s --mlir-print-op-generic | loom-opt | FileCheck %s

// Distributions (#tfm.dist) as tensor encodings, and ops of sharded IR.

module attributes {tfm.plan = #tfm.plan<tp = 2, cp = 2>} {
  mesh.mesh @dense(shape = 1x1x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}

  // Test: every spelling: replicated, split, several axes, zigzag, another
  // chunk order, partial sums and maxima; trailing whole dims are dropped.
  // CHECK-LABEL: func.func @spellings
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense>>
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}], [cp, tp] zigzag(2)]>>
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}], [] chunks(0, 2, 1, 3)]>>
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[cp, tp]>>
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}cp]], partial = max[tp]>>
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
  // CHECK-SAME: tensor<2x8xf32, #tfm.dist<@dense>>
  func.func @spellings(
      %a: tensor<2x8xf32, #tfm.dist<@dense>>,
      %b: tensor<2x8xf32, #tfm.dist<@dense, [[], [tp]]>>,
      %c: tensor<2x8xf32, #tfm.dist<@dense, [[], [cp, tp] zigzag(2)]>>,
      %d: tensor<2x8xf32, #tfm.dist<@dense, [[], [] chunks(0, 2, 1, 3)]>>,
      %e: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp, cp]>>,
      %f: tensor<2x8xf32, #tfm.dist<@dense, [[cp]], partial = max[tp]>>,
      %g: tensor<2x8xf32, #tfm.dist<@dense, [[tp], []]>>,
      %h: tensor<2x8xf32, #tfm.dist<@dense, [[], [] chunks(0, 1, 2, 3)]>>) {
    return
  }

  // Test: a chunk order is kept in its coarsest form (8 chunks that move
  // in pairs are 4 chunks).
  // CHECK-LABEL: func.func @coarsest
  // CHECK-SAME: tensor<8xf32, #tfm.dist<@dense, {{\[\[}}] chunks(0, 2, 1, 3)]>>
  func.func @coarsest(%x: tensor<8xf32, #tfm.dist<@dense, [[] chunks(0, 1, 4, 5, 2, 3, 6, 7)]>>) {
    return
  }

  // Test: gradient types print only when a gradient is distributed
  // otherwise than its forward value (a column-parallel linear's input
  // gradient is a partial sum; a sequence-parallel norm's weight gradient
  // too).
  // CHECK-LABEL: func.func @grads
  // CHECK: tfm.linear_grad {{.*}} grads(tensor<2x8x8xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>)
  // CHECK: tfm.rms_norm_grad {{.*}} grads(tensor<8xf32, #tfm.dist<@dense, partial = sum[tp]>>)
  func.func @grads(%x: tensor<2x8x8xf32, #tfm.dist<@dense>>,
                   %w: tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>,
                   %dy: tensor<2x8x4xf32, #tfm.dist<@dense, [[], [], [tp]]>>,
                   %s: tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>>,
                   %n: tensor<8xf32, #tfm.dist<@dense>>) {
    %dx, %dw = tfm.linear_grad %x, %w, %dy : tensor<2x8x8xf32, #tfm.dist<@dense>>, tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<2x8x4xf32, #tfm.dist<@dense, [[], [], [tp]]>> grads(tensor<2x8x8xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>)
    %dn, %dnw = tfm.rms_norm_grad %s, %n, %s eps 1.0e-5 : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>>, tensor<8xf32, #tfm.dist<@dense>> grads(tensor<8xf32, #tfm.dist<@dense, partial = sum[tp]>>)
    return
  }

  // Test: binary elementwise ops print their three types when they differ
  // (such an add breaks its distribution rule; tfm-verify-distribution
  // says so, the parser does not).
  // CHECK-LABEL: func.func @mixed
  // CHECK: tfm.add %{{.*}}, %{{.*}} : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4xf32, #tfm.dist<@dense>> -> tensor<4xf32, #tfm.dist<@dense>>
  func.func @mixed(%p: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, %r: tensor<4xf32, #tfm.dist<@dense>>) {
    %s = tfm.add %p, %r : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4xf32, #tfm.dist<@dense>> -> tensor<4xf32, #tfm.dist<@dense>>
    return
  }

  // Test: a reshard changes the distribution of one global tensor.
  // CHECK-LABEL: func.func @reshard
  // CHECK: tfm.reshard %{{.*}} : tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
  func.func @reshard(%p: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>>) {
    %r = tfm.reshard %p : tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<2x8xf32, #tfm.dist<@dense, [[], [tp]]>>
    return
  }
}

// -----

// Test: after tfm-localize shapes are per-rank: a parameter split over tp 2
// is read at half its size, and a reshard relates per-rank shapes.
module attributes {tfm.plan = #tfm.plan<tp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<4x8xf32>
  // CHECK-LABEL: func.func @local
  // CHECK: tfm.get_param @w : tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
  // CHECK: tfm.reshard %{{.*}} : tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>> -> tensor<4x8xf32, #tfm.dist<@dense>>
  func.func @local() -> tensor<4x8xf32, #tfm.dist<@dense>> {
    %w = tfm.get_param @w : tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>>
    %r = tfm.reshard %w : tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>> -> tensor<4x8xf32, #tfm.dist<@dense>>
    return %r : tensor<4x8xf32, #tfm.dist<@dense>>
  }
}
