// RUN: loom-opt %s -split-input-file --tfm-set-plan="tp=2" --tfm-pad-vocab | FileCheck %s
// RUN: loom-opt %s -split-input-file --tfm-set-plan="tp=2 make-vocab-size-divisible-by=1" --tfm-pad-vocab | FileCheck %s --check-prefix=BY1
// RUN: loom-opt %s -split-input-file --tfm-set-plan="tp=4 make-vocab-size-divisible-by=1" --tfm-pad-vocab | FileCheck %s --check-prefix=TP4

// A 500-token vocabulary, untied, with a bf16 output projection: tp 2 x 128
// pads the token embedding, the projection (through its cast) and the
// logits to 512; the position embedding keeps its rows; the cross-entropy
// leaves the 12 padding logits out of the softmax.
// CHECK-LABEL: module attributes
// CHECK-SAME: unpadded_vocab_size = 500 : i64, vocab_size = 512 : i64
// CHECK: tfm.param @wte {{.*}} : tensor<512x8xf32>
// CHECK: tfm.param @wpe {{.*}} : tensor<4x8xf32>
// CHECK: tfm.param @head {{.*}} : tensor<512x8xbf16>
// CHECK: tfm.get_param @wte : tensor<512x8xf32>
// CHECK: tfm.embedding {{.*}} tensor<512x8xf32> -> tensor<1x4x8xf32>
// CHECK: tfm.embedding {{.*}} tensor<4x8xf32> -> tensor<1x4x8xf32>
// CHECK: tfm.cast {{.*}} : tensor<512x8xbf16> to tensor<512x8xf32>
// CHECK: tfm.linear {{.*}} -> tensor<1x4x512xf32>
// CHECK: tfm.cross_entropy {{.*}} {unpadded_vocab_size = 500 : i64} : tensor<1x4x512xf32>
// With divisible-by=1, tp 2 divides 500: nothing to pad or mark.
// BY1-LABEL: module attributes
// BY1-SAME: vocab_size = 500 : i64
// BY1-NOT: unpadded_vocab_size
// BY1: tensor<500x8xf32>
// BY1-NOT: unpadded_vocab_size
// tp 4 x 1: 500 is a multiple of 4 as well.
// TP4: tfm.param @wte {{.*}} : tensor<500x8xf32>
module attributes {tfm.model = {vocab_size = 500 : i64}} {
  tfm.param @wte init(normal, std = 2.000000e-02) : tensor<500x8xf32>
  tfm.param @wpe init(normal, std = 2.000000e-02) : tensor<4x8xf32>
  tfm.param @head init(normal, std = 2.000000e-02) : tensor<500x8xbf16>
  func.func @forward(%tokens: tensor<1x4xi32>, %labels: tensor<1x4xi32>, %mask: tensor<1x4xf32>) -> tensor<f32> {
    %t = tfm.get_param @wte : tensor<500x8xf32>
    %x = tfm.embedding %tokens, %t : tensor<1x4xi32>, tensor<500x8xf32> -> tensor<1x4x8xf32>
    %pos = tfm.position_ids %tokens : tensor<1x4xi32>
    %p = tfm.get_param @wpe : tensor<4x8xf32>
    %y = tfm.embedding %pos, %p : tensor<1x4xi32>, tensor<4x8xf32> -> tensor<1x4x8xf32>
    %h = tfm.get_param @head : tensor<500x8xbf16>
    %hc = tfm.cast %h : tensor<500x8xbf16> to tensor<500x8xf32>
    %logits = tfm.linear %x, %hc : tensor<1x4x8xf32>, tensor<500x8xf32> -> tensor<1x4x500xf32>
    %loss, %m, %s = tfm.cross_entropy %logits, %labels, %mask : tensor<1x4x500xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A vocabulary the importer padded (500 -> 512) keeps its rows when tp
// needs no more, and the cross-entropy is marked all the same.
// CHECK-LABEL: module attributes
// CHECK: tfm.param @wte {{.*}} : tensor<512x8xf32>
// CHECK: tfm.cross_entropy {{.*}} {unpadded_vocab_size = 500 : i64}
// BY1-LABEL: module attributes
// BY1: tfm.cross_entropy {{.*}} {unpadded_vocab_size = 500 : i64}
module attributes {tfm.model = {unpadded_vocab_size = 500 : i64, vocab_size = 512 : i64}} {
  tfm.param @wte init(normal, std = 2.000000e-02) : tensor<512x8xf32>
  func.func @forward(%tokens: tensor<1x4xi32>, %labels: tensor<1x4xi32>, %mask: tensor<1x4xf32>) -> tensor<f32> {
    %t = tfm.get_param @wte : tensor<512x8xf32>
    %x = tfm.embedding %tokens, %t : tensor<1x4xi32>, tensor<512x8xf32> -> tensor<1x4x8xf32>
    %logits = tfm.linear %x, %t : tensor<1x4x8xf32>, tensor<512x8xf32> -> tensor<1x4x512xf32>
    %loss, %m, %s = tfm.cross_entropy %logits, %labels, %mask : tensor<1x4x512xf32>, tensor<1x4xi32>, tensor<1x4xf32> -> tensor<f32>
    return %loss : tensor<f32>
  }
}
