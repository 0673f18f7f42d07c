//===- Moe.cpp - Runtime lowerings of the mixture-of-experts ops -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Routing, router losses, dispatch order, combine, the experts' grouped
// linear layers and the shared expert's gate: one runtime call each. The
// expert counts stay in backend memory; the grouped calls read them there.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/TfmOps.h"

#include <tuple>

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace loom::lowering {

/// loomrt.h's LOOMRT_METRIC_* slots (the ABI fixes these values).
constexpr int64_t kMetricLoadBalancing = 0, kMetricZLoss = 1;

/// Tokens (batch x seq) of a [B, S, ...] value.
static int64_t tokens(Value v) { return dim(v, 0) * dim(v, 1); }

template <>
LogicalResult lower(MoeRouteOp op, MoeRouteOp::Adaptor a, Emitter &e) {
  Value probs = e.result(0), experts = e.result(1);
  e.call(rt::MoeRouteForward{.T = e.i64(tokens(a.getLogits())),
                             .E = e.i64(dim(a.getLogits(), 2)),
                             .k = e.i64(op.getTopK()),
                             .pre_softmax = e.i32(op.getPreSoftmax() ? 1 : 0),
                             .logits = e.ptr(a.getLogits()),
                             .probs = e.ptr(probs),
                             .experts = e.ptr(experts)});
  return success();
}

template <>
LogicalResult lower(MoeRouteGradOp op, MoeRouteGradOp::Adaptor a,
                    Emitter &e) {
  e.call(rt::MoeRouteBackward{.T = e.i64(tokens(a.getLogits())),
                              .E = e.i64(dim(a.getLogits(), 2)),
                              .k = e.i64(op.getTopK()),
                              .pre_softmax = e.i32(op.getPreSoftmax() ? 1 : 0),
                              .logits = e.ptr(a.getLogits()),
                              .experts = e.ptr(a.getExperts()),
                              .dprobs = e.ptr(a.getProbsGrad()),
                              .dlogits = e.ptr(e.result(0))});
  return success();
}

template <>
LogicalResult lower(MoeRouteCountsOp op, MoeRouteCountsOp::Adaptor a,
                    Emitter &e) {
  e.call(rt::MoeRouteCounts{.T = e.i64(tokens(a.getExperts())),
                            .E = e.i64(int64_t(op.getNumExperts())),
                            .k = e.i64(dim(a.getExperts(), 2)),
                            .experts = e.ptr(a.getExperts()),
                            .counts = e.ptr(e.result(0))});
  return success();
}

template <>
LogicalResult lower(MoeRouterLossOp op, MoeRouterLossOp::Adaptor a,
                    Emitter &e) {
  e.call(rt::MoeRouterLossForward{
      .T = e.i64(tokens(a.getLogits())),
      .E = e.i64(dim(a.getLogits(), 2)),
      .k = e.i64(int64_t(op.getTopK())),
      .aux_coeff = e.f32(op.getAuxCoeff().convertToDouble()),
      .z_coeff = e.f32(op.getZCoeff().convertToDouble()),
      .logits = e.ptr(a.getLogits()),
      .counts = e.ptr(a.getCounts()),
      .aux_loss = e.ptr(e.result(0)),
      .z_loss = e.ptr(e.result(1))});
  // The rank program logs each loss without its coefficient (Megatron's
  // load_balancing_loss and z_loss), summed here over layers and
  // micro-batches.
  Value metrics;
  for (auto [slot, coeff, value] :
       {std::tuple{kMetricLoadBalancing, op.getAuxCoeff(), e.result(0)},
        {kMetricZLoss, op.getZCoeff(), e.result(1)}}) {
    double c = coeff.convertToDouble();
    if (c == 0.0)
      continue;
    if (!metrics)
      metrics = e.callValue(rt::Metrics{});
    e.call(rt::Axpy{.n = e.i64(1),
                    .alpha = e.f32(1.0 / c),
                    .x_dtype = e.dtype(value),
                    .x = e.ptr(value),
                    .y_dtype = e.dtype(value),
                    .y = e.offsetPtr(metrics, slot * 4)});
  }
  return success();
}

template <>
LogicalResult lower(MoeRouterLossGradOp op, MoeRouterLossGradOp::Adaptor a,
                    Emitter &e) {
  e.call(rt::MoeRouterLossBackward{
      .T = e.i64(tokens(a.getLogits())),
      .E = e.i64(dim(a.getLogits(), 2)),
      .k = e.i64(int64_t(op.getTopK())),
      .aux_coeff = e.f32(op.getAuxCoeff().convertToDouble()),
      .z_coeff = e.f32(op.getZCoeff().convertToDouble()),
      .logits = e.ptr(a.getLogits()),
      .counts = e.ptr(a.getCounts()),
      .grad_scale = e.ptr(a.getGrad()),
      .dlogits = e.ptr(e.result(0))});
  return success();
}

template <>
LogicalResult lower(MoeDropOp op, MoeDropOp::Adaptor a, Emitter &e) {
  e.call(rt::MoeDrop{.T = e.i64(tokens(a.getExperts())),
                     .E = e.i64(op.getNumExperts()),
                     .k = e.i64(dim(a.getExperts(), 2)),
                     .capacity = e.i64(int64_t(op.getCapacity())),
                     .policy = e.i32(op.getPolicy() == DropPolicy::probs ? 0 : 1),
                     .probs = e.ptr(a.getProbs()),
                     .experts = e.ptr(a.getExperts()),
                     .kept = e.ptr(e.result(0))});
  return success();
}

template <>
LogicalResult lower(MoePermuteOp op, MoePermuteOp::Adaptor a, Emitter &e) {
  Value rows = e.result(0);
  e.call(rt::MoePermute{.dtype = e.dtype(rows),
                        .T = e.i64(tokens(a.getInput())),
                        .H = e.i64(dim(a.getInput(), 2)),
                        .k = e.i64(dim(a.getExperts(), 2)),
                        .E = e.i64(op.getNumExperts()),
                        .N = e.i64(dim(rows, 0)),
                        .pad_to = e.i64(op.getPadToCapacity()
                                            ? int64_t(*op.getCapacity())
                                            : 0),
                        .x = e.ptr(a.getInput()),
                        .experts = e.ptr(a.getExperts()),
                        .rows = e.ptr(rows),
                        .counts = e.ptr(e.result(1)),
                        .row_map = e.ptr(e.result(2))});
  return success();
}

template <>
LogicalResult lower(MoePermuteGradOp op, MoePermuteGradOp::Adaptor a,
                    Emitter &e) {
  Value dx = e.result(0);
  e.call(rt::MoePermuteBackward{.dtype = e.dtype(dx),
                                .T = e.i64(tokens(dx)),
                                .H = e.i64(dim(dx, 2)),
                                .k = e.i64(dim(a.getRowMap(), 2)),
                                .drows = e.ptr(a.getRowsGrad()),
                                .row_map = e.ptr(a.getRowMap()),
                                .dx = e.ptr(dx)});
  return success();
}

template <>
LogicalResult lower(MoeUnpermuteOp op, MoeUnpermuteOp::Adaptor a,
                    Emitter &e) {
  Value out = e.result(0);
  e.call(rt::MoeUnpermute{.dtype = e.dtype(out),
                          .T = e.i64(tokens(out)),
                          .H = e.i64(dim(out, 2)),
                          .k = e.i64(dim(a.getRowMap(), 2)),
                          .rows = e.ptr(a.getRows()),
                          .probs = e.ptr(a.getProbs()),
                          .row_map = e.ptr(a.getRowMap()),
                          .out = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(MoeUnpermuteGradOp op, MoeUnpermuteGradOp::Adaptor a,
                    Emitter &e) {
  Value drows = e.result(0);
  e.call(rt::MoeUnpermuteBackward{.dtype = e.dtype(drows),
                                  .T = e.i64(tokens(a.getGrad())),
                                  .H = e.i64(dim(a.getGrad(), 2)),
                                  .k = e.i64(dim(a.getRowMap(), 2)),
                                  .N = e.i64(dim(drows, 0)),
                                  .rows = e.ptr(a.getRows()),
                                  .probs = e.ptr(a.getProbs()),
                                  .row_map = e.ptr(a.getRowMap()),
                                  .dout = e.ptr(a.getGrad()),
                                  .drows = e.ptr(drows),
                                  .dprobs = e.ptr(e.result(1))});
  return success();
}

template <>
LogicalResult lower(GroupedLinearOp op, GroupedLinearOp::Adaptor a,
                    Emitter &e) {
  Value y = e.result(0);
  e.call(rt::GroupedLinearForward{.dtype = e.dtype(y),
                                  .M = e.i64(dim(y, 0)),
                                  .N = e.i64(dim(y, 1)),
                                  .K = e.i64(dim(a.getInput(), 1)),
                                  .E = e.i64(dim(a.getWeight(), 0)),
                                  .x = e.ptr(a.getInput()),
                                  .W = e.ptr(a.getWeight()),
                                  .counts = e.ptr(a.getCounts()),
                                  .y = e.ptr(y)});
  return success();
}

template <>
LogicalResult lower(GroupedLinearGradOp op, GroupedLinearGradOp::Adaptor a,
                    Emitter &e) {
  Value dx = e.result(0), dw = e.result(1);
  int64_t m = dim(dx, 0), n = dim(a.getGrad(), 1), k = dim(dx, 1),
          experts = dim(dw, 0);
  e.call(rt::GroupedLinearBackwardData{.dtype = e.dtype(dx),
                                       .M = e.i64(m),
                                       .N = e.i64(n),
                                       .K = e.i64(k),
                                       .E = e.i64(experts),
                                       .dy = e.ptr(a.getGrad()),
                                       .W = e.ptr(a.getWeight()),
                                       .counts = e.ptr(a.getCounts()),
                                       .dx = e.ptr(dx)});
  e.call(rt::GroupedLinearBackwardWeight{.dtype = e.dtype(dx),
                                         .M = e.i64(m),
                                         .N = e.i64(n),
                                         .K = e.i64(k),
                                         .E = e.i64(experts),
                                         .dy = e.ptr(a.getGrad()),
                                         .x = e.ptr(a.getInput()),
                                         .counts = e.ptr(a.getCounts()),
                                         .gdtype = e.dtype(dw),
                                         .dW = e.ptr(dw),
                                         .accumulate = e.i32(0)});
  return success();
}

template <>
LogicalResult lower(SigmoidGateOp op, SigmoidGateOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::SigmoidGateForward{.dtype = e.dtype(out),
                                .rows = e.i64(rows(out)),
                                .H = e.i64(dim(out, -1)),
                                .x = e.ptr(a.getInput()),
                                .gate = e.ptr(a.getGate()),
                                .out = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(SigmoidGateGradOp op, SigmoidGateGradOp::Adaptor a,
                    Emitter &e) {
  Value dx = e.result(0);
  e.call(rt::SigmoidGateBackward{.dtype = e.dtype(dx),
                                 .rows = e.i64(rows(dx)),
                                 .H = e.i64(dim(dx, -1)),
                                 .x = e.ptr(a.getInput()),
                                 .gate = e.ptr(a.getGate()),
                                 .dout = e.ptr(a.getGrad()),
                                 .dx = e.ptr(dx),
                                 .dgate = e.ptr(e.result(1))});
  return success();
}

void attachMoeLowerings(MLIRContext *ctx) {
  attach<MoeRouteOp, MoeRouteGradOp, MoeRouteCountsOp, MoeRouterLossOp,
         MoeRouterLossGradOp, MoeDropOp, MoePermuteOp, MoePermuteGradOp,
         MoeUnpermuteOp, MoeUnpermuteGradOp, GroupedLinearOp,
         GroupedLinearGradOp, SigmoidGateOp, SigmoidGateGradOp>(ctx);
}

} // namespace loom::lowering
