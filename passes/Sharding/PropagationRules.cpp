//===- PropagationRules.cpp - Megatron's choices, op by op ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// How tfm-propagate-distribution distributes each op (one
// PropagationOpInterface model per op): the distributions it needs its
// operands in, given those they arrive with. These are Megatron-LM's tensor
// and sequence parallelism, read off the data flow:
//
//   linear(x whole on features)  column-parallel: W split on dim 0 over tp
//   linear(x features over tp)   row-parallel: W split on dim 1, a partial
//                                sum out, the bias added after the reduction
//   norms, residual adds         the residual stream (whole, or with SP the
//                                sequence split over tp)
//   embedding of token ids       vocab-parallel table, a partial sum out
//   cross_entropy of split logits  vocab-parallel pieces, statistics reduced
//   or of split rows             the loss's sum and token count reduced
//   attention of split queries   context parallelism by the layer's
//                                cp_comm_type (k and v gathered whole)
//
// What an op computes given those choices is its distribution rule's
// (dialects/Tfm/TfmDistributionRules.cpp); every rule here ends by typing
// the results with it.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Propagation.h"

#include "mlir/IR/DialectRegistry.h"

using namespace mlir;
using namespace loom;
using namespace loom::tfm;
using loom::sharding::Propagation;
using loom::sharding::PropagationOpInterface;

namespace {

int64_t rankOf(Value v) { return cast<RankedTensorType>(v.getType()).getRank(); }

/// Requires operand `i` of `op` in the residual stream's layout.
LogicalResult requireResidual(Propagation &p, Operation *op, unsigned i) {
  FailureOr<DistAttr> want = p.residual(op->getOperand(i), op);
  return failed(want) ? failure() : p.require(op, i, *want);
}

LogicalResult requireReplicated(Propagation &p, Operation *op, unsigned i) {
  return p.require(op, i, p.replicated());
}

/// `d` with dim `dim` distributed as `like`'s dim `likeDim`.
DistAttr dimLike(DistAttr d, int64_t dim, DistAttr like, int64_t likeDim) {
  return d.withDim(dim, like.getDim(likeDim));
}

/// `v` (rows [N, H] or tokens [B, S, H]) with its partial axes kept, its
/// other dims whole over tp but kept split over cp (each rank's own tokens,
/// or their rows; over tp too where ranks route their own), the features
/// whole.
DistAttr linearOperandDist(Propagation &p, Value v) {
  DistAttr d = getDist(v);
  DistAttr tokens = p.routesLocalTokens() ? d : p.wholeOverTp(d);
  DistAttr kept = DistAttr::replicated(d.getMesh());
  for (int64_t i = 0; i + 1 < rankOf(v); ++i)
    kept = kept.withDim(i, tokens.getDim(i));
  return kept.withPartial(d.getPartialAxes(), d.getReduction());
}

template <typename Concrete, typename OpT>
using Model = PropagationOpInterface::ExternalModel<Concrete, OpT>;

//===----------------------------------------------------------------------===//
// Linear layers
//===----------------------------------------------------------------------===//

/// What a linear's result `v` feeds.
enum class Feeds { Other, Router, Gate };

/// Whether `v` is a router's logits (read by routing) or a gate (read by a
/// sigmoid gate), perhaps also saved for the backward: every token's whole
/// row is needed there, so its linear is not split.
Feeds feedsRouting(Value v) {
  Feeds feeds = Feeds::Other;
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (isa<MoeRouteOp, MoeRouterLossOp, MoeRouteGradOp, MoeRouterLossGradOp>(
            user))
      feeds = Feeds::Router;
    else if (isa<SigmoidGateOp>(user) && use.getOperandNumber() == 1)
      feeds = Feeds::Gate;
    else if (!isa<YieldOp>(user))
      return Feeds::Other;
  }
  return feeds;
}

struct LinearRule : Model<LinearRule, LinearOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<LinearOp>(o);
    if (p.tp().empty())
      return failure(failed(p.requireAsIs(o)) || failed(p.inferResults(o)));
    Value x = op.getInput();
    int64_t rank = rankOf(x);
    // A router or a gate: a replicated weight on the tokens routing takes
    // (whole over tp, or a rank's own where it routes those), or that the
    // gated output has (whole over tp).
    if (Feeds feeds = feedsRouting(op.getResult()); feeds != Feeds::Other) {
      FailureOr<DistAttr> in = feeds == Feeds::Router
                                   ? p.routingTokens(x, o)
                                   : FailureOr<DistAttr>(p.wholeOverTp(getDist(x)));
      if (failed(in) || failed(p.require(o, 0, *in)) ||
          failed(p.require(o, 1, p.replicated())) ||
          (op.getBias() && failed(p.require(o, 2, p.replicated()))))
        return failure();
      return p.inferResults(o);
    }
    if (p.featuresSplit(x))
      return rowParallel(op, p);
    // Column-parallel: the input whole over tp (all-gathered with SP,
    // reduced if partial), the weight's out-features split.
    int64_t out = cast<RankedTensorType>(op.getWeight().getType()).getDimSize(0);
    if (out % p.tpRanks() != 0)
      return op.emitError() << "out_features " << out
                            << " of a column-parallel linear is not "
                               "divisible by tp "
                            << p.tpRanks();
    DistAttr in = p.wholeOverTp(getDist(x));
    if (failed(p.require(o, 0, in)))
      return failure();
    DistAttr w = dimLike(p.replicated(), 1, in, rank - 1).withAxes(0, {p.tp()});
    if (failed(p.require(o, 1, w)) ||
        (op.getBias() &&
         failed(p.require(o, 2, p.replicated().withDim(0, w.getDim(0))))))
      return failure();
    return p.inferResults(o);
  }

  /// Row-parallel: the weight's in-features split like the input's
  /// features, a partial sum out. A bias is added once, after the sum is
  /// reduced into the residual stream's layout (Megatron's RowParallelLinear
  /// adds it after the all-reduce or reduce-scatter).
  LogicalResult rowParallel(LinearOp op, Propagation &p) const {
    Value x = op.getInput();
    DistAttr w = dimLike(p.replicated(), 1, getDist(x), rankOf(x) - 1);
    if (failed(p.require(op, 1, w)))
      return failure();
    if (!op.getBias())
      return p.inferResults(op);
    OpBuilder &b = p.builder();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op);
    auto partial = b.create<LinearOp>(op.getLoc(), op.getType(), x,
                                      op.getWeight(), Value());
    auto biased = b.create<BiasAddOp>(op.getLoc(), op.getType(), partial,
                                      op.getBias());
    op.replaceAllUsesWith(biased.getResult());
    op.erase();
    if (failed(p.inferResults(partial)) ||
        failed(requireResidual(p, biased, 0)) ||
        failed(requireReplicated(p, biased, 1)))
      return failure();
    return p.inferResults(biased);
  }
};

struct LinearGradRule : Model<LinearGradRule, LinearGradOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<LinearGradOp>(o);
    // The forward's decision, read off the weight. The output gradient's
    // tokens are the input's (a key or value gradient summed over the
    // context-parallel ranks' queries is reduce-scattered back here).
    DistAttr w = getDist(op.getWeight());
    Value x = op.getInput();
    int64_t last = rankOf(x) - 1;
    // A router that routes each rank's own tokens: its logits' gradient
    // comes split as the tokens are, over tp too, and so is its input.
    if (p.routesLocalTokens() && w == p.replicated() && last > kSeqDim &&
        llvm::is_contained(getDist(op.getGrad()).getAxes(kSeqDim), p.tp())) {
      DistAttr dyd = getDist(op.getGrad()).withoutPartial();
      if (failed(p.require(o, 0, dyd.withDim(last, DimDist{}))) ||
          failed(p.require(o, 2, dyd)))
        return failure();
      return p.inferResults(o);
    }
    bool row = llvm::is_contained(w.getAxes(1), p.tp());
    // Column-parallel: x whole over tp (gathered again with SP), dy split
    // like the weight's out-features: dx is partial (Megatron's f).
    // Row-parallel: x split like the in-features, dy whole over tp: dx is
    // split (g is the identity in backward).
    DistAttr xd = row ? dimLike(p.wholeOverTp(getDist(x)), last, w, 1)
                      : p.wholeOverTp(getDist(x));
    DistAttr dyd = dimLike(xd, last, w, 0);
    if (failed(p.require(o, 0, xd)) || failed(p.require(o, 2, dyd)))
      return failure();
    return p.inferResults(o);
  }
};

//===----------------------------------------------------------------------===//
// The residual stream
//===----------------------------------------------------------------------===//

template <typename OpT> struct NormRule : Model<NormRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    if (failed(requireResidual(p, o, 0)))
      return failure();
    for (unsigned i = 1; i < o->getNumOperands(); ++i)
      if (failed(requireReplicated(p, o, i)))
        return failure();
    return p.inferResults(o);
  }
};

template <typename OpT> struct NormGradRule : Model<NormGradRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    // x, w, dy: the input and its gradient in the residual stream.
    if (failed(requireResidual(p, o, 0)) || failed(requireReplicated(p, o, 1)) ||
        failed(requireResidual(p, o, 2)))
      return failure();
    return p.inferResults(o);
  }
};

struct AddRule : Model<AddRule, AddOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<AddOp>(o);
    // Partial sums add as they are (reduced once, later); anything else
    // that differs meets in the residual stream.
    if (getDist(op.getLhs()) != getDist(op.getRhs()))
      for (unsigned i : {0u, 1u})
        if (failed(requireResidual(p, o, i)))
          return failure();
    return p.inferResults(o);
  }
};

struct DropoutRule : Model<DropoutRule, DropoutOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    // Dropout inside attention or the MLP keeps the split features; hidden
    // dropout runs on the residual stream, after the reduction.
    if (!p.featuresSplit(o->getOperand(0)) && failed(requireResidual(p, o, 0)))
      return failure();
    return p.inferResults(o);
  }
};

struct BiasAddRule : Model<BiasAddRule, BiasAddOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    Value x = o->getOperand(0);
    if (getDist(x).isPartial() && failed(requireResidual(p, o, 0)))
      return failure();
    x = o->getOperand(0);
    if (failed(p.require(o, 1, dimLike(p.replicated(), 0, getDist(x),
                                       rankOf(x) - 1))))
      return failure();
    return p.inferResults(o);
  }
};

//===----------------------------------------------------------------------===//
// Elementwise activations
//===----------------------------------------------------------------------===//

/// Not linear, so no partial sums; the operands meet in the split features
/// when one has them, else whole over tp (but where ranks route their own
/// tokens, on their own tokens' rows: whole experts' activations).
template <typename OpT>
struct ActivationRule : Model<ActivationRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    DistAttr common;
    for (Value v : o->getOperands())
      if (p.featuresSplit(v) && !getDist(v).isPartial())
        common = getDist(v);
    if (!common)
      common = p.routesLocalTokens()
                   ? linearOperandDist(p, o->getOperand(0)).withoutPartial()
                   : p.wholeOverTp(getDist(o->getOperand(0)));
    for (unsigned i = 0; i < o->getNumOperands(); ++i)
      if (failed(p.require(o, i, common)))
        return failure();
    return p.inferResults(o);
  }
};

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

/// The distribution of an embedding table looked up with `ids`: position
/// embeddings stay whole (as in Megatron); a table of token embeddings is
/// vocab-parallel, split on the vocabulary.
FailureOr<DistAttr> tableOf(Propagation &p, Operation *op, Value ids,
                            Type table) {
  if (p.tp().empty() || Propagation::isPositionIds(ids))
    return p.replicated();
  int64_t vocab = cast<RankedTensorType>(table).getDimSize(0);
  if (vocab % p.tpRanks() != 0)
    return op->emitError()
           << "vocabulary size " << vocab << " is not divisible by tp "
           << p.tpRanks()
           << "; pad it (tfm-pad-vocab, which loom-compile runs)";
  return p.replicated().withAxes(0, {p.tp()});
}

/// Looked-up rows are a partial sum over the vocabulary's split.
struct EmbeddingRule : Model<EmbeddingRule, EmbeddingOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<EmbeddingOp>(o);
    FailureOr<DistAttr> table =
        tableOf(p, o, op.getIds(), op.getTable().getType());
    if (failed(table) ||
        failed(p.require(o, 0, p.wholeOverTp(getDist(op.getIds())))) ||
        failed(p.require(o, 1, *table)))
      return failure();
    return p.inferResults(o);
  }
};

/// Every rank scatters every token's gradient into the rows of its slice of
/// the vocabulary (the table's split in forward).
struct EmbeddingGradRule : Model<EmbeddingGradRule, EmbeddingGradOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<EmbeddingGradOp>(o);
    FailureOr<DistAttr> table = tableOf(p, o, op.getIds(), op.getType());
    if (failed(table))
      return failure();
    Propagation::setDist(op.getResult(), *table);
    if (failed(p.require(o, 0, p.wholeOverTp(getDist(op.getIds())))) ||
        failed(p.require(o, 1, p.wholeOverTp(getDist(op.getGrad())))))
      return failure();
    return p.inferResults(o);
  }
};

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Checks the head counts for tp and says whether k and v must be repeated
/// (fewer kv heads than ranks).
template <typename OpT>
FailureOr<bool> repeatKv(OpT op, Propagation &p) {
  int64_t heads = op.getNumHeads(), kv = op.getNumKvHeads(), t = p.tpRanks();
  if (!p.featuresSplit(op.getQuery()))
    return op.emitError() << "attention inputs are replicated; tensor "
                             "parallelism expects q, k and v from "
                             "column-parallel linears";
  if (heads % t != 0)
    return op.emitError() << "num_heads " << heads
                          << " is not divisible by tp " << t;
  if (kv % t != 0 && t % kv != 0)
    return op.emitError() << "num_kv_heads " << kv << " and tp " << t
                          << ": one must divide the other";
  return kv % t != 0;
}

/// Makes k (or v), operand `i` of `op`, one kv head per tp rank: gathered
/// whole, every head repeated tp / kv times, each rank's head taken.
LogicalResult repeatedKv(Operation *op, unsigned i, int64_t kvHeads,
                         int64_t headDim, Propagation &p) {
  if (failed(p.require(op, i, p.wholeOverTp(getDist(op->getOperand(i))))))
    return failure();
  Value whole = op->getOperand(i);
  auto type = cast<RankedTensorType>(whole.getType());
  SmallVector<int64_t> shape(type.getShape());
  int64_t factor = p.tpRanks() / kvHeads;
  shape.back() *= factor;
  OpBuilder &b = p.builder();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(op);
  auto repeated = b.create<RepeatKvOp>(op->getLoc(), type.clone(shape), whole,
                                       factor, headDim);
  op->setOperand(i, repeated);
  if (failed(p.inferResults(repeated)))
    return failure();
  return p.require(op, i, p.featuresOverTp(getDist(repeated), type.getRank()));
}

/// Operands 1 and 2 (k and v) of `op` repeated; one repeat when they are
/// one value.
LogicalResult repeatedKvPair(Operation *op, int64_t kvHeads, int64_t headDim,
                             Propagation &p) {
  bool same = op->getOperand(1) == op->getOperand(2);
  if (failed(repeatedKv(op, 1, kvHeads, headDim, p)))
    return failure();
  if (same) {
    op->setOperand(2, op->getOperand(1));
    return success();
  }
  return repeatedKv(op, 2, kvHeads, headDim, p);
}

/// The cp_comm_type of `op`'s layer when its queries' sequence is split over
/// cp, else none. Fails for what is not implemented yet.
template <typename OpT>
FailureOr<std::optional<rankgen::CpCommType>> cpCommType(OpT op,
                                                         Propagation &p) {
  using rankgen::CpCommType;
  if (!p.sequenceOverCp(op.getQuery()))
    return std::optional<CpCommType>();
  auto block = op->template getParentOfType<BlockOp>();
  int64_t layer = block && block.getIndex() ? *block.getIndex() : 0;
  CpCommType type = p.plan().getCpCommTypeOfLayer(layer);
  if (type == CpCommType::A2AP2P) {
    // TransformerEngine's degenerate cases: a2a groups of one rank are the
    // plain ring, a ring of one group is Ulysses.
    DenseI64ArrayAttr sizes = p.plan().getHierarchicalCpSizes();
    if (!sizes || sizes.size() != 2)
      return op.emitError()
             << "cp_comm_type a2a+p2p (layer " << layer
             << ") takes two hierarchical cp sizes, the a2a group's and the "
                "ring's (--hierarchical-context-parallel-sizes A P)";
    if (sizes[0] == 1)
      type = CpCommType::P2P;
    else if (sizes[1] == 1)
      type = CpCommType::A2A;
  }
  // Document ids need the whole sequence's tokens (few bytes: gathered).
  if (Value tokens = op.getTokens())
    if (failed(p.require(op, op.getTokensMutable()[0].getOperandNumber(),
                         getDist(tokens).withDim(kSeqDim, DimDist()))))
      return failure();
  return std::optional<CpCommType>(type);
}

/// Context parallelism: the queries keep their piece of the sequence; how
/// the keys and values meet them is the layer's cp_comm_type.
///  - `a2a+p2p` (hierarchical): like p2p, with the op marked `a2a A`:
///    tfm-expand-ring-attention writes the all-to-all within each group of
///    A cp ranks and the ring over the groups. The heads of a tp rank must
///    divide over A (TransformerEngine asserts the same).
///  - `allgather` (Megatron/TE's all_gather): k and v gathered whole over
///    cp, in order; in backward they are gathered again and their
///    gradients, partial sums over cp, reduce-scattered back (by the
///    reshards of their uses).
///  - `p2p`: k and v stay split like the queries and the op becomes ring
///    attention over cp (tfm-expand-ring-attention writes the ring).
///  - `a2a` (Ulysses): after tensor parallelism, ulysses() below.
template <typename OpT>
LogicalResult contextParallel(OpT op, Propagation &p) {
  using rankgen::CpCommType;
  FailureOr<std::optional<CpCommType>> type = cpCommType(op, p);
  if (failed(type) || !*type || **type == CpCommType::A2A)
    return failure(failed(type));
  DimDist seq = getDist(op.getQuery()).getDim(kSeqDim);
  bool ring = rankgen::isRing(**type);
  if (ring)
    op.setRingAttr(p.builder().getStringAttr(p.cp()));
  if (**type == CpCommType::A2AP2P) {
    int64_t a2a = p.plan().getHierarchicalCpSizes()[0];
    int64_t tp = p.tpRanks();
    int64_t heads = op.getNumHeads() / tp,
            kv = std::max<int64_t>(1, op.getNumKvHeads() / tp);
    if (heads % a2a != 0 || kv % a2a != 0)
      return op.emitError()
             << "a2a+p2p context parallelism splits each tp rank's " << heads
             << " query and " << kv << " kv heads over a2a groups of " << a2a
             << ", which does not divide them";
    op.setRingA2aAttr(p.builder().getI64IntegerAttr(a2a));
  }
  for (unsigned i : {1u, 2u}) {
    DistAttr d = getDist(op->getOperand(i));
    if (failed(p.require(op, i, d.withDim(kSeqDim, ring ? seq : DimDist()))))
      return failure();
  }
  return success();
}

/// `d` in Ulysses' layout: the sequence gathered and in order (TE's
/// reorder; the kernel's causal mask could take the load-balanced order by
/// positions, but it skips whole masked blocks only in order), the heads
/// split over cp as well.
DistAttr ulyssesLayout(DistAttr d, int64_t rank, StringRef cp) {
  SmallVector<StringRef> heads = d.getAxes(rank - 1);
  heads.push_back(cp);
  return d.withDim(kSeqDim, DimDist()).withAxes(rank - 1, heads);
}

/// `d` back in the residual layout of context parallelism: the sequence
/// split over cp like `like`'s, the heads whole over cp.
DistAttr sequenceLayout(DistAttr d, int64_t rank, DistAttr like, StringRef cp) {
  SmallVector<StringRef> heads = d.getAxes(rank - 1);
  llvm::erase(heads, cp);
  return d.withDim(kSeqDim, like.getDim(kSeqDim)).withAxes(rank - 1, heads);
}

/// Ulysses (a2a, TE's AttnFuncWithCPAndQKVOA2A): the operands `operands`
/// (q, k, v and in backward out and its gradient) are exchanged, heads for
/// sequence, with an all-to-all over cp; each rank attends with its share of
/// the heads over the whole sequence; the results `results` go back the
/// same way. The query heads of a tp rank must divide over cp; kv heads
/// that do not are repeated (TE refuses that case) and, in backward, their
/// copies' gradients summed. Returns the kv repeat factor.
template <typename OpT>
FailureOr<int64_t> ulyssesOperands(OpT op, Propagation &p,
                                   ArrayRef<unsigned> operands) {
  int64_t cp = p.cpRanks(), tp = p.tpRanks();
  int64_t kvHeads = op.getNumKvHeads();
  int64_t heads = op.getNumHeads() / tp, kv = kvHeads / tp;
  if (heads % cp != 0)
    return op.emitError() << "a2a context parallelism splits each tp rank's "
                          << heads << " query heads over cp " << cp
                          << ", which does not divide them";
  if (kvHeads < tp)
    return op.emitError() << "a2a context parallelism with fewer kv heads ("
                          << kvHeads << ") than tp ranks (" << tp
                          << ") is not implemented yet";
  int64_t factor = 1;
  if (kv % cp != 0) {
    if (cp % kv != 0)
      return op.emitError() << "a2a context parallelism: " << kv
                            << " kv heads per tp rank and cp " << cp
                            << ": one must divide the other";
    factor = cp / kv;
    // Each kv head repeated for the cp ranks whose query heads read it.
    bool same = op.getKey() == op.getValue();
    OpBuilder &b = p.builder();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op);
    for (unsigned i : {1u, 2u}) {
      if (i == 2 && same) {
        op->setOperand(2, op->getOperand(1));
        break;
      }
      Value x = op->getOperand(i);
      auto type = cast<RankedTensorType>(x.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape.back() *= factor;
      auto repeated = b.create<RepeatKvOp>(op.getLoc(), type.clone(shape), x,
                                           factor, op.getHeadDim());
      op->setOperand(i, repeated);
      if (failed(p.inferResults(repeated)))
        return failure();
    }
    op.setNumKvHeads(op.getNumKvHeads() * factor);
  }
  for (unsigned i : operands) {
    Value x = op->getOperand(i);
    int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
    if (failed(p.require(op, i, ulyssesLayout(getDist(x), rank, p.cp()))))
      return failure();
  }
  return factor;
}

/// Reshards result `r` of `op` (typed in Ulysses' layout) back to the
/// sequence layout of `like` for its users; with `factor` > 1 then sums the
/// gradients of a kv head's copies.
LogicalResult ulyssesResult(Operation *op, Value r, DistAttr like,
                            int64_t factor, int64_t headDim, Propagation &p) {
  OpBuilder &b = p.builder();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointAfter(op);
  auto type = cast<RankedTensorType>(r.getType());
  DistAttr back = sequenceLayout(getDist(r), type.getRank(), like, p.cp());
  Value v = b.create<ReshardOp>(op->getLoc(), withDist(type, back), r);
  r.replaceAllUsesExcept(v, v.getDefiningOp());
  if (factor == 1)
    return success();
  SmallVector<int64_t> shape(type.getShape());
  shape.back() /= factor;
  auto summed = b.create<RepeatKvGradOp>(op->getLoc(), type.clone(shape), v,
                                         factor, headDim);
  v.replaceAllUsesExcept(summed, summed);
  return p.inferResults(summed);
}

struct AttentionRule : Model<AttentionRule, AttentionOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<AttentionOp>(o);
    auto cp = cpCommType(op, p);
    if (failed(cp) || failed(contextParallel(op, p)))
      return failure();
    if (!p.tp().empty()) {
      FailureOr<bool> repeat = repeatKv(op, p);
      if (failed(repeat))
        return failure();
      if (*repeat) {
        if (failed(repeatedKvPair(o, op.getNumKvHeads(), op.getHeadDim(), p)))
          return failure();
        op.setNumKvHeads(p.tpRanks());
      }
    } else {
      p.settle(o);
    }
    if (*cp != rankgen::CpCommType::A2A)
      return p.inferResults(o);
    DistAttr like = getDist(op.getQuery());
    FailureOr<int64_t> factor = ulyssesOperands(op, p, {0, 1, 2});
    if (failed(factor) || failed(p.inferResults(o)))
      return failure();
    // The log-sum-exp stays in Ulysses' layout: the backward reads it so.
    return ulyssesResult(o, op.getResult(), like, 1, op.getHeadDim(), p);
  }
};

struct AttentionGradRule : Model<AttentionGradRule, AttentionGradOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<AttentionGradOp>(o);
    auto cp = cpCommType(op, p);
    if (failed(cp) || failed(contextParallel(op, p)))
      return failure();
    if (*cp == rankgen::CpCommType::A2A)
      return ulysses(op, p);
    if (p.tp().empty())
      return failure(failed(p.requireAsIs(o)) || failed(p.inferResults(o)));
    FailureOr<bool> repeat = repeatKv(op, p);
    if (failed(repeat))
      return failure();
    if (!*repeat)
      return p.inferResults(o);
    int64_t kv = op.getNumKvHeads(), factor = p.tpRanks() / kv;
    if (failed(repeatedKvPair(o, kv, op.getHeadDim(), p)))
      return failure();
    op.setNumKvHeads(p.tpRanks());
    // The gradients are now those of the repeated k and v.
    op.getKeyGrad().setType(op.getKey().getType());
    op.getValueGrad().setType(op.getValue().getType());
    if (failed(p.inferResults(o)))
      return failure();
    // The gradient of each rank's copy of a head: gathered, and the copies
    // of each head summed, for the whole k and v.
    OpBuilder &b = p.builder();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfter(op);
    for (Value g : {op.getKeyGrad(), op.getValueGrad()}) {
      auto type = cast<RankedTensorType>(g.getType());
      SmallVector<int64_t> shape(type.getShape());
      shape.back() /= factor;
      auto summed = b.create<RepeatKvGradOp>(op.getLoc(), type.clone(shape), g,
                                             factor, op.getHeadDim());
      g.replaceAllUsesExcept(summed, summed);
      if (failed(p.require(summed, 0, p.wholeOverTp(getDist(g)))) ||
          failed(p.inferResults(summed)))
        return failure();
    }
    return success();
  }

  /// Ulysses' backward: q, k, v, the output and its gradient exchanged to
  /// the heads layout (the log-sum-exp is in it already), the gradients
  /// exchanged back.
  static LogicalResult ulysses(AttentionGradOp op, Propagation &p) {
    if (!p.tp().empty()) {
      FailureOr<bool> repeat = repeatKv(op, p);
      if (failed(repeat))
        return failure();
      if (*repeat)
        return op.emitError() << "a2a context parallelism with fewer kv heads "
                                 "than tp ranks is not implemented yet";
    } else {
      p.settle(op);
    }
    DistAttr like = getDist(op.getQuery());
    FailureOr<int64_t> factor = ulyssesOperands(op, p, {0, 1, 2, 3, 5});
    if (failed(factor))
      return failure();
    if (*factor > 1) {
      // The gradients are those of the repeated k and v.
      op.getKeyGrad().setType(op.getKey().getType());
      op.getValueGrad().setType(op.getValue().getType());
    }
    if (failed(p.inferResults(op)))
      return failure();
    if (failed(ulyssesResult(op, op.getQueryGrad(), like, 1, op.getHeadDim(),
                             p)))
      return failure();
    for (Value g : {op.getKeyGrad(), op.getValueGrad()})
      if (failed(ulyssesResult(op, g, like, *factor, op.getHeadDim(), p)))
        return failure();
    return success();
  }
};

/// Position ids reset at documents count from the last end-of-document
/// token before each token, so they are computed from the whole sequence's
/// tokens (gathered: few bytes), then taken apart again like the tokens (a
/// local slice).
struct PositionIdsRule : Model<PositionIdsRule, PositionIdsOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<PositionIdsOp>(o);
    DistAttr tokens = getDist(op.getTokens());
    DimDist seq = tokens.getDim(kSeqDim);
    if (!op.getResetAtEod() || (seq.isWhole() && seq.isNatural())) {
      p.settle(o);
      return p.inferResults(o);
    }
    if (failed(p.require(o, 0, tokens.withDim(kSeqDim, DimDist()))) ||
        failed(p.inferResults(o)))
      return failure();
    OpBuilder &b = p.builder();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfter(op);
    Value whole = op.getResult();
    Value split = b.create<ReshardOp>(op.getLoc(),
                                      withDist(whole.getType(), tokens), whole);
    whole.replaceAllUsesExcept(split, split.getDefiningOp());
    return success();
  }
};

/// Rotations act per head: a feature split that cuts heads is gathered.
template <typename OpT> struct RopeRule : Model<RopeRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<OpT>(o);
    Value x = op.getInput();
    int64_t features = cast<RankedTensorType>(x.getType()).getShape().back();
    if (p.featuresSplit(x) &&
        (features / op.getHeadDim()) % p.tpRanks() != 0 &&
        failed(p.require(o, 0, p.wholeOverTp(getDist(x)))))
      return failure();
    x = op.getInput();
    // A key gradient summed over the context-parallel ranks' queries is
    // reduce-scattered to its tokens first: each rank rotates its own.
    DistAttr pos = getDist(op.getPositions());
    if (getDist(x).isPartial() &&
        failed(p.require(o, 0, getDist(x)
                                   .withoutPartial()
                                   .withDim(0, pos.getDim(0))
                                   .withDim(1, pos.getDim(1)))))
      return failure();
    x = op.getInput();
    if (failed(p.require(o, 1, pos.withDim(0, getDist(x).getDim(0))
                                   .withDim(1, getDist(x).getDim(1)))))
      return failure();
    return p.inferResults(o);
  }
};

//===----------------------------------------------------------------------===//
// The loss
//===----------------------------------------------------------------------===//

/// Whether the rows of the [batch, seq] value `rows` are split over ranks.
bool rowsSplit(Value rows) {
  DistAttr d = getDist(rows);
  return !d.getDim(kBatchDim).isWhole() || !d.getDim(kSeqDim).isWhole();
}

struct CrossEntropyRule : Model<CrossEntropyRule, CrossEntropyOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<CrossEntropyOp>(o);
    Value logits = op.getLogits();
    if (!p.featuresSplit(logits) && !rowsSplit(op.getLabels())) {
      if (failed(p.require(o, 0, p.wholeOverTp(getDist(logits)))))
        return failure();
      return p.inferResults(o);
    }
    // In pieces: row maxima, sums of exponentials and target logits of each
    // slice of the vocabulary, each reduced over its split (Megatron's
    // _VocabParallelCrossEntropy); then the masked sum of row losses and
    // the token count, reduced over the rows' split (context parallelism:
    // Megatron's [loss_sum, num_tokens]), and their quotient.
    // The logits' rows are the labels'.
    DistAttr rows = getDist(op.getLabels());
    if (failed(p.require(o, 0, getDist(logits)
                                   .withDim(kBatchDim, rows.getDim(kBatchDim))
                                   .withDim(kSeqDim, rows.getDim(kSeqDim)))))
      return failure();
    logits = op.getLogits();
    OpBuilder &b = p.builder();
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(op);
    Location loc = op.getLoc();
    Type stats = op.getRowMax().getType();
    IntegerAttr unpadded = op.getUnpaddedVocabSizeAttr(); // padding left out
    auto rowMax = b.create<CeRowMaxOp>(loc, stats, logits, unpadded);
    auto sumExp = b.create<CeSumExpOp>(loc, stats, logits, rowMax, unpadded);
    auto target = b.create<CeTargetLogitOp>(loc, stats, logits, op.getLabels());
    auto parts = b.create<CeLossSumOp>(
        loc, RankedTensorType::get({2}, b.getF32Type()), rowMax, sumExp,
        target, op.getLossMask());
    auto loss = b.create<LossMeanOp>(loc, op.getLoss().getType(), parts);
    if (failed(p.inferResults(rowMax)) ||
        failed(p.require(sumExp, 1, rows)) || failed(p.inferResults(sumExp)) ||
        failed(p.inferResults(target)))
      return failure();
    for (unsigned i = 0; i < 4; ++i)
      if (failed(p.require(parts, i, rows)))
        return failure();
    if (failed(p.inferResults(parts)) ||
        failed(p.require(loss, 0, p.replicated())) ||
        failed(p.inferResults(loss)))
      return failure();
    op.getLoss().replaceAllUsesWith(loss.getLoss());
    op.getRowMax().replaceAllUsesWith(parts.getRowMax());
    op.getSumExp().replaceAllUsesWith(parts.getSumExp());
    op.erase();
    return success();
  }
};

/// Operands that must be whole over tp: the statistics and the loss's
/// gradient; the logits as they arrive. With the rows split, the mean's
/// denominator is the whole batch's token count, reduced over the split.
struct CrossEntropyGradRule
    : Model<CrossEntropyGradRule, CrossEntropyGradOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<CrossEntropyGradOp>(o);
    for (unsigned i = 1; i < o->getNumOperands(); ++i)
      if (failed(p.require(o, i, p.wholeOverTp(getDist(o->getOperand(i))))))
        return failure();
    DistAttr rows = getDist(op.getLabels());
    if (failed(p.require(o, 0,
                         getDist(op.getLogits())
                             .withDim(kBatchDim, rows.getDim(kBatchDim))
                             .withDim(kSeqDim, rows.getDim(kSeqDim)))))
      return failure();
    if (rowsSplit(op.getLabels()) && !op.getCount()) {
      OpBuilder &b = p.builder();
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(op);
      auto count = b.create<TokenCountOp>(op.getLoc(), op.getGrad().getType(),
                                          op.getLossMask());
      op.getCountMutable().assign(count);
      if (failed(p.inferResults(count)) ||
          failed(p.require(o, o->getNumOperands() - 1, p.replicated())))
        return failure();
    }
    return p.inferResults(o);
  }
};

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//
//
// Every rank routes every token (the layer's input gathered whole, as a
// dense MLP's column-parallel input is); the experts are split as a dense
// MLP is: gate and up column-parallel, down row-parallel, so the combine
// gives a partial sum that meets the residual stream by the layer's one
// all-reduce (or reduce-scatter with SP). With experts not split over tp
// (etp 1, with SP) each rank routes its own share of the sequence instead,
// the residual stream's layout throughout, and nothing is gathered.

/// Requires operand `i` of `op`, tokens [batch, seq, ..], as routing takes
/// them (Propagation::routingTokens).
LogicalResult requireRouting(Propagation &p, Operation *op, unsigned i) {
  FailureOr<DistAttr> want = p.routingTokens(op->getOperand(i), op);
  return failed(want) ? failure() : p.require(op, i, *want);
}

/// Routing ops: every operand as routing takes tokens.
template <typename OpT> struct RoutingRule : Model<RoutingRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    for (unsigned i = 0; i < o->getNumOperands(); ++i)
      if (failed(requireRouting(p, o, i)))
        return failure();
    return p.inferResults(o);
  }
};

/// The router's losses: the logits as routing takes them, and the whole
/// micro-batch's expert counts (summed where the tokens are split).
template <typename OpT>
struct RouterLossRule : Model<RouterLossRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<OpT>(o);
    for (unsigned i = 0; i < o->getNumOperands(); ++i)
      if (failed(o->getOperand(i) == op.getCounts()
                     ? p.require(o, i, p.replicated())
                     : requireRouting(p, o, i)))
        return failure();
    return p.inferResults(o);
  }
};

/// Expert parallelism's counts exchange, dispatch and combine: operands as
/// they arrive (the rule says what they must be), results by the rule.
template <typename OpT>
struct ExpertExchangeRule : Model<ExpertExchangeRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    return failure(failed(p.requireAsIs(o)) || failed(p.inferResults(o)));
  }
};

/// Ops linear in operand `Linear` (linearOperandDist: partial sums and
/// token splits kept, features whole); every other operand as routing takes
/// tokens.
template <typename OpT, unsigned Linear>
struct LinearInRule : Model<LinearInRule<OpT, Linear>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    for (unsigned i = 0; i < o->getNumOperands(); ++i)
      if (failed(i == Linear
                     ? p.require(o, i, linearOperandDist(p, o->getOperand(i)))
                     : requireRouting(p, o, i)))
        return failure();
    return p.inferResults(o);
  }
};

/// A sigmoid gate and its gradient: linear in the input (operand 0), whose
/// tokens the gate (and the output gradient) take as they are, whole on
/// their features and not partial.
template <typename OpT> struct GateRule : Model<GateRule<OpT>, OpT> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    DistAttr in = linearOperandDist(p, o->getOperand(0));
    if (failed(p.require(o, 0, in)))
      return failure();
    for (unsigned i = 1; i < o->getNumOperands(); ++i)
      if (failed(p.require(o, i, in.withoutPartial())))
        return failure();
    return p.inferResults(o);
  }
};

struct GroupedLinearRule : Model<GroupedLinearRule, GroupedLinearOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<GroupedLinearOp>(o);
    Value x = op.getInput();
    // Expert parallelism: dispatched rows (split over ep) meet this rank's
    // experts, the weight split on dim 0 as the rows are; with tp each
    // expert is split over the expert mesh's tp axis as a dense MLP is
    // (etp = tp): column-parallel on whole rows, row-parallel on rows whose
    // features are split; or whole (etp 1: ranks route their own tokens).
    if (!p.tp().empty() && !p.routesLocalTokens() &&
        p.plan().routesLocalTokens())
      return op.emitError()
             << "experts not split over tp (expert tensor parallel size 1) "
                "with tp "
             << p.tpRanks()
             << " need sequence parallelism: each tp rank routes its own "
                "share of the sequence";
    if (DimDist rows = getDist(x).getDim(0);
        !getDist(op.getCounts()).getDim(0).isWhole()) {
      DistAttr experts =
          DistAttr::replicated(getDist(x).getMesh()).withDim(0, rows);
      if (!p.tp().empty() && !p.routesLocalTokens()) {
        int64_t out =
            cast<RankedTensorType>(op.getWeight().getType()).getDimSize(1);
        if (p.featuresSplit(x))
          experts = dimLike(experts, 2, getDist(x), 1);
        else if (out % p.tpRanks() != 0)
          return op.emitError() << "the experts' " << out
                                << " out-features are not divisible by tp "
                                << p.tpRanks();
        else
          experts = experts.withAxes(1, {p.tp()});
      }
      return failure(failed(p.require(o, 1, experts)) ||
                     failed(p.requireAsIs(o)) || failed(p.inferResults(o)));
    }
    // Whole experts on whole rows, or on each rank's own tokens' rows (with
    // their own counts) where the tokens are split over cp (or tp).
    if (p.tp().empty() || p.routesLocalTokens())
      return failure(failed(p.requireAsIs(o)) || failed(p.inferResults(o)));
    if (failed(p.require(o, 2, p.wholeOverTp(getDist(op.getCounts())))))
      return failure();
    // Row-parallel (the down projection): the weight's in-features split
    // like the rows' features, a partial sum out.
    if (p.featuresSplit(x))
      return failure(
          failed(p.require(o, 1, dimLike(p.replicated(), 2, getDist(x), 1))) ||
          failed(p.inferResults(o)));
    // Column-parallel (gate and up): rows whole, out-features split.
    int64_t out =
        cast<RankedTensorType>(op.getWeight().getType()).getDimSize(1);
    if (out % p.tpRanks() != 0)
      return op.emitError() << "the experts' " << out
                            << " out-features are not divisible by tp "
                            << p.tpRanks();
    if (failed(p.require(o, 0, p.wholeOverTp(getDist(x)))) ||
        failed(p.require(o, 1, p.replicated().withAxes(1, {p.tp()}))))
      return failure();
    return p.inferResults(o);
  }
};

struct GroupedLinearGradRule
    : Model<GroupedLinearGradRule, GroupedLinearGradOp> {
  LogicalResult propagate(Operation *o, Propagation &p) const {
    auto op = cast<GroupedLinearGradOp>(o);
    // The forward's decision, read off the weight [experts, out, in]: its
    // experts split (over ep) as the rows and counts are, its features as
    // the rows' features are.
    // Whole experts take the rows as the forward did: whole, or each rank's
    // own tokens' rows with their own counts (a partial sum).
    DistAttr w = getDist(op.getWeight());
    DistAttr experts = DistAttr::replicated(w.getMesh()).withDim(0, w.getDim(0));
    DistAttr rows = experts, counts = experts;
    if (w.getDim(0).isWhole()) {
      DimDist own = getDist(op.getInput()).getDim(0);
      rows = experts.withDim(0, own);
      counts = experts.withPartial(own.axes);
    }
    DistAttr xd = dimLike(rows, 1, w, 2);
    DistAttr dyd = dimLike(rows, 1, w, 1);
    if (failed(p.require(o, 0, xd)) || failed(p.require(o, 2, counts)) ||
        failed(p.require(o, 3, dyd)))
      return failure();
    return p.inferResults(o);
  }
};

template <typename... Ops> void attachActivations(MLIRContext *ctx) {
  (Ops::template attachInterface<ActivationRule<Ops>>(*ctx), ...);
}

} // namespace

void sharding::registerPropagationRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, TfmDialect *) {
    LinearOp::attachInterface<LinearRule>(*ctx);
    LinearGradOp::attachInterface<LinearGradRule>(*ctx);
    LayerNormOp::attachInterface<NormRule<LayerNormOp>>(*ctx);
    RmsNormOp::attachInterface<NormRule<RmsNormOp>>(*ctx);
    LayerNormGradOp::attachInterface<NormGradRule<LayerNormGradOp>>(*ctx);
    RmsNormGradOp::attachInterface<NormGradRule<RmsNormGradOp>>(*ctx);
    AddOp::attachInterface<AddRule>(*ctx);
    DropoutOp::attachInterface<DropoutRule>(*ctx);
    BiasAddOp::attachInterface<BiasAddRule>(*ctx);
    attachActivations<GeluOp, GeluGradOp, SiluOp, SiluGradOp, SwigluOp,
                      SwigluGradOp, CastOp>(ctx);
    EmbeddingOp::attachInterface<EmbeddingRule>(*ctx);
    EmbeddingGradOp::attachInterface<EmbeddingGradRule>(*ctx);
    AttentionOp::attachInterface<AttentionRule>(*ctx);
    AttentionGradOp::attachInterface<AttentionGradRule>(*ctx);
    PositionIdsOp::attachInterface<PositionIdsRule>(*ctx);
    RopeOp::attachInterface<RopeRule<RopeOp>>(*ctx);
    RopeGradOp::attachInterface<RopeRule<RopeGradOp>>(*ctx);
    CrossEntropyOp::attachInterface<CrossEntropyRule>(*ctx);
    CrossEntropyGradOp::attachInterface<CrossEntropyGradRule>(*ctx);
    MoeRouteOp::attachInterface<RoutingRule<MoeRouteOp>>(*ctx);
    MoeRouteGradOp::attachInterface<RoutingRule<MoeRouteGradOp>>(*ctx);
    MoeRouteCountsOp::attachInterface<RoutingRule<MoeRouteCountsOp>>(*ctx);
    MoeRouterLossOp::attachInterface<RouterLossRule<MoeRouterLossOp>>(*ctx);
    MoeRouterLossGradOp::attachInterface<RouterLossRule<MoeRouterLossGradOp>>(
        *ctx);
    MoeDropOp::attachInterface<RoutingRule<MoeDropOp>>(*ctx);
    MoePermuteOp::attachInterface<RoutingRule<MoePermuteOp>>(*ctx);
    MoePermuteGradOp::attachInterface<LinearInRule<MoePermuteGradOp, 0>>(
        *ctx);
    MoeUnpermuteOp::attachInterface<LinearInRule<MoeUnpermuteOp, 0>>(*ctx);
    MoeUnpermuteGradOp::attachInterface<LinearInRule<MoeUnpermuteGradOp, 0>>(
        *ctx);
    SigmoidGateOp::attachInterface<GateRule<SigmoidGateOp>>(*ctx);
    SigmoidGateGradOp::attachInterface<GateRule<SigmoidGateGradOp>>(
        *ctx);
    MoeGatherCountsOp::attachInterface<ExpertExchangeRule<MoeGatherCountsOp>>(
        *ctx);
    MoeDispatchOp::attachInterface<ExpertExchangeRule<MoeDispatchOp>>(*ctx);
    MoeCombineOp::attachInterface<ExpertExchangeRule<MoeCombineOp>>(*ctx);
    GroupedLinearOp::attachInterface<GroupedLinearRule>(*ctx);
    GroupedLinearGradOp::attachInterface<GroupedLinearGradRule>(*ctx);
  });
}
