// RUN: not loom-opt %s --tfm-differentiate="recompute-granularity=some" 2>&1 | FileCheck %s --check-prefix=GRAN
// RUN: not loom-opt %s --tfm-differentiate="recompute-granularity=full recompute-method=zigzag" 2>&1 | FileCheck %s --check-prefix=METHOD
// RUN: not loom-opt %s --tfm-differentiate="recompute-granularity=full recompute-num-layers=2" 2>&1 | FileCheck %s --check-prefix=UNIFORM
// RUN: not loom-opt %s --tfm-differentiate="recompute-granularity=full recompute-method=block recompute-num-layers=2" 2>&1 | FileCheck %s --check-prefix=MANY
// RUN: not loom-opt %s --tfm-differentiate="recompute-granularity=full recompute-num-layers=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// GRAN: error: recompute-granularity must be full or selective, got 'some'
// METHOD: error: recompute-method must be uniform or block, got 'zigzag'
// UNIFORM: error: recompute-method uniform with recompute-num-layers 2 (groups of layers recomputed together) is not implemented yet; use 1, or recompute-method block
// MANY: error: recompute-num-layers 2 exceeds the 1 layers of @forward
// ZERO: error: recompute-num-layers must be at least 1, got 0

func.func @forward(%x: tensor<1x2x4xf32>, %l: tensor<1x2xi32>, %m: tensor<1x2xf32>) -> tensor<f32> {
  %h = tfm.block layer 0 ins(%x : tensor<1x2x4xf32>) -> tensor<1x2x4xf32> {
  ^bb0(%a: tensor<1x2x4xf32>):
    %r = tfm.add %a, %a : tensor<1x2x4xf32>
    tfm.yield %r : tensor<1x2x4xf32>
  }
  %loss = tfm.block head ins(%h, %l, %m : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<1x2x4xf32>, %y: tensor<1x2xi32>, %z: tensor<1x2xf32>):
    %c, %c_max, %c_sum = tfm.cross_entropy %a, %y, %z : tensor<1x2x4xf32>, tensor<1x2xi32>, tensor<1x2xf32> -> tensor<f32>
    tfm.yield %c : tensor<f32>
  }
  return %loss : tensor<f32>
}
