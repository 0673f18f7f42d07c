// RUN: loom-opt %s -split-input-file --pass-pipeline='builtin.module(func.func(tfm-expand-ring-attention))' | FileCheck %s

// Ring attention over cp 3 (each rank's 4 of 12 tokens). Forward: the
// diagonal tile of the rank's own block, then two steps that pass k and v to
// the next rank and merge the tile of the block received (of rank r - 1,
// then r - 2). Backward: from the block of rank r + 1 (the last one the
// forward received, reused), each step adds the tile's gradients and passes
// k, v, dk and dv to the previous rank; the third step is the rank's own
// block: 2 hops of k and v forward, 2 of k, v, dk and dv backward.

#q = #tfm.dist<@dense, [[], [cp] zigzag(3)]>
#s = #tfm.dist<@dense, [[], [], [cp] zigzag(3)]>
// CHECK-LABEL: func.func @train
// CHECK:      %[[O0:.*]], %[[L0:.*]] = tfm.attention_section %arg0, %arg1, %arg2 kv_from 0 on @dense axis "cp"
// CHECK-NEXT: %[[KV1:.*]]:2 = tfm.ring_shift %arg1, %arg2 on @dense axis "cp" offset 1
// CHECK-NEXT: %[[O1:.*]], %[[L1:.*]] = tfm.attention_section %arg0, %[[KV1]]#0, %[[KV1]]#1 merge(%[[O0]], %[[L0]] : {{.*}}) kv_from -1
// CHECK-NEXT: %[[KV2:.*]]:2 = tfm.ring_shift %[[KV1]]#0, %[[KV1]]#1 on @dense axis "cp" offset 1
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = tfm.attention_section %arg0, %[[KV2]]#0, %[[KV2]]#1 merge(%[[O1]], %[[L1]] : {{.*}}) kv_from -2
// CHECK-NEXT: %[[DQ0:[^,]*]], %[[DK0:[^,]*]], %[[DV0:[^ ]*]] = tfm.attention_section_grad %arg0, %[[KV2]]#0, %[[KV2]]#1, %[[O]], %[[L]], %arg3 kv_from 1
// CHECK-NEXT: %[[B1:.*]]:4 = tfm.ring_shift %[[KV2]]#0, %[[KV2]]#1, %[[DK0]], %[[DV0]] on @dense axis "cp" offset -1
// CHECK-NEXT: %[[DQ1:[^,]*]], %[[DK1:[^,]*]], %[[DV1:[^ ]*]] = tfm.attention_section_grad %arg0, %[[B1]]#0, %[[B1]]#1, %[[O]], %[[L]], %arg3 grads(%[[DQ0]], %[[B1]]#2, %[[B1]]#3 : {{.*}}) kv_from 2
// CHECK-NEXT: %[[B2:.*]]:4 = tfm.ring_shift %[[B1]]#0, %[[B1]]#1, %[[DK1]], %[[DV1]] on @dense axis "cp" offset -1
// CHECK-NEXT: %[[DQ2:[^,]*]], %[[DK2:[^,]*]], %[[DV2:[^ ]*]] = tfm.attention_section_grad %arg0, %[[B2]]#0, %[[B2]]#1, %[[O]], %[[L]], %arg3 grads(%[[DQ1]], %[[B2]]#2, %[[B2]]#3 : {{.*}}) kv_from 3
// CHECK-NEXT: return %[[O]], %[[DQ2]], %[[DK2]], %[[DV2]]
// CHECK-NOT: tfm.attention
module attributes {tfm.plan = #tfm.plan<cp = 3>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x3x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @train(%q: tensor<1x4x16xf32, #q>, %k: tensor<1x4x16xf32, #q>, %v: tensor<1x4x16xf32, #q>, %do: tensor<1x4x16xf32, #q>)
      -> (tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>) {
    %o, %lse = tfm.attention %q, %k, %v heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal ring "cp" : tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q> -> tensor<1x4x16xf32, #q>, tensor<1x2x4xf32, #s>
    %dq, %dk, %dv = tfm.attention_grad %q, %k, %v, %o, %lse, %do heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal ring "cp" : tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>, tensor<1x2x4xf32, #s>
    return %o, %dq, %dk, %dv : tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>, tensor<1x4x16xf32, #q>
  }
}

// -----

// A backward without its forward in the function starts by fetching the
// block of rank r + 1.
// CHECK-LABEL: func.func @backward_only
// CHECK: %[[KV:.*]]:2 = tfm.ring_shift %{{.*}}, %{{.*}} on @dense axis "cp" offset -1
// CHECK-NEXT: tfm.attention_section_grad %{{.*}}, %[[KV]]#0, %[[KV]]#1, {{.*}} kv_from 1
// CHECK-NEXT: tfm.ring_shift {{.*}} offset -1
// CHECK-NEXT: tfm.attention_section_grad {{.*}} kv_from 2
#q2 = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
#s2 = #tfm.dist<@dense, [[], [], [cp] zigzag(2)]>
module attributes {tfm.plan = #tfm.plan<cp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @backward_only(%q: tensor<1x4x16xf32, #q2>, %k: tensor<1x4x16xf32, #q2>, %o: tensor<1x4x16xf32, #q2>,
                           %lse: tensor<1x2x4xf32, #s2>, %do: tensor<1x4x16xf32, #q2>) -> tensor<1x4x16xf32, #q2> {
    %dq, %dk, %dv = tfm.attention_grad %q, %k, %k, %o, %lse, %do heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal ring "cp" : tensor<1x4x16xf32, #q2>, tensor<1x4x16xf32, #q2>, tensor<1x4x16xf32, #q2>, tensor<1x2x4xf32, #s2>
    return %dk : tensor<1x4x16xf32, #q2>
  }
}

// -----

// A document mask: every tile reads the whole sequence's tokens (their
// document ids at the queries' and the block's positions).
// CHECK-LABEL: func.func @documents
// CHECK: tfm.attention_section %{{.*}}, %{{.*}}, %{{.*}} tokens(%[[T:[^ ]*]] : tensor<1x8xi32, #tfm.dist<@dense>>) eod 7 kv_from 0
// CHECK: tfm.ring_shift
// CHECK: tfm.attention_section {{.*}} tokens(%[[T]] : {{.*}}) eod 7 kv_from -1
#q3 = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
#s3 = #tfm.dist<@dense, [[], [], [cp] zigzag(2)]>
module attributes {tfm.plan = #tfm.plan<cp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @documents(%q: tensor<1x4x16xf32, #q3>, %k: tensor<1x4x16xf32, #q3>, %t: tensor<1x8xi32, #tfm.dist<@dense>>) -> tensor<1x4x16xf32, #q3> {
    %o, %lse = tfm.attention %q, %k, %k tokens %t heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal_document eod 7 ring "cp" : tensor<1x4x16xf32, #q3>, tensor<1x4x16xf32, #q3>, tensor<1x4x16xf32, #q3>, tensor<1x8xi32, #tfm.dist<@dense>> -> tensor<1x4x16xf32, #q3>, tensor<1x2x4xf32, #s3>
    return %o : tensor<1x4x16xf32, #q3>
  }
}

// -----

// Hierarchical (a2a+p2p, `a2a 2` over cp 4: pairs of cp ranks, a ring of
// 2). q, k and v trade heads for sequence within the pair (level 0), the
// four received chunks reordered (each rank's first chunk, then the second
// ones mirrored: the load-balanced layout of the ring), then the ring runs
// over level 1 with half the heads and twice the tokens; the output and
// the log-sum-exp trade back. The backward exchanges q, the output, its
// gradient and the lse again, starts from the forward's last block and
// sends the three gradients back.
#q4 = #tfm.dist<@dense, [[], [cp] zigzag(4)]>
#s4 = #tfm.dist<@dense, [[], [], [cp] zigzag(4)]>
// CHECK-LABEL: func.func @hierarchical
// CHECK:      %[[QX:.*]] = tfm.level_all_to_all %arg0 on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x4x32xf32, #{{.*}}> -> tensor<1x8x16xf32>
// CHECK-NEXT: %[[Q:.*]] = tfm.permute_chunks %[[QX]] dim 1 order [0, 2, 3, 1]
// CHECK:      %[[O0:.*]], %[[L0:.*]] = tfm.attention_section %[[Q]], %[[K:.*]], %[[V:.*]] kv_from 0 on @dense axis "cp" level 1 heads 2 kv_heads 2
// CHECK-NEXT: %[[KV1:.*]]:2 = tfm.ring_shift %[[K]], %[[V]] on @dense axis "cp" level 1 offset 1
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = tfm.attention_section %[[Q]], %[[KV1]]#0, %[[KV1]]#1 merge(%[[O0]], %[[L0]] : {{.*}}) kv_from -1 on @dense axis "cp" level 1
// CHECK-SAME: -> tensor<1x2x8xf32>
// CHECK-NEXT: %[[OP:.*]] = tfm.permute_chunks %[[O]] dim 1 order [0, 3, 1, 2]
// CHECK-NEXT: %[[OUT:.*]] = tfm.level_all_to_all %[[OP]] on @dense axis "cp" level 0 split 1 concat 2 : tensor<1x8x16xf32> -> tensor<1x4x32xf32, #{{.*}}>
// CHECK-NEXT: %[[LP:.*]] = tfm.permute_chunks %[[L]] dim 2 order [0, 3, 1, 2]
// CHECK-NEXT: %[[LSE:.*]] = tfm.level_all_to_all %[[LP]] on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x2x8xf32> -> tensor<1x4x4xf32, #{{.*}}>
// CHECK:      tfm.level_all_to_all %[[LSE]] on @dense axis "cp" level 0 split 1 concat 2
// CHECK:      tfm.attention_section_grad {{.*}}, %[[KV1]]#0, %[[KV1]]#1, {{.*}} kv_from 1 on @dense axis "cp" level 1 heads 2 kv_heads 2
// CHECK-NEXT: tfm.ring_shift {{.*}} on @dense axis "cp" level 1 offset -1
// CHECK-NEXT: tfm.attention_section_grad {{.*}} kv_from 2 on @dense axis "cp" level 1
// CHECK-COUNT-3: tfm.level_all_to_all {{.*}} level 0 split 1 concat 2 : tensor<1x8x16xf32> -> tensor<1x4x32xf32, #{{.*}}>
// CHECK-NEXT: return
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [2, 2]>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @hierarchical(%q: tensor<1x4x32xf32, #q4>, %k: tensor<1x4x32xf32, #q4>, %v: tensor<1x4x32xf32, #q4>, %do: tensor<1x4x32xf32, #q4>)
      -> (tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>) {
    %o, %lse = tfm.attention %q, %k, %v heads 4 kv_heads 4 head_dim 8 scale 0.35 mask causal ring "cp" a2a 2 : tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4> -> tensor<1x4x32xf32, #q4>, tensor<1x4x4xf32, #s4>
    %dq, %dk, %dv = tfm.attention_grad %q, %k, %v, %o, %lse, %do heads 4 kv_heads 4 head_dim 8 scale 0.35 mask causal ring "cp" a2a 2 : tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>, tensor<1x4x4xf32, #s4>
    return %o, %dq, %dk, %dv : tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>, tensor<1x4x32xf32, #q4>
  }
}
