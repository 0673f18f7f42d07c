//===- CrossEntropy.cpp - Runtime lowerings of the loss ----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The cross-entropy's kernels, each on [n, V] logits (a slice of the
// vocabulary when it is split, Megatron's vocab-parallel cross-entropy) and
// [n] f32 row statistics; the loss's masked mean and token count, and the
// backward's scale, all divided on the device (loomrt_safe_divide), so the
// loss never waits for the host.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/TfmOps.h"

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace loom::lowering {

namespace {

/// How many of the Vl logits columns of the op's slice of the vocabulary
/// are real vocabulary: all without `unpadded` (no padding), else those
/// with a global id below it, clamp(unpadded - start, 0, Vl) where the slice
/// starts at `start` (a rank's slice may be all padding).
FailureOr<rt::I64> validColumns(int64_t vl, IntegerAttr unpadded, Emitter &e) {
  if (!unpadded)
    return e.i64(vl);
  auto slice = e.sliceOf(vl);
  if (failed(slice))
    return failure();
  return rt::I64(
      e.clampI64(e.subI64(e.i64(unpadded.getInt()), slice->first), 0, vl));
}

void rowMaxKernel(Value logits, rt::I64 valid, Value out, Emitter &e) {
  e.call(rt::CeLocalMax{.dtype = e.dtype(logits),
                        .n = e.i64(rows(logits)),
                        .Vl = e.i64(dim(logits, -1)),
                        .valid = valid,
                        .logits = e.ptr(logits),
                        .row_max = e.ptr(out)});
}

void sumExpKernel(Value logits, rt::I64 valid, Value rowMax, Value out,
                  Emitter &e) {
  e.call(rt::CeLocalSumExp{.dtype = e.dtype(logits),
                           .n = e.i64(rows(logits)),
                           .Vl = e.i64(dim(logits, -1)),
                           .valid = valid,
                           .logits = e.ptr(logits),
                           .row_max = e.ptr(rowMax),
                           .sum_exp = e.ptr(out)});
}

void targetKernel(Value logits, Value labels, Value vocabStart, Value out,
                  Emitter &e) {
  e.call(rt::CeLocalTarget{.dtype = e.dtype(logits),
                           .n = e.i64(rows(logits)),
                           .Vl = e.i64(dim(logits, -1)),
                           .logits = e.ptr(logits),
                           .labels = e.ptr(labels),
                           .vocab_start = rt::I64(vocabStart),
                           .target = e.ptr(out)});
}

} // namespace

/// The cross-entropy of whole logits: its row statistics (which the
/// gradient reads) and the loss from them, the masked mean.
template <>
LogicalResult lower(CrossEntropyOp op, CrossEntropyOp::Adaptor a, Emitter &e) {
  Value logits = a.getLogits();
  Value rowMax = e.result(1), sumExp = e.result(2);
  Value target = e.alloc(op.getRowMax().getType());
  auto valid =
      validColumns(dim(logits, -1), op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  rowMaxKernel(logits, *valid, rowMax, e);
  sumExpKernel(logits, *valid, rowMax, sumExp, e);
  targetKernel(logits, a.getLabels(), e.i64(0), target, e);
  Value loss = e.result(0);
  Value maskedSum = e.allocF32(-1), maskSum = e.allocF32(-1);
  e.call(rt::CeLossFromParts{.n = e.i64(numElements(rowMax)),
                             .row_max = e.ptr(rowMax),
                             .sum_exp = e.ptr(sumExp),
                             .target = e.ptr(target),
                             .mask = e.ptr(a.getLossMask()),
                             .row_loss = e.null(),
                             .masked_sum = e.ptr(maskedSum),
                             .mask_sum = e.ptr(maskSum)});
  e.call(rt::SafeDivide{.num = e.ptr(maskedSum),
                        .den = e.ptr(maskSum),
                        .out = e.ptr(loss)});
  return success();
}

template <>
LogicalResult lower(CeRowMaxOp op, CeRowMaxOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  auto valid = validColumns(dim(a.getLogits(), -1),
                            op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  rowMaxKernel(a.getLogits(), *valid, out, e);
  return success();
}

template <>
LogicalResult lower(CeSumExpOp op, CeSumExpOp::Adaptor a, Emitter &e) {
  Value out = e.result(0);
  auto valid = validColumns(dim(a.getLogits(), -1),
                            op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  sumExpKernel(a.getLogits(), *valid, a.getRowMax(), out, e);
  return success();
}

template <>
LogicalResult lower(CeTargetLogitOp op, CeTargetLogitOp::Adaptor a,
                    Emitter &e) {
  Value out = e.result(0);
  auto slice = e.sliceOf(dim(a.getLogits(), -1));
  if (failed(slice))
    return failure();
  targetKernel(a.getLogits(), a.getLabels(), slice->first, out, e);
  return success();
}

/// The masked sum of row losses and the mask's sum side by side, for their
/// reduction over the ranks that split the batch or sequence.
template <>
LogicalResult lower(CeLossSumOp op, CeLossSumOp::Adaptor a, Emitter &e) {
  Value parts = e.result(0);
  e.call(rt::CeLossFromParts{
      .n = e.i64(numElements(a.getRowMax())),
      .row_max = e.ptr(a.getRowMax()),
      .sum_exp = e.ptr(a.getSumExp()),
      .target = e.ptr(a.getTarget()),
      .mask = e.ptr(a.getLossMask()),
      .row_loss = e.null(),
      .masked_sum = e.ptr(parts),
      .mask_sum = e.offsetPtr(e.ptr(parts), sizeof(float))});
  return success();
}

template <>
LogicalResult lower(LossMeanOp op, LossMeanOp::Adaptor a, Emitter &e) {
  Value loss = e.result(0);
  e.call(rt::SafeDivide{
      .num = e.ptr(a.getParts()),
      .den = e.offsetPtr(e.ptr(a.getParts()), sizeof(float)),
      .out = e.ptr(loss)});
  return success();
}

template <>
LogicalResult lower(TokenCountOp op, TokenCountOp::Adaptor a, Emitter &e) {
  Value count = e.result(0);
  e.call(rt::MaskSum{.n = e.i64(numElements(a.getLossMask())),
                     .mask = e.ptr(a.getLossMask()),
                     .sum = e.ptr(count)});
  return success();
}

/// The softmax from the forward's row statistics, on this rank's slice of
/// the vocabulary (all of it when whole): no communication.
template <>
LogicalResult lower(CrossEntropyGradOp op, CrossEntropyGradOp::Adaptor a,
                    Emitter &e) {
  Value logits = a.getLogits(), out = e.result(0);
  int64_t n = rows(logits), vl = dim(logits, -1);
  auto slice = e.sliceOf(vl);
  if (failed(slice))
    return failure();
  // The tokens the loss averages: given (with the tokens split, the whole
  // batch's), or this op's mask's sum. The scale, dloss over them, is
  // computed on the device: no host wait.
  Value count = a.getCount();
  if (!count) {
    count = e.allocF32(-1);
    e.call(rt::MaskSum{.n = e.i64(n),
                       .mask = e.ptr(a.getLossMask()),
                       .sum = e.ptr(count)});
  }
  Value scale = e.allocF32(-1);
  e.call(rt::SafeDivide{.num = e.ptr(a.getGrad()),
                        .den = e.ptr(count),
                        .out = e.ptr(scale)});
  auto valid = validColumns(vl, op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  e.call(rt::CeVocabParallelBackward{
      .dtype = e.dtype(out),
      .n = e.i64(n),
      .Vl = e.i64(vl),
      .valid = *valid,
      .logits = e.ptr(logits),
      .labels = e.ptr(a.getLabels()),
      .vocab_start = rt::I64(slice->first),
      .row_max = e.ptr(a.getRowMax()),
      .sum_exp = e.ptr(a.getSumExp()),
      .mask = e.ptr(a.getLossMask()),
      .grad_scale = e.ptr(scale),
      .dlogits = e.ptr(out)});
  return success();
}

void attachCrossEntropyLowerings(MLIRContext *ctx) {
  attach<CrossEntropyOp, CeRowMaxOp, CeSumExpOp, CeTargetLogitOp, CeLossSumOp,
         LossMeanOp, TokenCountOp, CrossEntropyGradOp>(ctx);
}

} // namespace loom::lowering
