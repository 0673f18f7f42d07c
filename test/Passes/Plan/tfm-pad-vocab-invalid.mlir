// RUN: loom-opt %s -split-input-file -verify-diagnostics --tfm-set-plan="tp=2" --tfm-pad-vocab
// RUN: echo 'module {}' | not loom-opt --tfm-pad-vocab 2>&1 | FileCheck %s --check-prefix=NOPLAN
// RUN: echo 'module {}' | not loom-opt --tfm-set-plan="tp=2 make-vocab-size-divisible-by=0" --tfm-pad-vocab 2>&1 | FileCheck %s --check-prefix=ZERO

// NOPLAN: error: tfm-pad-vocab needs the module's tfm.plan (run tfm-set-plan first)
// ZERO: error: plan make_vocab_size_divisible_by 0 must be at least 1

// A table used in a way the pass does not know how to pad (here, after
// differentiation) is named, not padded halfway.
module {
  tfm.param @wte init(normal, std = 2.000000e-02) : tensor<500x8xf32>
  func.func @forward(%tokens: tensor<1x4xi32>, %labels: tensor<1x4xi32>, %mask: tensor<1x4xf32>, %dy: tensor<1x4x8xf32>) -> tensor<500x8xf32> {
    %t = tfm.get_param @wte : tensor<500x8xf32>
    %x = tfm.embedding %tokens, %t : tensor<1x4xi32>, tensor<500x8xf32> -> tensor<1x4x8xf32>
    // expected-error @+1 {{uses a value with a row or column per vocabulary entry in a way tfm-pad-vocab cannot pad}}
    %s = tfm.add %t, %t : tensor<500x8xf32>
    return %s : tensor<500x8xf32>
  }
}

// -----

// The embedding and the output projection must agree on the vocabulary.
module {
  tfm.param @wte init(normal, std = 2.000000e-02) : tensor<500x8xf32>
  // expected-error @+1 {{'tfm.param' op has 400 rows where the other vocabulary table has 500}}
  tfm.param @head init(normal, std = 2.000000e-02) : tensor<400x8xf32>
  func.func @forward(%tokens: tensor<1x4xi32>, %labels: tensor<1x4xi32>, %mask: tensor<1x4xf32>) -> tensor<f32> {
    %t = tfm.get_param @wte : tensor<500x8xf32>
    %x = tfm.embedding %tokens, %t : tensor<1x4xi32>, tensor<500x8xf32> -> tensor<1x4x8xf32>
    %h = tfm.get_param @head : tensor<400x8xf32>
    %logits = tfm.linear %x, %h : tensor<1x4x8xf32>, tensor<400x8xf32> -> tensor<1x4x400xf32>
    %loss, %m, %s = tfm.cross_entropy %logits, %labels, %mask : tensor<1x4x400xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// The logits of a cross-entropy that no parameter projects onto.
// expected-error @+1 {{tfm-pad-vocab: an embedding table or the logits of a cross-entropy do not come from a parameter}}
module {
  tfm.param @wte init(normal, std = 2.000000e-02) : tensor<500x8xf32>
  func.func @forward(%tokens: tensor<1x4xi32>, %labels: tensor<1x4xi32>, %mask: tensor<1x4xf32>, %logits: tensor<1x4x500xf32>) -> tensor<f32> {
    %t = tfm.get_param @wte : tensor<500x8xf32>
    %x = tfm.embedding %tokens, %t : tensor<1x4xi32>, tensor<500x8xf32> -> tensor<1x4x8xf32>
    %loss, %m, %s = tfm.cross_entropy %logits, %labels, %mask : tensor<1x4x500xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
