//===- Passes.td - Sharding passes -------------------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Sharding is three passes with one job each, in the shape of Shardy and
// upstream spmdization, and a verifier run after each:
//
//   tfm-propagate-distribution   every value gets a #tfm.dist (global shapes);
//                                tfm.reshard where an op needs an operand
//                                distributed otherwise
//   tfm-localize                 global shapes -> per-rank shapes
//   tfm-reshard-to-collectives   every tfm.reshard -> mesh collectives
//   tfm-verify-distribution      every op against its distribution rule
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_PASSES_TD
#define LOOM_PASSES_SHARDING_PASSES_TD

include "mlir/Pass/PassBase.td"

def TfmPropagateDistribution
    : Pass<"tfm-propagate-distribution", "mlir::ModuleOp"> {
  let summary = "give every value a distribution, Megatron's way";
  let description = [{
    Input: global-shape tfm IR (forward, and the train step if it was
    built) with a `tfm.plan` and its meshes; functions of any name. Output:
    the same program, still at global shapes, with a `#tfm.dist` on every
    tensor type and a `tfm.reshard` wherever an op needs an operand
    distributed otherwise than it arrives. No collective is chosen here
    (tfm-reshard-to-collectives does that) and no shape changes
    (tfm-localize).

    Ops are visited in program order, forward and backward alike, and each
    decides through its propagation rule (PropagationRules.cpp, one per op:
    PropagationOpInterface) which distributions it needs its operands in;
    its results are typed by its distribution rule (DistributedOpInterface).
    The rules are Megatron's tensor, sequence and context parallelism, found
    from the data flow with no name matching:

    - `linear` of an input whole on its features is column-parallel (weight
      split on dim 0 over tp, output features split); of an input whose
      features are split, row-parallel (weight split on dim 1, output a
      partial sum). A row-parallel bias becomes `tfm.bias_add` after the
      reduction, so it is added once. `linear_grad` follows its weight:
      column-parallel gives a partial input gradient (Megatron's f in
      backward), row-parallel a split one.
    - Attention keeps heads split over tp. With fewer kv heads than tp
      ranks, k and v are gathered, `tfm.repeat_kv` repeats each head until
      every rank has one, and each rank takes its own; the gradients are
      gathered and summed back (`tfm.repeat_kv_grad`).
    - Norms and residual adds take the residual stream: replicated, or with
      the plan's `sequence_parallel` split on the sequence over tp. Partial
      sums meeting it are reduced once, after they are summed.
    - The token embedding is vocab-parallel (table split on the vocabulary,
      a partial sum out); the head's projection is then column-parallel and
      the cross-entropy becomes vocab-parallel pieces (`tfm.ce_row_max`,
      `tfm.ce_sum_exp`, `tfm.ce_target_logit`, `tfm.ce_loss_sum`,
      `tfm.loss_mean`) with their statistics reduced: the logits are never
      gathered, and the gradient reads the reduced statistics (no
      communication in backward).
    - Context parallelism (the plan's cp): the batch inputs enter with their
      sequence split over cp in Megatron's load-balanced order of 2 cp
      chunks, and token-wise ops keep it. Attention follows its layer's
      cp_comm_type: `allgather` needs k and v whole, `p2p` keeps them split
      and marks the op ring attention (tfm-expand-ring-attention writes
      the ring), `a2a` exchanges q, k, v heads for sequence and back. The
      loss's masked sum and token count are partial sums over cp, reduced
      before the mean; the gradient divides by the whole count.
    - A parameter takes the distribution its first use needs; every other
      read must agree (a tied embedding is split alike in the embedding and
      the head). Parameter gradients leave a function distributed like
      their parameters (still partial over cp: the rank program reduces
      them over dp x cp).

    ```mlir
    %y = tfm.linear %x, %w : tensor<2x8x64xf32>, tensor<64x64xf32> -> tensor<2x8x64xf32>
    // tp = 2 (column-parallel) becomes
    %w = tfm.get_param @w : tensor<64x64xf32, #tfm.dist<@dense, [[tp]]>>
    %y = tfm.linear %x, %w : tensor<2x8x64xf32, #tfm.dist<@dense>>,
        tensor<64x64xf32, #tfm.dist<@dense, [[tp]]>>
        -> tensor<2x8x64xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    ```

    The mesh is the one of the plan's dense world (the `mesh.mesh` whose
    `tfm.mesh_axes` are the plan's tp, cp, dp and pp axes).
  }];
  let statistics = [
    Statistic<"numReshards", "reshards", "tfm.reshard ops inserted">,
    Statistic<"numSplitParams", "split-params",
              "Parameters split over the mesh">
  ];
  let dependentDialects = ["loom::tfm::TfmDialect", "mlir::mesh::MeshDialect"];
}

def TfmLocalize : Pass<"tfm-localize", "mlir::ModuleOp"> {
  let summary = "global shapes become this rank's shapes";
  let description = [{
    Input: IR whose every tensor type carries a `#tfm.dist`, at global
    shapes. Output: each type's shape divided by its distribution (a dim
    split over tp 2 halves), function signatures likewise, attributes that
    count global sizes adapted (attention's head counts), and the module
    marked `tfm.local_shapes`. A split that does not divide is an error
    naming the value's op and the dim.

    ```mlir
    %q = tfm.linear %x, %w : ... -> tensor<2x8x64xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    // tp = 2 becomes
    %q = tfm.linear %x, %w : ... -> tensor<2x8x32xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    ```
  }];
  let dependentDialects = ["loom::tfm::TfmDialect"];
}

def TfmReshardToCollectives
    : Pass<"tfm-reshard-to-collectives", "mlir::ModuleOp"> {
  let summary = "every tfm.reshard becomes the mesh collectives that do it";
  let description = [{
    Input: per-rank IR (after tfm-localize). Output: no `tfm.reshard`; in
    its place the collectives of Reshard.cpp's one `reshard(from, to)`
    builder, which works for any pair of distributions on one mesh:
    partial axes become `mesh.reduce_scatter` where the target splits a dim
    over them, else `mesh.all_reduce`; split axes the target does not have
    are `mesh.all_gather`ed (or moved to another dim with
    `mesh.all_to_all`); new split axes are `mesh.all_slice`d; chunk orders
    (load-balanced context parallelism) are restored or made with
    `tfm.permute_chunks` on a whole dim.

    ```mlir
    %r = tfm.reshard %p : tensor<2x8x64xf32, #tfm.dist<@dense, partial = sum[tp]>>
        -> tensor<2x4x64xf32, #tfm.dist<@dense, [[], [tp]]>>
    // becomes
    %r = mesh.reduce_scatter %p on @dense mesh_axes = [3] scatter_axis = 1
        : tensor<2x8x64xf32, ...> -> tensor<2x4x64xf32, ...>
    ```
  }];
  let statistics = [
    Statistic<"numCollectives", "collectives", "Mesh collectives created">
  ];
  let dependentDialects = ["loom::tfm::TfmDialect", "mlir::mesh::MeshDialect"];
}

def TfmVerifyDistribution
    : Pass<"tfm-verify-distribution", "mlir::ModuleOp"> {
  let summary = "check every value's distribution against every op's rule";
  let description = [{
    Checks sharded IR and changes nothing: every tensor value (function
    arguments and results, block arguments, op results) has a `#tfm.dist`
    naming a mesh that exists and axes it has; every op's results follow
    its distribution rule (an add of a partial sum and a replicated value,
    a row-parallel weight fed a replicated input, an all-reduce over an axis
    its input is not partial over are errors that name the values); every
    read of a parameter is distributed alike; at global shapes every split
    divides. loom-compile runs it after each sharding pass.
  }];
  let dependentDialects = ["loom::tfm::TfmDialect", "mlir::mesh::MeshDialect"];
}

def TfmMarkGradientGroups
    : Pass<"tfm-mark-gradient-groups", "mlir::ModuleOp"> {
  let summary = "record on each gradient the process group it is summed over";
  let description = [{
    The rank program sums each parameter gradient over the ranks that hold
    the same slice of the parameter but computed it from other data: the
    data-parallel replicas, and the mesh axes over which the gradient leaves
    the step a partial sum (context parallelism: each cp rank saw other
    tokens). The pass writes that group's kind, as the rank generator names
    it, on every entry result that is a gradient:

    ```mlir
    func.func @train_step(...) -> (tensor<64xf32, #tfm.dist<@dense, partial = sum[cp]>>
        {tfm.grad = "ln.weight", tfm.grad_group = "dp-cp"})
    ```
    so the manifest takes the group from the IR, per gradient (experts'
    gradients will name their expert-data-parallel group). Input: sharded
    entries (tfm.entry) whose gradient results carry distributions. A
    gradient partial by another reduction than a sum is an error naming it.
  }];
  let dependentDialects = ["loom::tfm::TfmDialect", "mlir::mesh::MeshDialect"];
}

#endif // LOOM_PASSES_SHARDING_PASSES_TD
