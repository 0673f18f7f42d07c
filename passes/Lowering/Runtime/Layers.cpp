//===- Layers.cpp - Runtime lowerings of the layers' ops ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Embedding, positions, norms, linear layers, rotary embedding, activations,
// residual adds, casts, dropout and the copies that repeat kv heads or
// reorder sequence chunks: one kernel call (or a few copies) each.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/TfmOps.h"

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace loom::lowering {

/// [start, end) of the vocabulary a (vocab-parallel) table of `rows` rows
/// holds.
static FailureOr<std::pair<Value, Value>> vocabRange(int64_t rows,
                                                     Emitter &e) {
  auto slice = e.sliceOf(rows);
  if (failed(slice))
    return failure();
  return std::make_pair(slice->first, e.addI64(slice->first, rows));
}

template <>
LogicalResult lower(EmbeddingOp op, EmbeddingOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  auto range = vocabRange(dim(a.getTable(), 0), e);
  if (failed(range))
    return failure();
  e.call(rt::EmbeddingForward{.dtype = e.dtype(out),
                              .n = e.i64(numElements(a.getIds())),
                              .H = e.i64(dim(out, -1)),
                              .ids = e.ptr(a.getIds()),
                              .vocab_start = rt::I64(range->first),
                              .vocab_end = rt::I64(range->second),
                              .table = e.ptr(a.getTable()),
                              .out = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(EmbeddingGradOp op, EmbeddingGradOp::Adaptor a,
                    Emitter &e) {
  Value out = e.result(0);
  auto range = vocabRange(dim(out, 0), e);
  if (failed(range))
    return failure();
  e.call(rt::EmbeddingBackward{.dtype = e.dtype(a.getGrad()),
                               .n = e.i64(numElements(a.getIds())),
                               .H = e.i64(dim(out, -1)),
                               .ids = e.ptr(a.getIds()),
                               .vocab_start = rt::I64(range->first),
                               .vocab_end = rt::I64(range->second),
                               .dout = e.ptr(a.getGrad()),
                               .gdtype = e.dtype(out),
                               .dtable = e.ptr(out),
                               .accumulate = e.i32(0)});
  return success();
}

template <>
LogicalResult lower(PositionIdsOp op, PositionIdsOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  std::optional<int64_t> eod = op.getResetAtEod();
  // A piece of the sequence (context parallelism): its tokens' positions.
  auto dims = positionedDims(op);
  if (failed(dims))
    return failure();
  if (!dims->front().isIdentity())
    return e.writeSequencePositions(dims->front(), e.ptr(out));
  e.call(rt::PositionIds{.B = e.i64(dim(out, 0)),
                         .S = e.i64(dim(out, 1)),
                         .tokens = e.ptr(a.getTokens()),
                         .eod = e.i32(eod ? *eod : 0),
                         .reset = e.i32(eod ? 1 : 0),
                         .pos = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(LayerNormOp op, LayerNormOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::LayerNormForward{.dtype = e.dtype(out),
                              .rows = e.i64(rows(out)),
                              .H = e.i64(dim(out, -1)),
                              .x = e.ptr(a.getInput()),
                              .w = e.ptr(a.getWeight()),
                              .b = e.ptr(a.getBias()),
                              .eps = e.f32(op.getEpsilon().convertToDouble()),
                              .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(AddLayerNormOp op, AddLayerNormOp::Adaptor a, Emitter &e) {
  Value sum = e.result(0), out = e.result(1);
  e.call(rt::AddLayerNormForward{
      .dtype = e.dtype(out),
      .rows = e.i64(rows(out)),
      .H = e.i64(dim(out, -1)),
      .x = e.ptr(a.getInput()),
      .residual = e.ptr(a.getResidual()),
      .w = e.ptr(a.getWeight()),
      .b = e.ptr(a.getBias()),
      .eps = e.f32(op.getEpsilon().convertToDouble()),
      .sum = e.ptr(sum),
      .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(AddRmsNormOp op, AddRmsNormOp::Adaptor a, Emitter &e) {
  Value sum = e.result(0), out = e.result(1);
  e.call(rt::AddRmsNormForward{
      .dtype = e.dtype(out),
      .rows = e.i64(rows(out)),
      .H = e.i64(dim(out, -1)),
      .x = e.ptr(a.getInput()),
      .residual = e.ptr(a.getResidual()),
      .w = e.ptr(a.getWeight()),
      .eps = e.f32(op.getEpsilon().convertToDouble()),
      .sum = e.ptr(sum),
      .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(LayerNormGradOp op, LayerNormGradOp::Adaptor a,
                    Emitter &e) {
  Value dx = e.result(0), dw = e.result(1), db = e.result(2);
  e.call(rt::LayerNormBackward{.dtype = e.dtype(dx),
                               .rows = e.i64(rows(dx)),
                               .H = e.i64(dim(dx, -1)),
                               .x = e.ptr(a.getInput()),
                               .w = e.ptr(a.getWeight()),
                               .dy = e.ptr(a.getGrad()),
                               .eps = e.f32(op.getEpsilon().convertToDouble()),
                               .dx_add = e.ptr(a.getAccumulate()),
                               .dx = e.ptr(dx),
                               .gdtype = e.dtype(dw),
                               .dw = e.ptr(dw),
                               .db = e.ptr(db),
                               .accumulate = e.i32(0)});
  return success();
}

template <>
LogicalResult lower(RmsNormOp op, RmsNormOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::RmsNormForward{.dtype = e.dtype(out),
                            .rows = e.i64(rows(out)),
                            .H = e.i64(dim(out, -1)),
                            .x = e.ptr(a.getInput()),
                            .w = e.ptr(a.getWeight()),
                            .eps = e.f32(op.getEpsilon().convertToDouble()),
                            .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(RmsNormGradOp op, RmsNormGradOp::Adaptor a, Emitter &e) {
  Value dx = e.result(0), dw = e.result(1);
  e.call(rt::RmsNormBackward{.dtype = e.dtype(dx),
                             .rows = e.i64(rows(dx)),
                             .H = e.i64(dim(dx, -1)),
                             .x = e.ptr(a.getInput()),
                             .w = e.ptr(a.getWeight()),
                             .dy = e.ptr(a.getGrad()),
                             .eps = e.f32(op.getEpsilon().convertToDouble()),
                             .dx_add = e.ptr(a.getAccumulate()),
                             .dx = e.ptr(dx),
                             .gdtype = e.dtype(dw),
                             .dw = e.ptr(dw),
                             .accumulate = e.i32(0)});
  return success();
}

template <>
LogicalResult lower(LinearOp op, LinearOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::LinearForward{.dtype = e.dtype(out),
                           .M = e.i64(rows(out)),
                           .N = e.i64(dim(out, -1)),
                           .K = e.i64(dim(a.getInput(), -1)),
                           .x = e.ptr(a.getInput()),
                           .W = e.ptr(a.getWeight()),
                           .bias = e.ptr(a.getBias()),
                           .y = e.ptr(out)});
  return success();
}

/// The runtime's code of a GELU approximation (LOOMRT_GELU_TANH or _ERF).
static int32_t geluCode(GeluApprox approximate) {
  return approximate == GeluApprox::tanh ? 1 : 0;
}

/// The weight's (and bias's) gradient of a linear: dW = dy^T x.
static void weightGradCall(Value x, Value dy, Value dw, Value db, Emitter &e) {
  e.call(rt::LinearBackwardWeight{.dtype = e.dtype(x),
                                  .M = e.i64(rows(x)),
                                  .N = e.i64(dim(dy, -1)),
                                  .K = e.i64(dim(x, -1)),
                                  .dy = e.ptr(dy),
                                  .x = e.ptr(x),
                                  .gdtype = e.dtype(dw),
                                  .dW = e.ptr(dw),
                                  .dbias = e.ptr(db),
                                  .accumulate = e.i32(0)});
}

/// An input gradient that adds onto `acc` (operand `accBuffer`): the GEMM
/// adds in its buffer when nothing reads it later, else onto a copy.
static void accumulateInto(Operation *op, Value acc, Value accBuffer,
                           Emitter &e) {
  if (acc)
    e.setResult(0, overwritableAt(acc, op)
                       ? accBuffer
                       : e.copyOf(accBuffer, op->getResult(0).getType()));
}

template <>
LogicalResult lower(LinearGradOp op, LinearGradOp::Adaptor a, Emitter &e) {
  accumulateInto(op, op.getAccumulate(), a.getAccumulate(), e);
  Value dx = e.result(0), dw = e.result(1);
  Value db = op.getBiasGrad() ? e.result(2) : Value();
  e.call(rt::LinearBackwardData{.dtype = e.dtype(dx),
                                .M = e.i64(rows(dx)),
                                .N = e.i64(dim(a.getGrad(), -1)),
                                .K = e.i64(dim(dx, -1)),
                                .dy = e.ptr(a.getGrad()),
                                .W = e.ptr(a.getWeight()),
                                .dx = e.ptr(dx),
                                .accumulate = e.i32(op.getAccumulate() ? 1 : 0)});
  weightGradCall(a.getInput(), a.getGrad(), dw, db, e);
  return success();
}

template <>
LogicalResult lower(LinearGeluOp op, LinearGeluOp::Adaptor a, Emitter &e) {
  Value pre = e.result(0), out = e.result(1);
  e.call(rt::LinearGeluForward{
      .dtype = e.dtype(out),
      .approximate = e.i32(geluCode(op.getApproximate())),
      .M = e.i64(rows(out)),
      .N = e.i64(dim(out, -1)),
      .K = e.i64(dim(a.getInput(), -1)),
      .x = e.ptr(a.getInput()),
      .W = e.ptr(a.getWeight()),
      .bias = e.ptr(a.getBias()),
      .pre = e.ptr(pre),
      .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(LinearGradGeluOp op, LinearGradGeluOp::Adaptor a,
                    Emitter &e) {
  Value dx = e.result(0), dw = e.result(1);
  Value db = op.getBiasGrad() ? e.result(2) : Value();
  e.call(rt::LinearBackwardDataGelu{
      .dtype = e.dtype(dx),
      .approximate = e.i32(geluCode(op.getApproximate())),
      .M = e.i64(rows(dx)),
      .N = e.i64(dim(a.getGrad(), -1)),
      .K = e.i64(dim(dx, -1)),
      .dy = e.ptr(a.getGrad()),
      .W = e.ptr(a.getWeight()),
      .gelu_input = e.ptr(a.getGeluInput()),
      .dx = e.ptr(dx)});
  weightGradCall(a.getInput(), a.getGrad(), dw, db, e);
  return success();
}

template <>
LogicalResult lower(LinearSwigluOp op, LinearSwigluOp::Adaptor a, Emitter &e) {
  Value gate = e.result(0), up = e.result(1), out = e.result(2);
  bool biased = !a.getBiases().empty();
  e.call(rt::LinearSwigluForward{.dtype = e.dtype(out),
                                 .M = e.i64(rows(out)),
                                 .F = e.i64(dim(out, -1)),
                                 .K = e.i64(dim(a.getInput(), -1)),
                                 .x = e.ptr(a.getInput()),
                                 .Wg = e.ptr(a.getGateWeight()),
                                 .Wu = e.ptr(a.getUpWeight()),
                                 .bg = biased ? e.ptr(a.getBiases()[0]) : e.null(),
                                 .bu = biased ? e.ptr(a.getBiases()[1]) : e.null(),
                                 .gate = e.ptr(gate),
                                 .up = e.ptr(up),
                                 .out = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(LinearGradSwigluOp op, LinearGradSwigluOp::Adaptor a,
                    Emitter &e) {
  Value dgate = e.result(0), dup = e.result(1), dw = e.result(2);
  Value db = op.getBiasGrad() ? e.result(3) : Value();
  e.call(rt::LinearBackwardDataSwiglu{.dtype = e.dtype(dgate),
                                      .M = e.i64(rows(dgate)),
                                      .N = e.i64(dim(a.getGrad(), -1)),
                                      .F = e.i64(dim(dgate, -1)),
                                      .dy = e.ptr(a.getGrad()),
                                      .W = e.ptr(a.getWeight()),
                                      .gate = e.ptr(a.getGate()),
                                      .up = e.ptr(a.getUp()),
                                      .dgate = e.ptr(dgate),
                                      .dup = e.ptr(dup)});
  weightGradCall(a.getInput(), a.getGrad(), dw, db, e);
  return success();
}

/// The out-features of each weight of a fused linear.
static SmallVector<int64_t> outFeatures(ValueRange weights) {
  SmallVector<int64_t> n;
  for (Value w : weights)
    n.push_back(dim(w, 0));
  return n;
}

template <>
LogicalResult lower(MultiLinearOp op, MultiLinearOp::Adaptor a, Emitter &e) {
  SmallVector<Value> outs = e.results();
  e.call(rt::MultiLinearForward{
      .dtype = e.dtype(outs.front()),
      .count = e.i32(int64_t(outs.size())),
      .M = e.i64(rows(outs.front())),
      .K = e.i64(dim(a.getInput(), -1)),
      .N = e.int64Array(outFeatures(a.getWeights())),
      .x = e.ptr(a.getInput()),
      .W = e.ptrArray(a.getWeights()),
      .bias = a.getBiases().empty() ? e.null() : e.ptrArray(a.getBiases()),
      .y = e.ptrArray(outs)});
  return success();
}

template <>
LogicalResult lower(MultiLinearGradOp op, MultiLinearGradOp::Adaptor a,
                    Emitter &e) {
  accumulateInto(op, op.getAccumulate(), a.getAccumulate(), e);
  SmallVector<Value> all = e.results();
  size_t n = op.getWeights().size();
  Value dx = all.front();
  ValueRange dws = ValueRange(all).slice(1, n),
             dbs = ValueRange(all).drop_front(1 + n);
  rt::I32 count = e.i32(int64_t(n));
  rt::I64 m = e.i64(rows(dx)), k = e.i64(dim(dx, -1));
  rt::Ptr outFeaturesArray = e.int64Array(outFeatures(a.getWeights()));
  rt::Ptr dys = e.ptrArray(a.getGrads());
  e.call(rt::MultiLinearBackwardData{
      .dtype = e.dtype(dx),
      .count = count,
      .M = m,
      .K = k,
      .N = outFeaturesArray,
      .dy = dys,
      .W = e.ptrArray(a.getWeights()),
      .dx = e.ptr(dx),
      .accumulate = e.i32(op.getAccumulate() ? 1 : 0)});
  e.call(rt::MultiLinearBackwardWeight{
      .dtype = e.dtype(dx),
      .count = count,
      .M = m,
      .K = k,
      .N = outFeaturesArray,
      .dy = dys,
      .x = e.ptr(a.getInput()),
      .gdtype = e.dtype(dws.front()),
      .dW = e.ptrArray(dws),
      .dbias = dbs.empty() ? e.null() : e.ptrArray(dbs),
      .accumulate = e.i32(0)});
  return success();
}

/// loomrt_rope_scaling: LOOMRT_ROPE_LLAMA3 (1) with its four numbers, or
/// LOOMRT_ROPE_DEFAULT (0), which ignores them.
struct RopeScaling {
  RopeScaling(Llama3RopeScalingAttr s, Emitter &e)
      : kind(e.i32(s ? 1 : 0)),
        factor(e.f32(s ? s.getFactor().convertToDouble() : 1.0)),
        low(e.f32(s ? s.getLowFreqFactor().convertToDouble() : 1.0)),
        high(e.f32(s ? s.getHighFreqFactor().convertToDouble() : 1.0)),
        original(e.i64(s ? s.getOriginalMaxPositionEmbeddings() : 0)) {}
  rt::I32 kind;
  rt::F32 factor, low, high;
  rt::I64 original;
};

template <>
LogicalResult lower(RopeOp op, RopeOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  int64_t headDim = op.getHeadDim();
  rt::I32 dtype = e.dtype(out);
  rt::I64 b = e.i64(dim(out, 0)), s = e.i64(dim(out, 1)),
          n = e.i64(dim(out, 2) / headDim), d = e.i64(headDim),
          rotDim = e.i64(headDim);
  rt::F32 theta = e.f32(op.getTheta().convertToDouble());
  RopeScaling scaling(op.getScalingAttr(), e);
  e.call(rt::RopeForward{.dtype = dtype,
                         .B = b,
                         .S = s,
                         .N = n,
                         .D = d,
                         .rot_dim = rotDim,
                         .theta = theta,
                         .scaling = scaling.kind,
                         .factor = scaling.factor,
                         .low_freq_factor = scaling.low,
                         .high_freq_factor = scaling.high,
                         .original_max_positions = scaling.original,
                         .pos = e.ptr(a.getPositions()),
                         .x = e.ptr(a.getInput()),
                         .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(RopeGradOp op, RopeGradOp::Adaptor a, Emitter &e) {
  Value dx = e.result(0);
  int64_t headDim = op.getHeadDim();
  rt::I32 dtype = e.dtype(dx);
  rt::I64 b = e.i64(dim(dx, 0)), s = e.i64(dim(dx, 1)),
          n = e.i64(dim(dx, 2) / headDim), d = e.i64(headDim),
          rotDim = e.i64(headDim);
  rt::F32 theta = e.f32(op.getTheta().convertToDouble());
  RopeScaling scaling(op.getScalingAttr(), e);
  e.call(rt::RopeBackward{.dtype = dtype,
                          .B = b,
                          .S = s,
                          .N = n,
                          .D = d,
                          .rot_dim = rotDim,
                          .theta = theta,
                          .scaling = scaling.kind,
                          .factor = scaling.factor,
                          .low_freq_factor = scaling.low,
                          .high_freq_factor = scaling.high,
                          .original_max_positions = scaling.original,
                          .pos = e.ptr(a.getPositions()),
                          .dy = e.ptr(a.getInput()),
                          .dx = e.ptr(dx)});
  return success();
}

/// The sizes and frequencies of a tfm.rope_pair or tfm.rope_pair_grad.
struct RopePairArgs {
  template <typename OpT>
  RopePairArgs(OpT op, Value y1, Value y2, Emitter &e)
      : dtype(e.dtype(y1)), B(e.i64(dim(y1, 0))), S(e.i64(dim(y1, 1))),
        N1(e.i64(dim(y1, 2) / op.getHeadDim())),
        N2(e.i64(dim(y2, 2) / op.getHeadDim())), D(e.i64(op.getHeadDim())),
        theta(e.f32(op.getTheta().convertToDouble())),
        scaling(op.getScalingAttr(), e) {}
  rt::I32 dtype;
  rt::I64 B, S, N1, N2, D;
  rt::F32 theta;
  RopeScaling scaling;
};

template <>
LogicalResult lower(RopePairOp op, RopePairOp::Adaptor a, Emitter &e) {
  Value y1 = e.result(0), y2 = e.result(1);
  RopePairArgs r(op, y1, y2, e);
  e.call(rt::RopePairForward{.dtype = r.dtype,
                             .B = r.B,
                             .S = r.S,
                             .N1 = r.N1,
                             .N2 = r.N2,
                             .D = r.D,
                             .rot_dim = r.D,
                             .theta = r.theta,
                             .scaling = r.scaling.kind,
                             .factor = r.scaling.factor,
                             .low_freq_factor = r.scaling.low,
                             .high_freq_factor = r.scaling.high,
                             .original_max_positions = r.scaling.original,
                             .pos = e.ptr(a.getPositions()),
                             .x1 = e.ptr(a.getFirst()),
                             .x2 = e.ptr(a.getSecond()),
                             .y1 = e.ptr(y1),
                             .y2 = e.ptr(y2)});
  return success();
}

template <>
LogicalResult lower(RopePairGradOp op, RopePairGradOp::Adaptor a, Emitter &e) {
  Value dx1 = e.result(0), dx2 = e.result(1);
  RopePairArgs r(op, dx1, dx2, e);
  e.call(rt::RopePairBackward{.dtype = r.dtype,
                              .B = r.B,
                              .S = r.S,
                              .N1 = r.N1,
                              .N2 = r.N2,
                              .D = r.D,
                              .rot_dim = r.D,
                              .theta = r.theta,
                              .scaling = r.scaling.kind,
                              .factor = r.scaling.factor,
                              .low_freq_factor = r.scaling.low,
                              .high_freq_factor = r.scaling.high,
                              .original_max_positions = r.scaling.original,
                              .pos = e.ptr(a.getPositions()),
                              .dy1 = e.ptr(a.getFirst()),
                              .dy2 = e.ptr(a.getSecond()),
                              .dx1 = e.ptr(dx1),
                              .dx2 = e.ptr(dx2)});
  return success();
}

template <>
LogicalResult lower(GeluOp op, GeluOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::GeluForward{.dtype = e.dtype(out),
                         .approximate = e.i32(geluCode(op.getApproximate())),
                         .n = e.i64(numElements(out)),
                         .x = e.ptr(a.getInput()),
                         .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(GeluGradOp op, GeluGradOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::GeluBackward{.dtype = e.dtype(out),
                          .approximate = e.i32(geluCode(op.getApproximate())),
                          .n = e.i64(numElements(out)),
                          .x = e.ptr(a.getInput()),
                          .dy = e.ptr(a.getGrad()),
                          .dx = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(SiluOp op, SiluOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::SiluForward{.dtype = e.dtype(out),
                         .n = e.i64(numElements(out)),
                         .x = e.ptr(a.getInput()),
                         .y = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(SiluGradOp op, SiluGradOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::SiluBackward{.dtype = e.dtype(out),
                          .n = e.i64(numElements(out)),
                          .x = e.ptr(a.getInput()),
                          .dy = e.ptr(a.getGrad()),
                          .dx = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(SwigluOp op, SwigluOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  int64_t f = dim(out, -1);
  e.call(rt::SwigluForward{.dtype = e.dtype(out),
                           .rows = e.i64(rows(out)),
                           .F = e.i64(f),
                           .in_ld = e.i64(f),
                           .gate = e.ptr(a.getGate()),
                           .up = e.ptr(a.getUp()),
                           .out = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(SwigluGradOp op, SwigluGradOp::Adaptor a, Emitter &e) {
  Value dg = e.result(0), du = e.result(1);
  int64_t f = dim(dg, -1);
  e.call(rt::SwigluBackward{.dtype = e.dtype(dg),
                            .rows = e.i64(rows(dg)),
                            .F = e.i64(f),
                            .in_ld = e.i64(f),
                            .gate = e.ptr(a.getGate()),
                            .up = e.ptr(a.getUp()),
                            .dout = e.ptr(a.getGrad()),
                            .dgate = e.ptr(dg),
                            .dup = e.ptr(du)});
  return success();
}

template <>
LogicalResult lower(AddOp op, AddOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::Add{.dtype = e.dtype(out),
                 .n = e.i64(numElements(out)),
                 .a = e.ptr(a.getLhs()),
                 .b = e.ptr(a.getRhs()),
                 .out = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(BiasAddOp op, BiasAddOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::AddBias{.dtype = e.dtype(out),
                     .rows = e.i64(rows(out)),
                     .n = e.i64(dim(out, -1)),
                     .x = e.ptr(a.getInput()),
                     .bias = e.ptr(a.getBias()),
                     .out = e.ptr(out)});
  return success();
}

/// `rows` rows of `rowBytes` bytes, `dstStride` / `srcStride` bytes apart
/// (callers compute the pointers first: argument order is unspecified).
static void copyRows(Value dst, int64_t dstStride, Value src, int64_t srcStride,
                     int64_t rows, int64_t rowBytes, Emitter &e) {
  e.call(rt::Copy2d{.dst = rt::Ptr(dst),
                    .dst_stride = e.i64(dstStride),
                    .src = rt::Ptr(src),
                    .src_stride = e.i64(srcStride),
                    .rows = e.i64(rows),
                    .row_bytes = e.i64(rowBytes)});
}

static int64_t elementBytes(Value v) {
  return cast<ShapedType>(v.getType()).getElementTypeBitWidth() / 8;
}

/// Every head of `narrow` is `factor` consecutive heads of `wide`: the
/// copies are strided row copies (a row is one head of one token).
template <>
LogicalResult lower(RepeatKvOp op, RepeatKvOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  int64_t f = op.getFactor(), d = op.getHeadDim();
  int64_t headBytes = d * elementBytes(out);
  int64_t heads = numElements(a.getInput()) / d;
  Value src = e.ptr(a.getInput()), dst = e.ptr(out);
  for (int64_t j = 0; j < f; ++j) {
    Value to = e.offsetPtr(dst, j * headBytes);
    copyRows(to, f * headBytes, src, headBytes, heads, headBytes, e);
  }
  return success();
}

template <>
LogicalResult lower(RepeatKvGradOp op, RepeatKvGradOp::Adaptor a,
                    Emitter &e) {
  Value out = e.result(0);
  int64_t f = op.getFactor(), d = op.getHeadDim();
  int64_t headBytes = d * elementBytes(out);
  int64_t heads = numElements(out) / d;
  Value src = e.ptr(a.getGrad());
  // The first copy lands in the result; the others are added to it.
  Value part = e.alloc(op.getType());
  for (int64_t j = 0; j < f; ++j) {
    Value dst = e.ptr(j == 0 ? out : part);
    Value from = e.offsetPtr(src, j * headBytes);
    copyRows(dst, headBytes, from, f * headBytes, heads, headBytes, e);
    if (j > 0)
      e.call(rt::Add{.dtype = e.dtype(out),
                     .n = e.i64(numElements(out)),
                     .a = e.ptr(out),
                     .b = e.ptr(part),
                     .out = e.ptr(out)});
  }
  return success();
}

template <>
LogicalResult lower(DropoutOp op, DropoutOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  int64_t n = numElements(out);
  // The mask is keyed by each element's index in the global tensor. Whole:
  // one row of n. Split on dim k over a group of size g: rows are the
  // elements before k, a local row is [L_k, inner...] and sits at
  // rank * L_k * inner within a global row of g * L_k * inner.
  Value rows = e.i64(1), cols = e.i64(n), offset = e.i64(0),
        rowStride = e.i64(n);
  auto positioned = positionedDims(op);
  if (failed(positioned))
    return failure();
  if (!positioned->empty()) {
    int64_t k = positioned->front().dim;
    ArrayRef<int64_t> shape = cast<ShapedType>(op.getType()).getShape();
    int64_t outer = 1, local = 1;
    for (int64_t i = 0; i < int64_t(shape.size()); ++i)
      (i < k ? outer : local) *= shape[i];
    auto slice = e.sliceOf(local);
    if (failed(slice))
      return failure();
    rows = e.i64(outer);
    cols = e.i64(local);
    offset = slice->first;
    rowStride = e.groupTimes(rt::Ptr(slice->second), local);
  }
  e.call(rt::DropoutForward{.dtype = e.dtype(out),
                            .rows = rt::I64(rows),
                            .cols = rt::I64(cols),
                            .x = e.ptr(a.getInput()),
                            .y = e.ptr(out),
                            .p = e.f32(op.getP().convertToDouble()),
                            .seed = e.i64(op.getSeed()),
                            .offset = rt::I64(offset),
                            .row_stride = rt::I64(rowStride)});
  return success();
}

template <>
LogicalResult lower(CastOp op, CastOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  e.call(rt::Cast{.src_dtype = e.dtype(a.getInput()),
                  .src = e.ptr(a.getInput()),
                  .dst_dtype = e.dtype(out),
                  .dst = e.ptr(out),
                  .n = e.i64(numElements(out))});
  return success();
}

/// Chunk j of the result is chunk order[j] of the input: one strided copy
/// per chunk (rows of the dims before `dim`).
template <>
LogicalResult lower(PermuteChunksOp op, PermuteChunksOp::Adaptor a,
                    Emitter &e) {
  Value out = e.result(0);
  auto type = cast<ShapedType>(op.getType());
  int64_t d = op.getDim(), outer = 1, inner = 1;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (i < d)
      outer *= type.getDimSize(i);
    else if (i > d)
      inner *= type.getDimSize(i);
  int64_t esize = type.getElementTypeBitWidth() / 8;
  ArrayRef<int64_t> order = op.getOrder();
  int64_t chunkBytes =
      type.getDimSize(d) / int64_t(order.size()) * inner * esize;
  int64_t rowBytes = type.getDimSize(d) * inner * esize;
  Value src = e.ptr(a.getInput()), dst = e.ptr(out);
  for (auto [j, from] : llvm::enumerate(order)) {
    Value to = e.offsetPtr(dst, int64_t(j) * chunkBytes);
    Value chunk = e.offsetPtr(src, from * chunkBytes);
    copyRows(to, rowBytes, chunk, rowBytes, outer, chunkBytes, e);
  }
  return success();
}

void attachLayerLowerings(MLIRContext *ctx) {
  attach<EmbeddingOp, EmbeddingGradOp, PositionIdsOp, LayerNormOp,
         LayerNormGradOp, RmsNormOp, RmsNormGradOp, AddLayerNormOp,
         AddRmsNormOp, RopePairOp, RopePairGradOp, LinearOp, LinearGradOp,
         LinearGeluOp, LinearGradGeluOp, LinearSwigluOp, LinearGradSwigluOp,
         MultiLinearOp, MultiLinearGradOp,
         RopeOp, RopeGradOp, GeluOp, GeluGradOp, SiluOp, SiluGradOp, SwigluOp,
         SwigluGradOp, AddOp, BiasAddOp, RepeatKvOp, RepeatKvGradOp, DropoutOp,
         CastOp, PermuteChunksOp>(ctx);
}

} // namespace loom::lowering
