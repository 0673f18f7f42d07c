//===- TfmAttrs.h - Transformer dialect attributes --------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMATTRS_H
#define LOOM_DIALECTS_TFM_TFMATTRS_H

#include "rankgen/ParallelLayout.h"
#include "rankgen/Plan.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/TensorEncoding.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

namespace loom::tfm {

/// How one tensor dim is distributed (see #tfm.dist): its chunks reordered
/// by `chunks` (empty: natural order), then split over `axes`, major first.
struct DimDist {
  llvm::SmallVector<llvm::StringRef> axes;
  llvm::SmallVector<int64_t> chunks;

  bool isWhole() const { return axes.empty(); }
  bool isNatural() const { return chunks.empty(); }
  bool operator==(const DimDist &o) const {
    return axes == o.axes && chunks == o.chunks;
  }
  bool operator!=(const DimDist &o) const { return !(*this == o); }
};

// The discardable attributes of the tfm dialect (verified by TfmDialect).

/// Module: the parallel plan (#tfm.plan).
inline constexpr llvm::StringLiteral kPlanAttrName = "tfm.plan";
/// Module: the model's configuration as loom-import read it (a dictionary).
inline constexpr llvm::StringLiteral kModelAttrName = "tfm.model";
/// Function: an entry point the rank program calls, with its C symbol.
inline constexpr llvm::StringLiteral kEntryAttrName = "tfm.entry";
/// Entry argument: the batch input it carries (see kInputKinds).
inline constexpr llvm::StringLiteral kInputArgAttrName = "tfm.input";
/// Entry argument: the parameter it carries (after tfm-params-to-args).
inline constexpr llvm::StringLiteral kParamArgAttrName = "tfm.param";
/// Entry argument: the process group of a communicator (tfm-comms-to-args).
inline constexpr llvm::StringLiteral kCommArgAttrName = "tfm.comm";
/// Entry result: the parameter whose gradient it is.
inline constexpr llvm::StringLiteral kGradResultAttrName = "tfm.grad";
/// Entry result: the process-group kind its gradient is summed over
/// (tfm-mark-gradient-groups), e.g. "dp" or "dp-cp".
inline constexpr llvm::StringLiteral kGradGroupAttrName = "tfm.grad_group";
/// On a pipelined step's batch input or loss result: it holds this many
/// micro-batches, stacked on its leading dim.
inline constexpr llvm::StringLiteral kMicrobatchesAttrName = "tfm.microbatches";
/// Function: its last argument is its workspace, this many bytes that hold
/// every temporary at offsets fixed at compile time (tfm-plan-buffers);
/// the caller provides it, and keeps it from call to call.
inline constexpr llvm::StringLiteral kWorkspaceAttrName = "tfm.workspace";
/// Function: the pipeline rank whose step it is (tfm-schedule-pipeline).
inline constexpr llvm::StringLiteral kPipelineRankAttrName =
    "tfm.pipeline_rank";
/// The batch inputs an entry argument can carry: token ids, labels, the
/// loss mask, and the train step's loss scale.
inline constexpr llvm::StringLiteral kInputKinds[] = {"tokens", "labels",
                                                      "loss_mask", "grad_scale"};
/// The module attribute that says tensor shapes are per-rank (tfm-localize
/// ran); without it, distributed tensors have global shapes.
inline constexpr llvm::StringLiteral kLocalShapesAttrName = "tfm.local_shapes";
/// The attribute of a mesh.mesh that names its axes.
inline constexpr llvm::StringLiteral kMeshAxesAttrName = "tfm.mesh_axes";

} // namespace loom::tfm

#define GET_ATTRDEF_CLASSES
#include "dialects/Tfm/TfmAttrs.h.inc"

#endif // LOOM_DIALECTS_TFM_TFMATTRS_H
