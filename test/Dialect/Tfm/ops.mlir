// RUN: loom-opt %s --verify-roundtrip | FileCheck %s
// RUN: loom-opt %s --mlir-print-op-generic | loom-opt | FileCheck %s

// Round trip of every tfm op in custom and generic form.

// CHECK-LABEL: tfm.param @wte init(normal, std = 2.000000e-02) : tensor<64x32xf32>
tfm.param @wte init(normal, std = 2.000000e-02) : tensor<64x32xf32>
// CHECK: tfm.param @ln.weight init(ones) : tensor<32xf32>
tfm.param @ln.weight init(ones) : tensor<32xf32>
// CHECK: tfm.param @ln.bias init(zeros) : tensor<32xbf16>
tfm.param @ln.bias init(zeros) : tensor<32xbf16>

// CHECK-LABEL: func.func @get_param
func.func @get_param() -> tensor<64x32xf32> {
  // CHECK: tfm.get_param @wte : tensor<64x32xf32>
  %w = tfm.get_param @wte : tensor<64x32xf32>
  return %w : tensor<64x32xf32>
}

// CHECK-LABEL: func.func @blocks
func.func @blocks(%t: tensor<2x8xi32>, %x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  // CHECK: tfm.block embedding ins(%{{.*}} : tensor<2x8xi32>) -> tensor<2x8x32xf32> {
  // CHECK: tfm.yield %{{.*}} : tensor<2x8x32xf32>
  %e = tfm.block embedding ins(%t : tensor<2x8xi32>) -> tensor<2x8x32xf32> {
  ^bb0(%a: tensor<2x8xi32>):
    %w = tfm.get_param @wte : tensor<64x32xf32>
    %r = tfm.embedding %a, %w : tensor<2x8xi32>, tensor<64x32xf32> -> tensor<2x8x32xf32>
    tfm.yield %r : tensor<2x8x32xf32>
  }
  // CHECK: tfm.block layer 3 ins(%{{.*}}, %{{.*}} : tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<2x8x32xf32>
  %l = tfm.block layer 3 ins(%e, %t : tensor<2x8x32xf32>, tensor<2x8xi32>) -> tensor<2x8x32xf32> {
  ^bb0(%a: tensor<2x8x32xf32>, %b: tensor<2x8xi32>):
    tfm.yield %a : tensor<2x8x32xf32>
  }
  // CHECK: tfm.block head ins(
  %h = tfm.block head ins(%l : tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  ^bb0(%a: tensor<2x8x32xf32>):
    tfm.yield %a : tensor<2x8x32xf32>
  }
  return %h : tensor<2x8x32xf32>
}

// CHECK-LABEL: func.func @embeddings
func.func @embeddings(%t: tensor<2x8xi32>, %table: tensor<64x32xf32>, %dy: tensor<2x8x32xf32>)
    -> (tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<2x8xi32>, tensor<64x32xf32>) {
  // CHECK: tfm.embedding %{{.*}}, %{{.*}} : tensor<2x8xi32>, tensor<64x32xf32> -> tensor<2x8x32xf32>
  %e = tfm.embedding %t, %table : tensor<2x8xi32>, tensor<64x32xf32> -> tensor<2x8x32xf32>
  // CHECK: tfm.position_ids %{{.*}} : tensor<2x8xi32>
  %p = tfm.position_ids %t : tensor<2x8xi32>
  // CHECK: tfm.position_ids %{{.*}} reset_at_eod 63 : tensor<2x8xi32>
  %r = tfm.position_ids %t reset_at_eod 63 : tensor<2x8xi32>
  // CHECK: tfm.embedding_grad %{{.*}}, %{{.*}} : tensor<2x8xi32>, tensor<2x8x32xf32> -> tensor<64x32xf32>
  %g = tfm.embedding_grad %t, %dy : tensor<2x8xi32>, tensor<2x8x32xf32> -> tensor<64x32xf32>
  return %e, %p, %r, %g : tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<2x8xi32>, tensor<64x32xf32>
}

// CHECK-LABEL: func.func @norms
func.func @norms(%x: tensor<2x8x32xbf16>, %w: tensor<32xbf16>, %b: tensor<32xbf16>) {
  // CHECK: tfm.layer_norm %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>
  %0 = tfm.layer_norm %x, %w, %b eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>
  // CHECK: tfm.layer_norm %{{.*}}, %{{.*}} eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %1 = tfm.layer_norm %x, %w eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>
  // CHECK: tfm.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %dx, %dw, %db = tfm.layer_norm_grad %x, %w, %x eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>
  // CHECK: tfm.rms_norm %{{.*}}, %{{.*}} eps 9.9999999999999995E-7 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %2 = tfm.rms_norm %x, %w eps 1.000000e-06 : tensor<2x8x32xbf16>, tensor<32xbf16>
  // CHECK: tfm.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} eps 9.9999999999999995E-7 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %dx2, %dw2 = tfm.rms_norm_grad %x, %w, %x eps 1.000000e-06 : tensor<2x8x32xbf16>, tensor<32xbf16>
  // CHECK: tfm.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} accumulate(%{{.*}} : tensor<2x8x32xbf16>) eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %dx3, %dw3, %db3 = tfm.layer_norm_grad %x, %w, %x accumulate(%dx : tensor<2x8x32xbf16>) eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>
  // CHECK: tfm.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} accumulate(%{{.*}} : tensor<2x8x32xbf16>) eps 9.9999999999999995E-7 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %dx4, %dw4 = tfm.rms_norm_grad %x, %w, %x accumulate(%dx2 : tensor<2x8x32xbf16>) eps 1.000000e-06 : tensor<2x8x32xbf16>, tensor<32xbf16>
  // CHECK: tfm.add_layer_norm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>
  %s1, %n1 = tfm.add_layer_norm %x, %dx, %w, %w eps 1.000000e-05 : tensor<2x8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>
  // CHECK: tfm.add_rms_norm %{{.*}}, %{{.*}}, %{{.*}} eps 9.9999999999999995E-7 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %s2, %n2 = tfm.add_rms_norm %x, %dx, %w eps 1.000000e-06 : tensor<2x8x32xbf16>, tensor<32xbf16>
  %pos = arith.constant dense<0> : tensor<2x8xi32>
  // CHECK: tfm.rope_pair %{{.*}}, %{{.*}}, %{{.*}} head_dim 8 theta 1.000000e+04 : tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x8xi32>
  %r1, %r2 = tfm.rope_pair %x, %dx, %pos head_dim 8 theta 1.0e+04 : tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x8xi32>
  // CHECK: tfm.rope_pair_grad %{{.*}}, %{{.*}}, %{{.*}} head_dim 8 theta 1.000000e+04 : tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x8xi32>
  %g1, %g2 = tfm.rope_pair_grad %r1, %r2, %pos head_dim 8 theta 1.0e+04 : tensor<2x8x32xbf16>, tensor<2x8x32xbf16>, tensor<2x8xi32>
  return
}

// CHECK-LABEL: func.func @fused_linears
func.func @fused_linears(%x: tensor<2x8x32xbf16>, %wq: tensor<32x32xbf16>, %wk: tensor<16x32xbf16>,
                         %bq: tensor<32xbf16>, %bk: tensor<16xbf16>, %dq: tensor<2x8x32xbf16>,
                         %dk: tensor<2x8x16xbf16>, %w2: tensor<32x16xbf16>, %h: tensor<2x8x16xbf16>) {
  // CHECK: tfm.multi_linear %{{.*}}[%{{.*}}, %{{.*}}] bias[%{{.*}}, %{{.*}}] : tensor<2x8x32xbf16>[tensor<32x32xbf16>, tensor<16x32xbf16>] bias[tensor<32xbf16>, tensor<16xbf16>] -> tensor<2x8x32xbf16>, tensor<2x8x16xbf16>
  %q, %k = tfm.multi_linear %x [%wq, %wk] bias [%bq, %bk] : tensor<2x8x32xbf16> [tensor<32x32xbf16>, tensor<16x32xbf16>] bias [tensor<32xbf16>, tensor<16xbf16>] -> tensor<2x8x32xbf16>, tensor<2x8x16xbf16>
  // CHECK: tfm.multi_linear %{{.*}}[%{{.*}}, %{{.*}}] : tensor<2x8x32xbf16>[tensor<32x32xbf16>, tensor<16x32xbf16>] -> tensor<2x8x32xbf16>, tensor<2x8x16xbf16>
  %q2, %k2 = tfm.multi_linear %x [%wq, %wk] : tensor<2x8x32xbf16> [tensor<32x32xbf16>, tensor<16x32xbf16>] -> tensor<2x8x32xbf16>, tensor<2x8x16xbf16>
  // CHECK: tfm.multi_linear_grad %{{.*}}[%{{.*}}, %{{.*}}] [%{{.*}}, %{{.*}}] : tensor<2x8x32xbf16>[tensor<32x32xbf16>, tensor<16x32xbf16>] [tensor<2x8x32xbf16>, tensor<2x8x16xbf16>] -> tensor<2x8x32xbf16>[tensor<32x32xbf16>, tensor<16x32xbf16>] bias[tensor<32xbf16>, tensor<16xbf16>]
  %dx, %dwq, %dwk, %dbq, %dbk = tfm.multi_linear_grad %x [%wq, %wk] [%dq, %dk] : tensor<2x8x32xbf16> [tensor<32x32xbf16>, tensor<16x32xbf16>] [tensor<2x8x32xbf16>, tensor<2x8x16xbf16>] -> tensor<2x8x32xbf16> [tensor<32x32xbf16>, tensor<16x32xbf16>] bias [tensor<32xbf16>, tensor<16xbf16>]
  // CHECK: tfm.multi_linear_grad %{{.*}}[%{{.*}}] [%{{.*}}] accumulate(%{{.*}} : tensor<2x8x32xbf16>) : tensor<2x8x32xbf16>[tensor<32x32xbf16>] [tensor<2x8x32xbf16>] -> tensor<2x8x32xbf16>[tensor<32x32xbf16>]{{$}}
  %dx2, %dwq2 = tfm.multi_linear_grad %x [%wq] [%dq] accumulate(%dx : tensor<2x8x32xbf16>) : tensor<2x8x32xbf16> [tensor<32x32xbf16>] [tensor<2x8x32xbf16>] -> tensor<2x8x32xbf16> [tensor<32x32xbf16>]
  // CHECK: tfm.linear_gelu %{{.*}}, %{{.*}}, %{{.*}} tanh : tensor<2x8x32xbf16>, tensor<16x32xbf16>, tensor<16xbf16> -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
  %pre, %a = tfm.linear_gelu %x, %wk, %bk tanh : tensor<2x8x32xbf16>, tensor<16x32xbf16>, tensor<16xbf16> -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
  // CHECK: tfm.linear_swiglu %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x32xbf16>, tensor<16x32xbf16> -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
  %g, %u, %s = tfm.linear_swiglu %x, %wk, %wk : tensor<2x8x32xbf16>, tensor<16x32xbf16> -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
  // CHECK: tfm.linear_swiglu %{{.*}}, %{{.*}}, %{{.*}} bias(%{{.*}}, %{{.*}}) : tensor<2x8x32xbf16>, tensor<16x32xbf16> bias(tensor<16xbf16>, tensor<16xbf16>) -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
  %g2, %u2, %s2 = tfm.linear_swiglu %x, %wk, %wk bias(%bk, %bk) : tensor<2x8x32xbf16>, tensor<16x32xbf16> bias(tensor<16xbf16>, tensor<16xbf16>) -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
  // CHECK: tfm.linear_grad_swiglu %{{.*}}, %{{.*}}, %{{.*}} swiglu(%{{.*}}, %{{.*}}) : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16>{{$}}
  %dg, %du, %dwd = tfm.linear_grad_swiglu %s, %w2, %dq swiglu(%g, %u) : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16>
  // CHECK: tfm.linear_grad_gelu %{{.*}}, %{{.*}}, %{{.*}} gelu(%{{.*}}) none : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16>{{$}}
  %dh, %dw2 = tfm.linear_grad_gelu %a, %w2, %dq gelu(%h) none : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16>
  return
}

// CHECK-LABEL: func.func @linears
func.func @linears(%x: tensor<2x8x32xf16>, %w: tensor<96x32xf16>, %b: tensor<96xf16>, %dy: tensor<2x8x96xf16>) {
  // CHECK: tfm.linear %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<96xf16> -> tensor<2x8x96xf16>
  %0 = tfm.linear %x, %w, %b : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<96xf16> -> tensor<2x8x96xf16>
  // CHECK: tfm.linear %{{.*}}, %{{.*}} : tensor<2x8x32xf16>, tensor<96x32xf16> -> tensor<2x8x96xf16>
  %1 = tfm.linear %x, %w : tensor<2x8x32xf16>, tensor<96x32xf16> -> tensor<2x8x96xf16>
  // CHECK: tfm.linear_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<2x8x96xf16> -> tensor<96xf16>
  %dx, %dw, %db = tfm.linear_grad %x, %w, %dy : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<2x8x96xf16> -> tensor<96xf16>
  // CHECK: tfm.linear_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<2x8x96xf16>{{$}}
  %dx2, %dw2 = tfm.linear_grad %x, %w, %dy : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<2x8x96xf16>
  // CHECK: tfm.linear_grad %{{.*}}, %{{.*}}, %{{.*}} accumulate(%{{.*}} : tensor<2x8x32xf16>) : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<2x8x96xf16>{{$}}
  %dx3, %dw3 = tfm.linear_grad %x, %w, %dy accumulate(%dx2 : tensor<2x8x32xf16>) : tensor<2x8x32xf16>, tensor<96x32xf16>, tensor<2x8x96xf16>
  return
}

// CHECK-LABEL: func.func @rope
func.func @rope(%x: tensor<2x8x64xf32>, %pos: tensor<2x8xi32>) {
  // CHECK: tfm.rope %{{.*}}, %{{.*}} head_dim 16 theta 1.000000e+04 : tensor<2x8x64xf32>, tensor<2x8xi32>
  %0 = tfm.rope %x, %pos head_dim 16 theta 1.000000e+04 : tensor<2x8x64xf32>, tensor<2x8xi32>
  // CHECK: tfm.rope_grad %{{.*}}, %{{.*}} head_dim 16 theta 5.000000e+05 : tensor<2x8x64xf32>, tensor<2x8xi32>
  %1 = tfm.rope_grad %x, %pos head_dim 16 theta 5.000000e+05 : tensor<2x8x64xf32>, tensor<2x8xi32>
  return
}

// CHECK-LABEL: func.func @rope_llama3_scaling
func.func @rope_llama3_scaling(%x: tensor<2x8x64xf32>, %pos: tensor<2x8xi32>) {
  // CHECK: tfm.rope %{{.*}}, %{{.*}} head_dim 16 theta 5.000000e+05 scaling(#tfm.llama3_rope_scaling<factor = 8.000000e+00, low_freq_factor = 1.000000e+00, high_freq_factor = 4.000000e+00, original_max_position_embeddings = 8192>) : tensor<2x8x64xf32>, tensor<2x8xi32>
  %0 = tfm.rope %x, %pos head_dim 16 theta 5.0e5 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192>) : tensor<2x8x64xf32>, tensor<2x8xi32>
  // Factors that are not short decimals in binary round-trip exactly.
  // CHECK: tfm.rope_grad {{.*}} scaling(#tfm.llama3_rope_scaling<factor = 1.000000e-01, low_freq_factor = 3.300000e-01, high_freq_factor = 4.500000e+00, original_max_position_embeddings = 32>)
  %1 = tfm.rope_grad %x, %pos head_dim 16 theta 1.0e4 scaling(#tfm.llama3_rope_scaling<factor = 0.1, low_freq_factor = 0.33, high_freq_factor = 4.5, original_max_position_embeddings = 32>) : tensor<2x8x64xf32>, tensor<2x8xi32>
  return
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %t: tensor<2x8xi32>) {
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  %o, %lse = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  // CHECK: tfm.attention %{{.*}}, %{{.*}}, %{{.*}} tokens %{{.*}} heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal_document eod 0 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  %o2, %lse2 = tfm.attention %q, %k, %v tokens %t heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal_document eod 0
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  // CHECK: tfm.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4x8xf32>
  %dq, %dk, %dv = tfm.attention_grad %q, %k, %v, %o, %lse, %o heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4x8xf32>
  // CHECK: tfm.attention_grad {{.*}} tokens %{{.*}} heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal_document eod 0 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4x8xf32>, tensor<2x8xi32>
  %dq2, %dk2, %dv2 = tfm.attention_grad %q, %k, %v, %o2, %lse2, %o tokens %t heads 4 kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal_document eod 0
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4x8xf32>, tensor<2x8xi32>
  return
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<2x8x32xf32>, %y: tensor<2x8x32xf32>, %b32: tensor<32xf32>) {
  // CHECK: tfm.gelu %{{.*}} none : tensor<2x8x32xf32>
  %0 = tfm.gelu %x none : tensor<2x8x32xf32>
  // CHECK: tfm.gelu %{{.*}} tanh : tensor<2x8x32xf32>
  %1 = tfm.gelu %x tanh : tensor<2x8x32xf32>
  // CHECK: tfm.gelu_grad %{{.*}}, %{{.*}} tanh : tensor<2x8x32xf32>
  %2 = tfm.gelu_grad %x, %y tanh : tensor<2x8x32xf32>
  // CHECK: tfm.silu %{{.*}} : tensor<2x8x32xf32>
  %3 = tfm.silu %x : tensor<2x8x32xf32>
  // CHECK: tfm.silu_grad %{{.*}}, %{{.*}} : tensor<2x8x32xf32>
  %4 = tfm.silu_grad %x, %y : tensor<2x8x32xf32>
  // CHECK: tfm.swiglu %{{.*}}, %{{.*}} : tensor<2x8x32xf32>
  %5 = tfm.swiglu %x, %y : tensor<2x8x32xf32>
  // CHECK: tfm.swiglu_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x32xf32>
  %6:2 = tfm.swiglu_grad %x, %y, %x : tensor<2x8x32xf32>
  // CHECK: tfm.add %{{.*}}, %{{.*}} : tensor<2x8x32xf32>
  %7 = tfm.add %x, %y : tensor<2x8x32xf32>
  // CHECK: tfm.bias_add %{{.*}}, %{{.*}} : tensor<2x8x32xf32>, tensor<32xf32>
  %ba = tfm.bias_add %7, %b32 : tensor<2x8x32xf32>, tensor<32xf32>
  // CHECK: tfm.dropout %{{.*}} p 1.000000e-01 seed 1234 : tensor<2x8x32xf32>
  %8 = tfm.dropout %x p 1.000000e-01 seed 1234 : tensor<2x8x32xf32>
  // CHECK: tfm.cast %{{.*}} : tensor<2x8x32xf32> to tensor<2x8x32xbf16>
  %9 = tfm.cast %x : tensor<2x8x32xf32> to tensor<2x8x32xbf16>
  // CHECK: tfm.cast %{{.*}} : tensor<2x8x32xbf16> to tensor<2x8x32xf16>
  %10 = tfm.cast %9 : tensor<2x8x32xbf16> to tensor<2x8x32xf16>
  return
}

// CHECK-LABEL: func.func @repeat_kv
func.func @repeat_kv(%k: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  // CHECK: tfm.repeat_kv %{{.*}} factor 2 head_dim 16 : tensor<2x8x32xf32> -> tensor<2x8x64xf32>
  %r = tfm.repeat_kv %k factor 2 head_dim 16 : tensor<2x8x32xf32> -> tensor<2x8x64xf32>
  // CHECK: tfm.repeat_kv_grad %{{.*}} factor 2 head_dim 16 : tensor<2x8x64xf32> -> tensor<2x8x32xf32>
  %g = tfm.repeat_kv_grad %r factor 2 head_dim 16 : tensor<2x8x64xf32> -> tensor<2x8x32xf32>
  return %g : tensor<2x8x32xf32>
}

// CHECK-LABEL: func.func @loss
func.func @loss(%logits: tensor<2x8x64xf32>, %labels: tensor<2x8xi32>, %mask: tensor<2x8xf32>) -> (tensor<f32>, tensor<2x8x64xf32>) {
  // CHECK: %[[L:.*]], %[[MAX:.*]], %[[SUM:.*]] = tfm.cross_entropy %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32> -> tensor<f32>
  %l, %max, %sum = tfm.cross_entropy %logits, %labels, %mask : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32> -> tensor<f32>
  // CHECK: tfm.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}}, %[[MAX]], %[[SUM]], %[[L]] : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32>, tensor<f32>
  %g = tfm.cross_entropy_grad %logits, %labels, %mask, %max, %sum, %l : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32>, tensor<f32>
  return %l, %g : tensor<f32>, tensor<2x8x64xf32>
}

// The vocab-parallel pieces of the cross-entropy.
// CHECK-LABEL: func.func @loss_pieces
func.func @loss_pieces(%logits: tensor<2x8x64xf32>, %labels: tensor<2x8xi32>, %mask: tensor<2x8xf32>) -> tensor<f32> {
  // CHECK: %[[M:.*]] = tfm.ce_row_max %{{.*}} : tensor<2x8x64xf32> -> tensor<2x8xf32>
  %m = tfm.ce_row_max %logits : tensor<2x8x64xf32> -> tensor<2x8xf32>
  // CHECK: %[[E:.*]] = tfm.ce_sum_exp %{{.*}}, %[[M]] : tensor<2x8x64xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  %e = tfm.ce_sum_exp %logits, %m : tensor<2x8x64xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  // CHECK: %[[T:.*]] = tfm.ce_target_logit %{{.*}}, %{{.*}} : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<2x8xf32>
  %t = tfm.ce_target_logit %logits, %labels : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<2x8xf32>
  // CHECK: %[[P:.*]] = tfm.ce_loss_sum %[[M]], %[[E]], %[[T]], %{{.*}} : tensor<2x8xf32> -> tensor<2xf32>
  %p = tfm.ce_loss_sum %m, %e, %t, %mask : tensor<2x8xf32> -> tensor<2xf32>
  // CHECK: tfm.loss_mean %[[P]] : tensor<2xf32> -> tensor<f32>
  %l = tfm.loss_mean %p : tensor<2xf32> -> tensor<f32>
  // CHECK: tfm.token_count %{{.*}} : tensor<2x8xf32> -> tensor<f32>
  %n = tfm.token_count %mask : tensor<2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// The gradient with the whole batch's token count (context parallelism).
// CHECK-LABEL: func.func @loss_grad_count
func.func @loss_grad_count(%logits: tensor<2x8x64xf32>, %labels: tensor<2x8xi32>, %mask: tensor<2x8xf32>,
                           %m: tensor<2x8xf32>, %e: tensor<2x8xf32>, %g: tensor<f32>, %n: tensor<f32>) -> tensor<2x8x64xf32> {
  // CHECK: tfm.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} count %{{.*}} : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32>, tensor<f32>, tensor<f32>
  %d = tfm.cross_entropy_grad %logits, %labels, %mask, %m, %e, %g count %n : tensor<2x8x64xf32>, tensor<2x8xi32>, tensor<2x8xf32>, tensor<f32>, tensor<f32>
  return %d : tensor<2x8x64xf32>
}

// CHECK-LABEL: func.func @permute_chunks
func.func @permute_chunks(%x: tensor<2x8x4xf32>) -> tensor<2x8x4xf32> {
  // CHECK: tfm.permute_chunks %{{.*}} dim 1 order [0, 3, 1, 2] : tensor<2x8x4xf32> -> tensor<2x8x4xf32>
  %y = tfm.permute_chunks %x dim 1 order [0, 3, 1, 2] : tensor<2x8x4xf32> -> tensor<2x8x4xf32>
  return %y : tensor<2x8x4xf32>
}

// Expert parallelism's exchanges (global IR: the dispatched rows and
// counts at their ep-split global shapes).
mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
// CHECK-LABEL: func.func @expert_exchange
func.func @expert_exchange(%rows: tensor<32x64xf32>, %counts: tensor<4xi32>) {
  // CHECK: tfm.moe_gather_counts %{{.*}} on @expert axis "ep" : tensor<4xi32> -> tensor<8xi32>
  %all = tfm.moe_gather_counts %counts on @expert axis "ep" : tensor<4xi32> -> tensor<8xi32>
  // CHECK: tfm.moe_dispatch %{{.*}}, %{{.*}} on @expert axis "ep" : tensor<32x64xf32>, tensor<8xi32> -> tensor<128x64xf32>, tensor<4xi32>
  %d, %local = tfm.moe_dispatch %rows, %all on @expert axis "ep"
      : tensor<32x64xf32>, tensor<8xi32> -> tensor<128x64xf32>, tensor<4xi32>
  // CHECK: tfm.moe_combine %{{.*}}, %{{.*}} on @expert axis "ep" : tensor<128x64xf32>, tensor<8xi32> -> tensor<32x64xf32>
  %back = tfm.moe_combine %d, %all on @expert axis "ep"
      : tensor<128x64xf32>, tensor<8xi32> -> tensor<32x64xf32>
  return
}

// CHECK-LABEL: func.func @moe
func.func @moe(%x: tensor<2x8x64xf32>, %logits: tensor<2x8x4xf32>,
               %w: tensor<4x128x64xf32>, %scale: tensor<f32>,
               %dy: tensor<2x8x64xf32>, %g: tensor<2x8x1xf32>) {
  // CHECK: tfm.moe_route %{{.*}} top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
  %p, %e = tfm.moe_route %logits top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
  // CHECK: tfm.moe_route %{{.*}} top_k 2 pre_softmax :
  %p2, %e2 = tfm.moe_route %logits top_k 2 pre_softmax : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
  // CHECK: tfm.moe_route_grad %{{.*}}, %{{.*}}, %{{.*}} top_k 2 :
  %dl = tfm.moe_route_grad %logits, %e, %p top_k 2 : tensor<2x8x4xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>
  // CHECK: tfm.moe_route_counts %{{.*}} num_experts 4 : tensor<2x8x2xi32> -> tensor<4xf32>
  %routed = tfm.moe_route_counts %e num_experts 4 : tensor<2x8x2xi32> -> tensor<4xf32>
  // CHECK: tfm.moe_router_loss %{{.*}}, %{{.*}} top_k 2 aux_coeff 1.000000e-02 z_coeff 0.000000e+00 : tensor<2x8x4xf32>, tensor<4xf32> -> tensor<f32>, tensor<f32>
  %aux, %z = tfm.moe_router_loss %logits, %routed top_k 2 aux_coeff 1.000000e-02 z_coeff 0.000000e+00
      : tensor<2x8x4xf32>, tensor<4xf32> -> tensor<f32>, tensor<f32>
  // CHECK: tfm.moe_router_loss_grad %{{.*}}, %{{.*}}, %{{.*}} top_k 2
  %dl2 = tfm.moe_router_loss_grad %logits, %routed, %scale top_k 2 aux_coeff 1.000000e-02 z_coeff 0.000000e+00
      : tensor<2x8x4xf32>, tensor<4xf32>, tensor<f32>
  // CHECK: tfm.moe_permute %{{.*}}, %{{.*}} num_experts 4 : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<32x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
      : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<32x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  // CHECK: tfm.moe_drop %{{.*}}, %{{.*}} num_experts 4 capacity 3 probs : tensor<2x8x2xf32>, tensor<2x8x2xi32>
  %kept = tfm.moe_drop %p, %e num_experts 4 capacity 3 probs : tensor<2x8x2xf32>, tensor<2x8x2xi32>
  // CHECK: tfm.moe_drop %{{.*}}, %{{.*}} num_experts 4 capacity 3 position :
  %kept2 = tfm.moe_drop %p, %e num_experts 4 capacity 3 position : tensor<2x8x2xf32>, tensor<2x8x2xi32>
  // CHECK: tfm.moe_permute %{{.*}}, %{{.*}} num_experts 4 capacity 3 : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<12x64xf32>
  %crows, %ccounts, %cmap = tfm.moe_permute %x, %kept num_experts 4 capacity 3
      : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<12x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  // CHECK: tfm.moe_permute %{{.*}}, %{{.*}} num_experts 4 capacity 10 pad_to_capacity : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<40x64xf32>
  %prows, %pcounts, %pmap = tfm.moe_permute %x, %kept num_experts 4 capacity 10 pad_to_capacity
      : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<40x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  // CHECK: tfm.grouped_linear %{{.*}} : tensor<32x64xf32>, tensor<4x128x64xf32>, tensor<4xi32> -> tensor<32x128xf32>
  %h = tfm.grouped_linear %rows, %w, %counts : tensor<32x64xf32>, tensor<4x128x64xf32>, tensor<4xi32> -> tensor<32x128xf32>
  // CHECK: tfm.grouped_linear_grad
  %dx, %dw = tfm.grouped_linear_grad %rows, %w, %counts, %h
      : tensor<32x64xf32>, tensor<4x128x64xf32>, tensor<4xi32>, tensor<32x128xf32>
  // CHECK: tfm.moe_unpermute %{{.*}} : tensor<32x64xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x64xf32>
  %y = tfm.moe_unpermute %rows, %p, %map : tensor<32x64xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x64xf32>
  // CHECK: tfm.moe_unpermute_grad
  %drows, %dp = tfm.moe_unpermute_grad %rows, %p, %map, %dy
      : tensor<32x64xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<2x8x64xf32>
  // CHECK: tfm.moe_permute_grad %{{.*}} : tensor<32x64xf32>, tensor<2x8x2xi32> -> tensor<2x8x64xf32>
  %dxx = tfm.moe_permute_grad %drows, %map : tensor<32x64xf32>, tensor<2x8x2xi32> -> tensor<2x8x64xf32>
  // CHECK: tfm.sigmoid_gate %{{.*}} : tensor<2x8x64xf32>, tensor<2x8x1xf32>
  %s = tfm.sigmoid_gate %x, %g : tensor<2x8x64xf32>, tensor<2x8x1xf32>
  // CHECK: tfm.sigmoid_gate_grad
  %ds, %dg = tfm.sigmoid_gate_grad %x, %g, %dy : tensor<2x8x64xf32>, tensor<2x8x1xf32>, tensor<2x8x64xf32>
  return
}
