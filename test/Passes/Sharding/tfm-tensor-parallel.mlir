// RUN: loom-opt %s -split-input-file --tfm-tensor-parallel -verify-diagnostics | FileCheck %s

// A Llama-style layer at tp 2: q/k/v and gate/up are column-parallel, o and
// down row-parallel with one all-reduce each; heads and the ffn dim halve;
// norms and residuals stay whole; the embedding and head are untouched.

module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @norm init(ones) : tensor<16xf32>
  tfm.param @q init(normal, std = 2.000000e-02) : tensor<16x16xf32>
  tfm.param @k init(normal, std = 2.000000e-02) : tensor<8x16xf32>
  tfm.param @v init(normal, std = 2.000000e-02) : tensor<8x16xf32>
  tfm.param @o init(normal, std = 2.000000e-02) : tensor<16x16xf32>
  tfm.param @gate init(normal, std = 2.000000e-02) : tensor<32x16xf32>
  tfm.param @up init(normal, std = 2.000000e-02) : tensor<32x16xf32>
  tfm.param @down init(normal, std = 2.000000e-02) : tensor<16x32xf32>

  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<1x4x16xf32>, %pos: tensor<1x4xi32>) -> tensor<1x4x16xf32> {
    // CHECK: tfm.block layer 0
    %y = tfm.block layer 0 ins(%x, %pos : tensor<1x4x16xf32>, tensor<1x4xi32>) -> tensor<1x4x16xf32> {
    ^bb0(%h: tensor<1x4x16xf32>, %p: tensor<1x4xi32>):
      // CHECK: %[[N:.*]] = tfm.rms_norm %{{.*}} : tensor<1x4x16xf32>, tensor<16xf32>
      %g = tfm.get_param @norm : tensor<16xf32>
      %n = tfm.rms_norm %h, %g eps 1.0e-6 : tensor<1x4x16xf32>, tensor<16xf32>
      // CHECK: %[[WQ:.*]] = tfm.get_param @q tp_split 0 : tensor<8x16xf32>
      // CHECK: %[[Q:.*]] = tfm.linear %[[N]], %[[WQ]] : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      %wq = tfm.get_param @q : tensor<16x16xf32>
      %q = tfm.linear %n, %wq : tensor<1x4x16xf32>, tensor<16x16xf32> -> tensor<1x4x16xf32>
      // CHECK: tfm.get_param @k tp_split 0 : tensor<4x16xf32>
      %wk = tfm.get_param @k : tensor<8x16xf32>
      %k = tfm.linear %n, %wk : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      %wv = tfm.get_param @v : tensor<8x16xf32>
      %v = tfm.linear %n, %wv : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      // CHECK: tfm.rope %[[Q]], %{{.*}} head_dim 4 theta 1.000000e+04 : tensor<1x4x8xf32>, tensor<1x4xi32>
      %qr = tfm.rope %q, %p head_dim 4 theta 1.0e4 : tensor<1x4x16xf32>, tensor<1x4xi32>
      %kr = tfm.rope %k, %p head_dim 4 theta 1.0e4 : tensor<1x4x8xf32>, tensor<1x4xi32>
      // CHECK: %[[A:.*]], %{{.*}} = tfm.attention {{.*}} heads 2 kv_heads 1 head_dim 4 {{.*}} -> tensor<1x4x8xf32>, tensor<1x2x4xf32>
      %a, %lse = tfm.attention %qr, %kr, %v heads 4 kv_heads 2 head_dim 4 scale 0.5 mask causal
          : tensor<1x4x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<1x4x16xf32>, tensor<1x4x4xf32>
      // CHECK: %[[WO:.*]] = tfm.get_param @o tp_split 1 : tensor<16x8xf32>
      // CHECK: %[[OP:.*]] = tfm.linear %[[A]], %[[WO]] : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
      // CHECK: %[[OR:.*]] = mesh.all_reduce %[[OP]] on @dense mesh_axes = [3] : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
      // CHECK: %[[R:.*]] = tfm.add %{{.*}}, %[[OR]] : tensor<1x4x16xf32>
      %wo = tfm.get_param @o : tensor<16x16xf32>
      %o = tfm.linear %a, %wo : tensor<1x4x16xf32>, tensor<16x16xf32> -> tensor<1x4x16xf32>
      %r = tfm.add %h, %o : tensor<1x4x16xf32>
      // CHECK: tfm.get_param @gate tp_split 0 : tensor<16x16xf32>
      // CHECK: tfm.swiglu %{{.*}}, %{{.*}} : tensor<1x4x16xf32>
      // CHECK: tfm.get_param @down tp_split 1 : tensor<16x16xf32>
      // CHECK: mesh.all_reduce
      %wg = tfm.get_param @gate : tensor<32x16xf32>
      %gt = tfm.linear %r, %wg : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
      %wu = tfm.get_param @up : tensor<32x16xf32>
      %u = tfm.linear %r, %wu : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
      %s = tfm.swiglu %gt, %u : tensor<1x4x32xf32>
      %wd = tfm.get_param @down : tensor<16x32xf32>
      %d = tfm.linear %s, %wd : tensor<1x4x32xf32>, tensor<16x32xf32> -> tensor<1x4x16xf32>
      %out = tfm.add %r, %d : tensor<1x4x16xf32>
      // CHECK: tfm.yield %{{.*}} : tensor<1x4x16xf32>
      tfm.yield %out : tensor<1x4x16xf32>
    }
    return %y : tensor<1x4x16xf32>
  }
}

// -----

// Backward: a column-parallel linear_grad gives a partial input gradient,
// summed with the others and all-reduced once before the norm's gradient; a
// row-parallel one gives a split gradient and needs no communication.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @norm init(ones) : tensor<16xf32>
  tfm.param @up init(normal, std = 2.000000e-02) : tensor<32x16xf32>
  tfm.param @down init(normal, std = 2.000000e-02) : tensor<16x32xf32>

  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<1x4x16xf32>) -> tensor<1x4x16xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x4x16xf32>) -> tensor<1x4x16xf32> {
    ^bb0(%h: tensor<1x4x16xf32>):
      %wu = tfm.get_param @up : tensor<32x16xf32>
      %u = tfm.linear %h, %wu : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
      %s = tfm.silu %u : tensor<1x4x32xf32>
      %wd = tfm.get_param @down : tensor<16x32xf32>
      %d = tfm.linear %s, %wd : tensor<1x4x32xf32>, tensor<16x32xf32> -> tensor<1x4x16xf32>
      tfm.yield %d : tensor<1x4x16xf32>
    }
    return %y : tensor<1x4x16xf32>
  }

  // CHECK-LABEL: func.func @train_step
  // CHECK-SAME: -> (tensor<16x16xf32>, tensor<16x16xf32>)
  func.func @train_step(%x: tensor<1x4x16xf32>, %u: tensor<1x4x32xf32>, %s: tensor<1x4x32xf32>, %dy: tensor<1x4x16xf32>) -> (tensor<32x16xf32>, tensor<16x32xf32>) {
    %r:2 = tfm.block layer 0 backward ins(%x, %dy : tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<32x16xf32>, tensor<16x32xf32> {
    ^bb0(%h: tensor<1x4x16xf32>, %g: tensor<1x4x16xf32>):
      %wu = tfm.get_param @up : tensor<32x16xf32>
      %u2 = tfm.linear %h, %wu : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
      %s2 = tfm.silu %u2 : tensor<1x4x32xf32>
      %wd = tfm.get_param @down : tensor<16x32xf32>
      // CHECK: %[[DS:.*]], %[[DWD:.*]] = tfm.linear_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x4x16xf32>, tensor<16x16xf32>, tensor<1x4x16xf32>
      %ds, %dwd = tfm.linear_grad %s2, %wd, %g : tensor<1x4x32xf32>, tensor<16x32xf32>, tensor<1x4x16xf32>
      // CHECK: %[[DU:.*]] = tfm.silu_grad %{{.*}}, %[[DS]] : tensor<1x4x16xf32>
      %du = tfm.silu_grad %u2, %ds : tensor<1x4x32xf32>
      // CHECK: %[[DX:.*]], %[[DWU:.*]] = tfm.linear_grad %{{.*}}, %{{.*}}, %[[DU]] : tensor<1x4x16xf32>, tensor<16x16xf32>, tensor<1x4x16xf32>
      %dx, %dwu = tfm.linear_grad %h, %wu, %du : tensor<1x4x16xf32>, tensor<32x16xf32>, tensor<1x4x32xf32>
      // CHECK: tfm.yield %[[DWU]], %[[DWD]] : tensor<16x16xf32>, tensor<16x16xf32>
      tfm.yield %dwu, %dwd : tensor<32x16xf32>, tensor<16x32xf32>
    }
    return %r#0, %r#1 : tensor<32x16xf32>, tensor<16x32xf32>
  }
}

// -----

// tp 1: nothing changes.
module attributes {tfm.plan = #tfm.plan<>} {
  tfm.param @w init(ones) : tensor<8x8xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK: tfm.get_param @w : tensor<8x8xf32>
  // CHECK-NOT: mesh.all_reduce
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      %w = tfm.get_param @w : tensor<8x8xf32>
      %l = tfm.linear %h, %w : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      tfm.yield %l : tensor<1x2x8xf32>
    }
    return %y : tensor<1x2x8xf32>
  }
}

// -----

// A row-parallel linear's bias is added once, after the all-reduce, and
// stays whole; its gradient (dy is whole) is whole too.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @a init(ones) : tensor<8x8xf32>
  tfm.param @b init(ones) : tensor<8x8xf32>
  tfm.param @bias init(zeros) : tensor<8xf32>
  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      %wa = tfm.get_param @a : tensor<8x8xf32>
      %c = tfm.linear %h, %wa : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      // CHECK: %[[WB:.*]] = tfm.get_param @b tp_split 1 : tensor<8x4xf32>
      // CHECK: %[[BIAS:.*]] = tfm.get_param @bias : tensor<8xf32>
      // CHECK: %[[P:.*]] = tfm.linear %{{.*}}, %[[WB]] : tensor<1x2x4xf32>, tensor<8x4xf32> -> tensor<1x2x8xf32>
      // CHECK: %[[R:.*]] = mesh.all_reduce %[[P]]
      // CHECK: %[[Y:.*]] = tfm.bias_add %[[R]], %[[BIAS]] : tensor<1x2x8xf32>, tensor<8xf32>
      // CHECK: tfm.yield %[[Y]]
      %wb = tfm.get_param @b : tensor<8x8xf32>
      %bb = tfm.get_param @bias : tensor<8xf32>
      %r = tfm.linear %c, %wb, %bb : tensor<1x2x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<1x2x8xf32>
      tfm.yield %r : tensor<1x2x8xf32>
    }
    return %y : tensor<1x2x8xf32>
  }
}

// -----

// The token embedding is vocab-parallel (its table split on the vocabulary,
// one all-reduce of the looked-up rows), the position embedding whole; the
// tied head projection is column-parallel on the same split and the
// cross-entropy vocab-parallel, so no logits are gathered.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(normal, std = 2.000000e-02) : tensor<32x8xf32>
  tfm.param @wpe init(normal, std = 2.000000e-02) : tensor<4x8xf32>
  // CHECK-LABEL: func.func @forward
  func.func @forward(%t: tensor<1x4xi32>, %l: tensor<1x4xi32>, %m: tensor<1x4xf32>) -> tensor<f32> {
    // CHECK: tfm.block embedding
    // CHECK: %[[POS:.*]] = tfm.position_ids
    // CHECK: %[[WTE:.*]] = tfm.get_param @wte tp_split 0 : tensor<16x8xf32>
    // CHECK: %[[TOK:.*]] = tfm.embedding %{{.*}}, %[[WTE]] vocab_parallel_axis 3 : tensor<1x4xi32>, tensor<16x8xf32> -> tensor<1x4x8xf32>
    // CHECK: %[[SUM:.*]] = mesh.all_reduce %[[TOK]]
    // CHECK: %[[WPE:.*]] = tfm.get_param @wpe : tensor<4x8xf32>
    // CHECK: tfm.embedding %[[POS]], %[[WPE]] : tensor<1x4xi32>, tensor<4x8xf32> -> tensor<1x4x8xf32>
    // CHECK: tfm.add %[[SUM]], %{{.*}} : tensor<1x4x8xf32>
    %h = tfm.block embedding ins(%t : tensor<1x4xi32>) -> tensor<1x4x8xf32> {
    ^bb0(%a: tensor<1x4xi32>):
      %p = tfm.position_ids %a : tensor<1x4xi32>
      %w = tfm.get_param @wte : tensor<32x8xf32>
      %e = tfm.embedding %a, %w : tensor<1x4xi32>, tensor<32x8xf32> -> tensor<1x4x8xf32>
      %wp = tfm.get_param @wpe : tensor<4x8xf32>
      %ep = tfm.embedding %p, %wp : tensor<1x4xi32>, tensor<4x8xf32> -> tensor<1x4x8xf32>
      %x = tfm.add %e, %ep : tensor<1x4x8xf32>
      tfm.yield %x : tensor<1x4x8xf32>
    }
    // CHECK: tfm.block head
    // CHECK: %[[HW:.*]] = tfm.get_param @wte tp_split 0 : tensor<16x8xf32>
    // CHECK: %[[LOGITS:.*]] = tfm.linear %{{.*}}, %[[HW]] : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
    // CHECK-NOT: mesh.all_reduce
    // CHECK: tfm.cross_entropy %[[LOGITS]], %{{.*}}, %{{.*}} vocab_parallel_axis 3 : tensor<1x4x16xf32>
    %loss = tfm.block head ins(%h, %l, %m : tensor<1x4x8xf32>, tensor<1x4xi32>, tensor<1x4xf32>) -> tensor<f32> {
    ^bb0(%x: tensor<1x4x8xf32>, %y: tensor<1x4xi32>, %z: tensor<1x4xf32>):
      %w = tfm.get_param @wte : tensor<32x8xf32>
      %o = tfm.linear %x, %w : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
      %c, %c_max, %c_sum = tfm.cross_entropy %o, %y, %z : tensor<1x4x32xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
      tfm.yield %c : tensor<f32>
    }
    return %loss : tensor<f32>
  }
}

// -----

// Sequence parallelism: the residual stream is split on the sequence; a
// column-parallel linear all-gathers its input, a row-parallel one
// reduce-scatters its output; the norm runs on the local tokens.
module attributes {tfm.plan = #tfm.plan<tp = 2, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @g init(ones) : tensor<8xf32>
  tfm.param @up init(ones) : tensor<16x8xf32>
  tfm.param @down init(ones) : tensor<8x16xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: -> tensor<1x2x8xf32>
  func.func @forward(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    // CHECK: tfm.block layer 0 ins(%{{.*}} : tensor<1x4x8xf32>) -> tensor<1x2x8xf32>
    %y = tfm.block layer 0 ins(%x : tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    ^bb0(%h: tensor<1x4x8xf32>):
      // CHECK: %[[LOCAL:.*]] = mesh.all_slice %{{.*}} on @dense mesh_axes = [3] slice_axis = 1 : tensor<1x4x8xf32> -> tensor<1x2x8xf32>
      // CHECK: %[[N:.*]] = tfm.rms_norm %[[LOCAL]], %{{.*}} : tensor<1x2x8xf32>, tensor<8xf32>
      // CHECK: %[[FULL:.*]] = mesh.all_gather %[[N]] on @dense mesh_axes = [3] gather_axis = 1 : tensor<1x2x8xf32> -> tensor<1x4x8xf32>
      // CHECK: tfm.linear %[[FULL]], %{{.*}} : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
      // CHECK: %[[P:.*]] = tfm.linear %{{.*}}, %{{.*}} : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
      // CHECK: %[[RS:.*]] = mesh.reduce_scatter %[[P]] on @dense mesh_axes = [3] scatter_axis = 1 : tensor<1x4x8xf32> -> tensor<1x2x8xf32>
      // CHECK: %[[OUT:.*]] = tfm.add %[[LOCAL]], %[[RS]] : tensor<1x2x8xf32>
      // CHECK: tfm.yield %[[OUT]] : tensor<1x2x8xf32>
      %w = tfm.get_param @g : tensor<8xf32>
      %n = tfm.rms_norm %h, %w eps 1.0e-6 : tensor<1x4x8xf32>, tensor<8xf32>
      %wu = tfm.get_param @up : tensor<16x8xf32>
      %u = tfm.linear %n, %wu : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
      %s = tfm.silu %u : tensor<1x4x16xf32>
      %wd = tfm.get_param @down : tensor<8x16xf32>
      %d = tfm.linear %s, %wd : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      %r = tfm.add %h, %d : tensor<1x4x8xf32>
      tfm.yield %r : tensor<1x4x8xf32>
    }
    return %y : tensor<1x4x8xf32>
  }
}

// -----

// Fewer kv heads (2) than ranks (4): k and v stay whole; each rank repeats
// the kv heads and takes the one its query head reads.
module attributes {tfm.plan = #tfm.plan<tp = 4>} {
  mesh.mesh @dense(shape = 1x1x1x4) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @q init(ones) : tensor<16x8xf32>
  tfm.param @k init(ones) : tensor<8x8xf32>
  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x16xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x16xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      // CHECK: tfm.get_param @q tp_split 0 : tensor<4x8xf32>
      // CHECK: %[[WK:.*]] = tfm.get_param @k : tensor<8x8xf32>
      // CHECK: %[[K:.*]] = tfm.linear %{{.*}}, %[[WK]] : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      // CHECK: %[[REP:.*]] = tfm.repeat_kv %[[K]] factor 2 head_dim 4 : tensor<1x2x8xf32> -> tensor<1x2x16xf32>
      // CHECK: %[[MINE:.*]] = mesh.all_slice %[[REP]] on @dense mesh_axes = [3] slice_axis = 2 : tensor<1x2x16xf32> -> tensor<1x2x4xf32>
      // CHECK: tfm.attention %{{.*}}, %[[MINE]], %{{.*}} heads 1 kv_heads 1 head_dim 4
      %wq = tfm.get_param @q : tensor<16x8xf32>
      %q = tfm.linear %h, %wq : tensor<1x2x8xf32>, tensor<16x8xf32> -> tensor<1x2x16xf32>
      %wk = tfm.get_param @k : tensor<8x8xf32>
      %k = tfm.linear %h, %wk : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      %a, %l = tfm.attention %q, %k, %k heads 4 kv_heads 2 head_dim 4 scale 0.5 mask causal
          : tensor<1x2x16xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32> -> tensor<1x2x16xf32>, tensor<1x4x2xf32>
      tfm.yield %a : tensor<1x2x16xf32>
    }
    return %y : tensor<1x2x16xf32>
  }
}

// -----

// Dropout: on a row-parallel output with SP (hidden dropout) it runs after
// the reduce-scatter on this rank's tokens; on a column-parallel output on
// this rank's features. Either way it records its split so that its mask
// stays the unsharded program's.
module attributes {tfm.plan = #tfm.plan<tp = 2, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @up init(ones) : tensor<16x8xf32>
  tfm.param @down init(ones) : tensor<8x16xf32>
  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    ^bb0(%h: tensor<1x4x8xf32>):
      // CHECK: %[[U:.*]] = tfm.linear %{{.*}}, %{{.*}} : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
      // CHECK: tfm.dropout %[[U]] p 1.000000e-01 seed 1 {split_axis = 3 : i64, split_dim = 2 : i64} : tensor<1x4x8xf32>
      // CHECK: %[[RS:.*]] = mesh.reduce_scatter %{{.*}} on @dense mesh_axes = [3] scatter_axis = 1 : tensor<1x4x8xf32> -> tensor<1x2x8xf32>
      // CHECK: tfm.dropout %[[RS]] p 1.000000e-01 seed 2 {split_axis = 3 : i64, split_dim = 1 : i64} : tensor<1x2x8xf32>
      %wu = tfm.get_param @up : tensor<16x8xf32>
      %u = tfm.linear %h, %wu : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
      %ud = tfm.dropout %u p 0.1 seed 1 : tensor<1x4x16xf32>
      %wd = tfm.get_param @down : tensor<8x16xf32>
      %d = tfm.linear %ud, %wd : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      %dd = tfm.dropout %d p 0.1 seed 2 : tensor<1x4x8xf32>
      %r = tfm.add %h, %dd : tensor<1x4x8xf32>
      tfm.yield %r : tensor<1x4x8xf32>
    }
    return %y : tensor<1x4x8xf32>
  }
}
