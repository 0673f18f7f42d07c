//===- TfmAttrs.td - Transformer dialect attributes --------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMATTRS_TD
#define LOOM_DIALECTS_TFM_TFMATTRS_TD

include "dialects/Tfm/TfmDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/TensorEncoding.td"

class Tfm_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Tfm_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Tfm_PlanAttr : Tfm_Attr<"Plan", "plan"> {
  let summary = "the parallel plan of a module (Megatron-LM's parallel sizes)";
  let description = [{
    How the program is parallelized, with Megatron-LM's meanings: tensor
    (`tp`), context (`cp`), data (`dp`) and pipeline (`pp`) parallel sizes,
    virtual pipeline stages per rank (`vpp`), expert parallel (`ep`) and
    expert tensor parallel (`etp`, 0 = same as `tp`) sizes, sequence
    parallelism, the context-parallel communication type (one for all layers
    or one per layer: `p2p`, `a2a`, `allgather`, `a2a+p2p`), the sizes of
    hierarchical context parallelism (inner first, for `a2a+p2p`) and the
    order of the rank grid (fastest-varying first); the pipeline's
    micro-batches per step, interleaved group size, p2p mode and layer split
    (Megatron's `--decoder-first/last-pipeline-num-layers`,
    `--account-for-embedding/loss-in-pipeline-split`,
    `--pipeline-model-parallel-layout`); and the multiple the vocabulary is
    padded to (times tp). The world size is `tp * cp * dp * pp`; the expert
    world `etp * ep * edp * pp` uses the same ranks. Sizes equal to their
    default are omitted when printed. It is rankgen::Plan in the IR: the
    passes read the plan from here, never from options of their own.

    ```mlir
    module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 2, pp = 2,
                                            sequence_parallel = true>} {}
    #tfm.plan<cp = 8, cp_comm_type = ["a2a+p2p"],
              hierarchical_cp_sizes = [4, 2]>
    #tfm.plan<pp = 4, vpp = 2, num_microbatches = 8, p2p_mode = "unbatched">
    ```
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "1">:$tp,
    DefaultValuedParameter<"int64_t", "1">:$cp,
    DefaultValuedParameter<"int64_t", "1">:$dp,
    DefaultValuedParameter<"int64_t", "1">:$pp,
    DefaultValuedParameter<"int64_t", "1">:$vpp,
    DefaultValuedParameter<"int64_t", "1">:$ep,
    DefaultValuedParameter<"int64_t", "0">:$etp,
    OptionalParameter<"::mlir::BoolAttr">:$sequence_parallel,
    OptionalParameter<"::mlir::ArrayAttr">:$cp_comm_type,
    OptionalParameter<"::mlir::DenseI64ArrayAttr">:$hierarchical_cp_sizes,
    StringRefParameter<"rank order, fastest first", "\"tp-cp-ep-dp-pp\"">:$order,
    DefaultValuedParameter<"int64_t", "1">:$num_microbatches,
    DefaultValuedParameter<"int64_t", "0">:$microbatch_group_size,
    StringRefParameter<"pipeline p2p mode", "\"batched\"">:$p2p_mode,
    DefaultValuedParameter<"int64_t", "-1">:$first_stage_layers,
    DefaultValuedParameter<"int64_t", "-1">:$last_stage_layers,
    OptionalParameter<"::mlir::BoolAttr">:$account_for_embedding,
    OptionalParameter<"::mlir::BoolAttr">:$account_for_loss,
    StringRefParameter<"Megatron's pipeline layout string", "\"\"">:$pipeline_layout,
    DefaultValuedParameter<"int64_t", "128">:$make_vocab_size_divisible_by
  );
  let builders = [
    AttrBuilder<(ins "const ::loom::rankgen::Plan &":$plan)>
  ];
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The plan as the rank generator and the tools describe it.
    ::loom::rankgen::Plan toPlan() const;

    /// The plan as the rank generator's configuration (world size and
    /// defaults resolved by ParallelLayout::create).
    ::loom::rankgen::ParallelConfig toParallelConfig() const;
    /// tp * cp * dp * pp.
    int64_t getWorldSize() const {
      return getTp() * getCp() * getDp() * getPp();
    }
    /// The expert tensor-parallel size with the default resolved.
    int64_t getExpertTp() const { return getEtp() ? getEtp() : getTp(); }
    /// Whether MoE layers route each rank's own sequence-parallel tokens:
    /// the experts are not split over tp (etp 1 with tp > 1), so a rank's
    /// tokens need not be gathered over tp first, and the expert groups
    /// fold the tp ranks into ep or edp (Megatron's MoE parallel folding).
    bool routesLocalTokens() const { return getTp() > 1 && getExpertTp() == 1; }
    bool isSequenceParallel() const {
      return getSequenceParallel() && getSequenceParallel().getValue();
    }
    /// What the sequence must be a multiple of to split (Megatron's
    /// get_padding; rankgen::Plan::sequenceMultiple).
    int64_t getSequenceMultiple() const;
    /// The context-parallel communication of layer `layer` (p2p when none
    /// is given).
    ::loom::rankgen::CpCommType getCpCommTypeOfLayer(int64_t layer) const;
  }];
}

def Tfm_DistAttr : Tfm_Attr<"Dist", "dist", [
    DeclareAttrInterfaceMethods<VerifiableTensorEncoding>]> {
  let summary = "how a tensor value is distributed over a device mesh";
  let description = [{
    The encoding of every tensor type in sharded IR: the mesh, for each
    tensor dim the mesh axes it is split over (major first), the order of a
    dim's chunks before it is split, and the axes over which the value is a
    partial sum (or maximum).

    ```mlir
    #tfm.dist<@dense>                               // replicated
    #tfm.dist<@dense, [[], [], [tp]]>               // last dim split over tp
    #tfm.dist<@dense, partial = sum[tp]>            // whole shape, partial over tp
    #tfm.dist<@dense, [[], [cp, tp] zigzag(2)]>     // CP load balancing with SP
    #tfm.dist<@dense, [[], [] chunks(0, 2, 1, 3)]>  // whole, chunks reordered
    ```

    Meaning, for a dim split over axes `[a1, ..., ak]`: the dim is cut into
    `|a1| * ... * |ak|` equal pieces and the process with coordinates
    `(c1, ..., ck)` on those axes holds piece `c1 * |a2|...|ak| + ... + ck`
    (`a1` varies slowest). `zigzag(n)` (Megatron's load-balanced order for
    context parallelism) first reorders the dim's `2n` equal chunks as
    `0, 2n-1, 1, 2n-2, ..., n-1, n`, so that with `n = |a1|` rank `r` of
    `a1` holds chunks `r` and `2n-1-r`; `chunks(...)` is any other order
    (stored chunk `j` is global chunk `order[j]`). `partial = sum[axes]`: the
    global tensor is the sum over those axes' process groups of the local
    tensors (`max` likewise). Axes named nowhere are replicated. An axis is
    used once at most, and the axes of one dim follow the mesh's order.

    Upstream `#mesh.shard` says the same of splits and partial axes, with
    axis indices. It cannot say the chunk order that load-balanced context
    parallelism needs (and its intermediate, gathered-but-reordered values),
    so Loom has its own attribute; axes go by the names of the mesh's
    `tfm.mesh_axes`, which is also what makes the IR readable.

    Trailing whole dims in natural order are left out, so one distribution
    has one spelling; `#tfm.dist<@dense>` is replicated on any rank. The
    shape of a tensor of this type is global before `tfm-localize` and this
    rank's piece after it (the module says which: `tfm.local_shapes`).
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh,
    "::mlir::ArrayAttr":$split,
    "::mlir::ArrayAttr":$chunks,
    "::mlir::ArrayAttr":$partial,
    "::mlir::mesh::ReductionKind":$reduction
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "::mlir::FlatSymbolRefAttr":$mesh,
                     "::llvm::ArrayRef<::loom::tfm::DimDist>":$dims,
                     "::llvm::ArrayRef<::llvm::StringRef>":$partialAxes,
                     "::mlir::mesh::ReductionKind":$reduction)>
  ];
  let extraClassDeclaration = [{
    /// Replicated over every axis of `mesh`.
    static DistAttr replicated(::mlir::FlatSymbolRefAttr mesh);

    /// The distribution of dim `d` (whole and in order past the stored dims).
    ::loom::tfm::DimDist getDim(int64_t d) const;
    /// The axes dim `d` is split over, major first.
    ::llvm::SmallVector<::llvm::StringRef> getAxes(int64_t d) const;
    /// The chunk order of dim `d` (empty: natural order).
    ::llvm::ArrayRef<int64_t> getChunkOrder(int64_t d) const;
    /// Dims with an entry: the dims past it are whole and in order.
    int64_t getNumDims() const { return getSplit().size(); }
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxes() const;
    bool isPartial() const { return !getPartial().empty(); }
    /// Nothing split, reordered or partial.
    bool isReplicated() const { return !isPartial() && getSplit().empty(); }
    /// Every axis the value is split or partial over.
    ::llvm::SmallVector<::llvm::StringRef> getUsedAxes() const;
    /// The dim split over `axis`, if any.
    std::optional<int64_t> getDimOfAxis(::llvm::StringRef axis) const;

    /// This distribution with dim `d` changed.
    DistAttr withDim(int64_t d, const ::loom::tfm::DimDist &dim) const;
    DistAttr withAxes(int64_t d, ::llvm::ArrayRef<::llvm::StringRef> axes) const;
    DistAttr withPartial(::llvm::ArrayRef<::llvm::StringRef> axes,
                         ::mlir::mesh::ReductionKind reduction =
                             ::mlir::mesh::ReductionKind::Sum) const;
    DistAttr withoutPartial() const {
      return withPartial({}, ::mlir::mesh::ReductionKind::Sum);
    }
    /// The dims of this distribution, `rank` of them.
    ::llvm::SmallVector<::loom::tfm::DimDist> getDims(int64_t rank) const;
  }];
}

// An f64 parameter: written as a float literal, printed as its shortest
// exact decimal (APFloat's printer), so values like 0.1 round-trip.
class Tfm_F64Parameter<string desc> : APFloatParameter<desc> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double value;
    if ($_parser.parseFloat(value))
      return ::mlir::failure();
    return ::llvm::APFloat(value);
  }() }];
  let printer = [{ $_printer.printFloat($_self) }];
}

def Tfm_Llama3RopeScalingAttr
    : Tfm_Attr<"Llama3RopeScaling", "llama3_rope_scaling"> {
  let summary = "Llama 3.x frequency scaling of rotary embeddings";
  let description = [{
    Hugging Face's `rope_scaling` of type `llama3`
    (`_compute_llama3_parameters` in transformers' modeling_rope_utils.py):
    each inverse frequency `f` of the default RoPE, of wavelength
    `w = 2 pi / f`, becomes

    - `f / factor` when `w > original_max_position_embeddings / low_freq_factor`
      (low frequencies: stretched to the longer context),
    - `f` when `w < original_max_position_embeddings / high_freq_factor`,
    - otherwise `(1 - s) f / factor + s f` with
      `s = (original_max_position_embeddings / w - low_freq_factor) /
           (high_freq_factor - low_freq_factor)`.

    ```mlir
    #tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0,
        high_freq_factor = 4.0, original_max_position_embeddings = 8192>
    ```
  }];
  let parameters = (ins
    Tfm_F64Parameter<"factor">:$factor,
    Tfm_F64Parameter<"low frequency factor">:$low_freq_factor,
    Tfm_F64Parameter<"high frequency factor">:$high_freq_factor,
    "int64_t":$original_max_position_embeddings
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // LOOM_DIALECTS_TFM_TFMATTRS_TD
