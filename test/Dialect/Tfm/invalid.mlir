// RUN: loom-opt %s -split-input-file -verify-diagnostics

// One case per tfm verifier message.

// Test: normal init needs a std
// expected-error @+1 {{init normal needs a std}}
tfm.param @w init(normal) : tensor<4x4xf32>

// -----

// Test: normal init std must be positive
// expected-error @+1 {{init normal std must be positive, got -1}}
tfm.param @w init(normal, std = -1.0) : tensor<4x4xf32>

// -----

// Test: zeros init takes no std
// expected-error @+1 {{init zeros takes no std}}
tfm.param @w init(zeros, std = 1.0) : tensor<4xf32>

// -----

// Test: a parameter must be statically shaped
// expected-error @+1 {{type attribute of statically shaped tensor}}
tfm.param @w init(ones) : tensor<?xf32>

// -----

// Test: get_param of an unknown symbol
func.func @f() {
  // expected-error @+1 {{'missing' does not name a tfm.param}}
  %w = tfm.get_param @missing : tensor<4xf32>
  return
}

// -----

// Test: get_param with the wrong type
tfm.param @w init(ones) : tensor<4xf32>
func.func @f() {
  // expected-error @+1 {{result type 'tensor<8xf32>' does not match the type 'tensor<4xf32>' of param @w}}
  %w = tfm.get_param @w : tensor<8xf32>
  return
}

// -----

// Test: a layer block needs an index
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{a layer block needs an index}}
  %y = tfm.block layer ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    tfm.yield %a : tensor<2x4x8xf32>
  }
  return
}

// -----

// Test: a negative layer index
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{layer index -1 is negative}}
  %y = tfm.block layer -1 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    tfm.yield %a : tensor<2x4x8xf32>
  }
  return
}

// -----

// Test: only layer blocks have an index
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{a head block takes no index}}
  %y = tfm.block head 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    tfm.yield %a : tensor<2x4x8xf32>
  }
  return
}

// -----

// Test: block arguments must match the inputs in number
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{region has 2 arguments but the block has 1 inputs}}
  %y = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>, %b: tensor<2x4x8xf32>):
    tfm.yield %a : tensor<2x4x8xf32>
  }
  return
}

// -----

// Test: block arguments must match the inputs in type
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{region argument 0 has type 'tensor<2x4x8xf16>' but input 0 has type 'tensor<2x4x8xf32>'}}
  %y = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf16>):
    tfm.yield %a : tensor<2x4x8xf16>
  }
  return
}

// -----

// Test: a block must end with tfm.yield
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{region must end with tfm.yield}}
  %y = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    llvm.unreachable
  }
  return
}

// -----

// Test: the yield count must match the results
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{yields 2 values but the block has 1 results}}
  %y = tfm.block layer 0 ins(%x : tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4x8xf32>):
    tfm.yield %a, %a : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  }
  return
}

// -----

// Test: the yield types must match the results
func.func @f(%x: tensor<2x4x8xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{yielded value 0 has type 'tensor<2x4xi32>' but result 0 has type 'tensor<2x4x8xf32>'}}
  %y = tfm.block embedding ins(%t : tensor<2x4xi32>) -> tensor<2x4x8xf32> {
  ^bb0(%a: tensor<2x4xi32>):
    tfm.yield %a : tensor<2x4xi32>
  }
  return
}

// -----

// Test: tfm.yield only inside tfm.block
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{expects parent op 'tfm.block'}}
  tfm.yield %x : tensor<2x4x8xf32>
}

// -----

// Test: embedding ids must be rank 2
func.func @f(%t: tensor<2x4x1xi32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{ids must be [batch, seq] (rank 2), got rank 3}}
  %e = tfm.embedding %t, %w : tensor<2x4x1xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// Test: embedding table must be rank 2
func.func @f(%t: tensor<2x4xi32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{table must be [vocab, hidden] (rank 2), got rank 1}}
  %e = tfm.embedding %t, %w : tensor<2x4xi32>, tensor<16xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// Test: embedding result element type
func.func @f(%t: tensor<2x4xi32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{result element type 'bf16' does not match table element type 'f32'}}
  %e = tfm.embedding %t, %w : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xbf16>
  return
}

// -----

// Test: embedding result shape
func.func @f(%t: tensor<2x4xi32>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{result shape [2, 4, 6] does not match [2, 4, 8] (ids shape + hidden size)}}
  %e = tfm.embedding %t, %w : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x6xf32>
  return
}

// -----

// Test: embedding ids must be i32
func.func @f(%t: tensor<2x4xi64>, %w: tensor<16x8xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit signless integer values}}
  %e = tfm.embedding %t, %w : tensor<2x4xi64>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// Test: position ids of rank-1 tokens
func.func @f(%t: tensor<4xi32>) {
  // expected-error @+1 {{tokens must be [batch, seq] (rank 2), got rank 1}}
  %p = tfm.position_ids %t : tensor<4xi32>
  return
}

// -----

// Test: position ids reset at a negative eod
func.func @f(%t: tensor<2x4xi32>) {
  // expected-error @+1 {{eod token id -1 is negative}}
  %p = tfm.position_ids %t reset_at_eod -1 : tensor<2x4xi32>
  return
}

// -----

// Test: embedding_grad grad must be rank 3
func.func @f(%t: tensor<2x4xi32>, %g: tensor<8x8xf32>) {
  // expected-error @+1 {{grad must be [batch, seq, hidden] (rank 3), got rank 2}}
  %d = tfm.embedding_grad %t, %g : tensor<2x4xi32>, tensor<8x8xf32> -> tensor<16x8xf32>
  return
}

// -----

// Test: embedding_grad grad shape
func.func @f(%t: tensor<2x4xi32>, %g: tensor<2x5x8xf32>) {
  // expected-error @+1 {{grad shape [2, 5, 8] does not match [2, 4, 8] (ids shape + hidden size)}}
  %d = tfm.embedding_grad %t, %g : tensor<2x4xi32>, tensor<2x5x8xf32> -> tensor<16x8xf32>
  return
}

// -----

// Test: embedding_grad table hidden size
func.func @f(%t: tensor<2x4xi32>, %g: tensor<2x4x8xf32>) {
  // expected-error @+1 {{table hidden size 6 does not match grad hidden size 8}}
  %d = tfm.embedding_grad %t, %g : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x6xf32>
  return
}

// -----

// Test: embedding_grad element type
func.func @f(%t: tensor<2x4xi32>, %g: tensor<2x4x8xf32>) {
  // expected-error @+1 {{result element type 'f16' does not match grad element type 'f32'}}
  %d = tfm.embedding_grad %t, %g : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<16x8xf16>
  return
}

// -----

// Test: layer_norm weight size
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<6xf32>) {
  // expected-error @+1 {{weight size 6 does not match the normalized size 8}}
  %y = tfm.layer_norm %x, %w eps 1.0e-5 : tensor<2x4x8xf32>, tensor<6xf32>
  return
}

// -----

// Test: layer_norm bias size
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{bias size 4 does not match the normalized size 8}}
  %y = tfm.layer_norm %x, %w, %b eps 1.0e-5 : tensor<2x4x8xf32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

// Test: layer_norm weight rank
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x1xf32>) {
  // expected-error @+1 {{weight must be [normalized size] (rank 1), got rank 2}}
  %y = tfm.layer_norm %x, %w eps 1.0e-5 : tensor<2x4x8xf32>, tensor<8x1xf32>
  return
}

// -----

// Test: layer_norm weight element type
func.func @f(%x: tensor<2x4x8xbf16>, %w: tensor<8xf32>) {
  // expected-error @+1 {{weight element type 'f32' does not match input element type 'bf16'}}
  %y = tfm.layer_norm %x, %w eps 1.0e-5 : tensor<2x4x8xbf16>, tensor<8xf32>
  return
}

// -----

// Test: layer_norm epsilon
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be positive, got 0}}
  %y = tfm.layer_norm %x, %w eps 0.0 : tensor<2x4x8xf32>, tensor<8xf32>
  return
}

// -----

// Test: layer_norm of a scalar
func.func @f(%x: tensor<f32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %y = tfm.layer_norm %x, %w eps 1.0e-5 : tensor<f32>, tensor<8xf32>
  return
}

// -----

// Test: layer_norm_grad weight size
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<6xf32>) {
  // expected-error @+1 {{weight size 6 does not match the normalized size 8}}
  %a, %b, %c = tfm.layer_norm_grad %x, %w, %x eps 1.0e-5 : tensor<2x4x8xf32>, tensor<6xf32>
  return
}

// -----

// Test: rms_norm weight size
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{weight size 16 does not match the normalized size 8}}
  %y = tfm.rms_norm %x, %w eps 1.0e-6 : tensor<2x4x8xf32>, tensor<16xf32>
  return
}

// -----

// Test: rms_norm_grad epsilon
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be positive, got -1}}
  %a, %b = tfm.rms_norm_grad %x, %w, %x eps -1.0 : tensor<2x4x8xf32>, tensor<8xf32>
  return
}

// -----

// Test: linear input rank
func.func @f(%x: tensor<8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+1 {{input must have rank >= 2, got rank 1}}
  %y = tfm.linear %x, %w : tensor<8xf32>, tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

// Test: linear weight rank
func.func @f(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{weight must be [out_features, in_features] (rank 2), got rank 1}}
  %y = tfm.linear %x, %w : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  return
}

// -----

// Test: linear in_features
func.func @f(%x: tensor<2x4x64xf32>, %w: tensor<96x32xf32>) {
  // expected-error @+1 {{weight in_features 32 does not match input feature size 64}}
  %y = tfm.linear %x, %w : tensor<2x4x64xf32>, tensor<96x32xf32> -> tensor<2x4x96xf32>
  return
}

// -----

// Test: linear weight element type
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf16>) {
  // expected-error @+1 {{weight element type 'f16' does not match input element type 'f32'}}
  %y = tfm.linear %x, %w : tensor<2x4x32xf32>, tensor<96x32xf16> -> tensor<2x4x96xf32>
  return
}

// -----

// Test: linear bias size
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %b: tensor<100xf32>) {
  // expected-error @+1 {{bias size 100 does not match out_features 96}}
  %y = tfm.linear %x, %w, %b : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<100xf32> -> tensor<2x4x96xf32>
  return
}

// -----

// Test: linear bias rank
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %b: tensor<1x96xf32>) {
  // expected-error @+1 {{bias must be [out_features] (rank 1), got rank 2}}
  %y = tfm.linear %x, %w, %b : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<1x96xf32> -> tensor<2x4x96xf32>
  return
}

// -----

// Test: linear result shape
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>) {
  // expected-error @+1 {{result shape [2, 4, 32] does not match [2, 4, 96] (input shape with out_features last)}}
  %y = tfm.linear %x, %w : tensor<2x4x32xf32>, tensor<96x32xf32> -> tensor<2x4x32xf32>
  return
}

// -----

// Test: linear result element type
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>) {
  // expected-error @+1 {{result element type 'bf16' does not match input element type 'f32'}}
  %y = tfm.linear %x, %w : tensor<2x4x32xf32>, tensor<96x32xf32> -> tensor<2x4x96xbf16>
  return
}

// -----

// Test: linear_grad grad shape
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %dy: tensor<2x4x32xf32>) {
  // expected-error @+1 {{grad shape [2, 4, 32] does not match [2, 4, 96] (input shape with out_features last)}}
  %dx, %dw = tfm.linear_grad %x, %w, %dy : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<2x4x32xf32>
  return
}

// -----

// Test: linear_grad accumulates onto the input gradient's type
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %dy: tensor<2x4x96xf32>, %r: tensor<2x4x32xf16>) {
  // expected-error @+1 {{accumulates onto 'tensor<2x4x32xf16>' but its input gradient is 'tensor<2x4x32xf32>'}}
  %dx, %dw = tfm.linear_grad %x, %w, %dy accumulate(%r : tensor<2x4x32xf16>) : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<2x4x96xf32>
  return
}

// -----

// Test: linear_grad bias_grad size
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %dy: tensor<2x4x96xf32>) {
  // expected-error @+1 {{bias_grad size 32 does not match out_features 96}}
  %dx, %dw, %db = tfm.linear_grad %x, %w, %dy : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<2x4x96xf32> -> tensor<32xf32>
  return
}

// -----

// Test: linear_grad grad element type
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<96x32xf32>, %dy: tensor<2x4x96xbf16>) {
  // expected-error @+1 {{grad element type 'bf16' does not match input element type 'f32'}}
  %dx, %dw = tfm.linear_grad %x, %w, %dy : tensor<2x4x32xf32>, tensor<96x32xf32>, tensor<2x4x96xbf16>
  return
}

// -----

// Test: rope input rank
func.func @f(%x: tensor<2x4x4x16xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{input must be [batch, seq, heads*head_dim] (rank 3), got rank 4}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 : tensor<2x4x4x16xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: rope positions rank
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<8xi32>) {
  // expected-error @+1 {{positions must be [batch, seq] (rank 2), got rank 1}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 : tensor<2x4x64xf32>, tensor<8xi32>
  return
}

// -----

// Test: rope positions shape
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x8xi32>) {
  // expected-error @+1 {{positions shape [2, 8] does not match [2, 4] (input batch and sequence)}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 : tensor<2x4x64xf32>, tensor<2x8xi32>
  return
}

// -----

// Test: rope head_dim must be positive
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{head_dim must be positive, got 0}}
  %y = tfm.rope %x, %p head_dim 0 theta 1.0e4 : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: rope theta must be positive
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{theta must be positive, got 0}}
  %y = tfm.rope %x, %p head_dim 16 theta 0.0 : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: rope head_dim must be even
func.func @f(%x: tensor<2x4x60xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{head_dim 15 is odd; rotary embedding rotates pairs}}
  %y = tfm.rope %x, %p head_dim 15 theta 1.0e4 : tensor<2x4x60xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: rope features must be whole heads
func.func @f(%x: tensor<2x4x100xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{feature size 100 is not a multiple of head_dim 16}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 : tensor<2x4x100xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: rope_grad features must be whole heads
func.func @f(%x: tensor<2x4x100xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{feature size 100 is not a multiple of head_dim 16}}
  %y = tfm.rope_grad %x, %p head_dim 16 theta 1.0e4 : tensor<2x4x100xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: llama3 rope scaling factor must be positive
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{llama3 rope scaling factor 0 must be a positive f32}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 scaling(#tfm.llama3_rope_scaling<factor = 0.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 32>) : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: llama3 rope scaling low_freq_factor must be positive
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{llama3 rope scaling low_freq_factor -1 must be a positive f32}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = -1.0, high_freq_factor = 4.0, original_max_position_embeddings = 32>) : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: llama3 rope scaling factors must be finite in f32 (the runtime's
// precision)
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{llama3 rope scaling high_freq_factor 1e+300 must be a positive f32}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 1.0e300, original_max_position_embeddings = 32>) : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: llama3 rope scaling high_freq_factor must exceed low_freq_factor
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{llama3 rope scaling high_freq_factor 4 must exceed low_freq_factor 4}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 4.0, high_freq_factor = 4.0, original_max_position_embeddings = 32>) : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: llama3 rope scaling original_max_position_embeddings must be positive
func.func @f(%x: tensor<2x4x64xf32>, %p: tensor<2x4xi32>) {
  // expected-error @+1 {{llama3 rope scaling original_max_position_embeddings 0 must be positive}}
  %y = tfm.rope %x, %p head_dim 16 theta 1.0e4 scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 0>) : tensor<2x4x64xf32>, tensor<2x4xi32>
  return
}

// -----

// Test: num_heads must be positive, got 0
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{num_heads must be positive, got 0}}
  %o, %l = tfm.attention %q, %k, %v heads 0 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: num_kv_heads must be positive, got 0
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{num_kv_heads must be positive, got 0}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 0 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: head_dim must be positive, got -16
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{head_dim must be positive, got -16}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim -16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: scale must be positive, got 0
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{scale must be positive, got 0}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.0 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: num_kv_heads 3 does not divide num_heads 4
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{num_kv_heads 3 does not divide num_heads 4}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 3 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: query feature size 64 is not num_heads 5 * head_dim 16 = 80
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{query feature size 64 is not num_heads 5 * head_dim 16 = 80}}
  %o, %l = tfm.attention %q, %k, %v heads 5 kv_heads 1 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: key feature size 32 is not num_kv_heads 4 * head_dim 16 = 64
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{key feature size 32 is not num_kv_heads 4 * head_dim 16 = 64}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 4 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: query must be [batch, seq, heads*head_dim] (rank 3), got rank 2
func.func @f(%q: tensor<8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{query must be [batch, seq, heads*head_dim] (rank 3), got rank 2}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: key element type 'bf16' does not match query element type 'f32'
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xbf16>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{key element type 'bf16' does not match query element type 'f32'}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xbf16>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: key shape [2, 4, 32] does not match [2, 8, 32] (query batch and sequence, num_kv_heads * head_dim)
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x4x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{key shape [2, 4, 32] does not match [2, 8, 32] (query batch and sequence, num_kv_heads * head_dim)}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x4x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: value shape [2, 8, 16] does not match [2, 8, 32] (key shape)
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x16xf32>) {
  // expected-error @+1 {{value shape [2, 8, 16] does not match [2, 8, 32] (key shape)}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x16xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: lse shape [2, 8, 4] does not match [2, 4, 8] ([batch, num_heads, seq])
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{lse shape [2, 8, 4] does not match [2, 4, 8] ([batch, num_heads, seq])}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x8x4xf32>
  return
}

// -----

// Test: result type 'tensor<2x8x64xbf16>' does not match query type 'tensor<2x8x64xf32>'
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{result type 'tensor<2x8x64xbf16>' does not match query type 'tensor<2x8x64xf32>'}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xbf16>, tensor<2x4x8xf32>
  return
}

// -----

// Test: mask causal_document needs an eod token id
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %t: tensor<2x8xi32>) {
  // expected-error @+1 {{mask causal_document needs an eod token id}}
  %o, %l = tfm.attention %q, %k, %v tokens %t heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal_document : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: eod token id -3 is negative
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %t: tensor<2x8xi32>) {
  // expected-error @+1 {{eod token id -3 is negative}}
  %o, %l = tfm.attention %q, %k, %v tokens %t heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal_document eod -3 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: mask causal_document needs the tokens operand
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{mask causal_document needs the tokens operand}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal_document eod 0 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: tokens shape [2, 4] does not match [2, 8] (query batch and sequence)
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{tokens shape [2, 4] does not match [2, 8] (query batch and sequence)}}
  %o, %l = tfm.attention %q, %k, %v tokens %t heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal_document eod 0 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: mask causal takes no eod token id
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>) {
  // expected-error @+1 {{mask causal takes no eod token id}}
  %o, %l = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal eod 0 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: mask causal takes no tokens operand
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %t: tensor<2x8xi32>) {
  // expected-error @+1 {{mask causal takes no tokens operand}}
  %o, %l = tfm.attention %q, %k, %v tokens %t heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8xi32> -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: attention_grad shares the attention checks
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %l: tensor<2x4x8xf32>) {
  // expected-error @+1 {{num_kv_heads 3 does not divide num_heads 4}}
  %dq, %dk, %dv = tfm.attention_grad %q, %k, %v, %q, %l, %q heads 4 kv_heads 3 head_dim 16 scale 0.25 mask causal
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: attention_grad lse shape
func.func @f(%q: tensor<2x8x64xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>, %l: tensor<2x2x8xf32>) {
  // expected-error @+1 {{lse shape [2, 2, 8] does not match [2, 4, 8] ([batch, num_heads, seq])}}
  %dq, %dk, %dv = tfm.attention_grad %q, %k, %v, %q, %l, %q heads 4 kv_heads 2 head_dim 16 scale 0.25 mask causal
      : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x2x8xf32>
  return
}

// -----

// Test: dropout probability must be below 1
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{dropout probability 1 is not in [0, 1)}}
  %y = tfm.dropout %x p 1.0 seed 0 : tensor<2x4x8xf32>
  return
}

// -----

// Test: dropout probability must not be negative
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{dropout probability -0.5 is not in [0, 1)}}
  %y = tfm.dropout %x p -0.5 seed 0 : tensor<2x4x8xf32>
  return
}

// -----

// Test: cast keeps the shape
func.func @f(%x: tensor<2x4x8xf32>) {
  // expected-error @+1 {{requires the same shape for all operands and results}}
  %y = tfm.cast %x : tensor<2x4x8xf32> to tensor<2x4x4xbf16>
  return
}

// -----

// Test: only float activations
func.func @f(%x: tensor<2x4x8xf64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %y = tfm.silu %x : tensor<2x4x8xf64>
  return
}

// -----

// Test: static shapes only
func.func @f(%x: tensor<?x4x8xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor}}
  %y = tfm.gelu %x tanh : tensor<?x4x8xf32>
  return
}

// -----

// Test: cross_entropy logits rank
func.func @f(%l: tensor<8x64xf32>, %y: tensor<2x4xi32>, %m: tensor<2x4xf32>) {
  // expected-error @+1 {{logits must be [batch, seq, vocab] (rank 3), got rank 2}}
  %loss:3 = tfm.cross_entropy %l, %y, %m : tensor<8x64xf32>, tensor<2x4xi32>, tensor<2x4xf32> -> tensor<f32>
  return
}

// -----

// Test: cross_entropy padding marker below 1
func.func @f(%l: tensor<2x4x64xf32>, %y: tensor<2x4xi32>, %m: tensor<2x4xf32>) {
  // expected-error @+1 {{unpadded_vocab_size must be at least 1, got 0}}
  %loss:3 = tfm.cross_entropy %l, %y, %m {unpadded_vocab_size = 0 : i64} : tensor<2x4x64xf32>, tensor<2x4xi32>, tensor<2x4xf32> -> tensor<f32>
  return
}

// -----

// Test: cross_entropy labels shape
func.func @f(%l: tensor<2x4x64xf32>, %y: tensor<2x8xi32>, %m: tensor<2x4xf32>) {
  // expected-error @+1 {{labels shape [2, 8] does not match [2, 4] (logits batch and sequence)}}
  %loss:3 = tfm.cross_entropy %l, %y, %m : tensor<2x4x64xf32>, tensor<2x8xi32>, tensor<2x4xf32> -> tensor<f32>
  return
}

// -----

// Test: cross_entropy loss_mask shape
func.func @f(%l: tensor<2x4x64xf32>, %y: tensor<2x4xi32>, %m: tensor<4x2xf32>) {
  // expected-error @+1 {{loss_mask shape [4, 2] does not match [2, 4] (logits batch and sequence)}}
  %loss:3 = tfm.cross_entropy %l, %y, %m : tensor<2x4x64xf32>, tensor<2x4xi32>, tensor<4x2xf32> -> tensor<f32>
  return
}

// -----

// Test: cross_entropy_grad labels shape
func.func @f(%l: tensor<2x4x64xf32>, %y: tensor<2x8xi32>, %m: tensor<2x4xf32>, %s: tensor<2x8xf32>, %g: tensor<f32>) {
  // expected-error @+1 {{labels shape [2, 8] does not match [2, 4] (logits batch and sequence)}}
  %d = tfm.cross_entropy_grad %l, %y, %m, %s, %s, %g : tensor<2x4x64xf32>, tensor<2x8xi32>, tensor<2x4xf32>, tensor<f32>
  return
}

// -----

// Test: after tfm-localize a distributed parameter's split must divide
module attributes {tfm.plan = #tfm.plan<tp = 4>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x4) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<6x8xf32>
  func.func @f() {
    // expected-error @+1 {{@w dim 0 of size 6 is not divisible by tp 4}}
    %w = tfm.get_param @w : tensor<1x8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}

// -----

// Test: after tfm-localize the result is this rank's piece
module attributes {tfm.plan = #tfm.plan<tp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<4x8xf32>
  func.func @f() {
    // expected-error @+1 {{result type 'tensor<4x4xf32, #tfm.dist<@dense, [[tp]]>>' does not match the type 'tensor<4x8xf32>' of param @w (distributed, per-rank shape)}}
    %w = tfm.get_param @w : tensor<4x4xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}

// -----

// Test: before tfm-localize the result has the global shape
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w init(ones) : tensor<4x8xf32>
  func.func @f() {
    // expected-error @+1 {{result type 'tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>>' does not match the type 'tensor<4x8xf32>' of param @w}}
    %w = tfm.get_param @w : tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}

// -----

// Test: a per-rank shape needs the distribution's mesh
module attributes {tfm.local_shapes} {
  tfm.param @w init(ones) : tensor<4x8xf32>
  func.func @f() {
    // expected-error @+1 {{distribution names mesh @dense, which is not a mesh.mesh}}
    %w = tfm.get_param @w : tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}

// -----

// Test: bias_add bias size
func.func @f(%x: tensor<2x4x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{bias size 4 does not match the input's last dim 8}}
  %y = tfm.bias_add %x, %b : tensor<2x4x8xf32>, tensor<4xf32>
  return
}

// -----

// Test: bias_add bias rank
func.func @f(%x: tensor<2x4x8xf32>, %b: tensor<1x8xf32>) {
  // expected-error @+1 {{bias must be [features] (rank 1), got rank 2}}
  %y = tfm.bias_add %x, %b : tensor<2x4x8xf32>, tensor<1x8xf32>
  return
}

// -----

// Test: bias_add element types
func.func @f(%x: tensor<2x4x8xf32>, %b: tensor<8xbf16>) {
  // expected-error @+1 {{bias element type 'bf16' does not match input element type 'f32'}}
  %y = tfm.bias_add %x, %b : tensor<2x4x8xf32>, tensor<8xbf16>
  return
}

// -----

// Test: bias_add of a scalar
func.func @f(%x: tensor<f32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %y = tfm.bias_add %x, %b : tensor<f32>, tensor<8xf32>
  return
}

// -----

// Test: repeat_kv result shape
func.func @f(%k: tensor<2x8x32xf32>) {
  // expected-error @+1 {{repeated shape [2, 8, 32] does not match [2, 8, 64] (every head repeated factor times)}}
  %r = tfm.repeat_kv %k factor 2 head_dim 16 : tensor<2x8x32xf32> -> tensor<2x8x32xf32>
  return
}

// -----

// Test: repeat_kv whole heads
func.func @f(%k: tensor<2x8x30xf32>) {
  // expected-error @+1 {{feature size 30 is not a multiple of head_dim 16}}
  %r = tfm.repeat_kv %k factor 2 head_dim 16 : tensor<2x8x30xf32> -> tensor<2x8x60xf32>
  return
}

// -----

// Test: repeat_kv_grad factor
func.func @f(%k: tensor<2x8x32xf32>) {
  // expected-error @+1 {{factor must be positive, got 0}}
  %r = tfm.repeat_kv_grad %k factor 0 head_dim 16 : tensor<2x8x32xf32> -> tensor<2x8x32xf32>
  return
}

// -----

// Test: repeat_kv element types
func.func @f(%k: tensor<2x8x32xf32>) {
  // expected-error @+1 {{result element type 'bf16' does not match input element type 'f32'}}
  %r = tfm.repeat_kv %k factor 2 head_dim 16 : tensor<2x8x32xf32> -> tensor<2x8x64xbf16>
  return
}

// -----

// Test: level_all_to_all whose result is not the input's pieces rejoined
func.func @f(%x: tensor<1x8x64xf32>) {
  // expected-error @+1 {{result 'tensor<1x16x64xf32>' is not the input cut into equal pieces along dim 2 and joined along dim 1}}
  %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2 concat 1 : tensor<1x8x64xf32> -> tensor<1x16x64xf32>
  return
}

// -----

// Test: level_all_to_all dims beyond the rank
func.func @f(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{split and concat dims must be dims of the input, and the result of its rank}}
  %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2 concat 1 : tensor<8x64xf32> -> tensor<8x64xf32>
  return
}

// -----

// Test: top_k cannot exceed the experts
func.func @f(%l: tensor<2x8x4xf32>) {
  // expected-error @+1 {{top_k 5 exceeds the 4 experts}}
  %p, %e = tfm.moe_route %l top_k 5 : tensor<2x8x4xf32> -> tensor<2x8x5xf32>, tensor<2x8x5xi32>
  return
}

// -----

// Test: routing results are [batch, seq, top_k]
func.func @f(%l: tensor<2x8x4xf32>) {
  // expected-error @+1 {{probs shape [2, 8, 3] does not match [2, 8, 2] ([batch, seq, top_k] of the logits)}}
  %p, %e = tfm.moe_route %l top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x3xf32>, tensor<2x8x3xi32>
  return
}

// -----

// Test: router loss coefficients are not negative
func.func @f(%l: tensor<2x8x4xf32>, %c: tensor<4xf32>) {
  // expected-error @+1 {{aux_coeff must be finite and not negative, got -1}}
  %a, %z = tfm.moe_router_loss %l, %c top_k 2 aux_coeff -1.0 z_coeff 0.0 : tensor<2x8x4xf32>, tensor<4xf32> -> tensor<f32>, tensor<f32>
  return
}

// -----

// Test: the router loss's counts are one per expert
func.func @f(%l: tensor<2x8x4xf32>, %c: tensor<3xf32>) {
  // expected-error @+1 {{counts shape [3] does not match [4] ([experts] of the logits)}}
  %a, %z = tfm.moe_router_loss %l, %c top_k 2 aux_coeff 0.01 z_coeff 0.0 : tensor<2x8x4xf32>, tensor<3xf32> -> tensor<f32>, tensor<f32>
  return
}

// -----

// Test: the router loss's top_k cannot exceed the experts
func.func @f(%l: tensor<2x8x4xf32>, %c: tensor<4xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{top_k 5 exceeds the 4 experts}}
  %d = tfm.moe_router_loss_grad %l, %c, %s top_k 5 aux_coeff 0.01 z_coeff 0.0 : tensor<2x8x4xf32>, tensor<4xf32>, tensor<f32>
  return
}

// -----

// Test: route counts are one per expert
func.func @f(%e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{counts shape [3] does not match [4] ([num_experts])}}
  %c = tfm.moe_route_counts %e num_experts 4 : tensor<2x8x2xi32> -> tensor<3xf32>
  return
}

// -----

// Test: the dispatched rows hold every (token, expert) pair
func.func @f(%x: tensor<2x8x64xf32>, %e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{has 16 rows; its pairs and capacity need 32}}
  %r, %c, %m = tfm.moe_permute %x, %e num_experts 4 : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<16x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  return
}

// -----

// Test: with a capacity, the rows are the pairs an expert can keep
func.func @f(%x: tensor<2x8x64xf32>, %e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{has 32 rows; its pairs and capacity need 12}}
  %r, %c, %m = tfm.moe_permute %x, %e num_experts 4 capacity 3 : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<32x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  return
}

// -----

// Test: padding to capacity needs a capacity
func.func @f(%x: tensor<2x8x64xf32>, %e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{pad_to_capacity needs a capacity}}
  %r, %c, %m = tfm.moe_permute %x, %e num_experts 4 pad_to_capacity : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<32x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  return
}

// -----

// Test: a capacity of at least one pair
func.func @f(%p: tensor<2x8x2xf32>, %e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{capacity must be at least 1, got 0}}
  %k = tfm.moe_drop %p, %e num_experts 4 capacity 0 probs : tensor<2x8x2xf32>, tensor<2x8x2xi32>
  return
}

// -----

// Test: one probability per routed pair
func.func @f(%p: tensor<2x8x1xf32>, %e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{probs shape [2, 8, 1] does not match [2, 8, 2] (experts' shape)}}
  %k = tfm.moe_drop %p, %e num_experts 4 capacity 2 position : tensor<2x8x1xf32>, tensor<2x8x2xi32>
  return
}

// -----

// Test: one count per expert
func.func @f(%x: tensor<2x8x64xf32>, %e: tensor<2x8x2xi32>) {
  // expected-error @+1 {{counts shape [3] does not match [4] ([num_experts])}}
  %r, %c, %m = tfm.moe_permute %x, %e num_experts 4 : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<32x64xf32>, tensor<3xi32>, tensor<2x8x2xi32>
  return
}

// -----

// Test: grouped linear in-features match the weight
func.func @f(%x: tensor<32x48xf32>, %w: tensor<4x128x64xf32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{input has 48 features but the weight takes 64}}
  %y = tfm.grouped_linear %x, %w, %c : tensor<32x48xf32>, tensor<4x128x64xf32>, tensor<4xi32> -> tensor<32x128xf32>
  return
}

// -----

// Test: one count per expert of the weight
func.func @f(%x: tensor<32x64xf32>, %w: tensor<4x128x64xf32>, %c: tensor<3xi32>) {
  // expected-error @+1 {{counts shape [3] does not match [4] ([experts] of the weight)}}
  %y = tfm.grouped_linear %x, %w, %c : tensor<32x64xf32>, tensor<4x128x64xf32>, tensor<3xi32> -> tensor<32x128xf32>
  return
}

// -----

// Test: combine rows have the tokens' features
func.func @f(%r: tensor<32x48xf32>, %p: tensor<2x8x2xf32>, %m: tensor<2x8x2xi32>) {
  // expected-error @+1 {{rows have 48 features but the tokens 64}}
  %y = tfm.moe_unpermute %r, %p, %m : tensor<32x48xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x64xf32>
  return
}

// -----

// Test: a shared expert's gate has one feature
func.func @f(%x: tensor<2x8x64xf32>, %g: tensor<2x8x2xf32>) {
  // expected-error @+1 {{gate shape [2, 8, 2] does not match [2, 8, 1] (the input's shape with one feature)}}
  %y = tfm.sigmoid_gate %x, %g : tensor<2x8x64xf32>, tensor<2x8x2xf32>
  return
}

// -----

// Test: gathered counts hold every rank's
mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
func.func @f(%c: tensor<4xi32>) {
  // expected-error @+1 {{result shape [4] does not match [8] ([ep * experts]: every rank's counts)}}
  %all = tfm.moe_gather_counts %c on @expert axis "ep" : tensor<4xi32> -> tensor<4xi32>
  return
}

// -----

// Test: an exchange over an axis the mesh does not have
mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
func.func @f(%c: tensor<4xi32>) {
  // expected-error @+1 {{runs over axis tp, which @expert does not have}}
  %all = tfm.moe_gather_counts %c on @expert axis "tp" : tensor<4xi32> -> tensor<8xi32>
  return
}

// -----

// Test: a dispatch's rows bound: ep x ep x rows / s in global IR, s the
// ranks the rows are split over (here 96 is no such bound)
mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
func.func @f(%rows: tensor<32x64xf32>, %all: tensor<8xi32>) {
  // expected-error @+1 {{dispatched rows shape [96, 64] does not match [ep * ep * rows / s, features]: split over ep, s the ranks the rows are split over (ep 2, 32 rows, 64 features)}}
  %d, %l = tfm.moe_dispatch %rows, %all on @expert axis "ep" : tensor<32x64xf32>, tensor<8xi32> -> tensor<96x64xf32>, tensor<4xi32>
  return
}

// -----

// Test: experts that do not divide over ep
mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
func.func @f(%rows: tensor<32x64xf32>, %all: tensor<6xi32>) {
  // expected-error @+1 {{3 experts do not divide over 2 ranks}}
  %d, %l = tfm.moe_dispatch %rows, %all on @expert axis "ep" : tensor<32x64xf32>, tensor<6xi32> -> tensor<128x64xf32>, tensor<3xi32>
  return
}

// -----

// Test: a combine returns rows of the dispatched element type
mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
func.func @f(%d: tensor<128x64xbf16>, %all: tensor<8xi32>) {
  // expected-error @+1 {{dispatched rows element type 'bf16' does not match rows element type 'f32'}}
  %rows = tfm.moe_combine %d, %all on @expert axis "ep" : tensor<128x64xbf16>, tensor<8xi32> -> tensor<32x64xf32>
  return
}

// -----

// Test: multi_linear biases, none or one per weight
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{has 1 biases for 2 weights (none or one each)}}
  %a, %c = tfm.multi_linear %x [%w, %w] bias [%b] : tensor<2x4x32xf32> [tensor<16x32xf32>, tensor<16x32xf32>] bias [tensor<16xf32>] -> tensor<2x4x16xf32>, tensor<2x4x16xf32>
  return
}

// -----

// Test: multi_linear, one result per weight
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>) {
  // expected-error @+1 {{has 1 results for 2 weights}}
  %a = tfm.multi_linear %x [%w, %w] : tensor<2x4x32xf32> [tensor<16x32xf32>, tensor<16x32xf32>] -> tensor<2x4x16xf32>
  return
}

// -----

// Test: multi_linear, each weight's in_features
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>, %v: tensor<16x8xf32>) {
  // expected-error @+1 {{weight in_features 8 does not match input feature size 32}}
  %a, %c = tfm.multi_linear %x [%w, %v] : tensor<2x4x32xf32> [tensor<16x32xf32>, tensor<16x8xf32>] -> tensor<2x4x16xf32>, tensor<2x4x16xf32>
  return
}

// -----

// Test: multi_linear_grad, one output gradient per weight
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>, %dy: tensor<2x4x16xf32>) {
  // expected-error @+1 {{has 1 output gradients and 2 weight gradients for 2 weights}}
  %dx, %dw1, %dw2 = tfm.multi_linear_grad %x [%w, %w] [%dy] : tensor<2x4x32xf32> [tensor<16x32xf32>, tensor<16x32xf32>] [tensor<2x4x16xf32>] -> tensor<2x4x32xf32> [tensor<16x32xf32>, tensor<16x32xf32>]
  return
}

// -----

// Test: multi_linear_grad, each output gradient's shape
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>, %dy: tensor<2x4x8xf32>) {
  // expected-error @+1 {{grad shape [2, 4, 8] does not match [2, 4, 16]}}
  %dx, %dw = tfm.multi_linear_grad %x [%w] [%dy] : tensor<2x4x32xf32> [tensor<16x32xf32>] [tensor<2x4x8xf32>] -> tensor<2x4x32xf32> [tensor<16x32xf32>]
  return
}

// -----

// Test: multi_linear_grad accumulates onto the input gradient's type
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>, %dy: tensor<2x4x16xf32>, %r: tensor<2x4x16xf32>) {
  // expected-error @+1 {{accumulates onto 'tensor<2x4x16xf32>' but its input gradient is 'tensor<2x4x32xf32>'}}
  %dx, %dw = tfm.multi_linear_grad %x [%w] [%dy] accumulate(%r : tensor<2x4x16xf32>) : tensor<2x4x32xf32> [tensor<16x32xf32>] [tensor<2x4x16xf32>] -> tensor<2x4x32xf32> [tensor<16x32xf32>]
  return
}

// -----

// Test: linear_gelu keeps the pre-activation's type
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>) {
  // expected-error @+1 {{the pre-activation is 'tensor<2x4x16xf32>' but the result 'tensor<2x4x16xbf16>' (GELU keeps the type)}}
  %h, %a = tfm.linear_gelu %x, %w tanh : tensor<2x4x32xf32>, tensor<16x32xf32> -> tensor<2x4x16xf32>, tensor<2x4x16xbf16>
  return
}

// -----

// Test: linear_grad_gelu output gradient shape
func.func @f(%a: tensor<2x4x16xf32>, %w: tensor<32x16xf32>, %dy: tensor<2x4x16xf32>, %h: tensor<2x4x16xf32>) {
  // expected-error @+1 {{grad shape [2, 4, 16] does not match [2, 4, 32]}}
  %dh, %dw = tfm.linear_grad_gelu %a, %w, %dy gelu(%h) tanh : tensor<2x4x16xf32>, tensor<32x16xf32>, tensor<2x4x16xf32>
  return
}

// -----

// Test: linear_swiglu biases, none or gate's and up's
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{has 1 biases (none, or gate's and up's)}}
  %g, %u, %a = tfm.linear_swiglu %x, %w, %w bias(%b) : tensor<2x4x32xf32>, tensor<16x32xf32> bias(tensor<16xf32>) -> tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
  return
}

// -----

// Test: linear_swiglu keeps gate's and up's type
func.func @f(%x: tensor<2x4x32xf32>, %w: tensor<16x32xf32>) {
  // expected-error @+1 {{but the result 'tensor<2x4x8xf32>' (SwiGLU keeps the type)}}
  %g, %u, %a = tfm.linear_swiglu %x, %w, %w : tensor<2x4x32xf32>, tensor<16x32xf32> -> tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

// Test: linear_grad_swiglu output gradient shape
func.func @f(%a: tensor<2x4x16xf32>, %w: tensor<32x16xf32>, %dy: tensor<2x4x16xf32>) {
  // expected-error @+1 {{grad shape [2, 4, 16] does not match [2, 4, 32]}}
  %dg, %du, %dw = tfm.linear_grad_swiglu %a, %w, %dy swiglu(%a, %a) : tensor<2x4x16xf32>, tensor<32x16xf32>, tensor<2x4x16xf32>
  return
}
