//===- Communication.cpp - Runtime lowerings of communication ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The mesh collectives, ring attention's hops, the hierarchical all-to-alls
// and the pipeline's p2p batches, step markers and gradient signals: each a
// runtime call on the communicator argument of its group
// (tfm-comms-to-args).
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/TfmOps.h"
#include "passes/Lowering/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Transforms/DialectConversion.h"

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace loom::lowering {

FailureOr<Ring> ringOf(Emitter &e) {
  auto group = ringGroupOf(e.op());
  if (failed(group))
    return failure();
  FailureOr<rt::Ptr> h = e.groupHandle((*group)->first);
  if (failed(h))
    return failure();
  return Ring{*h, e.rankIn(*h), (*group)->second};
}

Value ringPeer(const Ring &ring, int64_t offset, Emitter &e) {
  int64_t n = ring.size, shift = ((offset % n) + n) % n;
  return e.remI64(e.addI64(ring.rank, shift), n);
}

/// loomrt_all_to_all on `h`: `in` (of `inType`) cut along `split`, the
/// pieces received joined along `concat` into `out`.
static void allToAll(rt::Ptr h, rt::I32 dtype, RankedTensorType inType,
                     int64_t split, int64_t concat, Value in, Value out,
                     Emitter &e) {
  e.call(rt::AllToAll{.comm = h,
                      .dtype = dtype,
                      .ndim = e.i32(int32_t(inType.getRank())),
                      .shape = e.int64Array(inType.getShape()),
                      .split_dim = e.i32(int32_t(split)),
                      .concat_dim = e.i32(int32_t(concat)),
                      .send = e.ptr(in),
                      .recv = e.ptr(out)});
}

/// Int32 tensors (token ids; position and document ids relayed with the
/// hidden state) move as f32 words of the same size: gathers, slices,
/// all-to-alls and p2p only copy bytes.
static rt::I32 movedDtype(Value buffer, Emitter &e) {
  Type element = cast<ShapedType>(buffer.getType()).getElementType();
  return element.isInteger(32)
             ? e.i32(dtypeCode(Float32Type::get(buffer.getContext())))
             : e.dtype(buffer);
}

//===----------------------------------------------------------------------===//
// Ring attention's hops, hierarchical all-to-alls, pipeline p2p
//===----------------------------------------------------------------------===//

/// One grouped exchange: every input to rank r + offset, every result from
/// r - offset (the runtime posts them in Megatron's even/odd order).
template <>
LogicalResult lower(RingShiftOp op, RingShiftOp::Adaptor a, Emitter &e) {
  FailureOr<Ring> ring = ringOf(e);
  if (failed(ring))
    return failure();
  int64_t offset = static_cast<int64_t>(op.getOffset()); // signed
  rt::I32 to(e.toI32(ringPeer(*ring, offset, e)));
  rt::I32 from(e.toI32(ringPeer(*ring, -offset, e)));
  // Every result buffer exists before the batch: the sends read their
  // inputs only in p2p_end, and an input whose last use is its send must not
  // give its memory to a buffer the batch receives into.
  SmallVector<Value> results = e.results();
  e.call(rt::P2pBegin{.comm = ring->handle});
  for (auto [in, out] : llvm::zip(a.getInputs(), results)) {
    rt::I64 n = e.i64(numElements(out));
    e.call(rt::Send{.comm = ring->handle,
                    .dtype = e.dtype(in),
                    .buf = e.ptr(in),
                    .n = n,
                    .peer = to});
    e.call(rt::Recv{.comm = ring->handle,
                    .dtype = e.dtype(out),
                    .buf = e.ptr(out),
                    .n = n,
                    .peer = from});
  }
  e.call(rt::P2pEnd{.comm = ring->handle});
  return success();
}

/// One batch of a pipeline schedule: every send to rank r + offset, every
/// result from r + offset (the last rank's next is the first), posted in
/// operand order, then the results.
template <>
LogicalResult lower(PipelineP2POp op, PipelineP2POp::Adaptor a, Emitter &e) {
  FailureOr<Ring> ring = ringOf(e);
  if (failed(ring))
    return failure();
  // As for ring_shift: every result buffer exists before the batch.
  SmallVector<Value> results = e.results();
  e.call(rt::P2pBegin{.comm = ring->handle});
  for (auto [in, offset] : llvm::zip(a.getSends(), op.getSendOffsets()))
    e.call(rt::Send{.comm = ring->handle,
                    .dtype = movedDtype(in, e),
                    .buf = e.ptr(in),
                    .n = e.i64(numElements(in)),
                    .peer = rt::I32(e.toI32(ringPeer(*ring, offset, e)))});
  for (auto [out, offset] : llvm::zip(results, op.getRecvOffsets()))
    e.call(rt::Recv{.comm = ring->handle,
                    .dtype = movedDtype(out, e),
                    .buf = e.ptr(out),
                    .n = e.i64(numElements(out)),
                    .peer = rt::I32(e.toI32(ringPeer(*ring, offset, e)))});
  e.call(rt::P2pEnd{.comm = ring->handle});
  return success();
}

/// An all-to-all within a level of the hierarchical cp groups: the
/// runtime's all-to-all on that level's communicator.
template <>
LogicalResult lower(LevelAllToAllOp op, LevelAllToAllOp::Adaptor a,
                    Emitter &e) {
  FailureOr<Ring> ring = ringOf(e);
  if (failed(ring))
    return failure();
  auto inType = cast<RankedTensorType>(op.getInput().getType());
  if (inType.getDimSize(int64_t(op.getSplitDim())) % ring->size != 0)
    return op.emitOpError() << "split dim of " << inType
                            << " does not divide over the group's "
                            << ring->size << " ranks";
  Value out = e.result(0);
  allToAll(ring->handle, e.dtype(a.getInput()), inType,
           int64_t(op.getSplitDim()), int64_t(op.getConcatDim()),
           a.getInput(), out, e);
  return success();
}

/// The step marker: a runtime call that prints it when tracing is on.
/// A marker's micro-batch: its number, plus a loop's offset.
static rt::I64 microbatchOf(int64_t microbatch, Value base, Emitter &e) {
  if (!base)
    return e.i64(microbatch);
  return rt::I64(e.addI64(e.indexToI64(base), microbatch));
}

template <>
LogicalResult lower(PipelineStepOp op, PipelineStepOp::Adaptor a,
                    Emitter &e) {
  e.call(rt::PipelineStep{
      .forward = e.i32(op.getBackward() ? 0 : 1),
      .microbatch = microbatchOf(int64_t(op.getMicrobatch()), a.getBase(), e),
      .chunk = e.i64(static_cast<int64_t>(op.getChunk()))});
  return success();
}

/// What a step computed, printed when tracing is on.
template <>
LogicalResult lower(PipelineDataOp op, PipelineDataOp::Adaptor a, Emitter &e) {
  rt::I64 microbatch =
      microbatchOf(int64_t(op.getMicrobatch()), a.getBase(), e);
  rt::I64 chunk = e.i64(static_cast<int64_t>(op.getChunk()));
  if (op.getWhat() == "tokens")
    e.call(rt::PipelineTokens{.microbatch = microbatch,
                              .chunk = chunk,
                              .tokens = e.ptr(a.getValue()),
                              .n = e.i64(numElements(op.getValue()))});
  else
    e.call(rt::PipelineLoss{.microbatch = microbatch,
                            .chunk = chunk,
                            .dtype = e.dtype(op.getValue()),
                            .loss = e.ptr(a.getValue())});
  return success();
}

/// A chunk's gradients are final: the rank program starts their
/// data-parallel reduction (the buffers are the step's out-params, which
/// it knows).
template <>
LogicalResult lower(GradsReadyOp op, GradsReadyOp::Adaptor, Emitter &e) {
  e.call(rt::GradsReady{.chunk = e.i64(static_cast<int64_t>(op.getChunk()))});
  return success();
}

//===----------------------------------------------------------------------===//
// Mesh collectives
//===----------------------------------------------------------------------===//

namespace {

/// What every collective checks and finds first: f32, bf16 or f16 tensors
/// of one type (gathers, slices and all-to-alls only move data, so also
/// int32 ones), and the communicator of the group.
template <typename OpT>
FailureOr<rt::Ptr> collectiveHandle(OpT op, Emitter &e) {
  constexpr bool movesOnly = std::is_same_v<OpT, mesh::AllGatherOp> ||
                             std::is_same_v<OpT, mesh::AllSliceOp> ||
                             std::is_same_v<OpT, mesh::AllToAllOp>;
  Type element =
      cast<RankedTensorType>(op.getInput().getType()).getElementType();
  bool words = movesOnly && element.isInteger(32);
  if (element != cast<RankedTensorType>(op.getResult().getType())
                     .getElementType() ||
      (!words && !isa<Float32Type, BFloat16Type, Float16Type>(element)))
    return op.emitOpError()
           << "moves f32, bf16 or f16 tensors of one type (gathers, slices "
              "and all-to-alls int32 ones too), not "
           << op.getInput().getType() << " to " << op.getResult().getType();
  FailureOr<std::string> kind =
      groupKindOf(op, op.getMesh(), op.getMeshAxes());
  if (failed(kind))
    return failure();
  return e.groupHandle(*kind);
}

} // namespace

template <>
LogicalResult lower(mesh::AllReduceOp op, mesh::AllReduceOp::Adaptor a,
                    Emitter &e) {
  mesh::ReductionKind reduction = op.getReduction();
  if (reduction != mesh::ReductionKind::Sum &&
      reduction != mesh::ReductionKind::Max)
    return op.emitOpError() << "reduces by sum or max only, not "
                            << mesh::stringifyReductionKind(reduction);
  FailureOr<rt::Ptr> h = collectiveHandle(op, e);
  if (failed(h))
    return failure();
  Value in = a.getInput(), out = e.result(0);
  e.call(rt::AllReduce{
      .comm = *h,
      .dtype = e.dtype(in),
      .op = e.i32(reduction == mesh::ReductionKind::Max),
      .send = e.ptr(in),
      .recv = e.ptr(out),
      .n = e.i64(numElements(in))});
  return success();
}

template <>
LogicalResult lower(mesh::AllGatherOp op, mesh::AllGatherOp::Adaptor a,
                    Emitter &e) {
  FailureOr<rt::Ptr> h = collectiveHandle(op, e);
  if (failed(h))
    return failure();
  auto inType = cast<RankedTensorType>(op.getInput().getType());
  Value in = a.getInput(), out = e.result(0);
  e.call(rt::AllGather{.comm = *h,
                       .dtype = movedDtype(in, e),
                       .ndim = e.i32(inType.getRank()),
                       .shape = e.int64Array(inType.getShape()),
                       .dim = e.i32(op.getGatherAxis().getSExtValue()),
                       .send = e.ptr(in),
                       .recv = e.ptr(out)});
  return success();
}

/// No communication: this rank copies its slice, rows of the dims before
/// the slice axis times the slice (a strided copy).
template <>
LogicalResult lower(mesh::AllSliceOp op, mesh::AllSliceOp::Adaptor a,
                    Emitter &e) {
  FailureOr<rt::Ptr> h = collectiveHandle(op, e);
  if (failed(h))
    return failure();
  auto inType = cast<RankedTensorType>(op.getInput().getType());
  auto outType = cast<RankedTensorType>(op.getResult().getType());
  Value out = e.result(0);
  int64_t axis = op.getSliceAxis().getSExtValue();
  ArrayRef<int64_t> outShape = outType.getShape();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= outShape[i];
  for (int64_t i = axis + 1; i < outType.getRank(); ++i)
    inner *= outShape[i];
  int64_t esize = outType.getElementTypeBitWidth() / 8;
  int64_t rowBytes = outShape[axis] * inner * esize;
  int64_t parts = inType.getDimSize(axis) / outShape[axis];
  Value offset = e.mulI64(e.rankIn(*h), rowBytes);
  OpBuilder &b = e.rewriter();
  Value src = b.create<LLVM::GEPOp>(
      e.loc(), LLVM::LLVMPointerType::get(b.getContext()), b.getI8Type(),
      e.ptr(a.getInput()), ValueRange{offset});
  e.call(rt::Copy2d{.dst = e.ptr(out),
                    .dst_stride = e.i64(rowBytes),
                    .src = rt::Ptr(src),
                    .src_stride = e.i64(rowBytes * parts),
                    .rows = e.i64(outer),
                    .row_bytes = e.i64(rowBytes)});
  return success();
}

template <>
LogicalResult lower(mesh::ReduceScatterOp op, mesh::ReduceScatterOp::Adaptor a,
                    Emitter &e) {
  if (op.getReduction() != mesh::ReductionKind::Sum)
    return op.emitOpError() << "reduce_scatter sums only, not "
                            << mesh::stringifyReductionKind(op.getReduction());
  FailureOr<rt::Ptr> h = collectiveHandle(op, e);
  if (failed(h))
    return failure();
  auto inType = cast<RankedTensorType>(op.getInput().getType());
  Value in = a.getInput(), out = e.result(0);
  e.call(rt::ReduceScatter{.comm = *h,
                           .dtype = e.dtype(in),
                           .ndim = e.i32(inType.getRank()),
                           .shape = e.int64Array(inType.getShape()),
                           .dim = e.i32(op.getScatterAxis().getSExtValue()),
                           .send = e.ptr(in),
                           .recv = e.ptr(out)});
  return success();
}

template <>
LogicalResult lower(mesh::AllToAllOp op, mesh::AllToAllOp::Adaptor a,
                    Emitter &e) {
  FailureOr<rt::Ptr> h = collectiveHandle(op, e);
  if (failed(h))
    return failure();
  Value in = a.getInput();
  rt::I32 dtype = movedDtype(in, e);
  Value out = e.result(0);
  allToAll(*h, dtype, cast<RankedTensorType>(op.getInput().getType()),
           op.getSplitAxis().getSExtValue(), op.getConcatAxis().getSExtValue(),
           in, out, e);
  return success();
}

//===----------------------------------------------------------------------===//
// Expert parallelism: the counts exchange, dispatch and combine
//===----------------------------------------------------------------------===//

template <>
LogicalResult lower(MoeGatherCountsOp op, MoeGatherCountsOp::Adaptor a,
                    Emitter &e) {
  FailureOr<Ring> group = ringOf(e);
  if (failed(group))
    return failure();
  Value in = a.getCounts();
  int64_t n = cast<RankedTensorType>(op.getCounts().getType()).getDimSize(0);
  e.call(rt::AllGather{.comm = group->handle,
                       .dtype = movedDtype(in, e),
                       .ndim = e.i32(1),
                       .shape = e.int64Array({n}),
                       .dim = e.i32(0),
                       .send = e.ptr(in),
                       .recv = e.ptr(e.result(0))});
  return success();
}

/// The sizes of a dispatch or combine: E (every rank's counts over the
/// group's size), the rank's rows [N, H] and the dispatched rows M.
struct ExchangeSizes {
  rt::I64 E, N, H, M;
};
static ExchangeSizes exchangeSizes(Value rows, Value dispatched,
                                   Value allCounts, const Ring &group,
                                   Emitter &e) {
  auto shape = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getShape();
  };
  return {e.i64(shape(allCounts)[0] / group.size), e.i64(shape(rows)[0]),
          e.i64(shape(rows)[1]), e.i64(shape(dispatched)[0])};
}

/// The allgather dispatcher's buffer: every rank's rows, [P * N, H].
static Value gatheredRows(Value rows, const Ring &group, Emitter &e) {
  auto type = cast<RankedTensorType>(rows.getType());
  return e.alloc(RankedTensorType::get(
      {group.size * type.getDimSize(0), type.getDimSize(1)},
      type.getElementType()));
}

template <>
LogicalResult lower(MoeDispatchOp op, MoeDispatchOp::Adaptor a, Emitter &e) {
  FailureOr<Ring> group = ringOf(e);
  if (failed(group))
    return failure();
  ExchangeSizes n = exchangeSizes(op.getRows(), op.getDispatched(),
                                  op.getAllCounts(), *group, e);
  Value out = e.result(0);
  if (op.getAllgather()) {
    e.call(rt::MoeDispatchAllgather{
        .comm = group->handle,
        .dtype = e.dtype(out),
        .E = n.E,
        .N = n.N,
        .H = n.H,
        .M = n.M,
        .all_counts = e.ptr(a.getAllCounts()),
        .rows = e.ptr(a.getRows()),
        .gathered = e.ptr(gatheredRows(op.getRows(), *group, e)),
        .dispatched = e.ptr(out),
        .local_counts = e.ptr(e.result(1))});
    return success();
  }
  e.call(rt::MoeDispatch{.comm = group->handle,
                         .dtype = e.dtype(out),
                         .E = n.E,
                         .N = n.N,
                         .H = n.H,
                         .M = n.M,
                         .all_counts = e.ptr(a.getAllCounts()),
                         .rows = e.ptr(a.getRows()),
                         .dispatched = e.ptr(out),
                         .local_counts = e.ptr(e.result(1))});
  return success();
}

template <>
LogicalResult lower(MoeCombineOp op, MoeCombineOp::Adaptor a, Emitter &e) {
  FailureOr<Ring> group = ringOf(e);
  if (failed(group))
    return failure();
  ExchangeSizes n = exchangeSizes(op.getRows(), op.getDispatched(),
                                  op.getAllCounts(), *group, e);
  Value out = e.result(0);
  if (op.getAllgather()) {
    e.call(rt::MoeCombineAllgather{
        .comm = group->handle,
        .dtype = e.dtype(out),
        .E = n.E,
        .N = n.N,
        .H = n.H,
        .M = n.M,
        .all_counts = e.ptr(a.getAllCounts()),
        .dispatched = e.ptr(a.getDispatched()),
        .gathered = e.ptr(gatheredRows(op.getRows(), *group, e)),
        .rows = e.ptr(out)});
    return success();
  }
  e.call(rt::MoeCombine{.comm = group->handle,
                        .dtype = e.dtype(out),
                        .E = n.E,
                        .N = n.N,
                        .H = n.H,
                        .M = n.M,
                        .all_counts = e.ptr(a.getAllCounts()),
                        .dispatched = e.ptr(a.getDispatched()),
                        .rows = e.ptr(out)});
  return success();
}

void attachCommunicationLowerings(MLIRContext *ctx) {
  attach<RingShiftOp, PipelineP2POp, LevelAllToAllOp, PipelineStepOp,
         PipelineDataOp, GradsReadyOp, MoeGatherCountsOp, MoeDispatchOp,
         MoeCombineOp>(ctx);
}

void attachCollectiveLowerings(MLIRContext *ctx) {
  attach<mesh::AllReduceOp, mesh::AllGatherOp, mesh::AllSliceOp,
         mesh::ReduceScatterOp, mesh::AllToAllOp>(ctx);
}

} // namespace loom::lowering
