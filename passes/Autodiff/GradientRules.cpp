//===- GradientRules.cpp - One gradient rule per tfm op ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Each rule reads the forward operands it needs through ctx.forward (saved or
// recomputed values) and the output gradients through ctx.gradient, and
// contributes input gradients through ctx.accumulate:
//
//   y = linear(x, W, b)   ->  dx, dW, db = linear_grad(x, W, dy)
//   y = dropout(x, p, s)  ->  dx = dropout(dy, p, s)      (same mask)
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff/GradientRules.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"


using namespace mlir;
using namespace loom;
using namespace loom::tfm;

bool loom::autodiff::isDifferentiable(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa<FloatType>(tensor.getElementType());
}

namespace {

using autodiff::GradientContext;

/// Rules for ops whose gradient is another op of the same shape.
LogicalResult linear(LinearOp op, GradientContext &c) {
  Value dy = c.gradient(op.getResult());
  Value x = c.forward(op.getInput()), w = c.forward(op.getWeight());
  Type biasType = op.getBias() ? op.getBias().getType() : Type();
  auto g = c.builder.create<LinearGradOp>(op.getLoc(), x.getType(),
                                          w.getType(), biasType, x, w, dy,
                                          /*accumulate=*/Value());
  c.accumulate(op.getInput(), g.getInputGrad());
  c.accumulate(op.getWeight(), g.getWeightGrad());
  if (op.getBias())
    c.accumulate(op.getBias(), g.getBiasGrad());
  return success();
}

LogicalResult layerNorm(LayerNormOp op, GradientContext &c) {
  Value dy = c.gradient(op.getResult());
  Value x = c.forward(op.getInput()), w = c.forward(op.getWeight());
  auto g = c.builder.create<LayerNormGradOp>(
      op.getLoc(), x.getType(), w.getType(), w.getType(), x, w, dy,
      /*accumulate=*/Value(), op.getEpsilonAttr());
  c.accumulate(op.getInput(), g.getInputGrad());
  c.accumulate(op.getWeight(), g.getWeightGrad());
  if (op.getBias())
    c.accumulate(op.getBias(), g.getBiasGrad());
  return success();
}

LogicalResult rmsNorm(RmsNormOp op, GradientContext &c) {
  Value dy = c.gradient(op.getResult());
  Value x = c.forward(op.getInput()), w = c.forward(op.getWeight());
  auto g = c.builder.create<RmsNormGradOp>(
      op.getLoc(), x.getType(), w.getType(), x, w, dy, /*accumulate=*/Value(),
      op.getEpsilonAttr());
  c.accumulate(op.getInput(), g.getInputGrad());
  c.accumulate(op.getWeight(), g.getWeightGrad());
  return success();
}

LogicalResult embedding(EmbeddingOp op, GradientContext &c) {
  Value dy = c.gradient(op.getResult());
  Value ids = c.forward(op.getIds());
  Value dt = c.builder.create<EmbeddingGradOp>(
      op.getLoc(), op.getTable().getType(), ids, dy);
  c.accumulate(op.getTable(), dt);
  return success();
}

LogicalResult rope(RopeOp op, GradientContext &c) {
  Value dy = c.gradient(op.getResult());
  Value dx = c.builder.create<RopeGradOp>(
      op.getLoc(), dy.getType(), dy, c.forward(op.getPositions()),
      op.getHeadDimAttr(), op.getThetaAttr(), op.getScalingAttr());
  c.accumulate(op.getInput(), dx);
  return success();
}

LogicalResult attention(AttentionOp op, GradientContext &c) {
  // Only the output carries a gradient; the log-sum-exp is a by-product the
  // backward reads.
  Value dout = c.gradient(op.getResult());
  if (!dout)
    return success();
  Value tokens = op.getTokens() ? c.forward(op.getTokens()) : Value();
  Value q = c.forward(op.getQuery()), k = c.forward(op.getKey()),
        v = c.forward(op.getValue());
  auto g = c.builder.create<AttentionGradOp>(
      op.getLoc(), q.getType(), k.getType(), v.getType(), q, k, v,
      c.forward(op.getResult()),
      c.forward(op.getLse()), dout, tokens, op.getNumHeadsAttr(),
      op.getNumKvHeadsAttr(), op.getHeadDimAttr(), op.getScaleAttr(),
      op.getMaskAttr(), op.getEodAttr(), op.getRingAttr(),
      op.getRingA2aAttr());
  c.accumulate(op.getQuery(), g.getQueryGrad());
  c.accumulate(op.getKey(), g.getKeyGrad());
  c.accumulate(op.getValue(), g.getValueGrad());
  return success();
}

LogicalResult gelu(GeluOp op, GradientContext &c) {
  Value x = c.forward(op.getInput());
  Value dx = c.builder.create<GeluGradOp>(op.getLoc(), x.getType(), x,
                                          c.gradient(op.getResult()),
                                          op.getApproximateAttr());
  c.accumulate(op.getInput(), dx);
  return success();
}

LogicalResult silu(SiluOp op, GradientContext &c) {
  Value x = c.forward(op.getInput());
  Value dx = c.builder.create<SiluGradOp>(op.getLoc(), x.getType(), x,
                                          c.gradient(op.getResult()));
  c.accumulate(op.getInput(), dx);
  return success();
}

LogicalResult swiglu(SwigluOp op, GradientContext &c) {
  auto g = c.builder.create<SwigluGradOp>(op.getLoc(), c.forward(op.getGate()),
                                          c.forward(op.getUp()),
                                          c.gradient(op.getResult()));
  c.accumulate(op.getGate(), g.getGateGrad());
  c.accumulate(op.getUp(), g.getUpGrad());
  return success();
}

LogicalResult add(AddOp op, GradientContext &c) {
  Value dy = c.gradient(op.getResult());
  c.accumulate(op.getLhs(), dy);
  c.accumulate(op.getRhs(), dy);
  return success();
}

LogicalResult dropout(DropoutOp op, GradientContext &c) {
  // The mask is a function of the seed and the element index: applying the
  // same dropout to the gradient multiplies by the same mask / (1 - p).
  Value dy = c.gradient(op.getResult());
  Value dx = c.builder.create<DropoutOp>(op.getLoc(), dy.getType(), dy,
                                         op.getPAttr(), op.getSeedAttr());
  c.accumulate(op.getInput(), dx);
  return success();
}

LogicalResult cast(CastOp op, GradientContext &c) {
  Value dy = c.gradient(op.getResult());
  Value dx = c.builder.create<CastOp>(op.getLoc(), op.getInput().getType(), dy);
  c.accumulate(op.getInput(), dx);
  return success();
}

LogicalResult crossEntropy(CrossEntropyOp op, GradientContext &c) {
  Value dloss = c.gradient(op.getLoss());
  // The softmax comes from the forward's row statistics (saved, or
  // recomputed with the block), not from the logits again.
  // Padding logits (unpadded_vocab_size) get no gradient.
  Value dlogits = c.builder.create<CrossEntropyGradOp>(
      op.getLoc(), op.getLogits().getType(), c.forward(op.getLogits()),
      c.forward(op.getLabels()), c.forward(op.getLossMask()),
      c.forward(op.getRowMax()), c.forward(op.getSumExp()), dloss, Value(),
      op.getUnpaddedVocabSizeAttr());
  c.accumulate(op.getLogits(), dlogits);
  return success();
}


/// Mixture of experts. The routing decision (experts, counts, row map) is
/// piecewise constant: no gradient flows through it.
LogicalResult moeRoute(MoeRouteOp op, GradientContext &c) {
  Value dprobs = c.gradient(op.getProbs());
  if (!dprobs)
    return success();
  Value dlogits = c.builder.create<MoeRouteGradOp>(
      op.getLoc(), op.getLogits().getType(), c.forward(op.getLogits()),
      c.forward(op.getExperts()), dprobs, op.getTopKAttr(),
      op.getPreSoftmaxAttr());
  c.accumulate(op.getLogits(), dlogits);
  return success();
}

/// Both losses are seeded with the same grad_scale by tfm-differentiate
/// (they are terms of the objective), so one gradient op covers their sum.
LogicalResult moeRouterLoss(MoeRouterLossOp op, GradientContext &c) {
  Value dAux = c.gradient(op.getLoadBalancing());
  Value dZ = c.gradient(op.getZLoss());
  if (!dAux && !dZ)
    return success();
  if (dAux != dZ)
    return op.emitOpError()
           << "needs one gradient for both of its losses (tfm-differentiate "
              "seeds both with grad_scale)";
  Value dlogits = c.builder.create<MoeRouterLossGradOp>(
      op.getLoc(), op.getLogits().getType(), c.forward(op.getLogits()),
      c.forward(op.getCounts()), dAux, op.getTopKAttr(), op.getAuxCoeffAttr(),
      op.getZCoeffAttr());
  c.accumulate(op.getLogits(), dlogits);
  return success();
}

/// Which pairs an expert keeps is a routing decision too.
LogicalResult moeDrop(MoeDropOp, GradientContext &) { return success(); }

LogicalResult moePermute(MoePermuteOp op, GradientContext &c) {
  Value drows = c.gradient(op.getRows());
  Value dx = c.builder.create<MoePermuteGradOp>(
      op.getLoc(), op.getInput().getType(), drows, c.forward(op.getRowMap()));
  c.accumulate(op.getInput(), dx);
  return success();
}

LogicalResult moeUnpermute(MoeUnpermuteOp op, GradientContext &c) {
  auto g = c.builder.create<MoeUnpermuteGradOp>(
      op.getLoc(), op.getRows().getType(), op.getProbs().getType(),
      c.forward(op.getRows()), c.forward(op.getProbs()),
      c.forward(op.getRowMap()), c.gradient(op.getResult()));
  c.accumulate(op.getRows(), g.getRowsGrad());
  c.accumulate(op.getProbs(), g.getProbsGrad());
  return success();
}

// Expert parallelism: the counts are integers; dispatch and combine move
// rows between ranks, each the other's adjoint.
LogicalResult moeGatherCounts(MoeGatherCountsOp, GradientContext &) {
  return success();
}

LogicalResult moeDispatch(MoeDispatchOp op, GradientContext &c) {
  Value d = c.builder.create<MoeCombineOp>(
      op.getLoc(), op.getRows().getType(), c.gradient(op.getDispatched()),
      c.forward(op.getAllCounts()), op.getMeshAttr(), op.getAxisAttr(),
      op.getAllgatherAttr());
  c.accumulate(op.getRows(), d);
  return success();
}

LogicalResult moeCombine(MoeCombineOp op, GradientContext &c) {
  Value counts = c.forward(op.getAllCounts());
  FailureOr<tfm::MeshAxesInfo> mesh =
      tfm::MeshAxesInfo::lookup(op, op.getMeshAttr());
  if (failed(mesh))
    return failure();
  // The gradient's dispatch returns the experts' counts too ([E] in global
  // IR, E the counts of every rank over the group's size); unused.
  auto countsType = cast<RankedTensorType>(counts.getType());
  auto localCounts = RankedTensorType::get(
      {countsType.getDimSize(0) / mesh->size(op.getAxis())},
      countsType.getElementType());
  auto d = c.builder.create<MoeDispatchOp>(
      op.getLoc(), op.getDispatched().getType(), localCounts,
      c.gradient(op.getRows()), counts, op.getMeshAttr(), op.getAxisAttr(),
      op.getAllgatherAttr());
  c.accumulate(op.getDispatched(), d.getDispatched());
  return success();
}

LogicalResult groupedLinear(GroupedLinearOp op, GradientContext &c) {
  auto g = c.builder.create<GroupedLinearGradOp>(
      op.getLoc(), op.getInput().getType(), op.getWeight().getType(),
      c.forward(op.getInput()), c.forward(op.getWeight()),
      c.forward(op.getCounts()), c.gradient(op.getResult()));
  c.accumulate(op.getInput(), g.getInputGrad());
  c.accumulate(op.getWeight(), g.getWeightGrad());
  return success();
}

LogicalResult sigmoidGate(SigmoidGateOp op, GradientContext &c) {
  auto g = c.builder.create<SigmoidGateGradOp>(
      op.getLoc(), op.getInput().getType(), op.getGate().getType(),
      c.forward(op.getInput()), c.forward(op.getGate()),
      c.gradient(op.getResult()));
  c.accumulate(op.getInput(), g.getInputGrad());
  c.accumulate(op.getGate(), g.getGateGrad());
  return success();
}


/// The model that runs `Rule` on an `OpT`.
template <typename OpT, LogicalResult (*Rule)(OpT, GradientContext &)>
struct RuleModel
    : autodiff::DifferentiableOpInterface::ExternalModel<RuleModel<OpT, Rule>,
                                                         OpT> {
  LogicalResult emitGradient(Operation *op, GradientContext &ctx) const {
    return Rule(cast<OpT>(op), ctx);
  }
};

template <typename OpT, LogicalResult (*Rule)(OpT, GradientContext &)>
void attach(MLIRContext *ctx) {
  OpT::template attachInterface<RuleModel<OpT, Rule>>(*ctx);
}

} // namespace

#include "passes/Autodiff/GradientInterface.cpp.inc"

void autodiff::registerGradientRules(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, TfmDialect *) {
    attach<LinearOp, linear>(ctx);
    attach<LayerNormOp, layerNorm>(ctx);
    attach<RmsNormOp, rmsNorm>(ctx);
    attach<EmbeddingOp, embedding>(ctx);
    attach<RopeOp, rope>(ctx);
    attach<AttentionOp, attention>(ctx);
    attach<GeluOp, gelu>(ctx);
    attach<SiluOp, silu>(ctx);
    attach<SwigluOp, swiglu>(ctx);
    attach<AddOp, add>(ctx);
    attach<DropoutOp, dropout>(ctx);
    attach<CastOp, cast>(ctx);
    attach<CrossEntropyOp, crossEntropy>(ctx);
    attach<MoeRouteOp, moeRoute>(ctx);
    attach<MoeRouterLossOp, moeRouterLoss>(ctx);
    attach<MoeDropOp, moeDrop>(ctx);
    attach<MoePermuteOp, moePermute>(ctx);
    attach<MoeUnpermuteOp, moeUnpermute>(ctx);
    attach<MoeGatherCountsOp, moeGatherCounts>(ctx);
    attach<MoeDispatchOp, moeDispatch>(ctx);
    attach<MoeCombineOp, moeCombine>(ctx);
    attach<GroupedLinearOp, groupedLinear>(ctx);
    attach<SigmoidGateOp, sigmoidGate>(ctx);
  });
}

LogicalResult autodiff::emitGradient(Operation *op, GradientContext &ctx) {
  if (auto differentiable = dyn_cast<autodiff::DifferentiableOpInterface>(op))
    return differentiable.emitGradient(ctx);
  return op->emitOpError() << "has no gradient rule; tfm-differentiate cannot "
                              "differentiate through it";
}
