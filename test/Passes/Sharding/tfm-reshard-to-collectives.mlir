// RUN: loom-opt %s -split-input-file --tfm-reshard-to-collectives | FileCheck %s

// The one reshard(from, to) builder, pair by pair (per-rank shapes; mesh
// axes cp = 2 and tp = 3, both of size 2).

module attributes {tfm.plan = #tfm.plan<tp = 2, cp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}

  // Test: a partial sum made whole: all_reduce.
  // CHECK-LABEL: func.func @partial_to_whole
  // CHECK: mesh.all_reduce %{{.*}} on @dense mesh_axes = [3] : tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<2x8xf32, #tfm.dist<@dense>>
  func.func @partial_to_whole(%x: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>>) -> tensor<2x8xf32, #tfm.dist<@dense>> {
    %y = tfm.reshard %x : tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<2x8xf32, #tfm.dist<@dense>>
    return %y : tensor<2x8xf32, #tfm.dist<@dense>>
  }

  // Test: a partial maximum: all_reduce max.
  // CHECK-LABEL: func.func @partial_max
  // CHECK: mesh.all_reduce %{{.*}} on @dense mesh_axes = [3] reduction = <max>
  func.func @partial_max(%x: tensor<2x8xf32, #tfm.dist<@dense, partial = max[tp]>>) -> tensor<2x8xf32, #tfm.dist<@dense>> {
    %y = tfm.reshard %x : tensor<2x8xf32, #tfm.dist<@dense, partial = max[tp]>> -> tensor<2x8xf32, #tfm.dist<@dense>>
    return %y : tensor<2x8xf32, #tfm.dist<@dense>>
  }

  // Test: partial over two axes: one all_reduce over both, in mesh order.
  // CHECK-LABEL: func.func @two_partials
  // CHECK: mesh.all_reduce %{{.*}} on @dense mesh_axes = [2, 3] :
  func.func @two_partials(%x: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp, cp]>>) -> tensor<2x8xf32, #tfm.dist<@dense>> {
    %y = tfm.reshard %x : tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp, cp]>> -> tensor<2x8xf32, #tfm.dist<@dense>>
    return %y : tensor<2x8xf32, #tfm.dist<@dense>>
  }

  // Test: a partial sum onto a split (sequence parallelism): reduce_scatter.
  // CHECK-LABEL: func.func @partial_to_split
  // CHECK: mesh.reduce_scatter %{{.*}} on @dense mesh_axes = [3] scatter_axis = 1 : tensor<2x8xf32, {{.*}}> -> tensor<2x4xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
  func.func @partial_to_split(%x: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>>) -> tensor<2x4xf32, #tfm.dist<@dense, [[], [tp]]>> {
    %y = tfm.reshard %x : tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<2x4xf32, #tfm.dist<@dense, [[], [tp]]>>
    return %y : tensor<2x4xf32, #tfm.dist<@dense, [[], [tp]]>>
  }

  // Test: with context parallelism the sequence already split over cp is
  // kept; the partial sum over tp scatters onto it (Megatron's CP with SP).
  // CHECK-LABEL: func.func @partial_to_split_behind_cp
  // CHECK: mesh.reduce_scatter %{{.*}} on @dense mesh_axes = [3] scatter_axis = 1 : tensor<2x4xf32, {{.*}}> -> tensor<2x2xf32, #tfm.dist<@dense, {{\[\[}}], [cp, tp]]>>
  func.func @partial_to_split_behind_cp(%x: tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]], partial = sum[tp]>>) -> tensor<2x2xf32, #tfm.dist<@dense, [[], [cp, tp]]>> {
    %y = tfm.reshard %x : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]], partial = sum[tp]>> -> tensor<2x2xf32, #tfm.dist<@dense, [[], [cp, tp]]>>
    return %y : tensor<2x2xf32, #tfm.dist<@dense, [[], [cp, tp]]>>
  }

  // Test: a split made whole: all_gather (over both axes of the dim at once).
  // CHECK-LABEL: func.func @split_to_whole
  // CHECK: mesh.all_gather %{{.*}} on @dense mesh_axes = [2, 3] gather_axis = 1 : tensor<2x2xf32, {{.*}}> -> tensor<2x8xf32, #tfm.dist<@dense>>
  func.func @split_to_whole(%x: tensor<2x2xf32, #tfm.dist<@dense, [[], [cp, tp]]>>) -> tensor<2x8xf32, #tfm.dist<@dense>> {
    %y = tfm.reshard %x : tensor<2x2xf32, #tfm.dist<@dense, [[], [cp, tp]]>> -> tensor<2x8xf32, #tfm.dist<@dense>>
    return %y : tensor<2x8xf32, #tfm.dist<@dense>>
  }

  // Test: only the minor axis gathered (SP's all-gather under CP).
  // CHECK-LABEL: func.func @gather_minor
  // CHECK: mesh.all_gather %{{.*}} on @dense mesh_axes = [3] gather_axis = 1 : tensor<2x2xf32, {{.*}}> -> tensor<2x4xf32, #tfm.dist<@dense, {{\[\[}}], [cp]]>>
  func.func @gather_minor(%x: tensor<2x2xf32, #tfm.dist<@dense, [[], [cp, tp]]>>) -> tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]]>> {
    %y = tfm.reshard %x : tensor<2x2xf32, #tfm.dist<@dense, [[], [cp, tp]]>> -> tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]]>>
    return %y : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]]>>
  }

  // Test: a whole value split: all_slice (no communication).
  // CHECK-LABEL: func.func @whole_to_split
  // CHECK: mesh.all_slice %{{.*}} on @dense mesh_axes = [3] slice_axis = 0 : tensor<8x2xf32, #tfm.dist<@dense>> -> tensor<4x2xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
  func.func @whole_to_split(%x: tensor<8x2xf32, #tfm.dist<@dense>>) -> tensor<4x2xf32, #tfm.dist<@dense, [[tp]]>> {
    %y = tfm.reshard %x : tensor<8x2xf32, #tfm.dist<@dense>> -> tensor<4x2xf32, #tfm.dist<@dense, [[tp]]>>
    return %y : tensor<4x2xf32, #tfm.dist<@dense, [[tp]]>>
  }

  // Test: a split moved to another dim: all_to_all (Ulysses's exchange of
  // sequence for heads).
  // CHECK-LABEL: func.func @move_split
  // CHECK: mesh.all_to_all %{{.*}} on @dense mesh_axes = [2] split_axis = 2 concat_axis = 1 : tensor<2x4x8xf32, {{.*}}> -> tensor<2x8x4xf32, #tfm.dist<@dense, {{\[\[}}], [], [cp]]>>
  func.func @move_split(%x: tensor<2x4x8xf32, #tfm.dist<@dense, [[], [cp]]>>) -> tensor<2x8x4xf32, #tfm.dist<@dense, [[], [], [cp]]>> {
    %y = tfm.reshard %x : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [cp]]>> -> tensor<2x8x4xf32, #tfm.dist<@dense, [[], [], [cp]]>>
    return %y : tensor<2x8x4xf32, #tfm.dist<@dense, [[], [], [cp]]>>
  }

  // Test: a load-balanced (zigzag) sequence made whole: gathered in rank
  // order (chunks 0 3 1 2), then reordered: result chunk j is gathered chunk
  // [0, 2, 3, 1][j].
  // CHECK-LABEL: func.func @zigzag_to_whole
  // CHECK: %[[G:.*]] = mesh.all_gather %{{.*}} on @dense mesh_axes = [2] gather_axis = 1 : tensor<2x4xf32, {{.*}}> -> tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}], [] zigzag(2)]>>
  // CHECK: tfm.permute_chunks %[[G]] dim 1 order [0, 2, 3, 1] : tensor<2x8xf32, {{.*}}> -> tensor<2x8xf32, #tfm.dist<@dense>>
  func.func @zigzag_to_whole(%x: tensor<2x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>) -> tensor<2x8xf32, #tfm.dist<@dense>> {
    %y = tfm.reshard %x : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>> -> tensor<2x8xf32, #tfm.dist<@dense>>
    return %y : tensor<2x8xf32, #tfm.dist<@dense>>
  }

  // Test: a whole sequence split the load-balanced way: reordered, then
  // sliced (rank r keeps chunks r and 3 - r).
  // CHECK-LABEL: func.func @whole_to_zigzag
  // CHECK: %[[P:.*]] = tfm.permute_chunks %{{.*}} dim 1 order [0, 3, 1, 2] : tensor<2x8xf32, #tfm.dist<@dense>> -> tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}], [] zigzag(2)]>>
  // CHECK: mesh.all_slice %[[P]] on @dense mesh_axes = [2] slice_axis = 1 : {{.*}} -> tensor<2x4xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>
  func.func @whole_to_zigzag(%x: tensor<2x8xf32, #tfm.dist<@dense>>) -> tensor<2x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>> {
    %y = tfm.reshard %x : tensor<2x8xf32, #tfm.dist<@dense>> -> tensor<2x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>
    return %y : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>
  }

  // Test: from one chunk order to another: gathered whole, reordered once,
  // sliced again.
  // CHECK-LABEL: func.func @zigzag_to_contiguous
  // CHECK: mesh.all_gather
  // CHECK: tfm.permute_chunks %{{.*}} dim 1 order [0, 2, 3, 1]
  // CHECK: mesh.all_slice
  func.func @zigzag_to_contiguous(%x: tensor<2x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>) -> tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]]>> {
    %y = tfm.reshard %x : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>> -> tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]]>>
    return %y : tensor<2x4xf32, #tfm.dist<@dense, [[], [cp]]>>
  }
}
