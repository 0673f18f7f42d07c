//===- Microbatches.cpp - Lowerings of a step's stacked micro-batches ----===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A pipelined step's batch inputs and losses hold all its micro-batches on
// a leading dim; a micro-batch's place in them may be known only at run
// time (a loop's index). Its slices are copies: a few bytes per token.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace loom::tfm;

namespace loom::lowering {

namespace {

/// The pointer to micro-batch `index` (+ the index value `base`) of the
/// stacked buffer `stacked`, whose micro-batches are `bytes` apart.
rt::Ptr microbatchPtr(Value stacked, int64_t index, Value base, int64_t bytes,
                      Emitter &e) {
  rt::Ptr p = e.offsetPtr(e.ptr(stacked).value, index * bytes);
  if (!base)
    return p;
  return e.offsetPtr(p.value, e.mulI64(e.indexToI64(base), bytes));
}

} // namespace

template <>
LogicalResult lower(MicrobatchSliceOp op, MicrobatchSliceOp::Adaptor a,
                    Emitter &e) {
  int64_t bytes = bytesOf(op.getType());
  Value out = e.result(0);
  e.copyBytes(e.ptr(out),
              microbatchPtr(a.getStacked(), op.getIndex(), a.getBase(), bytes,
                            e),
              bytes);
  return success();
}

/// In place: the destination's buffer is the result's.
template <>
LogicalResult lower(MicrobatchInsertOp op, MicrobatchInsertOp::Adaptor a,
                    Emitter &e) {
  if (!op.getDest().hasOneUse())
    return op.emitOpError()
           << "writes its destination in place, which has other uses";
  int64_t bytes = bytesOf(op.getValue().getType());
  e.copyBytes(
      microbatchPtr(a.getDest(), op.getIndex(), a.getBase(), bytes, e),
      e.ptr(a.getValue()), bytes);
  e.setResult(0, a.getDest());
  return success();
}

template <>
LogicalResult lower(EmptyOp, EmptyOp::Adaptor, Emitter &e) {
  e.result(0);
  return success();
}

void attachMicrobatchLowerings(MLIRContext *ctx) {
  attach<MicrobatchSliceOp, MicrobatchInsertOp, EmptyOp>(ctx);
}

} // namespace loom::lowering
