//===- Passes.td - Parallel plan passes --------------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PLAN_PASSES_TD
#define LOOM_PASSES_PLAN_PASSES_TD

include "mlir/Pass/PassBase.td"

def TfmSetPlan : Pass<"tfm-set-plan", "mlir::ModuleOp"> {
  let summary = "attach a parallel plan (#tfm.plan) to the module";
  let description = [{
    Records the parallel sizes the rest of the pipeline works towards as the
    module attribute `tfm.plan`. Input: any module (a `tfm.model` attribute,
    when present, is used to check per-layer options). Output: the module with
    a verified `tfm.plan`; an existing plan is replaced.

    ```
    loom-opt m.mlir --tfm-set-plan="tp=2 pp=2 dp=2 sp=true"
    // module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 2, pp = 2,
    //                                          sequence_parallel = true>, ...}
    ```
    The options are the plan's fields (rankgen::Plan): the parallel sizes
    and order, context parallelism's communication, the pipeline's
    micro-batches, p2p mode and layer split, the vocabulary multiple; every
    later pass reads them from the attribute. A plan that is not valid
    (sizes below 1, an unknown order token or comm type, hierarchical sizes
    that do not multiply to cp, a per-layer cp_comm_type list whose length
    is not the number of layers) is an error naming it.
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel size">,
    Option<"cp", "cp", "int64_t", "1", "Context-parallel size">,
    Option<"dp", "dp", "int64_t", "1", "Data-parallel size">,
    Option<"pp", "pp", "int64_t", "1", "Pipeline-parallel size">,
    Option<"vpp", "vpp", "int64_t", "1", "Virtual pipeline stages per rank">,
    Option<"ep", "ep", "int64_t", "1", "Expert-parallel size">,
    Option<"etp", "etp", "int64_t", "0",
           "Expert tensor-parallel size (0 = same as tp)">,
    Option<"sequenceParallel", "sp", "bool", "false",
           "Sequence parallelism (with tp)">,
    ListOption<"cpCommType", "cp-comm-type", "std::string",
               "Context-parallel communication: p2p, a2a, allgather "
               "(or all_gather), a2a+p2p; one value, or one per layer">,
    ListOption<"hierarchicalCpSizes", "hierarchical-cp-sizes", "int64_t",
               "Sizes of hierarchical context parallelism, inner first">,
    Option<"order", "order", "std::string", "\"tp-cp-ep-dp-pp\"",
           "Rank order, fastest-varying first">,
    Option<"numMicrobatches", "num-microbatches", "int64_t", "1",
           "Micro-batches per step">,
    Option<"microbatchGroupSize", "microbatch-group-size", "int64_t", "0",
           "Interleaved schedule: micro-batches per group (0: pp)">,
    Option<"p2pMode", "p2p-mode", "std::string", "\"batched\"",
           "Pipeline p2p: batched or unbatched">,
    Option<"firstStageLayers", "first-stage-layers", "int64_t", "-1",
           "Layers of the first pipeline stage (-1: even split)">,
    Option<"lastStageLayers", "last-stage-layers", "int64_t", "-1",
           "Layers of the last pipeline stage (-1: even split)">,
    Option<"accountForEmbedding", "account-for-embedding", "bool", "false",
           "The embedding takes one layer's place on the first stage">,
    Option<"accountForLoss", "account-for-loss", "bool", "false",
           "The loss takes one layer's place on the last stage">,
    Option<"layout", "layout", "std::string", "\"\"",
           "Megatron's pipeline layout string (e.g. Ett|tt|ttL)">,
    Option<"makeVocabSizeDivisibleBy", "make-vocab-size-divisible-by",
           "int64_t", "128",
           "Pad the vocabulary to a multiple of this times tp">
  ];
  let dependentDialects = ["loom::tfm::TfmDialect"];
}

def TfmMaterializeMesh : Pass<"tfm-materialize-mesh", "mlir::ModuleOp"> {
  let summary = "create the mesh.mesh symbols of the module's parallel plan";
  let description = [{
    Input: a module with a `tfm.plan`. Output: `mesh.mesh @dense` over the
    dense world (tp*cp*dp*pp) and, when experts are parallel (ep > 1 or an
    expert tp that differs from tp), `mesh.mesh @expert` over the expert world
    (etp*ep*edp*pp). Mesh axes are the plan's order reversed, so the mesh's
    row-major linear process index is exactly the Megatron-LM global rank and
    a `mesh` collective over some axes runs over exactly the Megatron process
    group of those dims, with the same ranks in the same order. Each mesh
    names its axes in a `tfm.mesh_axes` attribute.

    ```mlir
    // tfm.plan = #tfm.plan<tp = 4, dp = 2, pp = 2>
    mesh.mesh @dense(shape = 2x2x1x4) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
    // mesh.all_reduce %x on @dense mesh_axes = [3]  -- the tp group
    ```
    With `world-size` set, a plan whose world size differs is an error.
  }];
  let options = [
    Option<"worldSize", "world-size", "int64_t", "0",
           "Expected world size (0: the plan's)">
  ];
  let dependentDialects = ["mlir::mesh::MeshDialect"];
}

def TfmPadVocab : Pass<"tfm-pad-vocab", "mlir::ModuleOp"> {
  let summary = "pad the vocabulary to a multiple of the plan's "
                "make_vocab_size_divisible_by x tp";
  let description = [{
    Megatron's vocabulary padding, done when the tensor-parallel size is
    known: the token embedding and the output projection (the tables a
    `tfm.embedding` reads and the `tfm.linear` that makes the logits of a
    `tfm.cross_entropy`) get rows up to the next multiple of the plan's
    `make_vocab_size_divisible_by` times its tp (Megatron's
    `--make-vocab-size-divisible-by`, default 128), so any vocabulary splits
    evenly over tp. Unlike Megatron, the padding stays out of the softmax:
    every `tfm.cross_entropy` gets `unpadded_vocab_size` (the tokenizer's
    vocabulary), so the loss and gradients are the unpadded model's. The
    module's `tfm.model` records `vocab_size` (padded) and
    `unpadded_vocab_size`; checkpoints keep the Hugging Face rows apart
    (docs/MANIFEST.md). A vocabulary the importer already padded is padded
    further only as far as tp needs.

    ```mlir
    // tp = 2, make_vocab_size_divisible_by = 128, vocab 500:
    tfm.param @transformer.wte.weight ... : tensor<500x64xf32>
    // becomes
    tfm.param @transformer.wte.weight ... : tensor<512x64xf32>
    %loss, %m, %s = tfm.cross_entropy %logits, %labels, %mask
        {unpadded_vocab_size = 500 : i64} : tensor<2x16x512xf32>, ...
    ```
    Input: a module with a `tfm.plan`, before `tfm-differentiate`. A table
    used by anything else than the ops above is an error naming the use.
  }];
}

def TfmPadSequence : Pass<"tfm-pad-sequence", "mlir::ModuleOp"> {
  let summary = "pad the sequence to a multiple of what cp and SP split";
  let description = [{
    Megatron's sequence padding for context parallelism and sequence
    parallelism (get_padding in megatron/core/models/multimodal/
    context_parallel.py): the sequence is cut into 2 x cp chunks (with SP
    each cp rank's piece again over tp), so a length S that the factor f
    (2 x cp x tp with SP and cp > 1, 2 x cp with cp > 1, tp with SP, else 1)
    does not divide becomes S' = ceil(S / f) x f. Every value computed from
    the batch inputs gets S' along its sequence dim (dim 1, or dim 2 of an
    attention's log-sum-exp); the rank program fills the S' - S tokens at
    the end of each sample with masked tokens (loss mask 0), which causal
    attention keeps out of every real token's result, so the loss and
    gradients are the unpadded model's. `tfm.model` records
    `padded_seq_length`; `seq_length` stays the length the data is sampled
    at.

    ```mlir
    // cp = 2, S = 10: f = 4, S' = 12
    func.func @forward(%t: tensor<1x10xi32> {tfm.input = "tokens"}, ...)
    // becomes
    func.func @forward(%t: tensor<1x12xi32> {tfm.input = "tokens"}, ...)
    ```
    Input: a module with a `tfm.plan`, before `tfm-differentiate`. Learned
    position tables shorter than S' are an error naming both sizes.
  }];
}


def TfmSetExpertCapacity : Pass<"tfm-set-expert-capacity", "mlir::ModuleOp"> {
  let summary = "token dropping: each expert keeps at most its capacity of pairs";
  let description = [{
    Megatron's `--moe-expert-capacity-factor`, `--moe-token-drop-policy` and
    `--moe-pad-expert-input-to-capacity`. Each MoE layer's capacity is
    `ceil(T*k/E * factor)` pairs per expert (T the micro-batch's tokens;
    at most T, as an expert takes a token once): a `tfm.moe_drop` after the
    router marks the pairs over it, the dispatch keeps the others, and the
    dispatched rows (and the expert layers on them) shrink to
    `min(T*k, E*capacity)`, or with padding grow to `E*capacity`, every
    expert's group padded to the capacity. Run before `tfm-differentiate`.

    ```
    loom-opt m.mlir --tfm-set-expert-capacity="capacity-factor=1.0"
    // %kept = tfm.moe_drop %p, %e num_experts 4 capacity 8 probs
    // tfm.moe_permute %x, %kept num_experts 4 capacity 8 : ... -> tensor<32x64xf32>, ...
    ```
  }];
  let options = [
    Option<"capacityFactor", "capacity-factor", "double", "0.0",
           "Capacity of each expert as a multiple of its even share T*k/E "
           "(0: dropless)">,
    Option<"dropPolicy", "drop-policy", "std::string", "\"probs\"",
           "Which pairs an expert keeps: probs (the largest router "
           "probabilities) or position (the first tokens)">,
    Option<"padToCapacity", "pad-to-capacity", "bool", "false",
           "Pad every expert's rows to its capacity">
  ];
  let statistics = [
    Statistic<"numLayers", "layers", "MoE layers given a capacity">
  ];
}

def TfmSetRouterLosses : Pass<"tfm-set-router-losses", "mlir::ModuleOp"> {
  let summary = "set the coefficients of the routers' losses; drop the zero ones";
  let description = [{
    Megatron's `--moe-aux-loss-coeff` and `--moe-z-loss-coeff`: every
    `tfm.moe_router_loss` gets the coefficients given (a negative option
    keeps the imported one: the config's `router_aux_loss_coef`, and no
    z-loss), and one whose coefficients are both zero is erased, so a model
    trained without router losses computes none. Run before
    `tfm-differentiate`, which seeds the remaining ones with the step's
    `grad_scale`.

    ```
    loom-opt m.mlir --tfm-set-router-losses="aux-coeff=0.01 z-coeff=0.001"
    // tfm.moe_router_loss %l, %e aux_coeff 1.000000e-02 z_coeff 1.000000e-03
    ```
  }];
  let options = [
    Option<"auxCoeff", "aux-coeff", "double", "-1.0",
           "Load-balancing loss coefficient (negative: keep)">,
    Option<"zCoeff", "z-coeff", "double", "-1.0",
           "Router z-loss coefficient (negative: keep)">
  ];
  let statistics = [
    Statistic<"numErased", "erased", "Router losses with zero coefficients erased">
  ];
}

def TfmDispatchExperts : Pass<"tfm-dispatch-experts", "mlir::ModuleOp"> {
  let summary = "expert parallelism: each expert's rows to the rank that holds it and back";
  let description = [{
    Megatron's all-to-all token dispatcher, for a plan with ep > 1. In
    every MoE layer the rows tfm.moe_permute groups by expert go, with a
    counts exchange, through a `tfm.moe_dispatch` over the expert mesh's ep
    axis to the ranks that hold their experts (E / ep each, in order), the
    expert layers run on the rows received, and a `tfm.moe_combine` brings
    their outputs back to tfm.moe_unpermute. The dispatched rows and
    counts are split over ep in global IR (`[ep * ep * N, H]`, `[E]`), so
    tfm-propagate-distribution splits the experts' weights the same way and
    each rank holds and computes its own experts only. A plan with ep 1 is
    left as it is. Run before `tfm-differentiate`: the backward is the
    adjoint (a combine for each dispatch and the reverse).

    ```
    loom-opt m.mlir --tfm-set-plan="dp=2 ep=2" --tfm-materialize-mesh --tfm-dispatch-experts
    // %all = tfm.moe_gather_counts %counts on @expert axis "ep" : tensor<4xi32> -> tensor<8xi32>
    // %d, %local = tfm.moe_dispatch %rows, %all on @expert axis "ep"
    //     : tensor<128x64xf32>, tensor<8xi32> -> tensor<512x64xf32>, tensor<4xi32>
    // ... tfm.grouped_linear %d, %w, %local ...
    // %back = tfm.moe_combine %out, %all on @expert axis "ep"
    ```

    `allgather=true` marks the dispatches and combines `allgather`
    (Megatron's `--moe-token-dispatcher-type allgather`): the same values,
    moved by an all-gather and a reduce-scatter of every rank's rows.
  }];
  let options = [
    Option<"allgather", "allgather", "bool", /*default=*/"false",
           "dispatch with all-gathers and reduce-scatters (Megatron's "
           "allgather token dispatcher) instead of all-to-alls">
  ];
  let statistics = [
    Statistic<"numLayers", "layers", "MoE layers dispatched over ep">
  ];
}

#endif // LOOM_PASSES_PLAN_PASSES_TD
