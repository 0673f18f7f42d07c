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
using loom::lowering::PositionedDim;

using Dims = SmallVector<lowering::PositionedDim>;

/// Dim `dim` of `v` (its distribution's axes there) as `op`'s kernel sees
/// it; `reordered` says whether the kernel takes a chunk order.
static FailureOr<lowering::PositionedDim>
splitOf(Operation *op, Value v, int64_t dim, bool reordered = false) {
  DistAttr dist = getDist(v);
  if (!dist)
    return lowering::PositionedDim{v, dim, "", {}};
  DimDist d = dist.getDim(dim);
  if (!d.isNatural() && !reordered)
    return op->emitOpError() << "reads the global positions of dim " << dim
                             << " of a value " << describe(dist)
                             << ", a chunk order its kernel does not take";
  if (d.isWhole())
    return lowering::PositionedDim{v, dim, "", d.chunks};
  FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(op, dist.getMesh());
  if (failed(mesh))
    return failure();
  FailureOr<std::string> group = lowering::groupKindOf(
      op, dist.getMesh().getValue(), mesh->indices(d.axes));
  if (failed(group))
    return failure();
  return lowering::PositionedDim{v, dim, *group, d.chunks,
                                 mesh->product(d.axes)};
}

/// The dims `dims` gives, or its failure.
static FailureOr<Dims>
collect(std::initializer_list<FailureOr<lowering::PositionedDim>> dims) {
  Dims out;
  for (const auto &d : dims) {
    if (failed(d))
      return failure();
    out.push_back(*d);
  }
  return out;
}

FailureOr<Dims> lowering::positionedDims(Operation *op) {
  using Result = FailureOr<Dims>;
  return llvm::TypeSwitch<Operation *, Result>(op)
      // The rows of the vocabulary a table (or its gradient) holds.
      .Case([&](EmbeddingOp e) { return collect({splitOf(op, e.getTable(), 0)}); })
      .Case([&](EmbeddingGradOp e) {
        return collect({splitOf(op, e.getResult(), 0)});
      })
      // The vocabulary ids of the logits' columns.
      .Case([&](CeTargetLogitOp c) {
        return collect({splitOf(op, c.getLogits(), 2)});
      })
      .Case([&](CrossEntropyGradOp c) {
        return collect({splitOf(op, c.getLogits(), 2)});
      })
      // Which of the columns are padding (only when there is padding).
      .Case<CeRowMaxOp, CeSumExpOp, CrossEntropyOp>([&](auto c) -> Result {
        if (!c.getUnpaddedVocabSizeAttr())
          return Dims{};
        return collect({splitOf(op, c.getLogits(), 2)});
      })
      // Position ids count from the start of the whole sequence; reset at
      // documents, they depend on every earlier token.
      .Case([&](PositionIdsOp p) -> Result {
        auto d = splitOf(op, p.getTokens(), kSeqDim, /*reordered=*/true);
        if (succeeded(d) && !d->isIdentity() && p.getResetAtEod())
          return op->emitOpError()
                 << "resets position ids at documents of a sequence split "
                    "over "
                 << d->group << ", which the runtime does not do yet";
        return collect({d});
      })
      // The causal mask compares the queries' and keys' global positions.
      .Case<AttentionOp, AttentionGradOp>([&](auto a) {
        return collect({splitOf(op, a.getQuery(), kSeqDim, true),
                        splitOf(op, a.getKey(), kSeqDim, true)});
      })
      // Ring attention's document ids: the queries' positions (the block's
      // are those of another rank of the same layout).
      .Case<AttentionSectionOp, AttentionSectionGradOp>([&](auto a) -> Result {
        if (!a.getTokens())
          return Dims{};
        return collect({splitOf(op, a.getQuery(), kSeqDim, true)});
      })
      // The mask is keyed by each element's global index.
      .Case([&](DropoutOp d) -> Result {
        Value x = d.getInput();
        std::optional<PositionedDim> found;
        int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
        for (int64_t k = 0; k < rank; ++k) {
          auto r = splitOf(op, x, k);
          if (failed(r))
            return failure();
          if (r->group.empty())
            continue;
          if (found)
            return op->emitOpError()
                   << "drops from a value split on two dims ("
                   << describe(getDist(x))
                   << "); its kernel takes one split dim";
          found = *r;
        }
        return found ? Dims{*found} : Dims{};
      })
      .Default([](Operation *) { return Dims{}; });
}
