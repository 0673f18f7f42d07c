// RUN: not loom-opt %s -split-input-file --tfm-set-plan="dp=2 ep=2" --tfm-materialize-mesh --tfm-dispatch-experts 2>&1 | FileCheck %s

// Experts that do not divide over ep.
func.func @f(%x: tensor<2x8x16xf32>, %e: tensor<2x8x2xi32>, %w: tensor<3x24x16xf32>) -> tensor<32x24xf32> {
  // CHECK: error: 'tfm.moe_permute' op dispatches 3 experts, which do not divide over ep 2
  %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 3
      : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<3xi32>, tensor<2x8x2xi32>
  %y = tfm.grouped_linear %rows, %w, %counts : tensor<32x16xf32>, tensor<3x24x16xf32>, tensor<3xi32> -> tensor<32x24xf32>
  return %y : tensor<32x24xf32>
}

// -----

// The permuted rows read by something other than the experts.
func.func @g(%x: tensor<2x8x16xf32>, %e: tensor<2x8x2xi32>) -> tensor<32x16xf32> {
  %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
      : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
  // CHECK: error: 'func.return' op reads an MoE layer's permuted rows or counts; only grouped linears may (tfm-dispatch-experts moves them to other ranks)
  return %rows : tensor<32x16xf32>
}

// -----

// A module with gradients: the backward is derived from the dispatch.
func.func @h(%g: tensor<32x16xf32>, %map: tensor<2x8x2xi32>) -> tensor<2x8x16xf32> {
  // CHECK: error: tfm-dispatch-experts runs before tfm-differentiate (the module has gradients)
  %dx = tfm.moe_permute_grad %g, %map : tensor<32x16xf32>, tensor<2x8x2xi32> -> tensor<2x8x16xf32>
  return %dx : tensor<2x8x16xf32>
}
