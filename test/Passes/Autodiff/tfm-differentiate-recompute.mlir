// RUN: loom-opt %s --tfm-differentiate | FileCheck %s --check-prefix=SAVE
// RUN: loom-opt %s --tfm-differentiate="recompute-granularity=full" | FileCheck %s --check-prefix=FULL
// RUN: loom-opt %s --tfm-differentiate="recompute-granularity=full recompute-method=block recompute-num-layers=1" | FileCheck %s --check-prefix=BLOCK
// RUN: loom-opt %s --tfm-differentiate="recompute-granularity=selective" | FileCheck %s --check-prefix=SEL

// Megatron's recompute options on a two-layer model (each layer: norm,
// attention, residual).

tfm.param @wte init(normal, std = 2.000000e-02) : tensor<16x4xf32>
tfm.param @ln0 init(ones) : tensor<4xf32>
tfm.param @ln1 init(ones) : tensor<4xf32>

func.func @forward(%t: tensor<1x2xi32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %h = tfm.block embedding ins(%t : tensor<1x2xi32>) -> tensor<1x2x4xf32> {
  ^bb0(%a: tensor<1x2xi32>):
    %w = tfm.get_param @wte : tensor<16x4xf32>
    %e = tfm.embedding %a, %w : tensor<1x2xi32>, tensor<16x4xf32> -> tensor<1x2x4xf32>
    tfm.yield %e : tensor<1x2x4xf32>
  }
  %h0 = tfm.block layer 0 ins(%h : tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>):
    %g = tfm.get_param @ln0 : tensor<4xf32>
    %n = tfm.rms_norm %x, %g eps 1.0e-6 : tensor<1x2x4xf32>, tensor<4xf32>
    %y, %lse = tfm.attention %n, %n, %n heads 2 kv_heads 2 head_dim 2 scale 0.5 mask causal : tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32> -> tensor<1x2x4xf32>, tensor<1x2x2xf32>
    %r = tfm.add %x, %y : tensor<1x2x4xf32>
    tfm.yield %r : tensor<1x2x4xf32>
  }
  %h1 = tfm.block layer 1 ins(%h0 : tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%x: tensor<1x2x4xf32>):
    %g = tfm.get_param @ln1 : tensor<4xf32>
    %n = tfm.rms_norm %x, %g eps 1.0e-6 : tensor<1x2x4xf32>, tensor<4xf32>
    %y, %lse = tfm.attention %n, %n, %n heads 2 kv_heads 2 head_dim 2 scale 0.5 mask causal : tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x4xf32> -> tensor<1x2x4xf32>, tensor<1x2x2xf32>
    %r = tfm.add %x, %y : tensor<1x2x4xf32>
    tfm.yield %r : tensor<1x2x4xf32>
  }
  %loss = tfm.block head ins(%h1, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%x: tensor<1x2x4xf32>, %y: tensor<1x2xi32>, %z: tensor<1x2xf32>):
    %w = tfm.get_param @wte : tensor<16x4xf32>
    %o = tfm.linear %x, %w : tensor<1x2x4xf32>, tensor<16x4xf32> -> tensor<1x2x16xf32>
    %c, %c_max, %c_sum = tfm.cross_entropy %o, %y, %z : tensor<1x2x16xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}

// Saving everything: next to its result each layer yields what its
// backward reads: the normed input, the attention's log-sum-exp and output.
// SAVE-LABEL: func.func @train_step
// SAVE: tfm.block layer 0 ins({{.*}}) -> tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x4xf32> {
// SAVE: tfm.block layer 1 ins({{.*}}) -> tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x4xf32> {

// Full, uniform: the layers yield their result only and their backward
// blocks re-run norm and attention; the head still saves (its logits).
// FULL-LABEL: func.func @train_step
// FULL: tfm.block layer 0 ins({{.*}}) -> tensor<1x2x4xf32> {
// FULL: tfm.block layer 1 ins({{.*}}) -> tensor<1x2x4xf32> {
// FULL: tfm.block head ins({{.*}}) -> tensor<f32>, tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2x16xf32> {
// FULL: tfm.block layer 1 backward
// FULL-NEXT: ^bb0
// FULL: tfm.rms_norm
// FULL: tfm.attention
// FULL: tfm.attention_grad
// FULL: tfm.block layer 0 backward
// FULL: tfm.rms_norm
// FULL: tfm.attention
// FULL: tfm.attention_grad

// Block, 1 layer: layer 0 is recomputed, layer 1 saves.
// BLOCK-LABEL: func.func @train_step
// BLOCK: tfm.block layer 0 ins({{.*}}) -> tensor<1x2x4xf32> {
// BLOCK: tfm.block layer 1 ins({{.*}}) -> tensor<1x2x4xf32>, tensor<1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x4xf32> {
// BLOCK: tfm.block layer 1 backward
// BLOCK-NOT: tfm.rms_norm %
// BLOCK-NOT: tfm.attention %
// BLOCK: tfm.attention_grad
// BLOCK: tfm.block layer 0 backward
// BLOCK: tfm.attention %

// Selective: the attention's output and log-sum-exp are not kept, only the
// normed input it reads; each backward block runs the attention again
// right before its gradient.
// SEL-LABEL: func.func @train_step
// SEL: tfm.block layer 0 ins({{.*}}) -> tensor<1x2x4xf32>, tensor<1x2x4xf32> {
// SEL: tfm.block layer 1 backward
// SEL-NOT: tfm.rms_norm %
// SEL: %{{.*}}, %{{.*}} = tfm.attention
// SEL-NEXT: tfm.attention_grad
// SEL: tfm.rms_norm_grad
