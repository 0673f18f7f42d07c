//===- Passes.td - Fusion passes ---------------------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Passes that merge ops of the prepared (flat, per-rank) IR into fewer
// runtime calls. Each keeps the function computed; loom-compile runs them
// as its fuse stage (--no-fuse skips it).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_FUSION_PASSES_TD
#define LOOM_PASSES_FUSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def TfmFoldGradientAdds : Pass<"tfm-fold-gradient-adds", "mlir::func::FuncOp"> {
  let summary = "fold the sums of input gradients into the ops that "
                "compute them";
  let description = [{
    The backward of a value read twice sums two gradients with a `tfm.add`:
    the q, k and v projections' input gradients, gate and up's, and the
    residual stream's gradient with the gradient a block's norm passes back.
    When one addend is the input gradient of a `tfm.linear_grad`,
    `tfm.layer_norm_grad` or `tfm.rms_norm_grad` (and only the add reads
    it), and the other addend is known before that op in its block, the op
    takes the other addend as its `accumulate` operand and the add goes:
    the linear's backward GEMM adds onto it (beta = 1, in its buffer, so
    there the addend must be an op's value that nothing reads after the
    linear_grad), the norm's backward adds it in the same pass (any value:
    a pipeline block's incoming gradient, an argument, folds alike, so a
    plan's stages do not change which sums fold).

    ```mlir
    %dv, %dwv = tfm.linear_grad %x, %wv, %gv : ...
    %dk, %dwk = tfm.linear_grad %x, %wk, %gk : ...
    %s = tfm.add %dv, %dk : tensor<2x8x64xf32>
    // becomes
    %dv, %dwv = tfm.linear_grad %x, %wv, %gv : ...
    %s, %dwk = tfm.linear_grad %x, %wk, %gk accumulate(%dv : tensor<2x8x64xf32>) : ...
    ```

    The sums are the same to rounding (f32: the GEMM adds its product
    onto the addend in the kernel's order; the norms add the same two
    values, once rounded).
  }];
  let statistics = [
    Statistic<"numFolded", "folded-adds",
              "Adds folded into the op computing an addend">
  ];
}

def TfmFuseResidualNorms : Pass<"tfm-fuse-residual-norms", "mlir::func::FuncOp"> {
  let summary = "fuse each residual add with the norm of its sum";
  let description = [{
    A `tfm.add` whose sum a `tfm.layer_norm` or `tfm.rms_norm` normalizes
    (the residual stream entering a block's norm) becomes one
    `tfm.add_layer_norm` or `tfm.add_rms_norm` where the add stood, when
    the norm's weights are known there: it returns the sum (read on by the
    next residual add and the norm's backward) and the normalized value,
    in one runtime call that computes both from the rounded sum, as the
    two ops do.

    ```mlir
    %h = tfm.add %x, %a : tensor<2x8x64xf32>
    %y = tfm.rms_norm %h, %w eps 1.0e-06 : tensor<2x8x64xf32>, tensor<64xf32>
    // becomes
    %h, %y = tfm.add_rms_norm %x, %a, %w eps 1.0e-06 : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-norms", "Residual adds fused with a norm">
  ];
}

def TfmPairRopes : Pass<"tfm-pair-ropes", "mlir::func::FuncOp"> {
  let summary = "rotate q and k (or their gradients) in one op";
  let description = [{
    Two `tfm.rope` (or two `tfm.rope_grad`) of one block with the same
    positions, head dim, theta and scaling become one `tfm.rope_pair`
    (`tfm.rope_pair_grad`): one runtime call for attention's q and k, each
    rotated as before. The pair stands where the first stood when the
    second's input is known there, else where the second stood when nothing
    reads the first's result in between.
  }];
  let statistics = [
    Statistic<"numPaired", "paired-ropes", "Rotations paired">
  ];
}

def TfmFuseLinearGelu : Pass<"tfm-fuse-linear-gelu", "mlir::func::FuncOp"> {
  let summary = "fuse GELU into the GEMMs around it";
  let description = [{
    A `tfm.linear` and the `tfm.gelu` of its result (in its block) become
    one `tfm.linear_gelu` where the linear stood, returning the
    pre-activation (what the GELU's gradient reads) and the activation. A
    `tfm.linear_grad` of a GELU's output whose input gradient only a
    `tfm.gelu_grad` reads becomes one `tfm.linear_grad_gelu` where the
    linear_grad stood: the next layer's backward GEMM with GELU's gradient
    as its epilogue (cuBLASLt's GELU_AUX_BIAS and DGELU). Each computes
    what the two ops compute, rounded alike.

    ```mlir
    %h = tfm.linear %x, %w1, %b1 : ... -> tensor<2x8x256xf32>
    %a = tfm.gelu %h tanh : tensor<2x8x256xf32>
    // becomes
    %h, %a = tfm.linear_gelu %x, %w1, %b1 tanh : ...

    %da, %dw2, %db2 = tfm.linear_grad %a, %w2, %dy : ...
    %dh = tfm.gelu_grad %h, %da tanh : tensor<2x8x256xf32>
    // becomes
    %dh, %dw2, %db2 = tfm.linear_grad_gelu %a, %w2, %dy gelu(%h) tanh : ...
    ```
  }];
  let statistics = [
    Statistic<"numForward", "fused-forward", "Linears fused with their GELU">,
    Statistic<"numBackward", "fused-backward",
              "Linear gradients fused with a GELU's gradient">
  ];
}

def TfmFuseLinearSwiglu : Pass<"tfm-fuse-linear-swiglu", "mlir::func::FuncOp"> {
  let summary = "fuse SwiGLU with the GEMMs around it";
  let description = [{
    A `tfm.swiglu` of two `tfm.linear` of one input, with biases on both or
    on none (a Llama MLP's gate and up), becomes one `tfm.linear_swiglu` where the first
    linear stood, returning gate, up (what the SwiGLU's gradient reads) and
    the activation. A `tfm.linear_grad` of a SwiGLU's output whose input
    gradient only a `tfm.swiglu_grad` reads becomes one
    `tfm.linear_grad_swiglu` where the linear_grad stood, returning the
    gradients of gate and up. Each computes what the ops it replaces
    compute, rounded alike. Run it before tfm-fuse-multi-linears, which
    would take gate and up into a tfm.multi_linear.

    ```mlir
    %g = tfm.linear %x, %wg : ...
    %u = tfm.linear %x, %wu : ...
    %a = tfm.swiglu %g, %u : tensor<2x8x128xf32>
    // becomes
    %g, %u, %a = tfm.linear_swiglu %x, %wg, %wu : ...

    %da, %dw = tfm.linear_grad %a, %wd, %dy : ...
    %dg, %du = tfm.swiglu_grad %g, %u, %da : tensor<2x8x128xf32>
    // becomes
    %dg, %du, %dw = tfm.linear_grad_swiglu %a, %wd, %dy swiglu(%g, %u) : ...
    ```
  }];
  let statistics = [
    Statistic<"numForward", "fused-forward",
              "Gate and up linears fused with their SwiGLU">,
    Statistic<"numBackward", "fused-backward",
              "Linear gradients fused with a SwiGLU's gradient">
  ];
}

def TfmFuseMultiLinears : Pass<"tfm-fuse-multi-linears", "mlir::func::FuncOp"> {
  let summary = "linears of one input in one op, forward and backward";
  let description = [{
    The `tfm.linear` ops of one block that read one input (attention's q,
    k and v; a gated MLP's gate and up) become one `tfm.multi_linear`
    where the first stood, when every weight and bias is known there and
    all or none have a bias. In the backward, a chain of `tfm.linear_grad`
    of one input where each accumulates onto the previous one's input
    gradient (how tfm-fold-gradient-adds leaves their sum; run it first)
    becomes one `tfm.multi_linear_grad` where the last stood, when nothing
    reads the earlier links' weight and bias gradients before it. The sums
    keep their order, so the results are the unfused ones bit for bit.

    ```mlir
    %q = tfm.linear %x, %wq : ...
    %k = tfm.linear %x, %wk : ...
    // becomes
    %q, %k = tfm.multi_linear %x [%wq, %wk] : ...

    %dk, %dwk = tfm.linear_grad %x, %wk, %gk : ...
    %dx, %dwq = tfm.linear_grad %x, %wq, %gq accumulate(%dk : ...) : ...
    // becomes
    %dx, %dwk, %dwq = tfm.multi_linear_grad %x [%wk, %wq] [%gk, %gq] : ...
    ```
  }];
  let statistics = [
    Statistic<"numForward", "fused-linears", "Linears fused">,
    Statistic<"numBackward", "fused-linear-grads", "Linear gradients fused">
  ];
}

#endif // LOOM_PASSES_FUSION_PASSES_TD
