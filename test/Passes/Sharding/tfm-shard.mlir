// RUN: loom-opt %s -split-input-file --tfm-shard | FileCheck %s

// The whole shard stage (propagate, localize, collectives, with the verifier
// after each): Megatron's tensor and sequence parallelism at per-rank shapes.

// Test: a Llama layer at tp 2: q/k/v and gate/up are column-parallel, o and
// down row-parallel with one all-reduce each; heads and the ffn dim halve;
// norms and residuals stay whole.
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
  // CHECK-SAME: tensor<1x4x16xf32, #tfm.dist<@dense>>
  func.func @forward(%x: tensor<1x4x16xf32>, %pos: tensor<1x4xi32>) -> tensor<1x4x16xf32> {
    %y = tfm.block layer 0 ins(%x, %pos : tensor<1x4x16xf32>, tensor<1x4xi32>) -> tensor<1x4x16xf32> {
    ^bb0(%h: tensor<1x4x16xf32>, %p: tensor<1x4xi32>):
      // CHECK: %[[N:.*]] = tfm.rms_norm %{{.*}} : tensor<1x4x16xf32, #tfm.dist<@dense>>, tensor<16xf32, #tfm.dist<@dense>>
      %g = tfm.get_param @norm : tensor<16xf32>
      %n = tfm.rms_norm %h, %g eps 1.0e-6 : tensor<1x4x16xf32>, tensor<16xf32>
      // CHECK: %[[WQ:.*]] = tfm.get_param @q : tensor<8x16xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
      // CHECK: %[[Q:.*]] = tfm.linear %[[N]], %[[WQ]] : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
      %wq = tfm.get_param @q : tensor<16x16xf32>
      %q = tfm.linear %n, %wq : tensor<1x4x16xf32>, tensor<16x16xf32> -> tensor<1x4x16xf32>
      // CHECK: tfm.get_param @k : tensor<4x16xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
      %wk = tfm.get_param @k : tensor<8x16xf32>
      %k = tfm.linear %n, %wk : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      %wv = tfm.get_param @v : tensor<8x16xf32>
      %v = tfm.linear %n, %wv : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      // CHECK: tfm.rope %[[Q]], %{{.*}} head_dim 4 theta 1.000000e+04 : tensor<1x4x8xf32, {{.*}}>, tensor<1x4xi32, #tfm.dist<@dense>>
      %qr = tfm.rope %q, %p head_dim 4 theta 1.0e4 : tensor<1x4x16xf32>, tensor<1x4xi32>
      %kr = tfm.rope %k, %p head_dim 4 theta 1.0e4 : tensor<1x4x8xf32>, tensor<1x4xi32>
      // CHECK: %[[A:.*]], %{{.*}} = tfm.attention {{.*}} heads 2 kv_heads 1 head_dim 4 {{.*}} -> tensor<1x4x8xf32, {{.*}}>, tensor<1x2x4xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
      %a, %lse = tfm.attention %qr, %kr, %v heads 4 kv_heads 2 head_dim 4 scale 0.5 mask causal
          : tensor<1x4x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<1x4x16xf32>, tensor<1x4x4xf32>
      // CHECK: %[[WO:.*]] = tfm.get_param @o : tensor<16x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
      // CHECK: %[[OP:.*]] = tfm.linear %[[A]], %[[WO]] : {{.*}} -> tensor<1x4x16xf32, #tfm.dist<@dense, partial = sum[tp]>>
      // CHECK: %[[OR:.*]] = mesh.all_reduce %[[OP]] on @dense mesh_axes = [3] : tensor<1x4x16xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<1x4x16xf32, #tfm.dist<@dense>>
      // CHECK: %[[R:.*]] = tfm.add %{{.*}}, %[[OR]] : tensor<1x4x16xf32, #tfm.dist<@dense>>
      %wo = tfm.get_param @o : tensor<16x16xf32>
      %o = tfm.linear %a, %wo : tensor<1x4x16xf32>, tensor<16x16xf32> -> tensor<1x4x16xf32>
      %r = tfm.add %h, %o : tensor<1x4x16xf32>
      // CHECK: tfm.get_param @gate : tensor<16x16xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
      // CHECK: tfm.swiglu %{{.*}}, %{{.*}} : tensor<1x4x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
      // CHECK: tfm.get_param @down : tensor<16x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
      // CHECK: mesh.all_reduce
      // CHECK-NOT: mesh.
      %wg = tfm.get_param @gate : tensor<32x16xf32>
      %gt = tfm.linear %r, %wg : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
      %wu = tfm.get_param @up : tensor<32x16xf32>
      %u = tfm.linear %r, %wu : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
      %s = tfm.swiglu %gt, %u : tensor<1x4x32xf32>
      %wd = tfm.get_param @down : tensor<16x32xf32>
      %d = tfm.linear %s, %wd : tensor<1x4x32xf32>, tensor<16x32xf32> -> tensor<1x4x16xf32>
      %out = tfm.add %r, %d : tensor<1x4x16xf32>
      // CHECK: tfm.yield %{{.*}} : tensor<1x4x16xf32, #tfm.dist<@dense>>
      tfm.yield %out : tensor<1x4x16xf32>
    }
    return %y : tensor<1x4x16xf32>
  }
}

// -----

// Test: backward. A column-parallel linear_grad gives a partial input
// gradient (all-reduced: Megatron's f in backward); a row-parallel one a
// split gradient and no communication. The weight gradients leave the
// function split like their weights.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
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
  // CHECK-SAME: -> (tensor<16x16xf32, #tfm.dist<@dense, {{\[\[}}tp]]>> {tfm.grad = "up"}, tensor<16x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>> {tfm.grad = "down"})
  func.func @train_step(%x: tensor<1x4x16xf32>, %dy: tensor<1x4x16xf32>) -> (tensor<32x16xf32> {tfm.grad = "up"}, tensor<16x32xf32> {tfm.grad = "down"}) {
    %r:3 = tfm.block layer 0 backward ins(%x, %dy : tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>, tensor<32x16xf32>, tensor<16x32xf32> {
    ^bb0(%h: tensor<1x4x16xf32>, %g: tensor<1x4x16xf32>):
      %wu = tfm.get_param @up : tensor<32x16xf32>
      %u2 = tfm.linear %h, %wu : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
      %s2 = tfm.silu %u2 : tensor<1x4x32xf32>
      %wd = tfm.get_param @down : tensor<16x32xf32>
      // CHECK: %[[DS:.*]], %[[DWD:.*]] = tfm.linear_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x4x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>, tensor<16x16xf32, {{.*}}>, tensor<1x4x16xf32, #tfm.dist<@dense>>{{$}}
      %ds, %dwd = tfm.linear_grad %s2, %wd, %g : tensor<1x4x32xf32>, tensor<16x32xf32>, tensor<1x4x16xf32>
      // CHECK: %[[DU:.*]] = tfm.silu_grad %{{.*}}, %[[DS]] : tensor<1x4x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
      %du = tfm.silu_grad %u2, %ds : tensor<1x4x32xf32>
      // CHECK: %[[DX:.*]], %[[DWU:.*]] = tfm.linear_grad %{{.*}}, %{{.*}}, %[[DU]] : {{.*}} grads(tensor<1x4x16xf32, #tfm.dist<@dense, partial = sum[tp]>>, {{.*}})
      // CHECK: %[[DXR:.*]] = mesh.all_reduce %[[DX]] on @dense mesh_axes = [3]
      // CHECK: tfm.yield %[[DXR]], %[[DWU]], %[[DWD]]
      %dx, %dwu = tfm.linear_grad %h, %wu, %du : tensor<1x4x16xf32>, tensor<32x16xf32>, tensor<1x4x32xf32>
      tfm.yield %dx, %dwu, %dwd : tensor<1x4x16xf32>, tensor<32x16xf32>, tensor<16x32xf32>
    }
    return %r#1, %r#2 : tensor<32x16xf32>, tensor<16x32xf32>
  }
}

// -----

// Test: tp 1: every value replicated, nothing to communicate.
module attributes {tfm.plan = #tfm.plan<>} {
  mesh.mesh @dense(shape = 1x1x1x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<8x8xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK: tfm.get_param @w : tensor<8x8xf32, #tfm.dist<@dense>>
  // CHECK-NOT: mesh.{{all|reduce}}
  // CHECK: return
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

// Test: a row-parallel linear's bias is added once, after the all-reduce,
// and stays whole.
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
      // CHECK: %[[WB:.*]] = tfm.get_param @b : tensor<8x4xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
      // CHECK: %[[BIAS:.*]] = tfm.get_param @bias : tensor<8xf32, #tfm.dist<@dense>>
      // CHECK: %[[P:.*]] = tfm.linear %{{.*}}, %[[WB]] : {{.*}} -> tensor<1x2x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
      // CHECK: %[[R:.*]] = mesh.all_reduce %[[P]]
      // CHECK: %[[Y:.*]] = tfm.bias_add %[[R]], %[[BIAS]] : tensor<1x2x8xf32, #tfm.dist<@dense>>, tensor<8xf32, #tfm.dist<@dense>>
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

// Test: the token embedding is vocab-parallel (its table split on the
// vocabulary, one all-reduce of the looked-up rows), the position embedding
// whole; the tied head projection is column-parallel on the same split and
// the cross-entropy becomes vocab-parallel pieces with their statistics
// all-reduced (max, then sums): the logits are never gathered.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(normal, std = 2.000000e-02) : tensor<32x8xf32>
  tfm.param @wpe init(normal, std = 2.000000e-02) : tensor<4x8xf32>
  // CHECK-LABEL: func.func @forward
  func.func @forward(%t: tensor<1x4xi32>, %l: tensor<1x4xi32>, %m: tensor<1x4xf32>) -> tensor<f32> {
    // CHECK: tfm.block embedding
    // CHECK: %[[POS:.*]] = tfm.position_ids
    // CHECK: %[[WTE:.*]] = tfm.get_param @wte : tensor<16x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
    // CHECK: %[[TOK:.*]] = tfm.embedding %{{.*}}, %[[WTE]] : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
    // CHECK: %[[WPE:.*]] = tfm.get_param @wpe : tensor<4x8xf32, #tfm.dist<@dense>>
    // CHECK: %[[PE:.*]] = tfm.embedding %[[POS]], %[[WPE]] : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense>>
    // CHECK: %[[SUM:.*]] = mesh.all_reduce %[[TOK]]
    // CHECK: tfm.add %[[SUM]], %[[PE]] : tensor<1x4x8xf32, #tfm.dist<@dense>>
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
    // CHECK: %[[HW:.*]] = tfm.get_param @wte : tensor<16x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
    // CHECK: %[[LOGITS:.*]] = tfm.linear %{{.*}}, %[[HW]] : {{.*}} -> tensor<1x4x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
    // CHECK: %[[MAX:.*]] = tfm.ce_row_max %[[LOGITS]] : {{.*}} -> tensor<1x4xf32, #tfm.dist<@dense, partial = max[tp]>>
    // CHECK: %[[MAXR:.*]] = mesh.all_reduce %[[MAX]] on @dense mesh_axes = [3] reduction = <max>
    // CHECK: %[[SE:.*]] = tfm.ce_sum_exp %[[LOGITS]], %[[MAXR]]
    // CHECK: %[[TG:.*]] = tfm.ce_target_logit %[[LOGITS]], %{{.*}}
    // CHECK: %[[SER:.*]] = mesh.all_reduce %[[SE]] on @dense mesh_axes = [3] :
    // CHECK: %[[TGR:.*]] = mesh.all_reduce %[[TG]] on @dense mesh_axes = [3] :
    // CHECK: %[[PARTS:.*]] = tfm.ce_loss_sum %[[MAXR]], %[[SER]], %[[TGR]], %{{.*}} : tensor<1x4xf32, #tfm.dist<@dense>> -> tensor<2xf32, #tfm.dist<@dense>>
    // CHECK: tfm.loss_mean %[[PARTS]] : tensor<2xf32, #tfm.dist<@dense>> -> tensor<f32, #tfm.dist<@dense>>
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

// Test: sequence parallelism: the residual stream is split on the
// sequence; a column-parallel linear all-gathers its input, a row-parallel
// one reduce-scatters its output; the norm runs on the local tokens.
module attributes {tfm.plan = #tfm.plan<tp = 2, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @g init(ones) : tensor<8xf32>
  tfm.param @up init(ones) : tensor<16x8xf32>
  tfm.param @down init(ones) : tensor<8x16xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: -> tensor<1x2x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
  func.func @forward(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    ^bb0(%h: tensor<1x4x8xf32>):
      // CHECK: %[[LOCAL:.*]] = mesh.all_slice %{{.*}} on @dense mesh_axes = [3] slice_axis = 1 : tensor<1x4x8xf32, #tfm.dist<@dense>> -> tensor<1x2x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
      // CHECK: %[[N:.*]] = tfm.rms_norm %[[LOCAL]], %{{.*}} : tensor<1x2x8xf32, {{.*}}>, tensor<8xf32, #tfm.dist<@dense>>
      // CHECK: %[[FULL:.*]] = mesh.all_gather %[[N]] on @dense mesh_axes = [3] gather_axis = 1 : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense>>
      // CHECK: tfm.linear %[[FULL]], %{{.*}} : tensor<1x4x8xf32, {{.*}}>, tensor<8x8xf32, {{.*}}> -> tensor<1x4x8xf32, {{.*}}>
      // CHECK: %[[P:.*]] = tfm.linear %{{.*}}, %{{.*}} : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
      // CHECK: %[[RS:.*]] = mesh.reduce_scatter %[[P]] on @dense mesh_axes = [3] scatter_axis = 1 : {{.*}} -> tensor<1x2x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
      // CHECK: %[[OUT:.*]] = tfm.add %[[LOCAL]], %[[RS]] : tensor<1x2x8xf32, {{.*}}>
      // CHECK: tfm.yield %[[OUT]] : tensor<1x2x8xf32, {{.*}}>
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

// Test: fewer kv heads (2) than ranks (4): k is computed split like any
// column-parallel output, gathered, its heads repeated until every rank
// has one, and each rank takes the one its query heads read.
module attributes {tfm.plan = #tfm.plan<tp = 4>} {
  mesh.mesh @dense(shape = 1x1x1x4) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @q init(ones) : tensor<16x8xf32>
  tfm.param @k init(ones) : tensor<8x8xf32>
  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x16xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x16xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      // CHECK: tfm.get_param @q : tensor<4x8xf32, {{.*}}>
      // CHECK: %[[WK:.*]] = tfm.get_param @k : tensor<2x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
      // CHECK: %[[K:.*]] = tfm.linear %{{.*}}, %[[WK]] : {{.*}} -> tensor<1x2x2xf32, {{.*}}>
      // CHECK: %[[KW:.*]] = mesh.all_gather %[[K]] on @dense mesh_axes = [3] gather_axis = 2 : {{.*}} -> tensor<1x2x8xf32, #tfm.dist<@dense>>
      // CHECK: %[[REP:.*]] = tfm.repeat_kv %[[KW]] factor 2 head_dim 4 : tensor<1x2x8xf32, #tfm.dist<@dense>> -> tensor<1x2x16xf32, #tfm.dist<@dense>>
      // CHECK: %[[MINE:.*]] = mesh.all_slice %[[REP]] on @dense mesh_axes = [3] slice_axis = 2 : {{.*}} -> tensor<1x2x4xf32, {{.*}}>
      // CHECK: tfm.attention %{{.*}}, %[[MINE]], %[[MINE]] heads 1 kv_heads 1 head_dim 4
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

// Test: dropout: on a row-parallel output with SP (hidden dropout) it runs
// after the reduce-scatter, on this rank's tokens; on a column-parallel
// output, on this rank's features. Its input's distribution says which
// slice of the global tensor it drops from.
module attributes {tfm.plan = #tfm.plan<tp = 2, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @up init(ones) : tensor<16x8xf32>
  tfm.param @down init(ones) : tensor<8x16xf32>
  // CHECK-LABEL: func.func @forward
  func.func @forward(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    ^bb0(%h: tensor<1x4x8xf32>):
      // CHECK: %[[U:.*]] = tfm.linear %{{.*}}, %{{.*}} : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
      // CHECK: tfm.dropout %[[U]] p 1.000000e-01 seed 1 : tensor<1x4x8xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
      // CHECK: %[[RS:.*]] = mesh.reduce_scatter %{{.*}} on @dense mesh_axes = [3] scatter_axis = 1 : {{.*}} -> tensor<1x2x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
      // CHECK: tfm.dropout %[[RS]] p 1.000000e-01 seed 2 : tensor<1x2x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
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

// -----

// Test: nothing depends on names: functions called anything, a mesh called
// anything (found as the plan's dense world by its axes) shard the same way.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @world(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @a init(ones) : tensor<8x8xf32>
  tfm.param @b init(ones) : tensor<8x8xf32>
  // CHECK-LABEL: func.func @my_model
  // CHECK: tfm.get_param @a : tensor<4x8xf32, #tfm.dist<@world, {{\[\[}}tp]]>>
  // CHECK: tfm.get_param @b : tensor<8x4xf32, #tfm.dist<@world, {{\[\[}}], [tp]]>>
  // CHECK: mesh.all_reduce %{{.*}} on @world mesh_axes = [3]
  func.func @my_model(%x: tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      %wa = tfm.get_param @a : tensor<8x8xf32>
      %c = tfm.linear %h, %wa : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      %wb = tfm.get_param @b : tensor<8x8xf32>
      %r = tfm.linear %c, %wb : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      tfm.yield %r : tensor<1x2x8xf32>
    }
    return %y : tensor<1x2x8xf32>
  }
}
