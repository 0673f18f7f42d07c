//===- Passes.td - Automatic differentiation ---------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_AUTODIFF_PASSES_TD
#define LOOM_PASSES_AUTODIFF_PASSES_TD

include "mlir/Pass/PassBase.td"

def TfmDifferentiate : Pass<"tfm-differentiate", "mlir::ModuleOp"> {
  let summary = "build the training step: forward, then the backward of every block";
  let description = [{
    Reverse-mode differentiation of `@forward(tokens, labels, loss_mask) ->
    loss` at global shapes, before any sharding, so the sharding passes see
    forward and backward alike. Input: `@forward` whose body is a sequence of
    `tfm.block` ops returning the loss. Output: a new function

    ```mlir
    func.func @train_step(%tokens, %labels, %loss_mask,
                          %grad_scale: tensor<f32> {tfm.input = "grad_scale"})
        -> (tensor<f32>, tensor<...> {tfm.grad = "<param>"}, ...)
        attributes {tfm.entry = "loom_train_step"}
    ```

    returning the loss and the gradient of `grad_scale * loss` with respect to
    every parameter, in declaration order (the driver passes the loss scale
    divided by the number of micro-batches). The forward blocks are kept; for
    each one, in reverse order, a `tfm.block <kind> <index> backward` takes
    the gradients of the block's results and yields those of its inputs and
    of the parameters it reads. Gradients of a parameter read in several
    blocks (tied embeddings) are summed.

    Forward values the backward needs are yielded by the forward block and
    passed in (saved activations), unless recomputed (Megatron's options):
    - `recompute-granularity=full`: a layer's backward block takes the
      forward block's inputs and re-runs its forward ops first (less memory,
      one more forward); with `recompute-method=uniform` (the default) every
      layer, with `block` the first `recompute-num-layers` layers only.
      Uniform groups of more than one layer are not built yet (an error).
      The embedding and head blocks keep their activations, as in Megatron.
    - `recompute-granularity=selective`: only the core attention is re-run
      in backward from its saved q, k and v (its output and log-sum-exp are
      not kept), Megatron's default advice.

    Every tfm forward op has a rule (linear -> tfm.linear_grad, attention ->
    tfm.attention_grad with the saved log-sum-exp, dropout -> the same mask
    on the gradient, ...); an op without one is an error naming it.
  }];
  let options = [
    Option<"granularity", "recompute-granularity", "std::string", "\"\"",
           "full or selective recomputation (empty: save every activation)">,
    Option<"method", "recompute-method", "std::string", "\"uniform\"",
           "With full: uniform (every layer) or block (the first N layers)">,
    Option<"numLayers", "recompute-num-layers", "int64_t", "1",
           "With full: layers per uniform group, or layers recomputed by block">,
    Option<"function", "function", "std::string", "\"forward\"",
           "The function to differentiate">,
    Option<"stepName", "step-name", "std::string", "\"train_step\"",
           "Name of the function to create">,
    Option<"entry", "entry", "std::string", "\"loom_train_step\"",
           "C symbol of the created function (tfm.entry)">
  ];
  let statistics = [
    Statistic<"numBackwardBlocks", "backward-blocks", "Backward blocks created">,
    Statistic<"numSaved", "saved-values", "Forward values saved for backward">
  ];
  let dependentDialects = ["loom::tfm::TfmDialect", "mlir::func::FuncDialect"];
}

#endif // LOOM_PASSES_AUTODIFF_PASSES_TD
