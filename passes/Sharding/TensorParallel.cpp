//===- TensorParallel.cpp - Megatron tensor parallelism ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Walks the program in order and gives every value in a layer block a
// distribution over the tp ranks:
//
//   R       replicated: every rank holds the whole tensor
//   S(d)    split: dim d is divided by tp, rank r holds slice r
//   P       partial sum: the whole tensor is the sum over the ranks
//
// Types are rewritten in place to the local shapes. A P value meets an op
// that needs R through one mesh.all_reduce placed right after it.
//
// With sequence parallelism the residual stream (embedding output, norms,
// residual adds, dropout) is S(1), split on the sequence: a partial sum
// reaches it through a reduce-scatter instead of an all-reduce, a
// column-parallel linear all-gathers its input, and the norms' weight
// gradients (sums over this rank's tokens only) are all-reduced.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

namespace loom::sharding {
#define GEN_PASS_DEF_TFMTENSORPARALLEL
#include "passes/Sharding/Passes.h.inc"
} // namespace loom::sharding

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

struct Dist {
  enum Kind { R, S, P } kind = R;
  int64_t dim = -1; // the split dim of S
  static Dist split(int64_t d) { return {S, d}; }
  static Dist partial() { return {P, -1}; }
  bool isR() const { return kind == R; }
  bool isP() const { return kind == P; }
  bool isS() const { return kind == S; }
};

class TensorParallel {
public:
  TensorParallel(ModuleOp module, int64_t tp, int64_t tpAxis, bool sp,
                 uint64_t &numAllReduces, uint64_t &numSplitParams)
      : module(module), tp(tp), tpAxis(tpAxis), sp(sp), b(module.getContext()),
        numAllReduces(numAllReduces), numSplitParams(numSplitParams) {}

  LogicalResult run(func::FuncOp func);

private:
  Dist get(Value v) const {
    auto it = dist.find(v);
    return it == dist.end() ? Dist() : it->second;
  }
  static int64_t lastDim(Value v) {
    return cast<RankedTensorType>(v.getType()).getRank() - 1;
  }

  /// Marks `v` split on `d` and divides that dim of its type by tp.
  LogicalResult split(Value v, int64_t d, Operation *where);
  /// Decides (or checks) how parameter `get` is split and rewrites it.
  LogicalResult splitParam(Value weight, int64_t d, Operation *user);
  /// The replicated version of `v`: `v` itself, its all-reduce if partial,
  /// its all-gather if split on the sequence.
  Value replicated(Value v);
  /// The sequence-split version of `v` (sequence parallelism): a partial sum
  /// is reduce-scattered, a replicated value sliced.
  FailureOr<Value> seqSplit(Value v, Operation *where);
  /// The layout of the residual stream: sequence-split with SP, else whole.
  FailureOr<Value> residual(Value v, Operation *where) {
    if (sp)
      return seqSplit(v, where);
    // Gathering a feature split (Megatron's gather_output) is not built:
    // no GPT-2 or Llama layer reads a column-parallel output whole.
    if (get(v).isS() && get(v).dim != 1)
      return where->emitError()
             << "needs whole tensors but an operand is split over tp";
    return replicated(v);
  }
  LogicalResult makeResidual(Operation *op, unsigned i) {
    FailureOr<Value> v = residual(op->getOperand(i), op);
    if (failed(v))
      return failure();
    op->setOperand(i, *v);
    return success();
  }
  /// The kv head this rank's query heads read, from whole k or v (when
  /// there are fewer kv heads than tp ranks).
  FailureOr<Value> kvHeadOfRank(Value kvWhole, int64_t kvHeads,
                                int64_t headDim, Operation *where);
  /// Turns the gradient of this rank's kv head into the whole k or v
  /// gradient (all-gather, then sum each head's copies).
  LogicalResult wholeKvGrad(Value localGrad, int64_t kvHeads, int64_t headDim,
                            Operation *where);
  /// Marks the linears producing k and v of attention ops with fewer kv
  /// heads than tp ranks: those stay whole.
  void findWholeKvLinears(Block &body);
  /// Inserts `build(builder)` right after `v`'s definition.
  template <typename BuildFn> Value after(Value v, BuildFn build);
  /// Replaces operand `i` of `op` by its replicated version.
  void makeReplicated(Operation *op, unsigned i) {
    op->setOperand(i, replicated(op->getOperand(i)));
  }
  void makeAllReplicated(Operation *op) {
    for (unsigned i = 0; i < op->getNumOperands(); ++i)
      if (isa<RankedTensorType>(op->getOperand(i).getType()))
        makeReplicated(op, i);
  }

  LogicalResult block(BlockOp block);
  LogicalResult layerOp(Operation *op);

  ModuleOp module;
  int64_t tp, tpAxis;
  bool sp;
  OpBuilder b;
  DenseMap<Value, Dist> dist;
  DenseMap<Value, Value> reduced;   // v -> its whole version
  DenseMap<Value, Value> scattered; // v -> its sequence-split version
  DenseSet<Operation *> wholeLinears; // k/v projections kept replicated
  /// Position ids (from tfm.position_ids, through block boundaries): their
  /// embedding tables are not vocabularies.
  DenseSet<Value> positions;
  llvm::StringMap<int64_t> paramSplit; // -1: replicated
  uint64_t &numAllReduces, &numSplitParams;
};

LogicalResult TensorParallel::split(Value v, int64_t d, Operation *where) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape());
  if (shape[d] % tp != 0)
    return where->emitError() << "dim " << d << " of size " << shape[d]
                              << " is not divisible by tp " << tp;
  shape[d] /= tp;
  v.setType(type.clone(shape));
  dist[v] = Dist::split(d);
  return success();
}

LogicalResult TensorParallel::splitParam(Value weight, int64_t d,
                                         Operation *user) {
  auto get = weight.getDefiningOp<GetParamOp>();
  if (!get)
    return user->emitError() << "tensor parallelism needs the weight read "
                                "with tfm.get_param in the same block";
  auto [it, inserted] = paramSplit.try_emplace(get.getName(), d);
  if (!inserted && it->second != d)
    return user->emitError() << "@" << get.getName() << " is split on dim "
                             << it->second << " elsewhere but needs dim " << d
                             << " here";
  if (get.getTpSplit())
    return success(); // already rewritten (read by two ops)
  get.setTpSplitAttr(b.getI64IntegerAttr(d));
  ++numSplitParams;
  return split(weight, d, user);
}

template <typename BuildFn> Value TensorParallel::after(Value v, BuildFn build) {
  OpBuilder::InsertionGuard guard(b);
  if (Operation *def = v.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
  return build();
}

Value TensorParallel::replicated(Value v) {
  Dist d = get(v);
  if (d.isR() || (d.isS() && d.dim != 1) || !isa<RankedTensorType>(v.getType()))
    return v;
  Value &r = reduced[v];
  if (r)
    return r;
  const int16_t axesStorage[] = {int16_t(tpAxis)};
  ArrayRef<int16_t> axes(axesStorage);
  if (d.isP()) {
    r = after(v, [&] {
      return b.create<mesh::AllReduceOp>(v.getLoc(), v.getType(), "dense",
                                         axes, v)
          .getResult();
    });
    ++numAllReduces;
    return r;
  }
  // Sequence-split: gather the sequence.
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[1] *= tp;
  r = after(v, [&] {
    return b.create<mesh::AllGatherOp>(v.getLoc(), type.clone(shape), "dense",
                                       axes, v, APInt(64, 1))
        .getResult();
  });
  return r;
}

FailureOr<Value> TensorParallel::seqSplit(Value v, Operation *where) {
  Dist d = get(v);
  if (d.isS() && d.dim == 1)
    return v;
  if (d.isS())
    return where->emitError() << "a value split on dim " << d.dim
                              << " cannot become sequence-parallel";
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getRank() < 2 || type.getDimSize(1) % tp != 0)
    return where->emitError()
           << "sequence length " << (type.getRank() < 2 ? 0 : type.getDimSize(1))
           << " is not divisible by tp " << tp << " (sequence parallelism)";
  Value &r = scattered[v];
  if (r)
    return r;
  SmallVector<int64_t> shape(type.getShape());
  shape[1] /= tp;
  const int16_t axesStorage[] = {int16_t(tpAxis)};
  ArrayRef<int16_t> axes(axesStorage);
  r = after(v, [&]() -> Value {
    if (d.isP())
      return b.create<mesh::ReduceScatterOp>(
          v.getLoc(), type.clone(shape), "dense", axes, v,
          mesh::ReductionKind::Sum, APInt(64, 1));
    return b.create<mesh::AllSliceOp>(v.getLoc(), type.clone(shape), v,
                                      "dense", axes, int64_t(1));
  });
  dist[r] = Dist::split(1);
  return r;
}

/// The rules: decide results' distributions from the operands', rewriting
/// parameter reads, attributes and types.
LogicalResult TensorParallel::layerOp(Operation *op) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<GetParamOp>([&](auto) { return success(); }) // decided by users
      .Case<LinearOp>([&](LinearOp lin) -> LogicalResult {
        if (wholeLinears.contains(op)) {
          makeAllReplicated(op);
          return success();
        }
        if (get(lin.getInput()).isP() ||
            (get(lin.getInput()).isS() && get(lin.getInput()).dim == 1))
          makeReplicated(op, 0);
        if (get(lin.getInput()).isR()) { // column-parallel
          if (failed(splitParam(lin.getWeight(), 0, op)) ||
              (lin.getBias() && failed(splitParam(lin.getBias(), 0, op))))
            return failure();
          return split(lin.getResult(), lastDim(lin.getResult()), op);
        }
        // Row-parallel: each rank multiplies its slice of the features; a
        // bias is added once, after the all-reduce (Megatron's
        // RowParallelLinear), so it stays whole on every rank.
        if (failed(splitParam(lin.getWeight(), 1, op)))
          return failure();
        if (!lin.getBias()) {
          dist[lin.getResult()] = Dist::partial();
          return success();
        }
        b.setInsertionPoint(lin);
        auto partial = b.create<LinearOp>(lin.getLoc(), lin.getType(),
                                          lin.getInput(), lin.getWeight(),
                                          Value());
        dist[partial.getResult()] = Dist::partial();
        FailureOr<Value> summed = residual(partial.getResult(), op);
        if (failed(summed))
          return failure();
        b.setInsertionPointAfter(summed->getDefiningOp());
        Value biased = b.create<BiasAddOp>(lin.getLoc(), summed->getType(),
                                           *summed, lin.getBias());
        dist[biased] = get(*summed);
        lin.replaceAllUsesWith(biased);
        lin.erase();
        return success();
      })
      .Case<LinearGradOp>([&](LinearGradOp g) -> LogicalResult {
        auto get = g.getWeight().getDefiningOp<GetParamOp>();
        auto it = get ? paramSplit.find(get.getName()) : paramSplit.end();
        if (it == paramSplit.end() || it->second < 0) {
          makeAllReplicated(op);
          return success();
        }
        if (failed(splitParam(g.getWeight(), it->second, op)))
          return failure();
        if (it->second == 0) { // column-parallel: dx = dy W is partial
          makeReplicated(op, 0);
          if (failed(split(g.getWeightGrad(), 0, op)) ||
              (g.getBiasGrad() && failed(split(g.getBiasGrad(), 0, op))))
            return failure();
          dist[g.getInputGrad()] = Dist::partial();
          return success();
        }
        // Row-parallel: dy is whole on every rank, so is the bias gradient.
        makeReplicated(op, 2);
        if (failed(split(g.getWeightGrad(), 1, op)))
          return failure();
        return split(g.getInputGrad(), lastDim(g.getInputGrad()), op);
      })
      .Case<AttentionOp, AttentionGradOp>([&](auto a) -> LogicalResult {
        if (!get(a.getQuery()).isS())
          return op->emitError()
                 << "attention inputs are replicated; tensor parallelism "
                    "expects q, k and v from column-parallel linears";
        int64_t heads = a.getNumHeads(), kv = a.getNumKvHeads();
        if (heads % tp != 0)
          return op->emitError() << "num_heads " << heads
                                 << " is not divisible by tp " << tp;
        bool replicatedKv = kv % tp != 0;
        if (replicatedKv && tp % kv != 0)
          return op->emitError() << "num_kv_heads " << kv << " and tp " << tp
                                 << ": one must divide the other";
        a.setNumHeads(heads / tp);
        a.setNumKvHeads(replicatedKv ? 1 : kv / tp);
        if (replicatedKv) {
          // Fewer kv heads than ranks: k and v were computed whole; each
          // rank takes the one head its query heads read (Megatron's kv
          // head replication).
          for (unsigned i : {1u, 2u}) {
            FailureOr<Value> local =
                kvHeadOfRank(op->getOperand(i), kv, a.getHeadDim(), op);
            if (failed(local))
              return failure();
            op->setOperand(i, *local);
          }
        }
        if constexpr (std::is_same_v<decltype(a), AttentionOp>) {
          if (failed(split(a.getResult(), 2, op)))
            return failure();
          return split(a.getLse(), 1, op);
        } else {
          makeReplicated(op, 5); // the output gradient is already split
          if (failed(split(a.getQueryGrad(), 2, op)))
            return failure();
          if (!replicatedKv)
            return success(split(a.getKeyGrad(), 2, op).succeeded() &&
                           split(a.getValueGrad(), 2, op).succeeded());
          // Each rank's k/v gradient is for its copy of one head: gather the
          // copies and sum each head's, so the replicated k and v linears
          // get whole gradients.
          for (Value g : {a.getKeyGrad(), a.getValueGrad()}) {
            g.setType(op->getOperand(g == a.getKeyGrad() ? 1 : 2).getType());
            dist[g] = Dist::split(2);
            if (failed(wholeKvGrad(g, kv, a.getHeadDim(), op)))
              return failure();
          }
          return success();
        }
      })
      .Case<RopeOp, RopeGradOp>([&](auto r) -> LogicalResult {
        if (get(r.getInput()).isP())
          makeReplicated(op, 0);
        if (get(r.getInput()).isS())
          return split(r.getResult(), 2, op);
        return success();
      })
      .Case<GeluOp, SiluOp, SwigluOp, GeluGradOp, SiluGradOp, SwigluGradOp,
            CastOp>([&](Operation *e) -> LogicalResult {
        // Elementwise: one distribution for all operands, which partial sums
        // cannot share (the ops are not linear).
        makeAllReplicated(e);
        bool anySplit = llvm::any_of(e->getOperands(), [&](Value v) {
          return get(v).isS();
        });
        if (!anySplit)
          return success();
        if (!llvm::all_of(e->getOperands(),
                          [&](Value v) { return get(v).isS(); }))
          return e->emitError() << "operands mix split and replicated values";
        for (Value r : e->getResults())
          if (failed(split(r, lastDim(r), e)))
            return failure();
        return success();
      })
      .Case<BiasAddOp>([&](auto) { return success(); }) // written by the pass
      .Case<PositionIdsOp>([&](PositionIdsOp p) -> LogicalResult {
        positions.insert(p.getResult());
        return success();
      })
      .Case<EmbeddingOp>([&](EmbeddingOp emb) -> LogicalResult {
        // Position embeddings stay whole (as in Megatron); the token
        // embedding is vocab-parallel: each rank looks up the ids of its
        // vocabulary slice, the others give zero rows, an all-reduce sums.
        if (positions.contains(emb.getIds()))
          return success();
        int64_t vocab = cast<RankedTensorType>(emb.getTable().getType())
                            .getDimSize(0);
        if (vocab % tp != 0)
          return op->emitError()
                 << "vocabulary size " << vocab << " is not divisible by tp "
                 << tp << "; pad it (loom-import --make-vocab-size-divisible-by)";
        if (failed(splitParam(emb.getTable(), 0, op)))
          return failure();
        emb.setVocabParallelAxisAttr(b.getI64IntegerAttr(tpAxis));
        dist[emb.getResult()] = Dist::partial();
        return success();
      })
      .Case<EmbeddingGradOp>([&](EmbeddingGradOp g) -> LogicalResult {
        makeReplicated(op, 1);
        if (positions.contains(g.getIds()))
          return success();
        g.setVocabParallelAxisAttr(b.getI64IntegerAttr(tpAxis));
        return split(g.getResult(), 0, op);
      })
      .Case<CrossEntropyOp, CrossEntropyGradOp>([&](auto ce) -> LogicalResult {
        // Vocab-parallel cross-entropy on logits split over the vocabulary
        // (the head's column-parallel projection): never gathered.
        if (get(ce.getLogits()).isP())
          makeReplicated(op, 0);
        if (!get(ce.getLogits()).isS())
          return success();
        ce.setVocabParallelAxisAttr(b.getI64IntegerAttr(tpAxis));
        if constexpr (std::is_same_v<decltype(ce), CrossEntropyGradOp>) {
          makeReplicated(op, 3);
          return split(ce.getResult(), lastDim(ce.getResult()), op);
        }
        return success();
      })
      .Case<AddOp>([&](AddOp a) -> LogicalResult {
        Dist l = get(a.getLhs()), r = get(a.getRhs());
        if (l.isP() && r.isP()) {
          dist[a.getResult()] = Dist::partial(); // sum first, reduce once
          return success();
        }
        if (l.isS() && r.isS() && l.dim == r.dim && l.dim != 1)
          return split(a.getResult(), l.dim, op);
        if ((l.isS() && l.dim != 1) || (r.isS() && r.dim != 1))
          return op->emitError() << "adds a split and a replicated value";
        // The residual stream: whole, or split on the sequence with SP.
        if (failed(makeResidual(op, 0)) || failed(makeResidual(op, 1)))
          return failure();
        if (sp)
          return split(a.getResult(), 1, op);
        return success();
      })
      .Case<LayerNormOp, RmsNormOp>([&](auto n) -> LogicalResult {
        // Row-wise: works on whole tensors or on sequence shards alike.
        if (failed(makeResidual(op, 0)))
          return failure();
        makeReplicated(op, 1);
        if (sp)
          return split(n.getResult(), 1, op);
        return success();
      })
      .Case<LayerNormGradOp, RmsNormGradOp>([&](auto g) -> LogicalResult {
        if (failed(makeResidual(op, 0)) || failed(makeResidual(op, 2)))
          return failure();
        makeReplicated(op, 1);
        if (!sp)
          return success();
        // Each rank saw its own tokens: the weight (and bias) gradients are
        // partial sums, all-reduced over tp (Megatron's sequence-parallel
        // gradient all-reduce).
        for (Value r : op->getResults().drop_front())
          dist[r] = Dist::partial();
        return split(g.getInputGrad(), 1, op);
      })
      .Case<DropoutOp>([&](DropoutOp d) -> LogicalResult {
        // A feature-split input stays split; anything else is the residual
        // stream (hidden dropout): partial sums are reduced first (dropout
        // is not linear in them), onto sequence shards with SP. A split op
        // is told where its slice lies, so its mask is the unsharded
        // program's.
        Dist in = get(d.getInput());
        if (!(in.isS() && in.dim != 1)) {
          if (failed(makeResidual(op, 0)))
            return failure();
          in = get(d.getInput());
        }
        if (!in.isS())
          return success();
        d.setSplitDimAttr(b.getI64IntegerAttr(in.dim));
        d.setSplitAxisAttr(b.getI64IntegerAttr(tpAxis));
        return split(d.getResult(), in.dim, op);
      })
      .Default([&](Operation *other) -> LogicalResult {
        // Norms, position ids, anything else: whole tensors in and out.
        makeAllReplicated(other);
        for (Value v : other->getOperands())
          if (get(v).isS())
            return other->emitError()
                   << "needs whole tensors but an operand is split over tp";
        return success();
      });
}

FailureOr<Value> TensorParallel::kvHeadOfRank(Value kvWhole, int64_t kvHeads,
                                              int64_t headDim,
                                              Operation *where) {
  if (get(kvWhole).isS())
    return where->emitError() << "kv heads are split over tp but there are "
                                 "only " << kvHeads;
  Value whole = replicated(kvWhole);
  auto type = cast<RankedTensorType>(whole.getType());
  int64_t factor = tp / kvHeads;
  SmallVector<int64_t> repeatedShape(type.getShape()), localShape(
                                                           type.getShape());
  repeatedShape.back() *= factor;
  localShape.back() = headDim;
  const int16_t axesStorage[] = {int16_t(tpAxis)};
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(where);
  Value repeated = b.create<RepeatKvOp>(where->getLoc(),
                                        type.clone(repeatedShape), whole,
                                        factor, headDim);
  Value local = b.create<mesh::AllSliceOp>(
      where->getLoc(), type.clone(localShape), repeated, "dense",
      ArrayRef<int16_t>(axesStorage), int64_t(type.getRank() - 1));
  dist[local] = Dist::split(2);
  return local;
}

LogicalResult TensorParallel::wholeKvGrad(Value localGrad, int64_t kvHeads,
                                          int64_t headDim, Operation *where) {
  auto type = cast<RankedTensorType>(localGrad.getType());
  SmallVector<int64_t> gatheredShape(type.getShape()), wholeShape(
                                                           type.getShape());
  gatheredShape.back() = headDim * tp;
  wholeShape.back() = headDim * kvHeads;
  const int16_t axesStorage[] = {int16_t(tpAxis)};
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointAfter(where);
  auto gathered = b.create<mesh::AllGatherOp>(
      where->getLoc(), type.clone(gatheredShape), "dense",
      ArrayRef<int16_t>(axesStorage), localGrad,
      APInt(64, type.getRank() - 1));
  Value whole = b.create<RepeatKvGradOp>(where->getLoc(),
                                         type.clone(wholeShape), gathered,
                                         tp / kvHeads, headDim);
  localGrad.replaceAllUsesExcept(whole, gathered);
  return success();
}

void TensorParallel::findWholeKvLinears(Block &body) {
  for (auto attn : body.getOps<AttentionOp>()) {
    int64_t kv = attn.getNumKvHeads();
    if (kv % tp == 0 || tp % kv != 0)
      continue;
    for (Value v : {attn.getKey(), attn.getValue()}) {
      if (auto rope = v.getDefiningOp<RopeOp>())
        v = rope.getInput();
      if (auto lin = v.getDefiningOp<LinearOp>())
        wholeLinears.insert(lin);
    }
  }
}

LogicalResult TensorParallel::block(BlockOp blk) {
  Block &body = blk.getBody().front();
  for (auto [arg, input] : llvm::zip(body.getArguments(), blk.getInputs())) {
    arg.setType(input.getType());
    if (Dist d = get(input); !d.isR())
      dist[arg] = d;
  }
  for (auto [arg, input] : llvm::zip(body.getArguments(), blk.getInputs()))
    if (positions.contains(input))
      positions.insert(arg);
  findWholeKvLinears(body);
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
    if (isa<mesh::AllReduceOp>(op))
      continue; // inserted by this pass
    if (failed(layerOp(&op)))
      return failure();
  }
  // Block results carry their yielded value's type and distribution; a
  // partial sum leaves a block reduced. With SP an activation ([batch, seq, ...]) leaves in the residual
  // stream's layout (a reduce-scatter); parameter gradients are summed.
  Operation *yield = body.getTerminator();
  for (unsigned i = 0; i < yield->getNumOperands(); ++i) {
    Value v = yield->getOperand(i);
    if (get(v).isP()) {
      bool activation = cast<RankedTensorType>(v.getType()).getRank() == 3;
      FailureOr<Value> out = sp && activation ? seqSplit(v, yield)
                                              : FailureOr<Value>(replicated(v));
      if (failed(out))
        return failure();
      yield->setOperand(i, *out);
      v = *out;
    }
    blk.getResult(i).setType(v.getType());
    if (Dist d = get(v); !d.isR())
      dist[blk.getResult(i)] = d;
    if (positions.contains(v))
      positions.insert(blk.getResult(i));
  }
  return success();
}

LogicalResult TensorParallel::run(func::FuncOp func) {
  for (Operation &op :
       llvm::make_early_inc_range(func.getBody().front().without_terminator())) {
    if (isa<mesh::AllReduceOp>(op))
      continue; // inserted by this pass
    // Between blocks: the sums of a tied parameter's gradients.
    if (failed(isa<BlockOp>(op) ? block(cast<BlockOp>(op)) : layerOp(&op)))
      return failure();
  }
  // Parameter gradients leave as this rank's shards.
  Operation *ret = func.getBody().front().getTerminator();
  func.setType(FunctionType::get(func.getContext(),
                                 func.getArgumentTypes(),
                                 ret->getOperandTypes()));
  return success();
}

struct TensorParallelPass
    : sharding::impl::TfmTensorParallelBase<TensorParallelPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>(kPlanAttrName);
    if (!plan || plan.getTp() == 1)
      return;
    auto meshOp = module.lookupSymbol<mesh::MeshOp>("dense");
    auto names = meshOp ? meshOp->getAttrOfType<ArrayAttr>("tfm.mesh_axes")
                        : ArrayAttr();
    int64_t tpAxis = -1;
    if (names)
      for (auto [i, n] : llvm::enumerate(names))
        if (cast<StringAttr>(n).getValue() == "tp")
          tpAxis = int64_t(i);
    if (tpAxis < 0) {
      module.emitError() << "tensor parallelism needs mesh @dense with a tp "
                            "axis (run tfm-materialize-mesh)";
      return signalPassFailure();
    }
    uint64_t allReduces = 0, splitParams = 0;
    // The forward is rewritten first, so the train step's backward blocks
    // meet parameters whose split is already decided.
    TensorParallel tensorParallel(module, plan.getTp(), tpAxis,
                                  plan.isSequenceParallel(), allReduces,
                                  splitParams);
    for (StringRef name : {"forward", "train_step"}) {
      auto func = module.lookupSymbol<func::FuncOp>(name);
      if (func && failed(tensorParallel.run(func)))
        return signalPassFailure();
    }
    numAllReduces += allReduces;
    numSplitParams += splitParams;
  }
};

} // namespace
