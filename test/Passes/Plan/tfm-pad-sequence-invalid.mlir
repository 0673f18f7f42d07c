// RUN: loom-opt %s -split-input-file --tfm-pad-sequence -verify-diagnostics

// Test: learned positions shorter than the padded sequence
module attributes {tfm.plan = #tfm.plan<cp = 3>} {
  tfm.param @wpe init(ones) : tensor<8x4xf32>
  func.func @forward(%t: tensor<1x8xi32> {tfm.input = "tokens"}) -> tensor<1x8x4xf32> attributes {tfm.entry = "loom_forward"} {
    %p = tfm.position_ids %t : tensor<1x8xi32>
    %w = tfm.get_param @wpe : tensor<8x4xf32>
    // expected-error @+1 {{padding the sequence from 8 to 12 tokens needs 12 learned positions, but the position table has 8 (max_position_embeddings); import a sequence of at most 4}}
    %e = tfm.embedding %p, %w : tensor<1x8xi32>, tensor<8x4xf32> -> tensor<1x8x4xf32>
    return %e : tensor<1x8x4xf32>
  }
}

// -----

// Test: a value computed from the batch whose dim 1 is not the sequence
module attributes {tfm.plan = #tfm.plan<cp = 2>} {
  func.func @forward(%t: tensor<1x6xi32> {tfm.input = "tokens"}) -> tensor<1x2x3xi32> attributes {tfm.entry = "loom_forward"} {
    // expected-error @+1 {{cannot pad the sequence of 'tensor<1x2x3xi32>': dim 1 should be the sequence (6 tokens) and dim 0 the micro-batch (1)}}
    %e = tensor.expand_shape %t [[0], [1, 2]] output_shape [1, 2, 3] : tensor<1x6xi32> into tensor<1x2x3xi32>
    return %e : tensor<1x2x3xi32>
  }
}

// -----

// Test: no plan
// expected-error @+1 {{tfm-pad-sequence needs a #tfm.plan (run tfm-set-plan first)}}
module {
}
