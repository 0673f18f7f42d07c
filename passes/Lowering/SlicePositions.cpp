//===- SlicePositions.cpp - Where a rank's slice lies ------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/SlicePositions.h"

#include "passes/Lowering/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

/// Dim `dim` of `v` (its distribution's axes there) as `op`'s kernel sees it.
static FailureOr<std::optional<lowering::PositionedDim>>
splitOf(Operation *op, Value v, int64_t dim) {
  DistAttr dist = getDist(v);
  if (!dist)
    return std::optional<lowering::PositionedDim>(
        lowering::PositionedDim{v, dim, ""});
  DimDist d = dist.getDim(dim);
  if (!d.isNatural())
    return op->emitOpError() << "reads the global positions of dim " << dim
                             << " of a value " << describe(dist)
                             << ", a chunk order its kernel does not take";
  if (d.isWhole())
    return std::optional<lowering::PositionedDim>(
        lowering::PositionedDim{v, dim, ""});
  FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(op, dist.getMesh());
  if (failed(mesh))
    return failure();
  FailureOr<std::string> group = lowering::groupKindOf(
      op, dist.getMesh().getValue(), mesh->indices(d.axes));
  if (failed(group))
    return failure();
  return std::optional<lowering::PositionedDim>(
      lowering::PositionedDim{v, dim, *group});
}

FailureOr<std::optional<lowering::PositionedDim>>
lowering::positionedDim(Operation *op) {
  using Result = FailureOr<std::optional<PositionedDim>>;
  return llvm::TypeSwitch<Operation *, Result>(op)
      // The rows of the vocabulary a table (or its gradient) holds.
      .Case([&](EmbeddingOp e) { return splitOf(op, e.getTable(), 0); })
      .Case([&](EmbeddingGradOp e) { return splitOf(op, e.getResult(), 0); })
      // The vocabulary ids of the logits' columns.
      .Case([&](CeTargetLogitOp c) { return splitOf(op, c.getLogits(), 2); })
      .Case([&](CrossEntropyGradOp c) { return splitOf(op, c.getLogits(), 2); })
      // Position ids count from the start of the whole sequence.
      .Case([&](PositionIdsOp p) -> Result {
        Result r = splitOf(op, p.getTokens(), kSeqDim);
        if (succeeded(r) && *r && !(*r)->group.empty())
          return op->emitOpError()
                 << "computes position ids of a sequence split over "
                 << (*r)->group << ", which the runtime does not do yet";
        return r;
      })
      // The mask is keyed by each element's global index.
      .Case([&](DropoutOp d) -> Result {
        Value x = d.getInput();
        std::optional<PositionedDim> found;
        int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
        for (int64_t k = 0; k < rank; ++k) {
          Result r = splitOf(op, x, k);
          if (failed(r))
            return failure();
          if ((*r)->group.empty())
            continue;
          if (found)
            return op->emitOpError()
                   << "drops from a value split on two dims ("
                   << describe(getDist(x))
                   << "); its kernel takes one split dim";
          found = *r;
        }
        return found;
      })
      .Default([](Operation *) { return std::optional<PositionedDim>(); });
}
