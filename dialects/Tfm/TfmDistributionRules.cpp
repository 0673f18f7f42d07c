//===- TfmDistributionRules.cpp - What each op computes distributed -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// One rule per op (DistributedOpInterface::inferResultDistributions): given
// the distributions of its operands, the distributions of its results that
// make every rank's local computation the unsharded op's, or an error that
// names why the operands cannot meet. For example
//
//   linear(x [.., k], W [n, k]):  x [.., [tp]], W [[], [tp]]
//     -> y [.., []], partial = sum[tp]            (row-parallel)
//   linear(x [.., k], W [n, k]):  x whole, W [[tp], []]
//     -> y [.., [tp]]                             (column-parallel)
//   add(a, b): a partial over tp, b replicated
//     -> error: the operands must be distributed alike
//
// tfm-verify-distribution compares every op's results with its rule, and
// tfm-propagate-distribution types results by it. Upstream mesh
// collectives get their rules here too, as external models: an all-reduce
// over tp removes tp from its input's partial axes, an all-gather of dim d
// the last axes of d's split, and so on.
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/ChunkOrder.h"
#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace loom::tfm;

using Dists = FailureOr<SmallVector<DistAttr>>;

LogicalResult loom::tfm::verifyInferredDistributions(Operation *op) {
  Dists want = cast<DistributedOpInterface>(op).inferResultDistributions();
  if (failed(want))
    return failure();
  for (auto [i, pair] : llvm::enumerate(llvm::zip(op->getResults(), *want))) {
    auto [result, dist] = pair;
    if (getDist(result) != dist)
      return op->emitOpError()
             << "result #" << i << " is " << describe(getDist(result))
             << " but the op's distribution rule gives " << describe(dist);
  }
  return success();
}

namespace {

/// The distribution of `v` as a list of dims (rank of them).
SmallVector<DimDist> dimsOf(Value v) {
  return getDist(v).getDims(cast<RankedTensorType>(v.getType()).getRank());
}

/// Names a distribution for diagnostics.
std::string of(Value v) { return describe(getDist(v)); }

/// A distribution on the mesh of `like`, or failure (with an error at `op`)
/// when it would use one axis twice: operands distributed so cannot meet.
FailureOr<DistAttr> make(Operation *op, Value like, ArrayRef<DimDist> dims,
                         ArrayRef<StringRef> partial,
                         mesh::ReductionKind reduction =
                             mesh::ReductionKind::Sum) {
  llvm::StringSet<> seen;
  for (const DimDist &d : dims)
    for (StringRef axis : d.axes)
      if (!seen.insert(axis).second)
        return op->emitOpError()
               << "operands are distributed over mesh axis " << axis
               << " in ways that cannot combine (it would split two dims "
                  "of a result)";
  for (StringRef axis : partial)
    if (!seen.insert(axis).second)
      return op->emitOpError()
             << "operands are distributed over mesh axis " << axis
             << " in ways that cannot combine (a result would be split and "
                "partial over it)";
  return DistAttr::get(op->getContext(), getDist(like).getMesh(), dims,
                       partial, reduction);
}

/// One result distribution, or failure.
Dists one(FailureOr<DistAttr> d) {
  if (failed(d))
    return failure();
  return SmallVector<DistAttr>{*d};
}

LogicalResult notPartial(Operation *op, StringRef what, Value v,
                         StringRef why) {
  if (!getDist(v).isPartial())
    return success();
  return op->emitOpError() << what << " is " << of(v) << "; " << why;
}

/// `v` is not a partial maximum: an op linear in `v` takes partial sums
/// only (`what` names the operand, `op` the op).
LogicalResult sumsOnly(Operation *op, StringRef what, Value v, StringRef opWhat) {
  DistAttr d = getDist(v);
  if (!d.isPartial() || d.getReduction() == mesh::ReductionKind::Sum)
    return success();
  return op->emitOpError() << what << " is " << of(v) << "; " << opWhat
                           << " is linear in sums only";
}

/// `v` is whole on dim `d` (not split, chunks in order).
LogicalResult wholeDim(Operation *op, StringRef what, Value v, int64_t d,
                       StringRef why) {
  DimDist dim = getDist(v).getDim(d);
  if (dim.isWhole() && dim.isNatural())
    return success();
  return op->emitOpError() << what << " is " << of(v) << "; " << why;
}

LogicalResult replicated(Operation *op, StringRef what, Value v) {
  if (!v || getDist(v).isReplicated())
    return success();
  return op->emitOpError() << what << " is " << of(v)
                           << " but must be replicated";
}

/// The dims `da` of `a` are distributed like the dims `db` of `b` (`which`
/// names them for the diagnostic).
LogicalResult sameDims(Operation *op, StringRef whatA, Value a,
                       ArrayRef<int64_t> da, StringRef whatB, Value b,
                       ArrayRef<int64_t> db,
                       StringRef which = "batch and sequence") {
  SmallVector<DimDist> A = dimsOf(a), B = dimsOf(b);
  for (auto [i, j] : llvm::zip(da, db))
    if (A[i] != B[j])
      return op->emitOpError()
             << whatA << " (" << of(a) << ") and " << whatB << " (" << of(b)
             << ") must be distributed alike on their " << which << " dims";
  return success();
}

/// Every axis that splits one of `dims` of `v`: a sum over those dims is a
/// partial sum over these axes.
SmallVector<StringRef> axesOfDims(Value v, ArrayRef<int64_t> dims) {
  SmallVector<StringRef> axes;
  for (int64_t d : dims)
    llvm::append_range(axes, getDist(v).getAxes(d));
  return axes;
}

SmallVector<int64_t> leadingDims(Value v) {
  int64_t rank = cast<RankedTensorType>(v.getType()).getRank();
  SmallVector<int64_t> dims;
  for (int64_t d = 0; d + 1 < rank; ++d)
    dims.push_back(d);
  return dims;
}

SmallVector<StringRef> concat(ArrayRef<StringRef> a, ArrayRef<StringRef> b) {
  SmallVector<StringRef> out(a);
  llvm::append_range(out, b);
  return out;
}

/// Elementwise: all operands share one distribution, which the results
/// take; `linear` ops may take partial sums (the op of the sum is the sum
/// of the ops).
Dists elementwise(Operation *op, bool linear) {
  Value first = op->getOperand(0);
  for (Value v : op->getOperands())
    if (getDist(v) != getDist(first))
      return op->emitOpError()
             << "the operands must be distributed alike, but one is "
             << of(first) << " and another " << of(v);
  if (!linear && failed(notPartial(op, "the input", first,
                                   "the op is not linear, so it needs whole "
                                   "values")))
    return failure();
  if (failed(sumsOnly(op, "the input", first, "the op")))
    return failure();
  return SmallVector<DistAttr>(op->getNumResults(), getDist(first));
}

LogicalResult weightsReplicated(Operation *op, ValueRange weights) {
  for (Value w : weights)
    if (failed(replicated(op, "the weight", w)))
      return failure();
  return success();
}

/// Normalizations over the last dim need whole rows.
LogicalResult normInput(Operation *op, Value x) {
  int64_t last = cast<RankedTensorType>(x.getType()).getRank() - 1;
  if (failed(notPartial(op, "the input", x, "a norm needs whole values")) ||
      failed(wholeDim(op, "the input", x, last,
                      "a norm needs the normalized dim whole")))
    return failure();
  return success();
}

/// A norm's gradients: the input's, and the weight's (and bias's) summed
/// over this rank's tokens.
Dists normGrads(Operation *op, Value x, Value dy, ValueRange weights,
                unsigned numParamGrads) {
  if (failed(normInput(op, x)) ||
      failed(notPartial(op, "the output gradient", dy,
                        "a norm's gradient needs whole values")) ||
      failed(weightsReplicated(op, weights)))
    return failure();
  if (getDist(x) != getDist(dy))
    return op->emitOpError() << "the input (" << of(x)
                             << ") and the output gradient (" << of(dy)
                             << ") must be distributed alike";
  FailureOr<DistAttr> param = make(op, x, {}, axesOfDims(x, leadingDims(x)));
  if (failed(param))
    return failure();
  SmallVector<DistAttr> out{getDist(x)};
  out.append(numParamGrads, *param);
  return out;
}

/// Attention's operands: heads split alike; keys and values whole on the
/// sequence (in any chunk order: the kernel reads every key's global
/// position), queries split or reordered on it as they come (context
/// parallelism: each rank attends with its own query rows). The results: the
/// output like the query, the log-sum-exp [B, N, S] from its dims.
/// With `ring` (context parallelism's p2p), k and v are split on the
/// sequence like the queries, over the ring's axis alone in Megatron's
/// load-balanced order: the ring brings every rank's block to every rank.
LogicalResult ringOperands(Operation *op, Value q, Value k, Value v,
                           StringAttr ring) {
  DimDist seq = getDist(q).getDim(kSeqDim);
  FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(op, getDist(q).getMesh());
  if (failed(mesh))
    return failure();
  if (!mesh->index(ring.getValue()))
    return op->emitOpError() << "the ring's axis " << ring
                             << " is not an axis of the mesh";
  std::optional<int64_t> pairs = zigzagPairs(seq.chunks);
  if (seq.axes != ArrayRef<StringRef>{ring.getValue()} || !pairs ||
      *pairs != mesh->size(ring.getValue()))
    return op->emitOpError()
           << "the query is " << of(q) << "; ring attention over "
           << ring.getValue()
           << " needs its sequence split over it alone, in the load-balanced "
              "order of 2 chunks per rank";
  for (auto [what, val] :
       {std::pair<StringRef, Value>{"the key", k}, {"the value", v}})
    if (getDist(val).getDim(kSeqDim) != seq)
      return op->emitOpError() << what << " is " << of(val)
                               << "; ring attention needs it split like the "
                                  "query on the sequence";
  return success();
}

Dists attentionOperands(Operation *op, Value q, Value k, Value v,
                        Value tokens, Value lse, StringAttr ring) {
  for (auto [what, val] : {std::pair<StringRef, Value>{"the query", q},
                           {"the key", k},
                           {"the value", v}})
    if (failed(notPartial(op, what, val, "attention needs whole values")))
      return failure();
  if (ring && failed(ringOperands(op, q, k, v, ring)))
    return failure();
  for (auto [what, val] :
       {std::pair<StringRef, Value>{"the key", k}, {"the value", v}})
    if (!ring && !getDist(val).getDim(kSeqDim).isWhole())
      return op->emitOpError()
             << what << " is " << of(val)
             << "; attention needs every key and value of the sequence";
  if (failed(sameDims(op, "the key", k, {0, 2}, "the query", q, {0, 2},
                      "batch and head")) ||
      failed(sameDims(op, "the value", v, {0, 1, 2}, "the key", k, {0, 1, 2},
                      "batch, sequence and head")))
    return failure();
  if (tokens) {
    // Document ids count the documents before each token: the kernel
    // computes them from the whole sequence's tokens, and reads each query's
    // and key's by its global position.
    if (failed(wholeDim(op, "the tokens", tokens, kSeqDim,
                        "document masks need the whole sequence's tokens")) ||
        failed(sameDims(op, "the tokens", tokens, {0}, "the query", q, {0},
                        "batch")))
      return failure();
  }
  SmallVector<DimDist> qd = dimsOf(q);
  FailureOr<DistAttr> stats = make(op, q, {qd[kBatchDim], qd[2], qd[kSeqDim]}, {});
  if (failed(stats))
    return failure();
  return SmallVector<DistAttr>{getDist(q), *stats};
}

/// Logits [B, S, V] (whole values) with per-row operands distributed like
/// their rows.
LogicalResult logitRows(Operation *op, Value logits, ValueRange rows) {
  if (failed(notPartial(op, "the logits", logits,
                        "the cross-entropy needs whole logits")))
    return failure();
  if (!dimsOf(logits)[2].isNatural())
    return op->emitOpError() << "the logits are " << of(logits)
                             << "; the vocabulary must be in order";
  for (Value r : rows)
    if (failed(sameDims(op, "a per-row operand", r, {0, 1}, "the logits",
                        logits, {0, 1})) ||
        failed(notPartial(op, "a per-row operand", r,
                          "the cross-entropy needs whole values")))
      return failure();
  return success();
}

/// A statistic of every row of a vocabulary slice: partial over the axes
/// that split the vocabulary.
Dists rowStatistic(Operation *op, Value logits, ValueRange rows,
                   mesh::ReductionKind reduction) {
  if (failed(logitRows(op, logits, rows)))
    return failure();
  SmallVector<DimDist> l = dimsOf(logits);
  return one(make(op, logits, {l[0], l[1]}, l[2].axes, reduction));
}

/// The loss is a mean over all tokens, so the token dims must be whole.
LogicalResult wholeTokens(Operation *op, Value rows) {
  if (failed(wholeDim(op, "the tokens", rows, kBatchDim,
                      "the loss is a mean over whole batches")) ||
      failed(wholeDim(op, "the tokens", rows, kSeqDim,
                      "the loss is a mean over whole sequences")))
    return failure();
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// tfm ops
//===----------------------------------------------------------------------===//

Dists GetParamOp::inferResultDistributions() {
  if (failed(notPartial(*this, "a parameter", getResult(),
                        "parameters are never partial sums")))
    return failure();
  return SmallVector<DistAttr>{getDist(getResult())};
}

Dists EmbeddingOp::inferResultDistributions() {
  // Vocab-parallel: a rank holding rows [a, b) of the table looks up the
  // ids in that range; the sum over the ranks is the lookup.
  Value ids = getIds(), table = getTable();
  if (failed(notPartial(*this, "the ids", ids, "ids are never partial")) ||
      failed(notPartial(*this, "the table", table,
                        "parameters are never partial sums")))
    return failure();
  SmallVector<DimDist> i = dimsOf(ids), t = dimsOf(table);
  if (!t[0].isNatural())
    return emitOpError() << "the table is " << of(table)
                         << "; its rows must be in order";
  return one(make(*this, table, {i[0], i[1], t[1]}, t[0].axes));
}

Dists PositionIdsOp::inferResultDistributions() {
  if (failed(notPartial(*this, "the tokens", getTokens(),
                        "ids are never partial")))
    return failure();
  return SmallVector<DistAttr>{getDist(getTokens())};
}

Dists EmbeddingGradOp::inferResultDistributions() {
  Value ids = getIds(), grad = getGrad();
  if (failed(notPartial(*this, "the ids", ids, "ids are never partial")) ||
      failed(sameDims(*this, "the gradient", grad, {0, 1}, "the ids", ids,
                      {0, 1})))
    return failure();
  if (failed(sumsOnly(*this, "the gradient", grad, "the op")))
    return failure();
  DistAttr gd = getDist(grad);
  // Rows are summed over this rank's tokens. Which rows of the vocabulary a
  // rank keeps is a choice (the ids outside them are skipped): the result's.
  DimDist rows = getDist(getResult())
                     ? getDist(getResult()).getDim(0)
                     : DimDist();
  if (!rows.isNatural())
    return emitOpError() << "the table gradient's rows must be in order";
  return one(make(*this, grad, {rows, dimsOf(grad)[2]},
                  concat(axesOfDims(ids, {0, 1}), gd.getPartialAxes())));
}

Dists LayerNormOp::inferResultDistributions() {
  if (failed(normInput(*this, getInput())) ||
      failed(weightsReplicated(*this, {getWeight(), getBias()})))
    return failure();
  return SmallVector<DistAttr>{getDist(getInput())};
}

/// A residual add and the norm of its sum (the addends have one type, so
/// one distribution): the rows whole; the sum and the result as the input.
static Dists addNorm(Operation *op, Value x, ValueRange weights) {
  if (failed(normInput(op, x)) || failed(weightsReplicated(op, weights)))
    return failure();
  return SmallVector<DistAttr>{getDist(x), getDist(x)};
}

Dists AddLayerNormOp::inferResultDistributions() {
  return addNorm(*this, getInput(), {getWeight(), getBias()});
}

Dists AddRmsNormOp::inferResultDistributions() {
  return addNorm(*this, getInput(), {getWeight()});
}

Dists RmsNormOp::inferResultDistributions() {
  if (failed(normInput(*this, getInput())) ||
      failed(weightsReplicated(*this, {getWeight()})))
    return failure();
  return SmallVector<DistAttr>{getDist(getInput())};
}

/// `dists` of an op whose input gradient (result 0) may be accumulated
/// onto `acc`, which must be distributed as it is.
static Dists withAccumulate(Operation *op, Value acc, Dists dists) {
  if (failed(dists) || !acc || getDist(acc) == (*dists)[0])
    return dists;
  return op->emitOpError() << "accumulates onto " << of(acc)
                           << " but its input gradient is "
                           << describe((*dists)[0]);
}

Dists LayerNormGradOp::inferResultDistributions() {
  return withAccumulate(
      *this, getAccumulate(),
      normGrads(*this, getInput(), getGrad(), {getWeight()}, 2));
}

Dists RmsNormGradOp::inferResultDistributions() {
  return withAccumulate(
      *this, getAccumulate(),
      normGrads(*this, getInput(), getGrad(), {getWeight()}, 1));
}

/// y = x W^T + b: the weight's out-features split gives the output's
/// features; a contraction over split in-features, a partial sum.
static FailureOr<DistAttr> linearDist(Operation *op, Value x, Value w,
                                      Value b) {
  if (failed(notPartial(op, "the weight", w,
                        "parameters are never partial sums")))
    return failure();
  if (failed(sumsOnly(op, "the input", x, "a linear map")))
    return failure();
  DistAttr xd = getDist(x);
  SmallVector<DimDist> xs = dimsOf(x), ws = dimsOf(w);
  // The contraction: the input's features and the weight's in-features
  // split alike give a partial sum over the split's axes.
  if (xs.back() != ws[1])
    return op->emitOpError() << "the input is " << of(x) << " and the weight "
                             << of(w)
                             << ": the input's features and the weight's "
                                "in-features must be split alike (a "
                                "row-parallel weight needs a split input)";
  SmallVector<DimDist> out(xs.begin(), xs.end() - 1);
  out.push_back(ws[0]);
  FailureOr<DistAttr> y =
      make(op, x, out, concat(xd.getPartialAxes(), xs.back().axes));
  if (failed(y))
    return failure();
  if (b) {
    if (failed(notPartial(op, "the bias", b,
                          "parameters are never partial sums")))
      return failure();
    if (dimsOf(b)[0] != ws[0])
      return op->emitOpError() << "the bias is " << of(b) << " and the weight "
                               << of(w)
                               << ": the bias must be split like the weight's "
                                  "out-features";
    if (y->isPartial())
      return op->emitOpError()
             << "adds its bias to " << describe(*y)
             << ", so every rank would add it; add it once after the "
                "reduction (tfm.bias_add)";
  }
  return y;
}

Dists LinearOp::inferResultDistributions() {
  FailureOr<DistAttr> y = linearDist(*this, getInput(), getWeight(), getBias());
  if (failed(y))
    return failure();
  return SmallVector<DistAttr>{*y};
}

Dists LinearGeluOp::inferResultDistributions() {
  FailureOr<DistAttr> y = linearDist(*this, getInput(), getWeight(), getBias());
  if (failed(y))
    return failure();
  if (y->isPartial())
    return emitOpError() << "applies GELU to " << describe(*y)
                         << ": a nonlinear map needs the reduced value";
  return SmallVector<DistAttr>{*y, *y};
}

Dists LinearSwigluOp::inferResultDistributions() {
  bool biased = !getBiases().empty();
  FailureOr<DistAttr> gate = linearDist(*this, getInput(), getGateWeight(),
                                        biased ? getBiases()[0] : Value());
  FailureOr<DistAttr> up = linearDist(*this, getInput(), getUpWeight(),
                                      biased ? getBiases()[1] : Value());
  if (failed(gate) || failed(up))
    return failure();
  if (*gate != *up)
    return emitOpError() << "gate is " << describe(*gate) << " and up "
                         << describe(*up) << ": SwiGLU needs them alike";
  if (gate->isPartial())
    return emitOpError() << "applies SwiGLU to " << describe(*gate)
                         << ": a nonlinear map needs the reduced value";
  return SmallVector<DistAttr>{*gate, *gate, *gate};
}

Dists MultiLinearOp::inferResultDistributions() {
  SmallVector<DistAttr> out;
  for (auto [i, w] : llvm::enumerate(getWeights())) {
    FailureOr<DistAttr> y =
        linearDist(*this, getInput(), w,
                   getBiases().empty() ? Value() : getBiases()[i]);
    if (failed(y))
      return failure();
    out.push_back(*y);
  }
  return out;
}

/// tfm.linear_grad's input, weight and (with `bias`) bias gradients.
static Dists linearGradDists(Operation *op, Value x, Value w, Value dy,
                             bool bias) {
  if (failed(notPartial(op, "the weight", w,
                        "parameters are never partial sums")) ||
      failed(sameDims(op, "the output gradient", dy, leadingDims(dy),
                      "the input", x, leadingDims(x), "token")))
    return failure();
  DistAttr xd = getDist(x), dyd = getDist(dy);
  if (xd.isPartial() && dyd.isPartial())
    return op->emitOpError() << "the input (" << of(x)
                             << ") and the output gradient (" << of(dy)
                             << ") are both partial; their product is not";
  for (DistAttr d : {xd, dyd})
    if (d.isPartial() && d.getReduction() != mesh::ReductionKind::Sum)
      return op->emitOpError() << "a partial maximum is not a linear input";
  SmallVector<DimDist> xs = dimsOf(x), ws = dimsOf(w), gs = dimsOf(dy);
  if (gs.back() != ws[0])
    return op->emitOpError() << "the output gradient is " << of(dy)
                             << " and the weight " << of(w)
                             << ": the gradient's features and the weight's "
                                "out-features must be split alike";
  // dx = dy W: a sum over the out-features.
  SmallVector<DimDist> dxDims(gs.begin(), gs.end() - 1);
  dxDims.push_back(ws[1]);
  FailureOr<DistAttr> dx =
      make(op, x, dxDims, concat(dyd.getPartialAxes(), gs.back().axes));
  if (failed(dx))
    return failure();
  // dW = dy^T x and db = sum(dy): sums over this rank's tokens.
  SmallVector<StringRef> tokens = axesOfDims(x, leadingDims(x));
  FailureOr<DistAttr> dw =
      make(op, w, {gs.back(), xs.back()},
           concat(tokens, concat(xd.getPartialAxes(), dyd.getPartialAxes())));
  if (failed(dw))
    return failure();
  SmallVector<DistAttr> out{*dx, *dw};
  if (bias) {
    FailureOr<DistAttr> db =
        make(op, w, {gs.back()}, concat(tokens, dyd.getPartialAxes()));
    if (failed(db))
      return failure();
    out.push_back(*db);
  }
  return out;
}

Dists LinearGradOp::inferResultDistributions() {
  return withAccumulate(*this, getAccumulate(),
                        linearGradDists(*this, getInput(), getWeight(),
                                        getGrad(), bool(getBiasGrad())));
}

/// The input gradient `dists[0]` of a linear whose input an activation
/// made from `activationInput` (`what`): the activation's gradient needs
/// the two alike and reduced.
static LogicalResult throughActivation(Operation *op, const Dists &dists,
                                       Value activationInput, StringRef what) {
  DistAttr in = getDist(activationInput);
  if ((*dists)[0] != in)
    return op->emitOpError() << "the " << what << " is " << of(activationInput)
                             << " but the linear's input gradient is "
                             << describe((*dists)[0])
                             << ": the activation's gradient needs them "
                                "alike and reduced";
  if (in.isPartial())
    return op->emitOpError() << "the " << what << " " << of(activationInput)
                             << " is partial: a nonlinear map needs the "
                                "reduced value";
  return success();
}

Dists LinearGradGeluOp::inferResultDistributions() {
  Dists out = linearGradDists(*this, getInput(), getWeight(), getGrad(),
                              bool(getBiasGrad()));
  if (failed(out) ||
      failed(throughActivation(*this, out, getGeluInput(), "GELU's input")))
    return failure();
  return out;
}

Dists LinearGradSwigluOp::inferResultDistributions() {
  Dists out = linearGradDists(*this, getInput(), getWeight(), getGrad(),
                              bool(getBiasGrad()));
  if (failed(out) ||
      failed(throughActivation(*this, out, getGate(), "SwiGLU's gate")))
    return failure();
  // The gate's and the up's gradients, then the weight's (and the bias's).
  SmallVector<DistAttr> dists{(*out)[0], (*out)[0]};
  dists.append(out->begin() + 1, out->end());
  return dists;
}

Dists MultiLinearGradOp::inferResultDistributions() {
  // dx sums every projection's input gradient: each must give one
  // distribution; then the weights' gradients, then the biases'.
  SmallVector<DistAttr> dx, dws, dbs;
  bool bias = !getBiasGrads().empty();
  for (auto [w, dy] : llvm::zip(getWeights(), getGrads())) {
    Dists one = linearGradDists(*this, getInput(), w, dy, bias);
    if (failed(one))
      return failure();
    if (!dx.empty() && (*one)[0] != dx.front())
      return emitOpError() << "sums input gradients " << describe(dx.front())
                           << " and " << describe((*one)[0]);
    if (dx.empty())
      dx.push_back((*one)[0]);
    dws.push_back((*one)[1]);
    if (bias)
      dbs.push_back((*one)[2]);
  }
  SmallVector<DistAttr> out = dx;
  llvm::append_range(out, dws);
  llvm::append_range(out, dbs);
  return withAccumulate(*this, getAccumulate(), out);
}

Dists BiasAddOp::inferResultDistributions() {
  Value x = getInput(), b = getBias();
  if (failed(notPartial(*this, "the input", x,
                        "a bias added to a partial sum is added by every "
                        "rank")) ||
      failed(notPartial(*this, "the bias", b,
                        "parameters are never partial sums")))
    return failure();
  if (dimsOf(b)[0] != dimsOf(x).back())
    return emitOpError() << "the bias is " << of(b) << " and the input "
                         << of(x) << ": they must be split alike";
  return SmallVector<DistAttr>{getDist(x)};
}

/// Rotations act on each token's heads: linear in the input (a partial sum
/// stays one), positions distributed with the tokens.
template <typename OpT> static Dists ropeRule(OpT op) {
  Operation *o = op.getOperation();
  if (failed(notPartial(o, "the positions", op.getPositions(),
                        "ids are never partial")) ||
      failed(sameDims(o, "the positions", op.getPositions(), {0, 1},
                      "the input", op.getInput(), {0, 1})))
    return failure();
  return SmallVector<DistAttr>{getDist(op.getInput())};
}
Dists RopeOp::inferResultDistributions() { return ropeRule(*this); }
Dists RopeGradOp::inferResultDistributions() { return ropeRule(*this); }
/// Two rotations: each tensor as ropeRule gives it.
template <typename OpT> static Dists ropePairRule(OpT op) {
  Operation *o = op.getOperation();
  for (Value x : {op.getFirst(), op.getSecond()})
    if (failed(notPartial(o, "the positions", op.getPositions(),
                          "ids are never partial")) ||
        failed(sameDims(o, "the positions", op.getPositions(), {0, 1},
                        "the input", x, {0, 1})))
      return failure();
  return SmallVector<DistAttr>{getDist(op.getFirst()), getDist(op.getSecond())};
}
Dists RopePairOp::inferResultDistributions() { return ropePairRule(*this); }
Dists RopePairGradOp::inferResultDistributions() {
  return ropePairRule(*this);
}

Dists AttentionOp::inferResultDistributions() {
  return attentionOperands(*this, getQuery(), getKey(), getValue(),
                           getTokens(), getLse(), getRingAttr());
}

Dists AttentionGradOp::inferResultDistributions() {
  Value q = getQuery(), k = getKey(), v = getValue();
  Dists fwd =
      attentionOperands(*this, q, k, v, getTokens(), getLse(), getRingAttr());
  if (failed(fwd))
    return failure();
  if (getDist(getLse()) != (*fwd)[1])
    return emitOpError() << "the log-sum-exp is " << of(getLse())
                         << " but the query gives " << describe((*fwd)[1]);
  if (failed(notPartial(*this, "the output gradient", getOutGrad(),
                        "attention's gradient needs whole values")))
    return failure();
  // Every rank's query rows contribute to every key's gradient: with the
  // queries' sequence split, dk and dv are partial sums over that split,
  // unless the ring brings each block's gradient back to its owner.
  SmallVector<StringRef> rows;
  if (!getRingAttr())
    rows = axesOfDims(q, {kSeqDim});
  FailureOr<DistAttr> dk = make(*this, k, dimsOf(k), rows);
  FailureOr<DistAttr> dv = make(*this, v, dimsOf(v), rows);
  if (failed(dk) || failed(dv))
    return failure();
  return SmallVector<DistAttr>{getDist(q), *dk, *dv};
}

/// Head counts follow the per-rank feature sizes.
template <typename OpT> static void localHeads(OpT op) {
  int64_t d = op.getHeadDim();
  auto features = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape().back();
  };
  op.setNumHeads(features(op.getQuery()) / d);
  op.setNumKvHeads(features(op.getKey()) / d);
}
void AttentionOp::adaptToLocalShapes() { localHeads(*this); }
void AttentionGradOp::adaptToLocalShapes() { localHeads(*this); }

Dists GeluOp::inferResultDistributions() { return elementwise(*this, false); }
Dists GeluGradOp::inferResultDistributions() {
  return elementwise(*this, false);
}
Dists SiluOp::inferResultDistributions() { return elementwise(*this, false); }
Dists SiluGradOp::inferResultDistributions() {
  return elementwise(*this, false);
}
Dists SwigluOp::inferResultDistributions() {
  return elementwise(*this, false);
}
Dists SwigluGradOp::inferResultDistributions() {
  return elementwise(*this, false);
}
Dists AddOp::inferResultDistributions() {
  if (getDist(getLhs()) != getDist(getRhs()))
    return emitOpError() << "the operands must be distributed alike, but "
                            "lhs is "
                         << of(getLhs()) << " and rhs is " << of(getRhs());
  return elementwise(*this, /*linear=*/true);
}
// The mask is a function of each element's global index: dropping from
// every partial sum drops from their sum.
Dists DropoutOp::inferResultDistributions() {
  return elementwise(*this, /*linear=*/true);
}

Dists CastOp::inferResultDistributions() {
  if (failed(notPartial(*this, "the input", getInput(),
                        "rounding each rank's partial sum is not rounding "
                        "the sum")))
    return failure();
  return SmallVector<DistAttr>{getDist(getInput())};
}

// Repeating (or summing) whole heads commutes with a split of the heads.
Dists RepeatKvOp::inferResultDistributions() {
  return SmallVector<DistAttr>{getDist(getInput())};
}
Dists RepeatKvGradOp::inferResultDistributions() {
  return SmallVector<DistAttr>{getDist(getGrad())};
}

Dists CrossEntropyOp::inferResultDistributions() {
  Value logits = getLogits(), labels = getLabels();
  if (failed(logitRows(*this, logits, {labels, getLossMask()})) ||
      failed(wholeDim(*this, "the logits", logits, 2,
                      "with a split vocabulary the loss is computed in "
                      "vocab-parallel pieces (tfm.ce_row_max, ...)")) ||
      failed(wholeTokens(*this, labels)))
    return failure();
  DistAttr rows = getDist(labels);
  return SmallVector<DistAttr>{DistAttr::replicated(rows.getMesh()), rows,
                               rows};
}

Dists CrossEntropyGradOp::inferResultDistributions() {
  Value logits = getLogits();
  if (failed(logitRows(*this, logits,
                       {getLabels(), getLossMask(), getRowMax(),
                        getSumExp()})) ||
      failed(replicated(*this, "the loss gradient", getGrad())) ||
      failed(replicated(*this, "the token count", getCount())))
    return failure();
  // Without a count the op counts its own tokens: all of them, then.
  if (!getCount() && failed(wholeTokens(*this, getLabels())))
    return failure();
  return SmallVector<DistAttr>{getDist(logits)};
}

Dists CeRowMaxOp::inferResultDistributions() {
  return rowStatistic(*this, getLogits(), {}, mesh::ReductionKind::Max);
}

Dists CeSumExpOp::inferResultDistributions() {
  return rowStatistic(*this, getLogits(), {getRowMax()},
                      mesh::ReductionKind::Sum);
}

Dists CeTargetLogitOp::inferResultDistributions() {
  return rowStatistic(*this, getLogits(), {getLabels()},
                      mesh::ReductionKind::Sum);
}

/// Sums over all tokens: partial over the axes that split the rows.
Dists CeLossSumOp::inferResultDistributions() {
  Value rows = getRowMax();
  for (Value v : {getSumExp(), getTarget(), getLossMask()})
    if (failed(sameDims(*this, "a row operand", v, {0, 1}, "the row maxima",
                        rows, {0, 1})))
      return failure();
  for (Value v : getOperands())
    if (failed(notPartial(*this, "a row operand", v,
                          "the loss needs whole row statistics")))
      return failure();
  return one(make(*this, rows, {}, axesOfDims(rows, {0, 1})));
}

Dists LossMeanOp::inferResultDistributions() {
  Value parts = getParts();
  if (failed(notPartial(*this, "the loss's sum and count", parts,
                        "a mean of partial sums is not the mean")) ||
      failed(replicated(*this, "the loss's sum and count", parts)))
    return failure();
  return SmallVector<DistAttr>{getDist(parts)};
}

Dists TokenCountOp::inferResultDistributions() {
  Value mask = getLossMask();
  if (failed(notPartial(*this, "the loss mask", mask,
                        "masks are never partial")))
    return failure();
  return one(make(*this, mask, {}, axesOfDims(mask, {0, 1})));
}

// Any distribution can become any other (tfm-reshard-to-collectives says
// how); the op's verifier checks that both are one tensor.
Dists ReshardOp::inferResultDistributions() {
  return SmallVector<DistAttr>{getDist(getResult())};
}

Dists PermuteChunksOp::inferResultDistributions() {
  Value x = getInput();
  int64_t d = getDim();
  // Within a hierarchical ring level's layout (no distribution) the order
  // is the ring's own, which no distribution names.
  if (!getDist(x))
    return SmallVector<DistAttr>{DistAttr()};
  DimDist in = getDist(x).getDim(d);
  if (!in.isWhole())
    return emitOpError() << "the input is " << of(x)
                         << "; only a whole dim can be reordered";
  DimDist out{{}, composeChunkOrders(in.chunks, getOrder())};
  return SmallVector<DistAttr>{getDist(x).withDim(d, out)};
}

//===----------------------------------------------------------------------===//
// Ring attention, per rank (tfm-expand-ring-attention)
//===----------------------------------------------------------------------===//
//
// The ring's values are split on the sequence over the ring's axis alone,
// in the load-balanced order, like the queries: a block passed around the
// ring is another rank's piece of the same split, so its type stays that of
// the rank's own. Hierarchical a2a+p2p runs its ring (`level 1`) on values
// in a layout no #tfm.dist names (A times the tokens, A times fewer heads):
// they carry none, enter it only through tfm.level_all_to_all and leave it
// the same way, and tfm-verify-distribution lets only these ops read them.

namespace {

/// Checks that ring values on `axis` are split on the sequence (dim `dim`)
/// over it alone, in the load-balanced order of its size (2 chunks a
/// rank), and not partial.
LogicalResult ringSplit(Operation *op, StringRef what, Value v, StringRef axis,
                        int64_t dim = kSeqDim) {
  DistAttr d = getDist(v);
  if (failed(notPartial(op, what, v, "ring values are whole values")))
    return failure();
  FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(op, d.getMesh());
  if (failed(mesh))
    return failure();
  if (!mesh->index(axis))
    return op->emitOpError() << "the ring's axis " << axis
                             << " is not an axis of the mesh";
  DimDist seq = d.getDim(dim);
  std::optional<int64_t> pairs = zigzagPairs(seq.chunks);
  if (seq.axes != ArrayRef<StringRef>{axis} || !pairs ||
      *pairs != mesh->size(axis))
    return op->emitOpError()
           << what << " is " << of(v) << "; the ring over " << axis
           << " needs dim " << dim
           << " split over it alone, in the load-balanced order of 2 chunks "
              "per rank";
  return success();
}

/// Ring values of a hierarchical ring's level carry no distribution;
/// values of the plain ring carry the ring's split.
LogicalResult ringValue(Operation *op, StringRef what, Value v, StringRef axis,
                        bool level) {
  if (level) {
    if (getDist(v))
      return op->emitOpError()
             << what << " is " << of(v)
             << "; a level of a hierarchical ring works in the ring's own "
                "layout, which carries no distribution (enter it with "
                "tfm.level_all_to_all)";
    return success();
  }
  if (!getDist(v))
    return op->emitOpError()
           << what << " has no distribution; outside a hierarchical level "
              "the ring's values are split on the sequence";
  return ringSplit(op, what, v, axis);
}

/// A section's results: the output like the query, the log-sum-exp
/// [B, N, S] from its dims (none in a level's layout).
Dists sectionOperands(Operation *op, Value q, Value k, Value v, Value tokens,
                      StringRef axis, bool level) {
  for (auto [what, val] : {std::pair<StringRef, Value>{"the query", q},
                           {"the key", k},
                           {"the value", v}})
    if (failed(ringValue(op, what, val, axis, level)))
      return failure();
  if (tokens && failed(wholeDim(op, "the tokens", tokens, kSeqDim,
                                "document masks need the whole sequence's "
                                "tokens")))
    return failure();
  if (level)
    return SmallVector<DistAttr>{DistAttr(), DistAttr()};
  if (failed(sameDims(op, "the key", k, {0, 1, 2}, "the value", v, {0, 1, 2},
                      "batch, sequence and head")) ||
      failed(sameDims(op, "the key", k, {0, 1}, "the query", q, {0, 1})))
    return failure();
  SmallVector<DimDist> qd = dimsOf(q);
  FailureOr<DistAttr> stats = make(op, q, {qd[kBatchDim], qd[2], qd[kSeqDim]}, {});
  if (failed(stats))
    return failure();
  return SmallVector<DistAttr>{getDist(q), *stats};
}

/// Accumulators (`merge`, `grads`) must be distributed as the results they
/// are folded into.
LogicalResult accumulators(Operation *op, StringRef what, ValueRange acc,
                           ArrayRef<DistAttr> want) {
  if (acc.empty())
    return success();
  for (auto [i, pair] : llvm::enumerate(llvm::zip(acc, want)))
    if (getDist(std::get<0>(pair)) != std::get<1>(pair))
      return op->emitOpError()
             << what << " #" << i << " is " << of(std::get<0>(pair))
             << " but folds into a result that is "
             << describe(std::get<1>(pair));
  return success();
}

} // namespace

Dists RingShiftOp::inferResultDistributions() {
  bool level = getLevel().has_value();
  for (Value v : getInputs())
    if (failed(ringValue(*this, "an input", v, getAxis(), level)))
      return failure();
  SmallVector<DistAttr> out;
  for (Value v : getInputs())
    out.push_back(getDist(v));
  return out;
}

Dists AttentionSectionOp::inferResultDistributions() {
  bool level = getLevel().has_value();
  Dists out = sectionOperands(*this, getQuery(), getKey(), getValue(),
                              getTokens(), getAxis(), level);
  if (failed(out) ||
      failed(accumulators(*this, "the merged result", getMerge(), *out)))
    return failure();
  return out;
}

Dists AttentionSectionGradOp::inferResultDistributions() {
  bool level = getLevel().has_value();
  Dists fwd = sectionOperands(*this, getQuery(), getKey(), getValue(),
                              getTokens(), getAxis(), level);
  if (failed(fwd))
    return failure();
  for (auto [what, val, want] :
       {std::tuple<StringRef, Value, DistAttr>{"the output", getOut(),
                                               (*fwd)[0]},
        {"the log-sum-exp", getLse(), (*fwd)[1]},
        {"the output gradient", getOutGrad(), (*fwd)[0]}})
    if (getDist(val) != want)
      return emitOpError() << what << " is " << of(val)
                           << " but the query gives " << describe(want);
  // The gradients of the block come back to it with its k and v (the ring
  // passes them along): distributed as the block.
  SmallVector<DistAttr> out{getDist(getQuery()), getDist(getKey()),
                            getDist(getValue())};
  if (failed(accumulators(*this, "the gradient accumulator", getGrads(), out)))
    return failure();
  return out;
}

Dists LevelAllToAllOp::inferResultDistributions() {
  // Into a level's layout (the input distributed, the result not) or back
  // out of it (the reverse): the distributed side is split over the ring's
  // axis on the dim the exchange concatenates (in) or splits (out).
  Value in = getInput(), out = getResult();
  DistAttr id = getDist(in), od = getDist(out);
  if (bool(id) == bool(od))
    return emitOpError()
           << "moves a value " << (id ? "that is distributed" : "without a distribution")
           << " to one " << (od ? "that is distributed" : "without one")
           << "; it moves values into a hierarchical ring level's layout "
              "(which carries no distribution) or out of it";
  if (id) {
    if (failed(ringSplit(*this, "the input", in, getAxis(),
                         int64_t(getConcatDim()))))
      return failure();
    return SmallVector<DistAttr>{DistAttr()};
  }
  if (failed(ringSplit(*this, "the result", out, getAxis(),
                       int64_t(getSplitDim()))))
    return failure();
  return SmallVector<DistAttr>{od};
}

//===----------------------------------------------------------------------===//
// Upstream mesh collectives
//===----------------------------------------------------------------------===//

namespace {

bool endsWith(ArrayRef<StringRef> list, ArrayRef<StringRef> suffix) {
  return list.size() >= suffix.size() &&
         list.take_back(suffix.size()) == suffix;
}

std::string names(ArrayRef<StringRef> axes) {
  std::string s;
  llvm::raw_string_ostream os(s);
  llvm::interleave(axes, os, ", ");
  return s;
}

/// `in` without the partial axes `axes`, which it must be partial over.
FailureOr<DistAttr> reduced(Operation *op, DistAttr in,
                            ArrayRef<StringRef> axes,
                            mesh::ReductionKind reduction) {
  SmallVector<StringRef> partial = in.getPartialAxes();
  for (StringRef a : axes)
    if (!llvm::is_contained(partial, a))
      return op->emitOpError() << "reduces over " << a << " a value that is "
                               << describe(in) << ", not partial over " << a;
  if (in.getReduction() != reduction)
    return op->emitOpError() << "reduces a value that is " << describe(in)
                             << " with another reduction ("
                             << mesh::stringifyReductionKind(reduction)
                             << ")";
  llvm::erase_if(partial,
                 [&](StringRef a) { return llvm::is_contained(axes, a); });
  return in.withPartial(partial, in.getReduction());
}

/// The rule of a mesh collective, by the names of its mesh axes.
template <typename OpT>
struct CollectiveRule
    : DistributedOpInterface::ExternalModel<CollectiveRule<OpT>, OpT> {
  Dists inferResultDistributions(Operation *o) const {
    auto op = cast<OpT>(o);
    DistAttr in = getDist(op.getInput());
    if (in.getMesh() != op.getMeshAttr())
      return op.emitOpError() << "runs on mesh " << op.getMeshAttr()
                              << " but its input is distributed over "
                              << in.getMesh();
    FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(o, op.getMeshAttr());
    if (failed(mesh))
      return failure();
    SmallVector<StringRef> axes;
    for (mesh::MeshAxis a : op.getMeshAxes())
      axes.push_back(mesh->name(a));
    return one(rule(op, in, axes));
  }

  FailureOr<DistAttr> rule(mesh::AllReduceOp op, DistAttr in,
                           ArrayRef<StringRef> axes) const {
    return reduced(op, in, axes, op.getReduction());
  }
  FailureOr<DistAttr> rule(mesh::ReduceScatterOp op, DistAttr in,
                           ArrayRef<StringRef> axes) const {
    FailureOr<DistAttr> r = reduced(op, in, axes, op.getReduction());
    if (failed(r))
      return failure();
    int64_t d = op.getScatterAxis().getSExtValue();
    return r->withAxes(d, concat(r->getAxes(d), axes));
  }
  FailureOr<DistAttr> rule(mesh::AllGatherOp op, DistAttr in,
                           ArrayRef<StringRef> axes) const {
    int64_t d = op.getGatherAxis().getSExtValue();
    SmallVector<StringRef> split = in.getAxes(d);
    if (!endsWith(split, axes))
      return op.emitOpError() << "gathers dim " << d << " over "
                              << names(axes) << " but the input is "
                              << describe(in);
    split.resize(split.size() - axes.size());
    return in.withAxes(d, split);
  }
  FailureOr<DistAttr> rule(mesh::AllSliceOp op, DistAttr in,
                           ArrayRef<StringRef> axes) const {
    int64_t d = op.getSliceAxis().getSExtValue();
    for (StringRef a : axes)
      if (llvm::is_contained(in.getUsedAxes(), a))
        return op.emitOpError() << "slices over " << a << " a value that is "
                                << describe(in);
    return in.withAxes(d, concat(in.getAxes(d), axes));
  }
  FailureOr<DistAttr> rule(mesh::AllToAllOp op, DistAttr in,
                           ArrayRef<StringRef> axes) const {
    int64_t concatDim = op.getConcatAxis().getSExtValue();
    int64_t splitDim = op.getSplitAxis().getSExtValue();
    SmallVector<StringRef> gathered = in.getAxes(concatDim);
    if (!endsWith(gathered, axes))
      return op.emitOpError() << "concatenates dim " << concatDim << " over "
                              << names(axes) << " but the input is "
                              << describe(in);
    gathered.resize(gathered.size() - axes.size());
    DistAttr mid = in.withAxes(concatDim, gathered);
    return mid.withAxes(splitDim, concat(mid.getAxes(splitDim), axes));
  }
};

} // namespace

void loom::tfm::registerDistributionExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, mesh::MeshDialect *) {
    mesh::AllReduceOp::attachInterface<CollectiveRule<mesh::AllReduceOp>>(
        *ctx);
    mesh::AllGatherOp::attachInterface<CollectiveRule<mesh::AllGatherOp>>(
        *ctx);
    mesh::ReduceScatterOp::attachInterface<
        CollectiveRule<mesh::ReduceScatterOp>>(*ctx);
    mesh::AllSliceOp::attachInterface<CollectiveRule<mesh::AllSliceOp>>(*ctx);
    mesh::AllToAllOp::attachInterface<CollectiveRule<mesh::AllToAllOp>>(*ctx);
  });
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//
//
// Routing decides on each token alone, so the tokens of the routing tensors
// ([batch, seq, ..]) may be split over ranks (context parallelism: each
// rank routes its own chunks), all alike, the last dim whole. Permuted rows
// [N, H] are then each rank's own tokens' rows, split over the same axes on
// dim 0, and a rank's expert counts the partial sum of the micro-batch's.
// The router's losses need the whole micro-batch's counts
// (tfm.moe_route_counts, summed over those axes); each rank computes its
// share, a partial sum. The experts are tensor-parallel as a dense MLP is
// (each expert's gate and up projections column-parallel, its down
// projection row-parallel): the rows' features split between them and the
// combine linear in the rows, so a partial sum passes through it. With
// expert parallelism the experts' weights, their counts and the dispatched
// rows are split alike over the expert mesh's ep axis, between a
// tfm.moe_dispatch and a tfm.moe_combine.

namespace {
/// How the tokens of a [batch, seq, ..] routing tensor are split: its first
/// two dims.
struct TokenSplit {
  DimDist batch, seq;

  /// The axes, batch's first: what the tokens' rows are split over, and
  /// what a per-rank sum over them is partial over.
  SmallVector<StringRef> axes() const {
    SmallVector<StringRef> all(batch.axes.begin(), batch.axes.end());
    all.append(seq.axes.begin(), seq.axes.end());
    return all;
  }
  /// Dim 0 of rows [N, H]: each rank's rows, in rank order.
  DimDist rows() const { return DimDist{axes(), {}}; }
  bool operator==(const TokenSplit &o) const {
    return batch == o.batch && seq == o.seq;
  }
};

/// The token split of the routing operand `v` (`what` names it), which is
/// not partial and whole past its token dims.
FailureOr<TokenSplit> tokensOf(Operation *op, StringRef what, Value v) {
  SmallVector<DimDist> dims = dimsOf(v);
  if (getDist(v).isPartial())
    return op->emitOpError() << what << " is " << of(v)
                             << "; routing operands are never partial";
  for (size_t d = 2; d < dims.size(); ++d)
    if (!dims[d].isWhole() || !dims[d].isNatural())
      return op->emitOpError()
             << what << " is " << of(v)
             << "; only the tokens (batch and sequence) of a routing "
                "operand are split";
  return TokenSplit{dims[0], dims[1]};
}

/// The token split all of `values` share (the first names it in errors).
FailureOr<TokenSplit> tokensAlike(Operation *op, ArrayRef<Value> values,
                                  ArrayRef<StringRef> names) {
  FailureOr<TokenSplit> first = tokensOf(op, names[0], values[0]);
  if (failed(first))
    return failure();
  for (size_t i = 1; i < values.size(); ++i) {
    FailureOr<TokenSplit> t = tokensOf(op, names[i], values[i]);
    if (failed(t))
      return failure();
    if (!(*t == *first))
      return op->emitOpError()
             << names[0] << " (" << of(values[0]) << ") and " << names[i]
             << " (" << of(values[i])
             << ") must split their tokens alike";
  }
  return first;
}

/// A [batch, seq, ..] tensor of `like`'s mesh with tokens split as `t`.
DistAttr tokensDist(Value like, const TokenSplit &t,
                    ArrayRef<StringRef> partial = {}) {
  return DistAttr::replicated(getDist(like).getMesh())
      .withDim(0, t.batch)
      .withDim(1, t.seq)
      .withPartial(partial, mesh::ReductionKind::Sum);
}

/// Rows [N, H] of tokens split as `t`: dim 0 each rank's own rows, the
/// features whole (a partial sum allowed where the op is linear in them).
LogicalResult rowsOfTokens(Operation *op, StringRef what, Value rows,
                           const TokenSplit &t) {
  if (getDist(rows).getDim(0) != t.rows())
    return op->emitOpError()
           << what << " are " << of(rows) << " but the tokens' rows are "
           << describe(DistAttr::replicated(getDist(rows).getMesh())
                           .withDim(0, t.rows()));
  return wholeDim(op, what, rows, 1,
                  "a token's rows are whole on their features");
}
} // namespace

Dists MoeRouteOp::inferResultDistributions() {
  FailureOr<TokenSplit> t = tokensOf(*this, "the logits", getLogits());
  if (failed(t))
    return failure();
  DistAttr d = tokensDist(getLogits(), *t);
  return SmallVector<DistAttr>{d, d};
}
Dists MoeRouteGradOp::inferResultDistributions() {
  FailureOr<TokenSplit> t =
      tokensAlike(*this, {getLogits(), getExperts(), getProbsGrad()},
                  {"the logits", "the experts", "the probs' gradient"});
  if (failed(t))
    return failure();
  return SmallVector<DistAttr>{tokensDist(getLogits(), *t)};
}
Dists MoeRouteCountsOp::inferResultDistributions() {
  // A sum over the tokens: partial where they are split.
  FailureOr<TokenSplit> t = tokensOf(*this, "the experts", getExperts());
  if (failed(t))
    return failure();
  return SmallVector<DistAttr>{DistAttr::replicated(getDist(getExperts()).getMesh())
                                   .withPartial(t->axes())};
}
Dists MoeRouterLossOp::inferResultDistributions() {
  // Sums over the tokens given the whole micro-batch's counts: each rank's
  // share where the tokens are split.
  FailureOr<TokenSplit> t = tokensOf(*this, "the logits", getLogits());
  if (failed(t) ||
      failed(replicated(*this, "the micro-batch's expert counts", getCounts())))
    return failure();
  DistAttr share = DistAttr::replicated(getDist(getLogits()).getMesh())
                       .withPartial(t->axes());
  return SmallVector<DistAttr>{share, share};
}
Dists MoeRouterLossGradOp::inferResultDistributions() {
  FailureOr<TokenSplit> t = tokensOf(*this, "the logits", getLogits());
  if (failed(t) ||
      failed(replicated(*this, "the micro-batch's expert counts",
                        getCounts())) ||
      failed(replicated(*this, "the loss gradient", getGrad())))
    return failure();
  return SmallVector<DistAttr>{tokensDist(getLogits(), *t)};
}
Dists MoeDropOp::inferResultDistributions() {
  FailureOr<TokenSplit> t = tokensAlike(*this, {getProbs(), getExperts()},
                                        {"the probs", "the experts"});
  if (failed(t))
    return failure();
  return SmallVector<DistAttr>{tokensDist(getExperts(), *t)};
}
Dists MoePermuteOp::inferResultDistributions() {
  FailureOr<TokenSplit> t = tokensAlike(*this, {getInput(), getExperts()},
                                        {"the tokens", "the experts"});
  if (failed(t))
    return failure();
  FlatSymbolRefAttr mesh = getDist(getInput()).getMesh();
  DistAttr rows = DistAttr::replicated(mesh).withDim(0, t->rows());
  DistAttr counts = DistAttr::replicated(mesh).withPartial(t->axes());
  return SmallVector<DistAttr>{rows, counts, tokensDist(getExperts(), *t)};
}
Dists MoePermuteGradOp::inferResultDistributions() {
  // A sum of each token's rows: linear in them.
  FailureOr<TokenSplit> t = tokensOf(*this, "the row map", getRowMap());
  if (failed(t) ||
      failed(rowsOfTokens(*this, "the rows' gradient", getRowsGrad(), *t)) ||
      failed(sumsOnly(*this, "the rows' gradient", getRowsGrad(),
                      "the sum of a token's rows")))
    return failure();
  return SmallVector<DistAttr>{
      tokensDist(getRowMap(), *t, getDist(getRowsGrad()).getPartialAxes())};
}
Dists MoeUnpermuteOp::inferResultDistributions() {
  // Weighted sums of rows: linear in them.
  FailureOr<TokenSplit> t = tokensAlike(*this, {getProbs(), getRowMap()},
                                        {"the probs", "the row map"});
  if (failed(t) || failed(rowsOfTokens(*this, "the rows", getRows(), *t)) ||
      failed(sumsOnly(*this, "the rows", getRows(), "a weighted sum of rows")))
    return failure();
  return SmallVector<DistAttr>{
      tokensDist(getProbs(), *t, getDist(getRows()).getPartialAxes())};
}
Dists MoeUnpermuteGradOp::inferResultDistributions() {
  // drows = probs * dout (dout whole on features); dprobs = <dout, rows>, a
  // partial sum where the rows are.
  FailureOr<TokenSplit> t = tokensAlike(
      *this, {getProbs(), getRowMap(), getGrad()},
      {"the probs", "the row map", "the output gradient"});
  if (failed(t) || failed(rowsOfTokens(*this, "the rows", getRows(), *t)) ||
      failed(sumsOnly(*this, "the rows", getRows(), "a weighted sum of rows")))
    return failure();
  DistAttr rows = DistAttr::replicated(getDist(getRows()).getMesh())
                      .withDim(0, t->rows());
  return SmallVector<DistAttr>{
      rows, tokensDist(getProbs(), *t, getDist(getRows()).getPartialAxes())};
}
// Expert parallelism: the counts exchange's result is the same on every
// rank of the ep group (each rank's own counts, concatenated); a dispatch
// splits the rows and counts it returns over the group's axis (each rank
// holds its experts' rows), and a combine returns rows in the token order
// of the rank that sent them, as the dispatch's input was.
Dists MoeGatherCountsOp::inferResultDistributions() {
  DistAttr in = getDist(getCounts());
  if (!in.getSplit().empty() ||
      (in.isPartial() && in.getReduction() != mesh::ReductionKind::Sum))
    return emitOpError() << "the counts are " << of(getCounts())
                         << " but must be each rank's own (replicated, or "
                            "a partial sum over the ranks its tokens are "
                            "split over)";
  return SmallVector<DistAttr>{in.withoutPartial()};
}
Dists MoeDispatchOp::inferResultDistributions() {
  DistAttr rows = getDist(getRows());
  if (rows.isPartial() || !rows.getDim(0).isNatural())
    return emitOpError() << "the dispatch's input is " << of(getRows())
                         << "; it takes each rank's own rows";
  if (failed(wholeDim(*this, "the dispatch's input", getRows(), 1,
                      "the rows are dispatched whole on their features")) ||
      failed(replicated(*this, "the counts", getAllCounts())))
    return failure();
  DistAttr split = DistAttr::replicated(getMeshAttr()).withAxes(0, {getAxis()});
  return SmallVector<DistAttr>{split, split};
}
Dists MoeCombineOp::inferResultDistributions() {
  // Linear in the rows: a partial sum over the expert tp group (a
  // row-parallel expert's output) stays one, over the dense world's group
  // of that name (the same ranks: etp = tp). The rows return split as the
  // dispatch of the same counts took them (each rank's own).
  DistAttr in = getDist(getDispatched());
  DistAttr want =
      DistAttr::replicated(getMeshAttr()).withAxes(0, {getAxis()});
  if (in.withoutPartial() != want)
    return emitOpError() << "the dispatched rows are " << of(getDispatched())
                         << " but must be " << describe(want);
  if (failed(sumsOnly(*this, "the dispatched rows", getDispatched(),
                      "a combine")) ||
      failed(replicated(*this, "the counts", getAllCounts())))
    return failure();
  std::optional<DimDist> rows;
  for (Operation *user : getAllCounts().getUsers())
    if (auto dispatch = dyn_cast<MoeDispatchOp>(user))
      if (DistAttr d = getDist(dispatch.getRows()))
        rows = d.getDim(0);
  if (!rows)
    return emitOpError() << "returns rows that no distributed tfm.moe_dispatch "
                            "of the same counts took";
  return SmallVector<DistAttr>{getDist(getAllCounts())
                                   .withDim(0, *rows)
                                   .withPartial(in.getPartialAxes(),
                                                in.getReduction())};
}

/// The experts' split. Under expert parallelism the weight [experts, ..] is
/// split on dim 0 (over ep) with the rows and the counts split alike (a
/// dispatch's results). Otherwise the experts are whole and the rows either
/// whole or each rank's own tokens' rows (split on dim 0 over the tokens'
/// axes), the counts then each rank's own: a partial sum over those axes.
/// Returns those axes (none for dispatched or whole rows).
static FailureOr<SmallVector<StringRef>>
expertsAlike(Operation *op, Value rows, Value weight, Value counts,
             ArrayRef<Value> moreRows = {}) {
  DimDist w = getDist(weight).getDim(0);
  DistAttr cd = getDist(counts);
  if (!w.isNatural() || !cd.getDim(0).isNatural())
    return op->emitOpError() << "the weight is " << of(weight)
                             << " and the counts " << of(counts)
                             << "; the experts are never reordered";
  if (cd.getDim(0) != w || getDist(weight).getMesh() != cd.getMesh())
    return op->emitOpError()
           << "the weight is " << of(weight) << " and the expert counts "
           << of(counts) << "; the experts must be split alike";
  SmallVector<Value> all = {rows};
  all.append(moreRows.begin(), moreRows.end());
  if (!w.isWhole()) {
    for (Value r : all)
      if (getDist(r).getDim(0) != w ||
          getDist(r).getMesh() != getDist(weight).getMesh())
        return op->emitOpError()
               << "the rows are " << of(r) << " and the weight " << of(weight)
               << "; the rows of split experts are dispatched rows, split as "
                  "the experts are (tfm.moe_dispatch)";
    // The counts say how many rows each expert has: nothing else of them
    // is split.
    if (cd.isPartial())
      return op->emitOpError() << "the expert counts are " << of(counts)
                               << "; the counts of dispatched rows are never "
                                  "partial";
    return SmallVector<StringRef>{};
  }
  DimDist own = getDist(rows).getDim(0);
  for (Value r : all)
    if (getDist(r).getDim(0) != own || !own.isNatural() ||
        getDist(r).getMesh() != getDist(weight).getMesh())
      return op->emitOpError()
             << "the rows are " << of(r) << " and " << of(rows)
             << "; whole experts take whole rows or each rank's own rows, "
                "all alike";
  if ((cd.isPartial() && cd.getReduction() != mesh::ReductionKind::Sum) ||
      cd.getPartialAxes() != own.axes)
    return op->emitOpError()
           << "the expert counts are " << of(counts) << " and the rows "
           << of(rows)
           << "; a rank's counts are those of its own rows (a partial sum "
              "over the axes the rows are split over)";
  return SmallVector<StringRef>(own.axes.begin(), own.axes.end());
}

Dists GroupedLinearOp::inferResultDistributions() {
  // Each expert's linear, tensor-parallel as LinearOp: x [rows, in],
  // W [experts, out, in] -> y [rows, out]; with expert parallelism the
  // experts, their counts and the dispatched rows split alike on dim 0.
  Value x = getInput(), w = getWeight();
  if (failed(notPartial(*this, "the weight", w,
                        "parameters are never partial sums")) ||
      failed(expertsAlike(*this, x, w, getCounts())))
    return failure();
  if (failed(sumsOnly(*this, "the input", x, "a linear map")))
    return failure();
  DistAttr xd = getDist(x);
  SmallVector<DimDist> xs = dimsOf(x), ws = dimsOf(w);
  if (xs[1] != ws[2])
    return emitOpError() << "the input is " << of(x) << " and the weight "
                         << of(w)
                         << ": the input's features and the weight's "
                            "in-features must be split alike";
  return one(make(*this, x, {xs[0], ws[1]},
                  concat(xd.getPartialAxes(), xs[1].axes)));
}
Dists GroupedLinearGradOp::inferResultDistributions() {
  Value x = getInput(), w = getWeight(), dy = getGrad();
  if (failed(notPartial(*this, "the weight", w,
                        "parameters are never partial sums")) ||
      failed(notPartial(*this, "the input", x,
                        "the weight's gradient would be a product of sums")) ||
      failed(notPartial(*this, "the output gradient", dy,
                        "the weight's gradient would be a product of sums")))
    return failure();
  FailureOr<SmallVector<StringRef>> ownRows =
      expertsAlike(*this, x, w, getCounts(), {dy});
  if (failed(ownRows))
    return failure();
  SmallVector<DimDist> xs = dimsOf(x), ws = dimsOf(w), gs = dimsOf(dy);
  if (gs[1] != ws[1] || xs[1] != ws[2])
    return emitOpError() << "the input (" << of(x) << "), the weight ("
                         << of(w) << ") and the output gradient (" << of(dy)
                         << ") must split the features alike";
  // dx = dy W[e]: a sum over the out-features; dW[e] = dy^T x over the
  // rows this rank holds (every row of its experts, or its own tokens'
  // rows: then a partial sum over the ranks that hold the others).
  FailureOr<DistAttr> dx = make(*this, x, {xs[0], ws[2]}, gs[1].axes);
  FailureOr<DistAttr> dw = make(*this, w, {ws[0], gs[1], xs[1]}, *ownRows);
  if (failed(dx) || failed(dw))
    return failure();
  return SmallVector<DistAttr>{*dx, *dw};
}
/// A gate [.., 1] of `x` [.., H]: its tokens split as x's (context
/// parallelism), its last dim whole, not partial.
static LogicalResult gateOf(Operation *op, Value gate, Value x) {
  int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  SmallVector<int64_t> tokens = llvm::to_vector(llvm::seq<int64_t>(0, rank - 1));
  if (failed(notPartial(op, "the gate", gate, "a gate is never partial")) ||
      failed(wholeDim(op, "the gate", gate, rank - 1,
                      "a token's gate is whole")))
    return failure();
  return sameDims(op, "the gate", gate, tokens, "the input", x, tokens,
                  "token");
}

Dists SigmoidGateOp::inferResultDistributions() {
  // input * sigmoid(gate): linear in the input (a partial sum stays one,
  // split features stay split); the gate whole on its tokens' dims.
  if (failed(gateOf(*this, getGate(), getInput())))
    return failure();
  return SmallVector<DistAttr>{getDist(getInput())};
}
Dists SigmoidGateGradOp::inferResultDistributions() {
  // dx = dout * s (dout whole on features, like the result); dgate = sum
  // over the features of dout * x * s': partial where x is, or where its
  // features are split.
  Value x = getInput();
  DistAttr xd = getDist(x);
  int64_t last = cast<RankedTensorType>(x.getType()).getRank() - 1;
  SmallVector<int64_t> tokens = llvm::to_vector(llvm::seq<int64_t>(0, last));
  if (failed(gateOf(*this, getGate(), x)) ||
      failed(notPartial(*this, "the output gradient", getGrad(),
                        "the gate's gradient would be a product of sums")) ||
      failed(wholeDim(*this, "the output gradient", getGrad(), last,
                      "the output gradient is whole on its features")) ||
      failed(sameDims(*this, "the output gradient", getGrad(), tokens,
                      "the input", x, tokens, "token")))
    return failure();
  if (failed(sumsOnly(*this, "the input", x, "the gate's gradient")))
    return failure();
  FailureOr<DistAttr> dgate =
      make(*this, x, dimsOf(getGate()),
           concat(xd.getPartialAxes(), xd.getAxes(last)));
  if (failed(dgate))
    return failure();
  return SmallVector<DistAttr>{getDist(getGrad()), *dgate};
}
