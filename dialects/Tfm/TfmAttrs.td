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
    order of the rank grid (fastest-varying first). The world size is
    `tp * cp * dp * pp`; the expert world `etp * ep * edp * pp` uses the same
    ranks. Sizes equal to their default are omitted when printed.

    ```mlir
    module attributes {tfm.plan = #tfm.plan<tp = 2, dp = 2, pp = 2,
                                            sequence_parallel = true>} {}
    #tfm.plan<cp = 8, cp_comm_type = ["a2a+p2p"],
              hierarchical_cp_sizes = [4, 2]>
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
    StringRefParameter<"rank order, fastest first", "\"tp-cp-ep-dp-pp\"">:$order
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// tp * cp * dp * pp.
    int64_t getWorldSize() const {
      return getTp() * getCp() * getDp() * getPp();
    }
    /// The expert tensor-parallel size with the default resolved.
    int64_t getExpertTp() const { return getEtp() ? getEtp() : getTp(); }
    bool isSequenceParallel() const {
      return getSequenceParallel() && getSequenceParallel().getValue();
    }
    /// The context-parallel communication type of layer `layer` ("p2p" when
    /// none is given).
    ::llvm::StringRef getCpCommTypeOfLayer(int64_t layer) const;
    /// The plan as the rank generator's configuration (world size and
    /// defaults resolved by ParallelLayout::create).
    ::loom::rankgen::ParallelConfig toParallelConfig() const;
  }];
}

#endif // LOOM_DIALECTS_TFM_TFMATTRS_TD
