//===- Differentiate.cpp - Reverse-mode differentiation ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// @forward is a chain of tfm.block ops. The training step keeps them and
// appends one backward block per forward block, in reverse order:
//
//   %h   = tfm.block layer 0 ins(%x) {...}
//   %l   = tfm.block head ins(%h, ...) {...}
//   %dh, %dW1 = tfm.block head backward ins(<saved>, %grad_scale) {...}
//   %dx, %dW0 = tfm.block layer 0 backward ins(<saved>, %dh) {...}
//
// Inside a backward block the gradients are built op by op in reverse
// (GradientRules.cpp). Forward values the rules read are either saved (the
// forward block yields them) or recomputed: the whole block (full
// granularity: the backward block re-runs the forward ops first) or only the
// core attention (selective: re-run from its saved operands when its
// results are first read).
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff/Passes.h"

#include "passes/Autodiff/GradientRules.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

#include <functional>

namespace loom::autodiff {
#define GEN_PASS_DEF_TFMDIFFERENTIATE
#include "passes/Autodiff/Passes.h.inc"
} // namespace loom::autodiff

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// Gradients of function-level values and of parameters, summed as
/// contributions arrive.
struct OuterGradients {
  DenseMap<Value, Value> values;
  llvm::StringMap<Value> params;
  /// The step's grad_scale: the seed of the loss and of every side loss.
  Value gradScale;

  static void add(OpBuilder &b, Location loc, Value &slot, Value g) {
    slot = slot ? b.create<AddOp>(loc, g.getType(), slot, g).getResult() : g;
  }
};

/// What a block's backward recomputes instead of saving.
enum class Recompute { None, Block, CoreAttention };

class BlockDifferentiator {
public:
  BlockDifferentiator(BlockOp forwardBlock, Operation *insertBefore,
                      Recompute recompute, OuterGradients &outer)
      : fb(forwardBlock), insertBefore(insertBefore), recompute(recompute),
        outer(outer), body(&fb.getBody().front()),
        bb(forwardBlock.getContext()), loc(fb.getLoc()) {
    // The backward block has no parent region yet, so the builder cannot
    // take its context from it.
    bb.setInsertionPointToEnd(bwd.get());
  }

  /// Writes the backward block; returns the number of saved values.
  FailureOr<int64_t> run();

private:
  /// A new argument of the backward block, fed by `outerValue` (set later for
  /// saved values).
  Value newArgument(Value outerValue, Type type) {
    inputs.push_back(outerValue);
    return bwd->addArgument(type, loc);
  }
  Value forward(Value v);
  void accumulate(Value forwardValue, Value g) {
    if (!autodiff::isDifferentiable(forwardValue.getType()))
      return;
    Value &slot = grads[forwardValue];
    slot = slot ? bb.create<AddOp>(loc, g.getType(), slot, g).getResult() : g;
  }
  void rebuildForwardWithSaved();

  BlockOp fb;
  Operation *insertBefore;
  Recompute recompute;
  OuterGradients &outer;
  Block *body;
  std::unique_ptr<Block> bwd = std::make_unique<Block>();
  OpBuilder bb;
  Location loc;

  SmallVector<Value> inputs;        // outer values feeding the backward block
  DenseMap<Value, Value> forwardOf; // forward-body value -> backward value
  DenseMap<Value, Value> grads;     // forward-body value -> its gradient
  SmallVector<Value> saved;         // forward-body values yielded for backward
  SmallVector<unsigned> savedArgs;  // their backward-block argument numbers
};

Value BlockDifferentiator::forward(Value v) {
  if (Value known = forwardOf.lookup(v))
    return known;
  Value result;
  if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == body) {
    result = newArgument(fb.getInputs()[arg.getArgNumber()], v.getType());
  } else if (auto get = v.getDefiningOp<GetParamOp>()) {
    // Parameters are symbols: read them again rather than pass them in.
    OpBuilder::InsertionGuard guard(bb);
    bb.setInsertionPointToStart(bwd.get());
    result = bb.create<GetParamOp>(get.getLoc(), get.getType(),
                                   get.getNameAttr());
  } else if (auto attention = v.getDefiningOp<AttentionOp>();
             attention && recompute == Recompute::CoreAttention) {
    // Selective recomputation: the attention runs again here, from its
    // operands (saved in its place), where its results are first needed.
    IRMapping map;
    for (Value operand : attention->getOperands())
      map.map(operand, forward(operand));
    Operation *again = bb.clone(*attention, map);
    for (auto [old, now] :
         llvm::zip(attention->getResults(), again->getResults()))
      forwardOf[old] = now;
    return forwardOf.lookup(v);
  } else {
    saved.push_back(v);
    result = newArgument(Value(), v.getType());
    savedArgs.push_back(cast<BlockArgument>(result).getArgNumber());
  }
  forwardOf[v] = result;
  return result;
}

/// Replaces the forward block by one that also yields the saved values.
void BlockDifferentiator::rebuildForwardWithSaved() {
  OpBuilder b(fb);
  SmallVector<Type> types(fb.getResultTypes());
  for (Value v : saved)
    types.push_back(v.getType());
  auto replacement = b.create<BlockOp>(fb.getLoc(), types, fb.getKindAttr(),
                                       fb.getIndexAttr(), fb.getBackwardAttr(),
                                       fb.getInputs());
  replacement.getBody().takeBody(fb.getBody());
  Operation *yield = body->getTerminator();
  yield->insertOperands(yield->getNumOperands(), saved);
  unsigned original = fb.getNumResults();
  for (unsigned i = 0; i < original; ++i)
    fb.getResult(i).replaceAllUsesWith(replacement.getResult(i));
  fb.erase();
  fb = replacement;
  for (auto [k, arg] : llvm::enumerate(savedArgs))
    inputs[arg] = replacement.getResult(original + k);
}

FailureOr<int64_t> BlockDifferentiator::run() {
  auto yield = cast<YieldOp>(body->getTerminator());

  if (recompute == Recompute::Block) {
    // The backward block re-runs the forward ops from the block's inputs.
    IRMapping map;
    for (BlockArgument arg : body->getArguments())
      map.map(arg, forward(arg));
    // Side losses are not recomputed: no forward op reads them, their
    // gradient rule reads their operands, and the step has counted them.
    auto replayed = [](Operation &op) { return !isa<MoeRouterLossOp>(op); };
    for (Operation &op : body->without_terminator())
      if (replayed(op))
        bb.clone(op, map);
    for (Operation &op : body->without_terminator())
      if (replayed(op))
        for (Value r : op.getResults())
          forwardOf[r] = map.lookup(r);
  }

  // Seeds: the gradients of the block's results, and grad_scale for the
  // side losses inside it (a router's load-balancing and z losses: terms of
  // the objective that no op reads, attached as Megatron-Core's
  // MoEAuxLossAutoScaler attaches them).
  for (auto [i, result] : llvm::enumerate(fb.getResults()))
    if (Value g = outer.values.lookup(result))
      accumulate(yield.getOperand(i), newArgument(g, g.getType()));
  Value sideSeed;
  for (auto loss : body->getOps<MoeRouterLossOp>()) {
    if (!sideSeed)
      sideSeed = newArgument(outer.gradScale, outer.gradScale.getType());
    for (Value r : loss->getResults())
      accumulate(r, sideSeed);
  }

  // Named, so the function_refs in the context outlive this statement.
  auto forwardFn = [&](Value v) { return forward(v); };
  auto gradientFn = [&](Value r) { return grads.lookup(r); };
  auto accumulateFn = [&](Value operand, Value g) { accumulate(operand, g); };
  autodiff::GradientContext ctx{bb, forwardFn, gradientFn, accumulateFn};
  for (Operation &op : llvm::reverse(body->without_terminator())) {
    if (isa<GetParamOp>(op) ||
        llvm::none_of(op.getResults(),
                      [&](Value r) { return grads.count(r); }))
      continue;
    if (failed(autodiff::emitGradient(&op, ctx)))
      return failure();
  }

  // Yield the gradients of the inputs, then of the parameters read here
  // (several reads of one parameter are summed).
  SmallVector<Value> yields;
  SmallVector<std::pair<unsigned, StringRef>> destinations; // input # or param
  for (BlockArgument arg : body->getArguments())
    if (Value g = grads.lookup(arg)) {
      yields.push_back(g);
      destinations.push_back({arg.getArgNumber(), StringRef()});
    }
  llvm::MapVector<StringRef, Value> paramGrads;
  for (auto get : body->getOps<GetParamOp>())
    if (Value g = grads.lookup(get.getResult())) {
      Value &slot = paramGrads[get.getName()];
      slot = slot ? bb.create<AddOp>(loc, g.getType(), slot, g).getResult() : g;
    }
  for (auto [name, g] : paramGrads) {
    yields.push_back(g);
    destinations.push_back({~0u, name});
  }
  bb.create<YieldOp>(loc, yields);

  if (!saved.empty())
    rebuildForwardWithSaved();

  OpBuilder ob(insertBefore);
  SmallVector<Type> types;
  for (Value y : yields)
    types.push_back(y.getType());
  auto backward = ob.create<BlockOp>(loc, types, fb.getKindAttr(),
                                     fb.getIndexAttr(), ob.getUnitAttr(),
                                     inputs);
  backward.getBody().push_back(bwd.release());

  for (auto [k, dest] : llvm::enumerate(destinations)) {
    Value g = backward.getResult(k);
    if (dest.second.empty())
      OuterGradients::add(ob, loc, outer.values[fb.getInputs()[dest.first]], g);
    else
      OuterGradients::add(ob, loc, outer.params[dest.second], g);
  }
  return int64_t(saved.size());
}

struct DifferentiatePass
    : autodiff::impl::TfmDifferentiateBase<DifferentiatePass> {
  using TfmDifferentiateBase::TfmDifferentiateBase;

  /// Megatron's recompute options as a choice per block: full granularity
  /// recomputes transformer layers (every one with the uniform method, the
  /// first numLayers with block), selective the core attention of every
  /// layer; the embedding and the head keep their activations.
  FailureOr<std::function<Recompute(BlockOp)>>
  recomputeChoice(func::FuncOp fwd) {
    const std::string g = granularity, m = method;
    const int64_t n = numLayers;
    auto isLayer = [](BlockOp b) { return b.getKind() == BlockKind::layer; };
    if (g.empty())
      return std::function<Recompute(BlockOp)>(
          [](BlockOp) { return Recompute::None; });
    if (g == "selective")
      return std::function<Recompute(BlockOp)>([=](BlockOp b) {
        return isLayer(b) ? Recompute::CoreAttention : Recompute::None;
      });
    if (g != "full") {
      fwd.emitError() << "recompute-granularity must be full or selective, "
                         "got '"
                      << g << "'";
      return failure();
    }
    if (n < 1) {
      fwd.emitError() << "recompute-num-layers must be at least 1, got " << n;
      return failure();
    }
    int64_t layers = 0;
    for (auto b : fwd.getBody().front().getOps<BlockOp>())
      layers += isLayer(b);
    if (m == "uniform") {
      if (n != 1) {
        fwd.emitError() << "recompute-method uniform with recompute-num-layers "
                        << n
                        << " (groups of layers recomputed together) is not "
                           "implemented yet; use 1, or recompute-method block";
        return failure();
      }
      return std::function<Recompute(BlockOp)>([=](BlockOp b) {
        return isLayer(b) ? Recompute::Block : Recompute::None;
      });
    }
    if (m != "block") {
      fwd.emitError() << "recompute-method must be uniform or block, got '" << m
                      << "'";
      return failure();
    }
    if (n > layers) {
      fwd.emitError() << "recompute-num-layers " << n << " exceeds the "
                      << layers << " layers of @" << function;
      return failure();
    }
    return std::function<Recompute(BlockOp)>([=](BlockOp b) {
      return isLayer(b) && b.getIndex() && int64_t(*b.getIndex()) < n
                 ? Recompute::Block
                 : Recompute::None;
    });
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    auto fwd = module.lookupSymbol<func::FuncOp>(function);
    if (!fwd || fwd.isExternal()) {
      module.emitError() << "no function @" << function << " to differentiate";
      return signalPassFailure();
    }
    if (module.lookupSymbol(stepName)) {
      module.emitError() << "@" << stepName << " already exists";
      return signalPassFailure();
    }
    auto lossType = dyn_cast<RankedTensorType>(
        fwd.getNumResults() == 1 ? fwd.getResultTypes()[0] : Type());
    if (!lossType || lossType.getRank() != 0 ||
        !lossType.getElementType().isF32()) {
      fwd.emitError() << "@" << function
                      << " must return one scalar f32 loss to be differentiated";
      return signalPassFailure();
    }
    if (!fwd.getBody().hasOneBlock()) {
      fwd.emitError() << "@" << function << " must be a single block";
      return signalPassFailure();
    }
    for (Operation &op : fwd.getBody().front().without_terminator())
      if (!isa<BlockOp>(op)) {
        op.emitError() << "tfm-differentiate expects @" << function
                       << " to be a sequence of tfm.block ops";
        return signalPassFailure();
      }

    OpBuilder b(ctx);
    b.setInsertionPointAfter(fwd);
    auto step = cast<func::FuncOp>(b.clone(*fwd));
    step.setName(stepName);
    step->setAttr(kEntryAttrName, b.getStringAttr(entry));
    Block &entryBlock = step.getBody().front();
    Value gradScale = entryBlock.addArgument(lossType, step.getLoc());
    auto ret = cast<func::ReturnOp>(entryBlock.getTerminator());
    Value loss = ret.getOperand(0);

    OuterGradients outer;
    outer.values[loss] = gradScale;
    outer.gradScale = gradScale;
    SmallVector<BlockOp> blocks(entryBlock.getOps<BlockOp>());
    FailureOr<std::function<Recompute(BlockOp)>> choose = recomputeChoice(fwd);
    if (failed(choose))
      return signalPassFailure();
    for (BlockOp block : llvm::reverse(blocks)) {
      BlockDifferentiator diff(block, ret, (*choose)(block), outer);
      FailureOr<int64_t> numSavedHere = diff.run();
      if (failed(numSavedHere))
        return signalPassFailure();
      ++numBackwardBlocks;
      numSaved += *numSavedHere;
    }

    // Return the loss and the gradient of every parameter, in declaration
    // order. (The head block was rebuilt with its saved values: read the
    // loss from the return again.)
    SmallVector<Value> results = {ret.getOperand(0)};
    SmallVector<StringRef> gradNames;
    for (auto param : module.getOps<ParamOp>())
      if (Value g = outer.params.lookup(param.getSymName())) {
        results.push_back(g);
        gradNames.push_back(param.getSymName());
      }
    b.setInsertionPoint(ret);
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    SmallVector<Type> resultTypes;
    for (Value r : results)
      resultTypes.push_back(r.getType());
    step.setType(FunctionType::get(ctx, entryBlock.getArgumentTypes(),
                                   resultTypes));
    step.setArgAttr(gradScale.cast<BlockArgument>().getArgNumber(),
                    kInputArgAttrName, b.getStringAttr("grad_scale"));
    for (auto [i, name] : llvm::enumerate(gradNames))
      step.setResultAttr(i + 1, tfm::kGradResultAttrName,
                         b.getStringAttr(name));
  }
};

} // namespace
