//===- Passes.td - Sharding passes -------------------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_PASSES_TD
#define LOOM_PASSES_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def TfmTensorParallel : Pass<"tfm-tensor-parallel", "mlir::ModuleOp"> {
  let summary = "split the model over the tp ranks (Megatron tensor parallelism)";
  let description = [{
    Input: global-shape tfm IR (forward, and the train step if it was
    built) with a `tfm.plan` and its meshes. Output: every `layer` block (and
    its backward, and the vocab-parallel embedding and head) at this rank's
    local shapes, with `mesh.all_reduce` over the
    tp axis where Megatron's f and g operators put communication.

    Each value gets a distribution: replicated, split on one dim over tp, or
    a partial sum. Rules decide it op by op, with no name matching:
    `linear` of a replicated input is column-parallel (weight split on dim 0,
    output split on its last dim); `linear` of a split input is row-parallel
    (weight split on dim 1, output a partial sum, all-reduced where a
    replicated value is needed). Attention keeps heads split (num_heads and
    num_kv_heads divided by tp; fewer kv heads, see below); RoPE and
    activations follow their input; norms and residual adds need replicated inputs. In backward the same
    decisions apply per parameter: a column-parallel `linear_grad` gives a
    partial input gradient (all-reduced: Megatron's f in backward), a
    row-parallel one a split gradient (g is the identity in backward).
    Parameters become `tfm.get_param ... tp_split <dim>` reads of this rank's
    shard.

    The bias of a row-parallel linear is added once, after the all-reduce
    (`tfm.bias_add`). The token embedding is vocab-parallel (table split on
    the vocabulary, ids outside a rank's slice give zeros, one all-reduce);
    the head's projection is then column-parallel and the cross-entropy
    vocab-parallel, so the full logits are never gathered; tied embeddings
    split the one table the same way in both places. Position embeddings stay
    whole.

    With the plan's `sequence_parallel`, the residual stream (embedding
    output, norms, residual adds) is split on the sequence (dim 1): a
    partial sum reaches it through `mesh.reduce_scatter` instead of an
    all-reduce, a column-parallel linear `mesh.all_gather`s its input (again
    in backward), a replicated value is sliced (`mesh.all_slice`), and the
    norms' weight gradients, sums over this rank's tokens only, are
    all-reduced.

    When tp exceeds num_kv_heads (GQA), every rank needs whole kv heads:
    the k/v projections stay replicated, `tfm.repeat_kv` expands them to
    num_heads and `mesh.all_slice` takes this rank's heads; in backward the
    kv gradients are all-gathered and summed back (`tfm.repeat_kv_grad`).

    Dropout takes its input's split (hidden dropout with SP runs on this
    rank's tokens, after the reduce-scatter) and records it (`split_dim`,
    `split_axis`), so each rank drops exactly the elements of its slice that
    the unsharded program drops. Gathering a feature-split value for an op
    that needs it whole (Megatron's gather_output) is not built: no GPT-2
    or Llama layer needs it, and such IR is reported as an error.

    ```mlir
    %q = tfm.linear %x, %wq : tensor<2x8x64xf32>, tensor<64x64xf32> -> tensor<2x8x64xf32>
    // tp = 2 becomes
    %wq = tfm.get_param @q.weight tp_split 0 : tensor<32x64xf32>
    %q = tfm.linear %x, %wq : tensor<2x8x64xf32>, tensor<32x64xf32> -> tensor<2x8x32xf32>
    ```
  }];
  let statistics = [
    Statistic<"numAllReduces", "all-reduces", "All-reduces inserted">,
    Statistic<"numSplitParams", "split-params", "Parameter reads split over tp">
  ];
  let dependentDialects = ["loom::tfm::TfmDialect", "mlir::mesh::MeshDialect"];
}

#endif // LOOM_PASSES_SHARDING_PASSES_TD
