// RUN: loom-opt %s --tfm-set-expert-capacity="capacity-factor=0.5" | FileCheck %s
// RUN: loom-opt %s --tfm-set-expert-capacity="capacity-factor=0.5 drop-policy=position" | FileCheck %s --check-prefix=POS
// RUN: loom-opt %s --tfm-set-expert-capacity="capacity-factor=1.5 pad-to-capacity=true" | FileCheck %s --check-prefix=PAD
// RUN: loom-opt %s --tfm-set-expert-capacity="capacity-factor=100" | FileCheck %s --check-prefix=HUGE
// RUN: loom-opt %s --tfm-set-expert-capacity | FileCheck %s --check-prefix=DROPLESS

// One MoE layer: 2 x 8 tokens, top-2 of 4 experts, 32 pairs, an even share
// of 8 per expert. Factor 0.5 keeps 4 per expert: a tfm.moe_drop after the
// router, and the dispatched rows (through the expert layers and the
// SwiGLU, up to the combine) shrink from 32 to 4 x 4 = 16. Padding at 1.5
// (capacity 12) makes them 4 x 12 = 48; a capacity is never more than the
// 16 tokens; without a factor nothing changes.

func.func @layer(%x: tensor<2x8x16xf32>, %r: tensor<4x16xf32>, %w1: tensor<4x24x16xf32>,
                 %w3: tensor<4x24x16xf32>, %w2: tensor<4x16x24xf32>) -> tensor<2x8x16xf32> {
  %logits = tfm.linear %x, %r : tensor<2x8x16xf32>, tensor<4x16xf32> -> tensor<2x8x4xf32>
  %p, %e = tfm.moe_route %logits top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
  %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
      : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  %g = tfm.grouped_linear %rows, %w1, %counts : tensor<32x16xf32>, tensor<4x24x16xf32>, tensor<4xi32> -> tensor<32x24xf32>
  %u = tfm.grouped_linear %rows, %w3, %counts : tensor<32x16xf32>, tensor<4x24x16xf32>, tensor<4xi32> -> tensor<32x24xf32>
  %a = tfm.swiglu %g, %u : tensor<32x24xf32>
  %y = tfm.grouped_linear %a, %w2, %counts : tensor<32x24xf32>, tensor<4x16x24xf32>, tensor<4xi32> -> tensor<32x16xf32>
  %o = tfm.moe_unpermute %y, %p, %map : tensor<32x16xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x16xf32>
  return %o : tensor<2x8x16xf32>
}

// CHECK: %[[P:.*]], %[[E:.*]] = tfm.moe_route
// CHECK: %[[K:.*]] = tfm.moe_drop %[[P]], %[[E]] num_experts 4 capacity 4 probs
// CHECK: tfm.moe_permute %{{.*}}, %[[K]] num_experts 4 capacity 4 : {{.*}} -> tensor<16x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
// CHECK: tfm.grouped_linear {{.*}} -> tensor<16x24xf32>
// CHECK: tfm.grouped_linear {{.*}} -> tensor<16x24xf32>
// CHECK: tfm.swiglu {{.*}} : tensor<16x24xf32>
// CHECK: tfm.grouped_linear {{.*}} -> tensor<16x16xf32>
// CHECK: tfm.moe_unpermute {{.*}} : tensor<16x16xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x16xf32>

// POS: tfm.moe_drop {{.*}} num_experts 4 capacity 4 position

// PAD: tfm.moe_drop {{.*}} capacity 12 probs
// PAD: tfm.moe_permute {{.*}} capacity 12 pad_to_capacity : {{.*}} -> tensor<48x16xf32>
// PAD: tfm.moe_unpermute {{.*}} : tensor<48x16xf32>

// HUGE: tfm.moe_drop {{.*}} capacity 16 probs
// HUGE: tfm.moe_permute {{.*}} capacity 16 : {{.*}} -> tensor<32x16xf32>

// DROPLESS-NOT: tfm.moe_drop
// DROPLESS: tfm.moe_permute %{{.*}}, %{{.*}} num_experts 4 : {{.*}} -> tensor<32x16xf32>
