//===- Propagation.cpp - State of distribution propagation ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Propagation.h"

#include "dialects/Tfm/ChunkOrder.h"

using namespace mlir;
using namespace loom;
using namespace loom::sharding;
using tfm::DistAttr;
using tfm::DimDist;

#include "passes/Sharding/PropagationInterface.cpp.inc"

Propagation::Propagation(MLIRContext *ctx, FlatSymbolRefAttr mesh,
                         const tfm::MeshAxesInfo &axes, tfm::PlanAttr plan,
                         StringRef tpAxis, StringRef cpAxis)
    : mesh(mesh), axes(axes), planAttr(plan), tpAxis(tpAxis.str()),
      cpAxis(cpAxis.str()), tpSize(plan.getTp()), cpSize(plan.getCp()),
      sp(plan.isSequenceParallel()),
      localRouting(plan.routesLocalTokens() && plan.isSequenceParallel()),
      b(ctx) {}

DistAttr Propagation::wholeOverTp(DistAttr d) const {
  if (tp().empty())
    return d;
  for (int64_t i = 0; i < d.getNumDims(); ++i) {
    SmallVector<StringRef> a = d.getAxes(i);
    if (llvm::is_contained(a, tp())) {
      llvm::erase(a, tp());
      d = d.withAxes(i, a);
    }
  }
  SmallVector<StringRef> partial = d.getPartialAxes();
  if (llvm::is_contained(partial, tp())) {
    llvm::erase(partial, tp());
    d = d.withPartial(partial, d.getReduction());
  }
  return d;
}

/// `d` with `axis` added as the minor axis of dim `dim`.
static DistAttr splitAlso(DistAttr d, int64_t dim, StringRef axis) {
  SmallVector<StringRef> a = d.getAxes(dim);
  a.push_back(axis);
  return d.withAxes(dim, a);
}

DistAttr Propagation::featuresOverTp(DistAttr d, int64_t rank) const {
  d = wholeOverTp(d);
  return tp().empty() ? d : splitAlso(d, rank - 1, tp());
}

FailureOr<DistAttr> Propagation::residual(Value v, Operation *where) const {
  DistAttr d = wholeOverTp(tfm::getDist(v));
  auto type = cast<RankedTensorType>(v.getType());
  if (!sp || tp().empty() || type.getRank() <= tfm::kSeqDim)
    return d;
  int64_t seq = type.getDimSize(tfm::kSeqDim);
  int64_t parts = tpSize * axes.product(d.getAxes(tfm::kSeqDim));
  if (seq % parts != 0)
    return where->emitError() << "sequence length " << seq
                              << " is not divisible by tp " << tpSize
                              << (cp().empty() ? "" : " x cp ")
                              << (cp().empty() ? "" : std::to_string(cpSize))
                              << " (sequence parallelism)";
  return splitAlso(d, tfm::kSeqDim, tp());
}

FailureOr<DistAttr> Propagation::routingTokens(Value v,
                                               Operation *where) const {
  if (!localRouting)
    return wholeOverTp(tfm::getDist(v));
  return residual(v, where);
}

bool Propagation::sequenceOverCp(Value v) const {
  return !cp().empty() &&
         cast<RankedTensorType>(v.getType()).getRank() > tfm::kSeqDim &&
         llvm::is_contained(tfm::getDist(v).getAxes(tfm::kSeqDim), cp());
}

FailureOr<DistAttr> Propagation::batchInput(Value v, Location where) const {
  auto type = cast<RankedTensorType>(v.getType());
  if (cp().empty() || type.getRank() <= tfm::kSeqDim)
    return replicated();
  int64_t seq = type.getDimSize(tfm::kSeqDim);
  if (seq % (2 * cpSize) != 0)
    return mlir::emitError(where)
           << "sequence length " << seq << " is not divisible by 2 x cp = "
           << 2 * cpSize
           << " (context parallelism cuts it into 2 x cp chunks)";
  return replicated().withDim(tfm::kSeqDim,
                              DimDist{{cp()}, tfm::zigzagOrder(cpSize)});
}

bool Propagation::featuresSplit(Value v) const {
  auto type = cast<RankedTensorType>(v.getType());
  return !tp().empty() &&
         llvm::is_contained(tfm::getDist(v).getAxes(type.getRank() - 1), tp());
}

void Propagation::visitParamRead(tfm::GetParamOp get) {
  if (DistAttr d = params.lookup(get.getName())) {
    setDist(get.getResult(), d);
    return;
  }
  setDist(get.getResult(), replicated());
  undecided.insert(get);
}

void Propagation::decide(tfm::GetParamOp get, DistAttr d) {
  undecided.erase(get);
  setDist(get.getResult(), d);
  params[get.getName()] = d;
  if (!d.isReplicated())
    ++numSplitParams;
}

void Propagation::settle(Operation *op) {
  for (Value v : op->getOperands())
    if (auto get = v.getDefiningOp<tfm::GetParamOp>();
        get && undecided.contains(get))
      decide(get, tfm::getDist(v));
}

LogicalResult Propagation::require(Operation *op, unsigned index,
                                   DistAttr want) {
  Value v = op->getOperand(index);
  if (auto get = v.getDefiningOp<tfm::GetParamOp>()) {
    if (undecided.contains(get)) {
      if (want.isPartial())
        return op->emitError() << "@" << get.getName()
                               << " would have to be a partial sum";
      decide(get, want);
      return success();
    }
    if (tfm::getDist(v) != want)
      return op->emitError() << "@" << get.getName() << " is "
                             << tfm::describe(tfm::getDist(v))
                             << " elsewhere but needs to be "
                             << tfm::describe(want) << " here";
    return success();
  }
  if (tfm::getDist(v) == want)
    return success();
  Value &r = reshards[{v, want}];
  if (!r) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op);
    r = b.create<tfm::ReshardOp>(op->getLoc(), tfm::withDist(v.getType(), want),
                                 v);
    ++numReshards;
  }
  op->setOperand(index, r);
  return success();
}

LogicalResult Propagation::requireAsIs(Operation *op) {
  settle(op);
  return success();
}

LogicalResult Propagation::inferResults(Operation *op) {
  auto rule = dyn_cast<tfm::DistributedOpInterface>(op);
  if (!rule)
    return op->emitOpError() << "has no distribution rule";
  FailureOr<SmallVector<DistAttr>> dists = rule.inferResultDistributions();
  if (failed(dists))
    return failure();
  for (auto [r, d] : llvm::zip(op->getResults(), *dists))
    setDist(r, d);
  return success();
}

bool Propagation::isPositionIds(Value ids) {
  return tfm::isPositionIds(ids);
}
