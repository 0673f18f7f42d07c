// RUN: loom-opt %s -split-input-file --tfm-propagate-distribution | FileCheck %s
// RUN: loom-opt %s -split-input-file --tfm-propagate-distribution --tfm-localize --tfm-reshard-to-collectives --tfm-verify-distribution | FileCheck %s --check-prefix=SHARD

// Context parallelism: the batch inputs enter with their sequence split over
// cp in Megatron's load-balanced order (cp 2: 4 chunks, rank r holds chunks
// r and 3 - r), and everything computed token by token keeps that layout.
// Attention follows each layer's cp_comm_type: allgather (layer 0) needs
// the keys and values whole (a reshard, which becomes an all-gather and a
// chunk reorder); p2p (layer 1) keeps them split and marks the op ring
// attention over cp (no collective: tfm-expand-ring-attention writes the
// ring).

// CHECK-LABEL: func.func @forward
// CHECK-SAME: tensor<1x8xi32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>> {tfm.input = "tokens"}
// CHECK: tfm.embedding {{.*}} -> tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>
// CHECK: tfm.block layer 0
// CHECK: %[[KV:.*]] = tfm.reshard %{{.*}} : tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>> -> tensor<1x8x16xf32, #tfm.dist<@dense>>
// CHECK: tfm.attention %{{.*}}, %[[KV]], %[[KV]] heads 2 kv_heads 2 head_dim 8 scale 3.500000e-01 mask causal :
// CHECK-SAME: -> tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>, tensor<1x2x8xf32, #tfm.dist<@dense, {{\[\[}}], [], [cp] zigzag(2)]>>
// CHECK: tfm.block layer 1
// CHECK-NOT: tfm.reshard
// CHECK: tfm.attention {{.*}} mask causal ring "cp" : tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>, tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>

// SHARD-LABEL: func.func @forward
// SHARD-SAME: tensor<1x4xi32
// SHARD: tfm.block layer 0
// SHARD: %[[G:.*]] = mesh.all_gather %{{.*}} on @dense mesh_axes = [2] gather_axis = 1 : tensor<1x4x16xf32, {{.*}}> -> tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [] zigzag(2)]>>
// SHARD: %[[N:.*]] = tfm.permute_chunks %[[G]] dim 1 order [0, 2, 3, 1] : {{.*}} -> tensor<1x8x16xf32, #tfm.dist<@dense>>
// SHARD: tfm.attention %{{.*}}, %[[N]], %[[N]] {{.*}} : tensor<1x4x16xf32, {{.*}}>, tensor<1x8x16xf32, #tfm.dist<@dense>>
// SHARD: tfm.block layer 1
// SHARD-NOT: mesh.
// SHARD: tfm.attention {{.*}} ring "cp" : tensor<1x4x16xf32, {{.*}}>, tensor<1x4x16xf32,
module attributes {tfm.plan = #tfm.plan<cp = 2, cp_comm_type = ["allgather", "p2p"]>} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x16xf32>
  tfm.param @wq init(ones) : tensor<16x16xf32>
  func.func @forward(%t: tensor<1x8xi32> {tfm.input = "tokens"}) -> (tensor<1x8x16xf32>, tensor<1x8x16xf32>) {
    %a, %b = tfm.block embedding ins(%t : tensor<1x8xi32>) -> tensor<1x8x16xf32>, tensor<1x8x16xf32> {
    ^bb0(%ids: tensor<1x8xi32>):
      %wte = tfm.get_param @wte : tensor<32x16xf32>
      %x = tfm.embedding %ids, %wte : tensor<1x8xi32>, tensor<32x16xf32> -> tensor<1x8x16xf32>
      %wq = tfm.get_param @wq : tensor<16x16xf32>
      %q = tfm.linear %x, %wq : tensor<1x8x16xf32>, tensor<16x16xf32> -> tensor<1x8x16xf32>
      tfm.yield %x, %q : tensor<1x8x16xf32>, tensor<1x8x16xf32>
    }
    %o0 = tfm.block layer 0 ins(%a, %b : tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
    ^bb0(%x: tensor<1x8x16xf32>, %q: tensor<1x8x16xf32>):
      %o, %lse = tfm.attention %q, %x, %x heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal : tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32> -> tensor<1x8x16xf32>, tensor<1x2x8xf32>
      tfm.yield %o : tensor<1x8x16xf32>
    }
    %o1 = tfm.block layer 1 ins(%a, %b : tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
    ^bb0(%x: tensor<1x8x16xf32>, %q: tensor<1x8x16xf32>):
      %o, %lse = tfm.attention %q, %x, %x heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal : tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32> -> tensor<1x8x16xf32>, tensor<1x2x8xf32>
      tfm.yield %o : tensor<1x8x16xf32>
    }
    return %o0, %o1 : tensor<1x8x16xf32>, tensor<1x8x16xf32>
  }
}

// -----

// The loss of a sequence split over cp: the masked sum of row losses and the
// token count are partial sums over cp (one all-reduce of the pair), the
// mean is taken after; the gradient divides by the whole batch's count, a
// token_count reduced over cp.
// CHECK-LABEL: func.func @loss
// CHECK: %[[M:.*]] = tfm.ce_row_max %{{.*}} -> tensor<1x8xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>
// CHECK: %[[P:.*]] = tfm.ce_loss_sum {{.*}} -> tensor<2xf32, #tfm.dist<@dense, partial = sum[cp]>>
// CHECK: %[[W:.*]] = tfm.reshard %[[P]] : {{.*}} -> tensor<2xf32, #tfm.dist<@dense>>
// CHECK: tfm.loss_mean %[[W]]
// CHECK: %[[C:.*]] = tfm.token_count %{{.*}} -> tensor<f32, #tfm.dist<@dense, partial = sum[cp]>>
// CHECK: %[[CW:.*]] = tfm.reshard %[[C]] : {{.*}} -> tensor<f32, #tfm.dist<@dense>>
// CHECK: tfm.cross_entropy_grad {{.*}} count %[[CW]]
// SHARD-LABEL: func.func @loss
// SHARD: mesh.all_reduce %{{.*}} on @dense mesh_axes = [2] : tensor<2xf32, #tfm.dist<@dense, partial = sum[cp]>> -> tensor<2xf32, #tfm.dist<@dense>>
// SHARD: mesh.all_reduce %{{.*}} on @dense mesh_axes = [2] : tensor<f32, #tfm.dist<@dense, partial = sum[cp]>> -> tensor<f32, #tfm.dist<@dense>>
module attributes {tfm.plan = #tfm.plan<cp = 2>} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @loss(%logits: tensor<1x8x32xf32>, %l: tensor<1x8xi32> {tfm.input = "labels"},
                  %m: tensor<1x8xf32> {tfm.input = "loss_mask"}) -> (tensor<f32>, tensor<1x8x32xf32>) {
    %loss, %g = tfm.block head ins(%logits, %l, %m : tensor<1x8x32xf32>, tensor<1x8xi32>, tensor<1x8xf32>) -> tensor<f32>, tensor<1x8x32xf32> {
    ^bb0(%x: tensor<1x8x32xf32>, %labels: tensor<1x8xi32>, %mask: tensor<1x8xf32>):
      %loss, %max, %sum = tfm.cross_entropy %x, %labels, %mask : tensor<1x8x32xf32>, tensor<1x8xi32>, tensor<1x8xf32> -> tensor<f32>
      %d = tfm.cross_entropy_grad %x, %labels, %mask, %max, %sum, %loss : tensor<1x8x32xf32>, tensor<1x8xi32>, tensor<1x8xf32>, tensor<f32>
      tfm.yield %loss, %d : tensor<f32>, tensor<1x8x32xf32>
    }
    return %loss, %g : tensor<f32>, tensor<1x8x32xf32>
  }
}

// -----

// a2a (Ulysses): q, k and v are exchanged, heads for sequence, by one
// all-to-all over cp and put back in order (TransformerEngine's reorder:
// the kernel skips whole masked blocks only in order); each rank attends
// with half the heads; the output goes back the same way.
// CHECK-LABEL: func.func @ulysses
// CHECK: %[[A:.*]] = tfm.reshard %{{.*}} : tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>> -> tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [cp]]>>
// CHECK: %[[O:.*]], %{{.*}} = tfm.attention %[[A]], %[[A]], %[[A]]
// CHECK: tfm.reshard %[[O]] : tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [cp]]>> -> tensor<1x8x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(2)]>>
// SHARD-LABEL: func.func @ulysses
// SHARD: %[[X:.*]] = mesh.all_to_all %{{.*}} on @dense mesh_axes = [2] split_axis = 2 concat_axis = 1 : tensor<1x4x16xf32, {{.*}}> -> tensor<1x8x8xf32,
// SHARD: %[[N:.*]] = tfm.permute_chunks %[[X]] dim 1 order [0, 2, 3, 1]
// SHARD: %[[R:.*]], %{{.*}} = tfm.attention %[[N]], %[[N]], %[[N]] heads 1 kv_heads 1
// SHARD: %[[Z:.*]] = tfm.permute_chunks %[[R]] dim 1 order [0, 3, 1, 2]
// SHARD: mesh.all_to_all %[[Z]] on @dense mesh_axes = [2] split_axis = 1 concat_axis = 2 : tensor<1x8x8xf32, {{.*}}> -> tensor<1x4x16xf32,
module attributes {tfm.plan = #tfm.plan<cp = 2, cp_comm_type = ["a2a"]>} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x16xf32>
  func.func @ulysses(%t: tensor<1x8xi32> {tfm.input = "tokens"}) -> tensor<1x8x16xf32> {
    %x = tfm.block embedding ins(%t : tensor<1x8xi32>) -> tensor<1x8x16xf32> {
    ^bb0(%ids: tensor<1x8xi32>):
      %wte = tfm.get_param @wte : tensor<32x16xf32>
      %e = tfm.embedding %ids, %wte : tensor<1x8xi32>, tensor<32x16xf32> -> tensor<1x8x16xf32>
      tfm.yield %e : tensor<1x8x16xf32>
    }
    %o0 = tfm.block layer 0 ins(%x : tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
    ^bb0(%h: tensor<1x8x16xf32>):
      %o, %lse = tfm.attention %h, %h, %h heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal : tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32> -> tensor<1x8x16xf32>, tensor<1x2x8xf32>
      %s = tfm.add %o, %h : tensor<1x8x16xf32>
      tfm.yield %s : tensor<1x8x16xf32>
    }
    return %o0 : tensor<1x8x16xf32>
  }
}

// -----

// a2a+p2p (hierarchical, sizes [2, 2] over cp 4): k and v stay split like
// the queries, as for p2p, and the op is marked a ring over cp with a2a
// groups of 2 (tfm-expand-ring-attention writes the exchanges and the ring).
// CHECK-LABEL: func.func @hierarchical
// CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} heads 4 kv_heads 4 head_dim 4 scale {{.*}} mask causal ring "cp" a2a 2 : tensor<1x16x16xf32, #tfm.dist<@dense, {{\[\[}}], [cp] zigzag(4)]>>
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [2, 2]>} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x16xf32>
  func.func @hierarchical(%t: tensor<1x16xi32> {tfm.input = "tokens"}) -> tensor<1x16x16xf32> {
    %x = tfm.block embedding ins(%t : tensor<1x16xi32>) -> tensor<1x16x16xf32> {
    ^bb0(%ids: tensor<1x16xi32>):
      %wte = tfm.get_param @wte : tensor<32x16xf32>
      %e = tfm.embedding %ids, %wte : tensor<1x16xi32>, tensor<32x16xf32> -> tensor<1x16x16xf32>
      tfm.yield %e : tensor<1x16x16xf32>
    }
    %o0 = tfm.block layer 0 ins(%x : tensor<1x16x16xf32>) -> tensor<1x16x16xf32> {
    ^bb0(%h: tensor<1x16x16xf32>):
      %o, %lse = tfm.attention %h, %h, %h heads 4 kv_heads 4 head_dim 4 scale 0.5 mask causal : tensor<1x16x16xf32>, tensor<1x16x16xf32>, tensor<1x16x16xf32> -> tensor<1x16x16xf32>, tensor<1x4x16xf32>
      %s = tfm.add %o, %h : tensor<1x16x16xf32>
      tfm.yield %s : tensor<1x16x16xf32>
    }
    return %o0 : tensor<1x16x16xf32>
  }
}
