// RUN: loom-opt %s -split-input-file --tfm-lower-to-runtime --canonicalize -verify-diagnostics | FileCheck %s

// Each tfm op becomes an aligned buffer for its result and one runtime call
// with the sizes as constants (dtype codes: f32 0, bf16 1, f16 2).

// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: memref<2x4x8xf32>, %[[W:.*]]: memref<16x8xf32>, %[[B:.*]]: memref<16xf32>) -> memref<2x4x16xf32>
// CHECK-DAG: %[[F32:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[M:.*]] = arith.constant 8 : i64
// CHECK-DAG: %[[N:.*]] = arith.constant 16 : i64
// CHECK: %[[Y:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x4x16xf32>
// CHECK: %[[XI:.*]] = memref.extract_aligned_pointer_as_index %[[X]]
// CHECK: %[[XP:.*]] = llvm.inttoptr
// CHECK: call @loomrt_linear_forward(%[[F32]], %[[M]], %[[N]], %[[M]], %[[XP]], %{{.*}}, %{{.*}}, %{{.*}}) : (i32, i64, i64, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
// CHECK: return %[[Y]]
func.func @linear(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<2x4x16xf32> {
  %y = tfm.linear %x, %w, %b : tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// A missing bias is a null pointer.
// CHECK-LABEL: func.func @linear_no_bias
// CHECK: %[[NULL:.*]] = llvm.mlir.zero : !llvm.ptr
// CHECK: call @loomrt_linear_forward({{.*}}, %[[NULL]], %{{.*}})
func.func @linear_no_bias(%x: tensor<4x8xbf16>, %w: tensor<16x8xbf16>) -> tensor<4x16xbf16> {
  %y = tfm.linear %x, %w : tensor<4x8xbf16>, tensor<16x8xbf16> -> tensor<4x16xbf16>
  return %y : tensor<4x16xbf16>
}

// Gradients: two calls, data then weight (and bias) gradients.
// CHECK-LABEL: func.func @linear_grad
// CHECK: call @loomrt_linear_backward_data
// CHECK: call @loomrt_linear_backward_weight
// CHECK: return {{.*}} : memref<4x8xf16>, memref<16x8xf16>, memref<16xf16>
func.func @linear_grad(%x: tensor<4x8xf16>, %w: tensor<16x8xf16>, %dy: tensor<4x16xf16>) -> (tensor<4x8xf16>, tensor<16x8xf16>, tensor<16xf16>) {
  %dx, %dw, %db = tfm.linear_grad %x, %w, %dy : tensor<4x8xf16>, tensor<16x8xf16>, tensor<4x16xf16> -> tensor<16xf16>
  return %dx, %dw, %db : tensor<4x8xf16>, tensor<16x8xf16>, tensor<16xf16>
}

// Accumulated (tfm-fold-gradient-adds): the second backward GEMM adds onto
// the first's buffer (accumulate 1), which nothing reads after; onto a
// function argument (its caller's buffer) it adds onto a copy.
// CHECK-LABEL: func.func @linear_grad_accumulate
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK: %[[DX:.*]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK: call @loomrt_linear_backward_data
// CHECK: call @loomrt_linear_backward_weight
// CHECK-NOT: memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK: call @loomrt_linear_backward_data({{.*}}, %[[ONE]])
// CHECK: call @loomrt_linear_backward_weight
// CHECK: %[[COPY:.*]] = memref.alloc() {{.*}} : memref<4x8xf32>
// CHECK: call @loomrt_copy_2d
// CHECK: call @loomrt_linear_backward_data({{.*}}, %[[ONE]])
// CHECK: return %[[DX]], %[[COPY]]
func.func @linear_grad_accumulate(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %dy: tensor<4x16xf32>, %r: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) {
  %a, %dwa = tfm.linear_grad %x, %w, %dy : tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x16xf32>
  %b, %dwb = tfm.linear_grad %x, %w, %dy accumulate(%a : tensor<4x8xf32>) : tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x16xf32>
  %c, %dwc = tfm.linear_grad %x, %w, %dy accumulate(%r : tensor<4x8xf32>) : tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x16xf32>
  return %b, %c, %dwa, %dwb, %dwc : tensor<4x8xf32>, tensor<4x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
}

// CHECK-LABEL: func.func @norms_and_activations
// CHECK-DAG: %[[EPS:.*]] = arith.constant 9.99999974E-6 : f32
// CHECK-DAG: %[[TANH:.*]] = arith.constant 1 : i32
// CHECK: call @loomrt_layer_norm_forward({{.*}}, %[[EPS]], %{{.*}})
// CHECK: call @loomrt_rms_norm_forward
// CHECK: call @loomrt_gelu_forward(%{{.*}}, %[[TANH]], %{{.*}}, %{{.*}}, %{{.*}})
// CHECK: call @loomrt_silu_forward
// CHECK: call @loomrt_swiglu_forward
// CHECK: call @loomrt_add(
// CHECK: call @loomrt_add_bias({{.*}}) : (i32, i64, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
// CHECK: call @loomrt_dropout_forward
// CHECK: call @loomrt_cast
func.func @norms_and_activations(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xbf16> {
  %0 = tfm.layer_norm %x, %w, %w eps 1.0e-5 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %1 = tfm.rms_norm %0, %w eps 1.0e-5 : tensor<2x4x8xf32>, tensor<8xf32>
  %2 = tfm.gelu %1 tanh : tensor<2x4x8xf32>
  %3 = tfm.silu %2 : tensor<2x4x8xf32>
  %4 = tfm.swiglu %3, %2 : tensor<2x4x8xf32>
  %add = tfm.add %4, %x : tensor<2x4x8xf32>
  %5 = tfm.bias_add %add, %w : tensor<2x4x8xf32>, tensor<8xf32>
  %6 = tfm.dropout %5 p 0.1 seed 7 : tensor<2x4x8xf32>
  %7 = tfm.cast %6 : tensor<2x4x8xf32> to tensor<2x4x8xbf16>
  return %7 : tensor<2x4x8xbf16>
}

// A document mask computes document ids from the tokens first.
// CHECK-LABEL: func.func @attention_document
// CHECK-DAG: %[[EOD:.*]] = arith.constant 3 : i32
// CHECK: %[[DOC:.*]] = memref.alloc() {alignment = 64 : i64} : memref<2x8xi32>
// CHECK: call @loomrt_document_ids(%{{.*}}, %{{.*}}, %{{.*}}, %[[EOD]], %{{.*}})
// CHECK: call @loomrt_attention_forward
// CHECK: return {{.*}} : memref<2x8x64xf32>, memref<2x4x8xf32>
func.func @attention_document(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %t: tensor<2x8xi32>) -> (tensor<2x8x64xf32>, tensor<2x4x8xf32>) {
  %o, %l = tfm.attention %q, %k, %v tokens %t heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal_document eod 3
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return %o, %l : tensor<2x8x64xf32>, tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @embedding_rope_loss
// CHECK: call @loomrt_position_ids
// CHECK: call @loomrt_embedding_forward
// CHECK: call @loomrt_rope_forward
// The cross-entropy keeps its row statistics (for the gradient): the loss
// from the row maxima, sums of exponentials and target logits.
// CHECK: call @loomrt_ce_local_max
// CHECK: call @loomrt_ce_local_sum_exp
// CHECK: call @loomrt_ce_local_target
// CHECK: %[[LOSS:.*]] = memref.alloc() {alignment = 64 : i64} : memref<f32>
// CHECK: call @loomrt_ce_loss_from_parts
// CHECK: return %[[LOSS]] : memref<f32>
func.func @embedding_rope_loss(%t: tensor<2x8xi32>, %table: tensor<64x32xf32>, %mask: tensor<2x8xf32>) -> tensor<f32> {
  %p = tfm.position_ids %t reset_at_eod 0 : tensor<2x8xi32>
  %e = tfm.embedding %t, %table : tensor<2x8xi32>, tensor<64x32xf32> -> tensor<2x8x32xf32>
  %r = tfm.rope %e, %p head_dim 16 theta 1.0e4 : tensor<2x8x32xf32>, tensor<2x8xi32>
  %logits = tfm.linear %r, %table : tensor<2x8x32xf32>, tensor<64x32xf32> -> tensor<2x8x64xf32>
  %loss, %max, %sum = tfm.cross_entropy %logits, %t, %mask : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32> -> tensor<f32>
  return %loss : tensor<f32>
}

// A Llama 3.x RoPE passes its scaling to the kernel: LOOMRT_ROPE_LLAMA3 (1),
// factor, low and high frequency factors, original context; a plain one
// passes LOOMRT_ROPE_DEFAULT (0).
// CHECK-LABEL: func.func @rope_scaling
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[FACTOR:.*]] = arith.constant 8.000000e+00 : f32
// CHECK-DAG: %[[LOW:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-DAG: %[[HIGH:.*]] = arith.constant 4.000000e+00 : f32
// CHECK-DAG: %[[ORIG:.*]] = arith.constant 8192 : i64
// CHECK-DAG: %[[NONE:.*]] = arith.constant 0 : i64
// CHECK: call @loomrt_rope_forward(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %[[FACTOR]], %[[LOW]], %[[HIGH]], %[[ORIG]],
// CHECK: call @loomrt_rope_backward(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %[[FACTOR]], %[[LOW]], %[[HIGH]], %[[ORIG]],
// CHECK: call @loomrt_rope_forward(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ZERO]], %{{.*}}, %{{.*}}, %{{.*}}, %[[NONE]],
func.func @rope_scaling(%x: tensor<2x8x32xf32>, %p: tensor<2x8xi32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  %r = tfm.rope %x, %p head_dim 16 theta 5.0e5 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192>) : tensor<2x8x32xf32>, tensor<2x8xi32>
  %g = tfm.rope_grad %x, %p head_dim 16 theta 5.0e5 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192>) : tensor<2x8x32xf32>, tensor<2x8xi32>
  %u = tfm.rope %x, %p head_dim 16 theta 5.0e5 : tensor<2x8x32xf32>, tensor<2x8xi32>
  return %r, %g, %u : tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
}

// The backward ops lower too.
// CHECK-LABEL: func.func @backward
// The softmax comes from the forward's statistics: no pass over the logits
// before the gradient's.
// CHECK-NOT: call @loomrt_ce_local
// CHECK: call @loomrt_mask_sum
// CHECK: call @loomrt_ce_vocab_parallel_backward
// CHECK: call @loomrt_attention_backward
// CHECK: call @loomrt_rope_backward
// CHECK: call @loomrt_layer_norm_backward
// CHECK: call @loomrt_rms_norm_backward
// CHECK: call @loomrt_gelu_backward
// CHECK: call @loomrt_silu_backward
// CHECK: call @loomrt_swiglu_backward
// CHECK: call @loomrt_embedding_backward
// The runtime functions are declared once each, at the end, from
// Entrypoints.def.
// CHECK: func.func private @loomrt_linear_forward(i32, i64, i64, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr)
// CHECK-NOT: func.func private @loomrt_linear_forward
func.func @backward(%logits: tensor<2x8x64xf32>, %t: tensor<2x8xi32>, %m: tensor<2x8xf32>, %g: tensor<f32>,
                    %q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %l: tensor<2x4x8xf32>, %w: tensor<64xf32>,
                    %rmax: tensor<2x8xf32>, %rsum: tensor<2x8xf32>) {
  %0 = tfm.cross_entropy_grad %logits, %t, %m, %rmax, %rsum, %g : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32>, tensor<f32>
  %1:3 = tfm.attention_grad %q, %k, %k, %q, %l, %0 heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4x8xf32>
  %2 = tfm.rope_grad %1#0, %t head_dim 16 theta 1.0e4 : tensor<2x8x64xf32>, tensor<2x8xi32>
  %3:3 = tfm.layer_norm_grad %q, %w, %2 eps 1.0e-5 : tensor<2x8x64xf32>, tensor<64xf32>
  %4:2 = tfm.rms_norm_grad %q, %w, %3#0 eps 1.0e-5 : tensor<2x8x64xf32>, tensor<64xf32>
  %5 = tfm.gelu_grad %q, %4#0 none : tensor<2x8x64xf32>
  %6 = tfm.silu_grad %q, %5 : tensor<2x8x64xf32>
  %7:2 = tfm.swiglu_grad %q, %q, %6 : tensor<2x8x64xf32>
  %8 = tfm.embedding_grad %t, %7#0 : tensor<2x8xi32>, tensor<2x8x64xf32> -> tensor<100x64xf32>
  return
}

// -----

// Parameter reads must have become arguments first.
tfm.param @w init(ones) : tensor<8xf32>
func.func @unprepared() -> tensor<8xf32> {
  // expected-error @+1 {{failed to legalize operation 'tfm.get_param'}}
  %w = tfm.get_param @w : tensor<8xf32>
  return %w : tensor<8xf32>
}

// -----

// So must blocks have been inlined.
func.func @blocked(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{failed to legalize operation 'tfm.block'}}
  %y = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    tfm.yield %a : tensor<2x4x8xf32>
  }
  return %y : tensor<2x4x8xf32>
}

// -----

// Arithmetic on tensors has no lowering.
func.func @tensor_arith(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{failed to legalize operation 'arith.negf'}}
  %y = arith.negf %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Collectives run on the communicator argument of their group.
mesh.mesh @dense(shape = 1x2x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}

// CHECK-LABEL: func.func @collectives
// CHECK-SAME: (%[[X:.*]]: memref<2x4xf32>, %[[TP:.*]]: !llvm.ptr {tfm.comm = "tp"}, %[[DP:.*]]: !llvm.ptr {tfm.comm = "dp"})
// CHECK: %[[H:.*]] = llvm.load %[[TP]] : !llvm.ptr -> !llvm.ptr
// CHECK: call @loomrt_all_reduce(%[[H]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i32, i32, !llvm.ptr, !llvm.ptr, i64) -> ()
// CHECK: %[[SHAPE:.*]] = memref.alloca() : memref<2xi64>
// CHECK: call @loomrt_all_gather
// CHECK: %[[H2:.*]] = llvm.load %[[DP]]
// CHECK: call @loomrt_reduce_scatter(%[[H2]]
// CHECK: call @loomrt_all_to_all
// CHECK: return {{.*}} : memref<2x4xf32>
func.func @collectives(%x: tensor<2x4xf32>, %tp: !llvm.ptr {tfm.comm = "tp"}, %dp: !llvm.ptr {tfm.comm = "dp"}) -> tensor<2x4xf32> {
  %a = mesh.all_reduce %x on @dense mesh_axes = [3] reduction = <max> : tensor<2x4xf32> -> tensor<2x4xf32>
  %b = mesh.all_gather %a on @dense mesh_axes = [3] gather_axis = 1 : tensor<2x4xf32> -> tensor<2x8xf32>
  %c = mesh.reduce_scatter %b on @dense mesh_axes = [1] scatter_axis = 1 : tensor<2x8xf32> -> tensor<2x4xf32>
  %d = mesh.all_to_all %c on @dense mesh_axes = [3] split_axis = 1 concat_axis = 0 : tensor<2x4xf32> -> tensor<4x2xf32>
  %e = tfm.cast %d : tensor<4x2xf32> to tensor<4x2xf32>
  %f = mesh.all_to_all %e on @dense mesh_axes = [3] split_axis = 0 concat_axis = 1 : tensor<4x2xf32> -> tensor<2x4xf32>
  return %f : tensor<2x4xf32>
}

// -----

mesh.mesh @dense(shape = 1x2x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}

// Without its communicator argument a collective cannot be lowered.
func.func @no_comm(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{has no communicator argument for group tp (run tfm-comms-to-args)}}
  // expected-error @+1 {{failed to legalize operation 'mesh.all_reduce'}}
  %a = mesh.all_reduce %x on @dense mesh_axes = [3] : tensor<4xf32> -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// Vocab-parallel ops find their slice of the vocabulary from the
// distribution of their table or logits: the rank's index in the group
// that splits it. The pieces of the cross-entropy are one kernel each (their
// statistics are reduced by mesh collectives, elsewhere); the gradient reads
// the whole statistics.
mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}

// CHECK-LABEL: func.func @vocab_parallel
// CHECK-SAME: %[[TP:[a-z0-9]+]]: !llvm.ptr {tfm.comm = "tp"}
// CHECK: %[[H:.*]] = llvm.load %[[TP]]
// CHECK: %[[R:.*]] = call @loomrt_comm_rank(%[[H]]) : (!llvm.ptr) -> i32
// CHECK: %[[RW:.*]] = arith.extsi %[[R]] : i32 to i64
// CHECK: %[[START:.*]] = arith.muli %[[RW]], %{{.*}} : i64
// CHECK: call @loomrt_embedding_forward(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[START]],
// CHECK: call @loomrt_ce_local_max
// CHECK: call @loomrt_ce_local_sum_exp
// CHECK: call @loomrt_comm_rank
// CHECK: call @loomrt_ce_local_target
// CHECK: call @loomrt_ce_loss_from_parts
// The mean and the gradient's scale are divided on the device: no copy to
// the host (loomrt_copy) anywhere.
// CHECK: call @loomrt_safe_divide
// CHECK: call @loomrt_mask_sum
// CHECK: call @loomrt_safe_divide
// CHECK: call @loomrt_ce_vocab_parallel_backward({{.*}}) : (i32, i64, i64, i64, !llvm.ptr, !llvm.ptr, i64, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr) -> ()
// CHECK: call @loomrt_embedding_backward
// CHECK-NOT: call @loomrt_all_reduce
// CHECK-NOT: call @loomrt_copy(
func.func @vocab_parallel(%t: tensor<2x4xi32, #tfm.dist<@dense>>, %table: tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>,
                          %logits: tensor<2x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %m: tensor<2x4xf32, #tfm.dist<@dense>>,
                          %g: tensor<f32, #tfm.dist<@dense>>, %dy: tensor<2x4x8xf32, #tfm.dist<@dense>>,
                          %rmax: tensor<2x4xf32, #tfm.dist<@dense>>, %rsum: tensor<2x4xf32, #tfm.dist<@dense>>,
                          %tp: !llvm.ptr {tfm.comm = "tp"}) {
  %e = tfm.embedding %t, %table : tensor<2x4xi32, #tfm.dist<@dense>>, tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>> -> tensor<2x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
  %mx = tfm.ce_row_max %logits : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>> -> tensor<2x4xf32, #tfm.dist<@dense, partial = max[tp]>>
  %se = tfm.ce_sum_exp %logits, %rmax : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<2x4xf32, #tfm.dist<@dense>> -> tensor<2x4xf32, #tfm.dist<@dense, partial = sum[tp]>>
  %tg = tfm.ce_target_logit %logits, %t : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<2x4xi32, #tfm.dist<@dense>> -> tensor<2x4xf32, #tfm.dist<@dense, partial = sum[tp]>>
  %p = tfm.ce_loss_sum %rmax, %rsum, %rmax, %m : tensor<2x4xf32, #tfm.dist<@dense>> -> tensor<2xf32, #tfm.dist<@dense>>
  %l = tfm.loss_mean %p : tensor<2xf32, #tfm.dist<@dense>> -> tensor<f32, #tfm.dist<@dense>>
  %d = tfm.cross_entropy_grad %logits, %t, %m, %rmax, %rsum, %g : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<2x4xi32, #tfm.dist<@dense>>, tensor<2x4xf32, #tfm.dist<@dense>>, tensor<f32, #tfm.dist<@dense>>
  %dt = tfm.embedding_grad %t, %dy : tensor<2x4xi32, #tfm.dist<@dense>>, tensor<2x4x8xf32, #tfm.dist<@dense>> -> tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>
  return
}

// -----

// Chunks reordered: one strided copy per chunk, from the chunk the order
// names (dim 1 of [2, 8, 4] f32 in 4 chunks of 2: 32 bytes a chunk, 128 a
// row).
// CHECK-LABEL: func.func @permute
// CHECK: %[[SRC:.*]] = llvm.inttoptr
// CHECK: %[[DST:.*]] = llvm.inttoptr
// CHECK: call @loomrt_copy_2d(%[[DST]], %{{.*}}, %[[SRC]],
// CHECK: %[[D1:.*]] = llvm.getelementptr %[[DST]][32]
// CHECK: %[[S2:.*]] = llvm.getelementptr %[[SRC]][64]
// CHECK: call @loomrt_copy_2d(%[[D1]], %{{.*}}, %[[S2]],
// CHECK: %[[D2:.*]] = llvm.getelementptr %[[DST]][64]
// CHECK: %[[S1:.*]] = llvm.getelementptr %[[SRC]][32]
// CHECK: call @loomrt_copy_2d(%[[D2]], %{{.*}}, %[[S1]],
func.func @permute(%x: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  %y = tfm.permute_chunks %x dim 1 order [0, 2, 1, 3] : tensor<2x8x4xf32> -> tensor<2x8x4xf32>
  return %y : tensor<2x8x4xf32>
}

// -----

// A tfm.reshard must be lowered to collectives first.
mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
func.func @reshard(%x: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>) -> tensor<4xf32, #tfm.dist<@dense>> {
  // expected-error @+1 {{a tfm.reshard is left; run tfm-reshard-to-collectives before lowering}}
  %y = tfm.reshard %x : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<4xf32, #tfm.dist<@dense>>
  return %y : tensor<4xf32, #tfm.dist<@dense>>
}

// -----

// A rank's slice: a strided copy from the offset of its index in the group.
mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// CHECK-LABEL: func.func @slice
// CHECK: %[[R:.*]] = call @loomrt_comm_rank
// CHECK: %[[RW:.*]] = arith.extsi %[[R]] : i32 to i64
// CHECK: %[[OFF:.*]] = arith.muli %[[RW]], %{{.*}} : i64
// CHECK: %[[SRC:.*]] = llvm.getelementptr %{{.*}}[%[[OFF]]] : (!llvm.ptr, i64) -> !llvm.ptr, i8
// CHECK: call @loomrt_copy_2d(%{{.*}}, %{{.*}}, %[[SRC]], %{{.*}}, %{{.*}}, %{{.*}})
func.func @slice(%x: tensor<2x8x4xf32>, %tp: !llvm.ptr {tfm.comm = "tp"}) -> tensor<2x4x4xf32> {
  %s = mesh.all_slice %x on @dense mesh_axes = [3] slice_axis = 1 : tensor<2x8x4xf32> -> tensor<2x4x4xf32>
  return %s : tensor<2x4x4xf32>
}

// -----

// repeat_kv: one strided copy per copy of the heads; its gradient sums them.
// CHECK-LABEL: func.func @repeat
// CHECK-COUNT-2: call @loomrt_copy_2d
// CHECK-COUNT-2: call @loomrt_copy_2d
// CHECK: call @loomrt_add(
func.func @repeat(%k: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %r = tfm.repeat_kv %k factor 2 head_dim 4 : tensor<2x8xf32> -> tensor<2x16xf32>
  %g = tfm.repeat_kv_grad %r factor 2 head_dim 4 : tensor<2x16xf32> -> tensor<2x8xf32>
  return %g : tensor<2x8xf32>
}

// -----

// A dropout split on dim 1 of [2, 4, 8] over a group of 2 keys its elements
// by their global index: 2 rows of 4 * 8 local elements, starting at
// rank * 32 within global rows of size * 32.
mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// CHECK-LABEL: func.func @split_dropout
// CHECK-DAG: %[[ROWS:.*]] = arith.constant 2 : i64
// CHECK-DAG: %[[COLS:.*]] = arith.constant 32 : i64
// CHECK: %[[R:.*]] = call @loomrt_comm_rank
// CHECK: %[[RW:.*]] = arith.extsi %[[R]] : i32 to i64
// CHECK: %[[OFF:.*]] = arith.muli %[[RW]], %[[COLS]] : i64
// CHECK: %[[S:.*]] = call @loomrt_comm_size
// CHECK: %[[SW:.*]] = arith.extsi %[[S]] : i32 to i64
// CHECK: %[[STRIDE:.*]] = arith.muli %[[SW]], %[[COLS]] : i64
// CHECK: call @loomrt_dropout_forward(%{{.*}}, %[[ROWS]], %[[COLS]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[OFF]], %[[STRIDE]])
func.func @split_dropout(%x: tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>>, %tp: !llvm.ptr {tfm.comm = "tp"}) -> tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>> {
  %y = tfm.dropout %x p 0.1 seed 7 : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>>
  return %y : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>>
}

// -----

// Context parallelism. A ring step: every result buffer first, then one
// grouped exchange with the next rank (r + 1 mod 3) and the previous
// (r + 2 mod 3). A tile's section is chosen at run time from the block's
// owner, rank (r - 1) mod 3 here: lower (1) below this rank, upper (2)
// above; the merge works on copies of the running result. The backward's
// gradients start at zero.
// CHECK-LABEL: func.func @ring
// CHECK-SAME: %[[CP:[^:]*]]: !llvm.ptr {tfm.comm = "cp"}
// CHECK-DAG: %[[THREE:.*]] = arith.constant 3 : i64
// CHECK: %[[H:.*]] = llvm.load %[[CP]]
// CHECK: %[[R32:.*]] = call @loomrt_comm_rank(%[[H]])
// CHECK: %[[R:.*]] = arith.extsi %[[R32]]
// CHECK: %[[NEXT:.*]] = arith.remsi %{{.*}}, %[[THREE]]
// CHECK: %[[PREV:.*]] = arith.remsi %{{.*}}, %[[THREE]]
// CHECK: memref.alloc() {{.*}} : memref<1x4x16xf32>
// CHECK: memref.alloc() {{.*}} : memref<1x4x16xf32>
// CHECK: call @loomrt_p2p_begin(%[[H]])
// CHECK: call @loomrt_send(%[[H]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}})
// CHECK: call @loomrt_recv(
// CHECK: call @loomrt_send(
// CHECK: call @loomrt_recv(
// CHECK: call @loomrt_p2p_end(%[[H]])
// CHECK: %[[OWNER:.*]] = arith.remsi %{{.*}}, %[[THREE]]
// CHECK: %[[BELOW:.*]] = arith.cmpi slt, %[[OWNER]], %{{.*}}
// CHECK: %[[SECTION:.*]] = arith.select %[[BELOW]], %{{.*}}, %{{.*}} : i32
// CHECK: call @loomrt_copy_2d(
// CHECK: call @loomrt_copy_2d(
// CHECK: call @loomrt_attention_section_forward(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[SECTION]],
// CHECK: call @loomrt_zero(
// CHECK: call @loomrt_zero(
// CHECK: call @loomrt_zero(
// CHECK: call @loomrt_attention_section_backward(
#r = #tfm.dist<@dense, [[], [cp] zigzag(3)]>
#rs = #tfm.dist<@dense, [[], [], [cp] zigzag(3)]>
mesh.mesh @dense(shape = 1x1x3x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
func.func @ring(%q: tensor<1x4x16xf32, #r>, %k: tensor<1x4x16xf32, #r>, %o: tensor<1x4x16xf32, #r>, %lse: tensor<1x2x4xf32, #rs>,
                %cp: !llvm.ptr {tfm.comm = "cp"}) -> (tensor<1x4x16xf32, #r>, tensor<1x4x16xf32, #r>) {
  %k1, %v1 = tfm.ring_shift %k, %k on @dense axis "cp" offset 1 : tensor<1x4x16xf32, #r>, tensor<1x4x16xf32, #r>
  %o1, %l1 = tfm.attention_section %q, %k1, %v1 merge(%o, %lse : tensor<1x4x16xf32, #r>, tensor<1x2x4xf32, #rs>) kv_from -1 on @dense axis "cp" heads 2 kv_heads 2 head_dim 8 scale 0.35 : tensor<1x4x16xf32, #r>, tensor<1x4x16xf32, #r> -> tensor<1x2x4xf32, #rs>
  %dq, %dk, %dv = tfm.attention_section_grad %q, %k1, %v1, %o1, %l1, %o1 kv_from 1 on @dense axis "cp" heads 2 kv_heads 2 head_dim 8 scale 0.35 : tensor<1x4x16xf32, #r>, tensor<1x4x16xf32, #r>, tensor<1x2x4xf32, #rs>
  return %o1, %dk : tensor<1x4x16xf32, #r>, tensor<1x4x16xf32, #r>
}

// -----

// All-gather context parallelism: the queries hold two of the sequence's
// 2cp = 4 load-balanced chunks, the keys and values the whole sequence.
// Attention takes the chunk layout (this rank's first token, the chunk size
// 16 / 4, 4 chunks in order [0, 3, 1, 2]) instead of position arrays, so
// each piece runs without positions; without documents no position is
// computed at all.
// CHECK-LABEL: func.func @all_gathered
// CHECK-DAG: %[[FOUR:.*]] = arith.constant 4 : i32
// CHECK: %[[RANK:.*]] = call @loomrt_comm_rank(
// CHECK: %[[SIZE:.*]] = call @loomrt_comm_size(
// CHECK: memref.store {{.*}} : memref<4xi64>
// CHECK-NOT: loomrt_sequence_positions
// CHECK: call @loomrt_attention_chunked_forward(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FOUR]],
// CHECK-NOT: loomrt_sequence_positions
// CHECK: call @loomrt_attention_chunked_backward(
// With documents the queries' ids are read at their global positions,
// written from the same layout (the rank asked once).
// CHECK-LABEL: func.func @all_gathered_documents
// CHECK: call @loomrt_comm_rank(
// CHECK-NOT: call @loomrt_comm_rank(
// CHECK: call @loomrt_sequence_positions(
// CHECK-NOT: call @loomrt_comm_rank(
// CHECK: call @loomrt_document_ids(
// CHECK: call @loomrt_gather_positions(
// CHECK: call @loomrt_attention_chunked_forward(
#q = #tfm.dist<@dense, [[], [cp] zigzag(2)]>
#lq = #tfm.dist<@dense, [[], [], [cp] zigzag(2)]>
#t = #tfm.dist<@dense>
mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
func.func @all_gathered(%q: tensor<1x8x16xf32, #q>, %k: tensor<1x16x16xf32, #t>, %dy: tensor<1x8x16xf32, #q>,
                        %cp: !llvm.ptr {tfm.comm = "cp"}) -> (tensor<1x8x16xf32, #q>, tensor<1x16x16xf32, #t>) {
  %o, %l = tfm.attention %q, %k, %k heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal
      : tensor<1x8x16xf32, #q>, tensor<1x16x16xf32, #t>, tensor<1x16x16xf32, #t> -> tensor<1x8x16xf32, #q>, tensor<1x2x8xf32, #lq>
  %dq, %dk, %dv = tfm.attention_grad %q, %k, %k, %o, %l, %dy heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal
      : tensor<1x8x16xf32, #q>, tensor<1x16x16xf32, #t>, tensor<1x16x16xf32, #t>, tensor<1x2x8xf32, #lq>
  return %dq, %dk : tensor<1x8x16xf32, #q>, tensor<1x16x16xf32, #t>
}
func.func @all_gathered_documents(%q: tensor<1x8x16xf32, #q>, %k: tensor<1x16x16xf32, #t>, %tok: tensor<1x16xi32, #t>,
                                  %cp: !llvm.ptr {tfm.comm = "cp"}) -> tensor<1x8x16xf32, #q> {
  %o, %l = tfm.attention %q, %k, %k tokens %tok heads 2 kv_heads 2 head_dim 8 scale 0.35 mask causal_document eod 3
      : tensor<1x8x16xf32, #q>, tensor<1x16x16xf32, #t>, tensor<1x16x16xf32, #t>, tensor<1x16xi32, #t> -> tensor<1x8x16xf32, #q>, tensor<1x2x8xf32, #lq>
  return %o : tensor<1x8x16xf32, #q>
}

// -----

// Pipeline markers: the step marker (traced with loom-run --trace-pipeline)
// and the end of a chunk's gradients, a call the rank program hooks (it
// starts their data-parallel reduction); the gradients stay the results.
// CHECK-LABEL: func.func @pipeline_markers
// CHECK-DAG: %[[BWD:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[MB:.*]] = arith.constant 3 : i64
// CHECK-DAG: %[[CHUNK:.*]] = arith.constant 1 : i64
// CHECK: call @loomrt_pipeline_step(%[[BWD]], %[[MB]], %[[CHUNK]]) : (i32, i64, i64) -> ()
// CHECK: call @loomrt_grads_ready(%[[CHUNK]]) : (i64) -> ()
// CHECK: return %{{.*}}, %{{.*}} : memref<16xf32>, memref<4x4xf32>
func.func @pipeline_markers(%g0: tensor<16xf32>, %g1: tensor<4x4xf32>) -> (tensor<16xf32>, tensor<4x4xf32>) {
  tfm.pipeline_step backward mb 3 chunk 1
  tfm.grads_ready chunk 1 of %g0, %g1 : tensor<16xf32>, tensor<4x4xf32>
  return %g0, %g1 : tensor<16xf32>, tensor<4x4xf32>
}

// -----

// Hierarchical context parallelism: the all-to-all within a level-0 group
// is the runtime's all-to-all on that level's communicator (split dim 2,
// concat dim 1).
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [2, 2]>} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  // CHECK-LABEL: func.func @level_all_to_all
  // CHECK-SAME: (%[[X:.*]]: memref<1x4x32xf32>, %[[C:.*]]: !llvm.ptr {tfm.comm = "hcp:0"})
  // CHECK-DAG: %[[TWO:.*]] = arith.constant 2 : i32
  // CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i32
  // CHECK: %[[H:.*]] = llvm.load %[[C]] : !llvm.ptr -> !llvm.ptr
  // CHECK: %[[Y:.*]] = memref.alloc() {alignment = 64 : i64} : memref<1x8x16xf32>
  // CHECK: call @loomrt_all_to_all(%[[H]], %{{.*}}, %{{.*}}, %{{.*}}, %[[TWO]], %[[ONE]], %{{.*}}, %{{.*}})
  // CHECK: return %[[Y]]
  func.func @level_all_to_all(%x: tensor<1x4x32xf32>, %c: !llvm.ptr {tfm.comm = "hcp:0"}) -> tensor<1x8x16xf32> {
    %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x4x32xf32> -> tensor<1x8x16xf32>
    return %y : tensor<1x8x16xf32>
  }
}
