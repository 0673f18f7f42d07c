// RUN: loom-opt %s -split-input-file --tfm-differentiate -verify-diagnostics

// Test: nothing to differentiate
// expected-error @+1 {{no function @forward to differentiate}}
module {}

// -----

// Test: the loss must be a scalar f32
func.func @forward(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
// expected-error @-3 {{@forward must return one scalar f32 loss to be differentiated}}

// -----

// Test: the body must be blocks
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  // expected-error @+1 {{tfm-differentiate expects @forward to be a sequence of tfm.block ops}}
  %c, %c_max, %c_sum = tfm.cross_entropy %x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
  return %c : tensor<f32>
}

// -----

// Test: an op without a gradient rule
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %b: tensor<1x2xi32>, %c: tensor<1x2xf32>):
    // expected-error @+1 {{'tfm.silu_grad' op has no gradient rule; tfm-differentiate cannot differentiate through it}}
    %y = tfm.silu_grad %a, %a : tensor<1x2x4xf32>
    %z, %z_max, %z_sum = tfm.cross_entropy %y, %b, %c : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %z : tensor<f32>
  }
  return %loss : tensor<f32>
}

// -----

// Test: the step's name is taken
func.func @train_step() {
  return
}
func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %loss = tfm.block head ins(%x, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %b: tensor<1x2xi32>, %c: tensor<1x2xf32>):
    %z, %z_max, %z_sum = tfm.cross_entropy %a, %b, %c : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %z : tensor<f32>
  }
  return %loss : tensor<f32>
}
// expected-error @-15 {{@train_step already exists}}

// -----

// Test: control flow in @forward is not differentiated
// expected-error @+1 {{@forward must be a single block}}
func.func @forward(%x: tensor<f32>) -> tensor<f32> {
  llvm.br ^bb1
^bb1:
  return %x : tensor<f32>
}
