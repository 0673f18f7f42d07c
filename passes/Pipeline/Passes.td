//===- Passes.td - Pipeline parallelism passes -------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINE_PASSES_TD
#define LOOM_PASSES_PIPELINE_PASSES_TD

include "mlir/Pass/PassBase.td"

def TfmSchedulePipeline : Pass<"tfm-schedule-pipeline", "mlir::ModuleOp"> {
  let dependentDialects = ["mlir::scf::SCFDialect", "mlir::arith::ArithDialect"];
  let summary = "split the program into pipeline stages and write each pp "
                "rank's schedule as one function";
  let description = [{
    Input: a sharded module (per-rank shapes) whose `#tfm.plan` has pp > 1,
    with `@forward` and, for training, `@train_step` built of `tfm.block`s.
    The model's layers go to the (pp rank, virtual stage) chunks as
    Megatron-Core assigns them (even split, or the layer-split options
    below); the embedding goes to the first chunk and the head to the last.

    For each pp rank `r` the pass writes `@train_step_pp<r>` (and
    `@forward_pp<r>`) that runs every micro-batch of a step in Megatron-Core's
    order for that rank (no pipelining, 1F1B, or interleaved 1F1B when
    vpp > 1; forward-only for `@forward`), each step marked by a
    `tfm.pipeline_step`: `F<m>.<v>` calls the chunk's forward blocks,
    `B<m>.<v>` its backward blocks (each block becomes one private function,
    `@<entry>_layer3_backward`, called once per micro-batch; after the
    first micro-batch an `_accumulate` variant adds the block's parameter
    gradients to the f32 sums it takes), and between them the schedule's
    p2p calls are `tfm.pipeline_p2p` batches
    (batched mode: one per call, Megatron's send_prev, recv_prev, send_next,
    recv_next order; unbatched: one per tensor, the even/odd order). Values
    a chunk reads from an earlier chunk (the hidden state) arrive with its
    activations and their gradients travel back. The schedule's steady
    phase, where the rank's steps repeat with the micro-batches one
    further, is one `scf.for` over the micro-batch offset (its trips
    unrolled until no value lives a whole trip; what a trip hands the next
    are its iteration arguments): the function's size does not grow with
    the micro-batches. Each batch argument holds every micro-batch, stacked
    on a leading dim (`tfm.microbatches`), and a step slices its own
    (`tfm.microbatch_slice`); the results are the last stage's
    micro-batch losses, stacked, and, for every parameter the rank's chunks read, its
    gradient summed over the micro-batches in f32 (Megatron's main_grad,
    whatever the parameter dtype; an all-reduce that only feeds a returned
    gradient runs once on the sum; the tied embedding's two parts
    stay on their stages: the rank program sums them over the embedding
    group). The original entries are removed.

    Everything it needs comes from the module's #tfm.plan: pp and vpp, the
    micro-batches, the interleaved group size, the p2p mode and Megatron's
    layer-split flags. The layers are assigned to stages first (a plan whose
    stages outnumber the layers is an error saying so), then the schedule's
    p2p is checked on RankGen's model in the plan's mode (an error says
    when the other mode would pass).

    ```
    loom-opt m.mlir --tfm-set-plan="pp=2 num-microbatches=4" \
        --tfm-differentiate --tfm-shard --tfm-schedule-pipeline
    ```
  }];
}

def TfmVerifyPipelineP2P : Pass<"tfm-verify-pipeline-p2p", "mlir::ModuleOp"> {
  let summary = "prove that the pipeline's sends and receives match and "
                "cannot deadlock";
  let description = [{
    Reads every pp rank's function (`tfm.pipeline_rank`; one program per
    function name without its `_pp<r>` suffix) as the sequence of its
    `tfm.pipeline_p2p` batches and proves, under rendezvous semantics with
    first-in-first-out matching per channel, that (a) each send meets
    exactly one receive expecting the same payload (activation or gradient,
    micro-batch, stage, shape, dtype) and (b) no rank blocks forever. A
    violation is an error naming the ranks, the batches and the payloads.
    A batch in the steady phase's loop (an `scf.for` with constant bounds
    in the rank's function, whose index the batch is `shifted by`) runs
    once per trip, with the trip's micro-batch offset: the proof covers the
    trip count compiled. A batch in any other region, or in a function the
    step calls, is refused.
  }];
}

#endif // LOOM_PASSES_PIPELINE_PASSES_TD
