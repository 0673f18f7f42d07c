// RUN: loom-opt %s -split-input-file --tfm-propagate-distribution | FileCheck %s

// Propagation gives every value a distribution at global shapes and marks
// with tfm.reshard where an op needs an operand distributed otherwise; no
// collective is chosen and no shape changes yet.

// Test: a column-parallel then a row-parallel linear: the partial sum is
// made whole by a reshard before the residual add that needs it, and each
// weight takes the distribution its use needs.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @up init(ones) : tensor<16x8xf32>
  tfm.param @down init(ones) : tensor<8x16xf32>
  // CHECK-LABEL: func.func @forward
  // CHECK-SAME: (%{{.*}}: tensor<1x4x8xf32, #tfm.dist<@dense>>) -> tensor<1x4x8xf32, #tfm.dist<@dense>>
  // CHECK: %[[WU:.*]] = tfm.get_param @up : tensor<16x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
  // CHECK: %[[U:.*]] = tfm.linear %{{.*}}, %[[WU]] : {{.*}} -> tensor<1x4x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
  // CHECK: %[[S:.*]] = tfm.gelu %[[U]] tanh : tensor<1x4x16xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
  // CHECK: %[[WD:.*]] = tfm.get_param @down : tensor<8x16xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
  // CHECK: %[[P:.*]] = tfm.linear %[[S]], %[[WD]] : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
  // CHECK: %[[W:.*]] = tfm.reshard %[[P]] : tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<1x4x8xf32, #tfm.dist<@dense>>
  // CHECK: tfm.add %{{.*}}, %[[W]] : tensor<1x4x8xf32, #tfm.dist<@dense>>
  // CHECK-NOT: mesh.all
  func.func @forward(%x: tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x4x8xf32>) -> tensor<1x4x8xf32> {
    ^bb0(%h: tensor<1x4x8xf32>):
      %wu = tfm.get_param @up : tensor<16x8xf32>
      %u = tfm.linear %h, %wu : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
      %s = tfm.gelu %u tanh : tensor<1x4x16xf32>
      %wd = tfm.get_param @down : tensor<8x16xf32>
      %d = tfm.linear %s, %wd : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
      %r = tfm.add %h, %d : tensor<1x4x8xf32>
      tfm.yield %r : tensor<1x4x8xf32>
    }
    return %y : tensor<1x4x8xf32>
  }
}

// -----

// Test: a partial sum leaves a block reduced (the vocab-parallel embedding
// of a model without position embeddings): a partial activation saved for
// backward would be reduced again there. With SP the reduction lands on
// the sequence (a reduce-scatter, later).
module attributes {tfm.plan = #tfm.plan<tp = 2, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x8xf32>
  // CHECK-LABEL: func.func @embed
  // CHECK: %[[E:.*]] = tfm.embedding {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
  // CHECK: %[[R:.*]] = tfm.reshard %[[E]] : {{.*}} -> tensor<1x4x8xf32, #tfm.dist<@dense, {{\[\[}}], [tp]]>>
  // CHECK: tfm.yield %[[R]]
  func.func @embed(%t: tensor<1x4xi32>) -> tensor<1x4x8xf32> {
    %h = tfm.block embedding ins(%t : tensor<1x4xi32>) -> tensor<1x4x8xf32> {
    ^bb0(%a: tensor<1x4xi32>):
      %w = tfm.get_param @wte : tensor<32x8xf32>
      %e = tfm.embedding %a, %w : tensor<1x4xi32>, tensor<32x8xf32> -> tensor<1x4x8xf32>
      tfm.yield %e : tensor<1x4x8xf32>
    }
    return %h : tensor<1x4x8xf32>
  }
}

// -----

// Test: with SP a norm's weight gradient is a partial sum (each rank saw its
// own tokens); it leaves its block partial and is made whole, like its
// parameter, where the function returns it.
module attributes {tfm.plan = #tfm.plan<tp = 2, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @g init(ones) : tensor<8xf32>
  // CHECK-LABEL: func.func @step
  // CHECK: %[[DX:.*]], %[[DW:.*]] = tfm.rms_norm_grad {{.*}} grads(tensor<8xf32, #tfm.dist<@dense, partial = sum[tp]>>)
  // CHECK: tfm.yield %[[DX]], %[[DW]]
  // CHECK: %[[W:.*]] = tfm.reshard %{{.*}}#1 : tensor<8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<8xf32, #tfm.dist<@dense>>
  // CHECK: return %{{.*}}#0, %[[W]]
  func.func @step(%x: tensor<1x4x8xf32>, %dy: tensor<1x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<8xf32> {tfm.grad = "g"}) {
    %r:2 = tfm.block layer 0 backward ins(%x, %dy : tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<1x4x8xf32>, tensor<8xf32> {
    ^bb0(%h: tensor<1x4x8xf32>, %d: tensor<1x4x8xf32>):
      %w = tfm.get_param @g : tensor<8xf32>
      %dx, %dw = tfm.rms_norm_grad %h, %w, %d eps 1.0e-6 : tensor<1x4x8xf32>, tensor<8xf32>
      tfm.yield %dx, %dw : tensor<1x4x8xf32>, tensor<8xf32>
    }
    return %r#0, %r#1 : tensor<1x4x8xf32>, tensor<8xf32>
  }
}

// -----

// Test: the vocab-parallel cross-entropy: the op becomes its pieces, the
// row statistics partial (maximum, sums) until a reshard makes them whole.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @head init(ones) : tensor<32x8xf32>
  // CHECK-LABEL: func.func @loss
  // CHECK: %[[L:.*]] = tfm.linear {{.*}} -> tensor<1x4x32xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
  // CHECK: %[[M:.*]] = tfm.ce_row_max %[[L]] : {{.*}} -> tensor<1x4xf32, #tfm.dist<@dense, partial = max[tp]>>
  // CHECK: %[[MW:.*]] = tfm.reshard %[[M]] : {{.*}} -> tensor<1x4xf32, #tfm.dist<@dense>>
  // CHECK: %[[E:.*]] = tfm.ce_sum_exp %[[L]], %[[MW]] : {{.*}} -> tensor<1x4xf32, #tfm.dist<@dense, partial = sum[tp]>>
  // CHECK: %[[T:.*]] = tfm.ce_target_logit %[[L]], %{{.*}} : {{.*}} -> tensor<1x4xf32, #tfm.dist<@dense, partial = sum[tp]>>
  // CHECK: %[[EW:.*]] = tfm.reshard %[[E]]
  // CHECK: %[[TW:.*]] = tfm.reshard %[[T]]
  // CHECK: %[[P:.*]] = tfm.ce_loss_sum %[[MW]], %[[EW]], %[[TW]], %{{.*}} : tensor<1x4xf32, #tfm.dist<@dense>> -> tensor<2xf32, #tfm.dist<@dense>>
  // CHECK: tfm.loss_mean %[[P]] : tensor<2xf32, #tfm.dist<@dense>> -> tensor<f32, #tfm.dist<@dense>>
  // CHECK-NOT: tfm.cross_entropy
  func.func @loss(%x: tensor<1x4x8xf32>, %l: tensor<1x4xi32>, %m: tensor<1x4xf32>) -> tensor<f32> {
    %loss = tfm.block head ins(%x, %l, %m : tensor<1x4x8xf32>, tensor<1x4xi32>, tensor<1x4xf32>) -> tensor<f32> {
    ^bb0(%a: tensor<1x4x8xf32>, %b: tensor<1x4xi32>, %c: tensor<1x4xf32>):
      %w = tfm.get_param @head : tensor<32x8xf32>
      %o = tfm.linear %a, %w : tensor<1x4x8xf32>, tensor<32x8xf32> -> tensor<1x4x32xf32>
      %ce, %ce_max, %ce_sum = tfm.cross_entropy %o, %b, %c : tensor<1x4x32xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
      tfm.yield %ce : tensor<f32>
    }
    return %loss : tensor<f32>
  }
}

// -----

// Test: what Megatron's layers never produce still distributes: a norm of
// a column-parallel output gathers its features (Megatron's gather_output),
// an add of a split and a whole value meets in the residual stream, and a
// weight that is not a parameter read is sliced where it is needed.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @a init(ones) : tensor<8x8xf32>
  tfm.param @g init(ones) : tensor<8xf32>
  // CHECK-LABEL: func.func @unusual
  // CHECK: %[[C:.*]] = tfm.linear {{.*}} -> tensor<1x2x8xf32, #tfm.dist<@dense, {{\[\[}}], [], [tp]]>>
  // CHECK: %[[CW:.*]] = tfm.reshard %[[C]] : {{.*}} -> tensor<1x2x8xf32, #tfm.dist<@dense>>
  // CHECK: tfm.rms_norm %[[CW]]
  // CHECK: tfm.add %{{.*}}, %[[CW]] : tensor<1x2x8xf32, #tfm.dist<@dense>>
  // CHECK: %[[WS:.*]] = tfm.reshard %{{.*}} : tensor<8x8xf32, #tfm.dist<@dense>> -> tensor<8x8xf32, #tfm.dist<@dense, {{\[\[}}tp]]>>
  // CHECK: tfm.linear %{{.*}}, %[[WS]]
  func.func @unusual(%x: tensor<1x2x8xf32>, %w: tensor<8x8xf32>) -> tensor<1x2x8xf32> {
    %y = tfm.block layer 0 ins(%x, %w : tensor<1x2x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8xf32> {
    ^bb0(%h: tensor<1x2x8xf32>, %v: tensor<8x8xf32>):
      %wa = tfm.get_param @a : tensor<8x8xf32>
      %c = tfm.linear %h, %wa : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      %wg = tfm.get_param @g : tensor<8xf32>
      %n = tfm.rms_norm %c, %wg eps 1.0e-6 : tensor<1x2x8xf32>, tensor<8xf32>
      %s = tfm.add %n, %c : tensor<1x2x8xf32>
      %o = tfm.linear %s, %v : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      tfm.yield %o : tensor<1x2x8xf32>
    }
    return %y : tensor<1x2x8xf32>
  }
}
