// RUN: loom-opt %s -split-input-file --tfm-verify-distribution -verify-diagnostics

// The rules of context parallelism's ops (chunk order, the ring, the
// hierarchical levels, the vocabulary's order, partial maxima and the
// log-sum-exp): each diagnostic once, on per-rank IR as
// tfm-expand-ring-attention writes it.

// Test: a chunk permutation of a split dim (only a whole dim can be
// reordered)
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%x: tensor<1x4x16xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>) {
    // expected-error @+1 {{the input is split on dim 1 over cp in zigzag(2) order; only a whole dim can be reordered}}
    %y = tfm.permute_chunks %x dim 1 order [0, 3, 1, 2] : tensor<1x4x16xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>> -> tensor<1x4x16xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>
    return
  }
}

// -----

// Test: a ring over a contiguous split (the load-balanced order is what
// the sections' causal halves assume)
#c = #tfm.dist<@dense, [[], [cp]]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%k: tensor<1x4x16xf32, #c>) {
    // expected-error @+1 {{an input is split on dim 1 over cp; the ring over cp needs dim 1 split over it alone, in the load-balanced order of 2 chunks per rank}}
    %k1, %v1 = tfm.ring_shift %k, %k on @dense axis "cp" offset 1 : tensor<1x4x16xf32, #c>, tensor<1x4x16xf32, #c>
    return
  }
}

// -----

// Test: a ring whose load-balanced order is that of another ring size
#z = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%k: tensor<1x4x16xf32, #z>) {
    // expected-error @+1 {{the ring over cp needs dim 1 split over it alone, in the load-balanced order of 2 chunks per rank}}
    %k1, %v1 = tfm.ring_shift %k, %k on @dense axis "cp" offset 1 : tensor<1x4x16xf32, #z>, tensor<1x4x16xf32, #z>
    return
  }
}

// -----

// Test: a partial sum passed around the ring
#p = #tfm.dist<@dense, [[], [cp] zigzag(2)], partial = sum[tp]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%k: tensor<1x4x16xf32, #p>) {
    // expected-error @+1 {{an input is split on dim 1 over cp in zigzag(2) order and a partial sum over tp; ring values are whole values}}
    %k1, %v1 = tfm.ring_shift %k, %k on @dense axis "cp" offset 1 : tensor<1x4x16xf32, #p>, tensor<1x4x16xf32, #p>
    return
  }
}

// -----

// Test: a ring over an axis the mesh does not have
#z = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%k: tensor<1x4x16xf32, #z>) {
    // expected-error @+1 {{the ring's axis ep is not an axis of the mesh}}
    %k1, %v1 = tfm.ring_shift %k, %k on @dense axis "ep" offset 1 : tensor<1x4x16xf32, #z>, tensor<1x4x16xf32, #z>
    return
  }
}

// -----

// Test: a section whose key is split unlike the query
#z = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
#s = #tfm.dist<@dense, [[], [], [cp] zigzag(2)]>
#w = #tfm.dist<@dense>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%q: tensor<1x4x16xf32, #z>, %k: tensor<1x4x16xf32, #w>) {
    // expected-error @+1 {{the key is replicated; the ring over cp needs dim 1 split over it alone}}
    %o, %l = tfm.attention_section %q, %k, %k kv_from 0 on @dense axis "cp" heads 2 kv_heads 2 head_dim 8 scale 0.35 : tensor<1x4x16xf32, #z>, tensor<1x4x16xf32, #w> -> tensor<1x2x4xf32, #s>
    return
  }
}

// -----

// Test: a section merged into an accumulator distributed otherwise than
// its result
#z = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
#s = #tfm.dist<@dense, [[], [], [cp] zigzag(2)]>
#w = #tfm.dist<@dense>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%q: tensor<1x4x16xf32, #z>, %o: tensor<1x4x16xf32, #z>, %lse: tensor<1x2x4xf32, #w>) {
    // expected-error @+1 {{the merged result #1 is replicated but folds into a result that is split on dim 2 over cp in zigzag(2) order}}
    %o1, %l1 = tfm.attention_section %q, %q, %q merge(%o, %lse : tensor<1x4x16xf32, #z>, tensor<1x2x4xf32, #w>) kv_from -1 on @dense axis "cp" heads 2 kv_heads 2 head_dim 8 scale 0.35 : tensor<1x4x16xf32, #z>, tensor<1x4x16xf32, #z> -> tensor<1x2x4xf32, #w>
    return
  }
}

// -----

// Test: a section's backward given a log-sum-exp distributed otherwise
// than its query's rows
#z = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
#w = #tfm.dist<@dense>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%q: tensor<1x4x16xf32, #z>, %lse: tensor<1x2x4xf32, #w>) {
    // expected-error @+1 {{the log-sum-exp is replicated but the query gives split on dim 2 over cp in zigzag(2) order}}
    %dq, %dk, %dv = tfm.attention_section_grad %q, %q, %q, %q, %lse, %q kv_from 1 on @dense axis "cp" heads 2 kv_heads 2 head_dim 8 scale 0.35 : tensor<1x4x16xf32, #z>, tensor<1x4x16xf32, #z>, tensor<1x2x4xf32, #w>
    return
  }
}

// -----

// Test: attention's backward given a log-sum-exp split otherwise than its
// query's rows
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%q: tensor<1x8x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %lse: tensor<1x2x8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the log-sum-exp is replicated but the query gives split on dim 1 over tp}}
    %dq, %dk, %dv = tfm.attention_grad %q, %q, %q, %q, %lse, %q heads 2 kv_heads 2 head_dim 4 scale 0.5 mask causal : tensor<1x8x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<1x8x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<1x8x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<1x2x8xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: an all-to-all of a hierarchical level between two distributed
// values (it enters or leaves the level's layout, which has none)
#z = #tfm.dist<@dense, [[], [cp] zigzag(4)]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%x: tensor<1x4x32xf32, #z>) {
    // expected-error @+1 {{moves a value that is distributed to one that is distributed; it moves values into a hierarchical ring level's layout (which carries no distribution) or out of it}}
    %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x4x32xf32, #z> -> tensor<1x8x16xf32, #z>
    return
  }
}

// -----

// Test: a level's layout read by an op outside the ring
#z = #tfm.dist<@dense, [[], [cp] zigzag(4)]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%x: tensor<1x4x32xf32, #z>) {
    %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x4x32xf32, #z> -> tensor<1x8x16xf32>
    // expected-error @+1 {{reads a value in a hierarchical ring level's layout (no distribution), which only the ring's ops may read; tfm.level_all_to_all brings it back}}
    %g = tfm.add %y, %y : tensor<1x8x16xf32>, tensor<1x8x16xf32> -> tensor<1x8x16xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a level's ring given a distributed value (the level works in its
// own layout)
#z = #tfm.dist<@dense, [[], [cp] zigzag(4)]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%x: tensor<1x4x32xf32, #z>) {
    // expected-error @+1 {{an input is split on dim 1 over cp in zigzag(4) order; a level of a hierarchical ring works in the ring's own layout, which carries no distribution (enter it with tfm.level_all_to_all)}}
    %k1, %v1 = tfm.ring_shift %x, %x on @dense axis "cp" level 1 offset 1 : tensor<1x4x32xf32, #z>, tensor<1x4x32xf32, #z>
    return
  }
}

// -----

// Test: the plain ring given a value in a level's layout
#z = #tfm.dist<@dense, [[], [cp] zigzag(4)]>
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%x: tensor<1x4x32xf32, #z>) {
    %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x4x32xf32, #z> -> tensor<1x8x16xf32>
    // expected-error @+1 {{an input has no distribution; outside a hierarchical level the ring's values are split on the sequence}}
    %k1, %v1 = tfm.ring_shift %y, %y on @dense axis "cp" offset 1 : tensor<1x8x16xf32>, tensor<1x8x16xf32>
    return
  }
}

// -----

// Test: a cross-entropy statistic of logits whose vocabulary is reordered
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%l: tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [cp] zigzag(2)]>>) {
    // expected-error @+1 {{the logits are split on dim 2 over cp in zigzag(2) order; the vocabulary must be in order}}
    %m = tfm.ce_row_max %l : tensor<1x4x16xf32, #tfm.dist<@dense, [[], [], [cp] zigzag(2)]>> -> tensor<1x4xf32, #tfm.dist<@dense, partial = max[cp]>>
    return
  }
}

// -----

// Test: a partial maximum fed to a linear map (only sums pass through)
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense, partial = max[tp]>>, %w: tensor<8x8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the input is a partial maximum over tp; a linear map is linear in sums only}}
    %y = tfm.linear %x, %w : tensor<1x4x8xf32, #tfm.dist<@dense, partial = max[tp]>>, tensor<8x8xf32, #tfm.dist<@dense>> -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = max[tp]>>
    return
  }
}
