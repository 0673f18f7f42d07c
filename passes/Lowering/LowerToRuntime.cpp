//===- LowerToRuntime.cpp - tfm ops -> runtime calls on buffers -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Every tfm op becomes: allocate its result buffers, then call the runtime
// kernel with raw pointers and static sizes. Tensor types of functions,
// calls and returns become memrefs through the same type converter.
//
// The kernels' C signatures come from runtime/include/loomrt/Entrypoints.def;
// declarations are created on first use.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "passes/Lowering/SlicePositions.h"

#include "dialects/Tfm/ChunkOrder.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringMap.h"
#include <limits>

namespace loom::lowering {
#define GEN_PASS_DEF_TFMLOWERTORUNTIME
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

//===----------------------------------------------------------------------===//
// Runtime declarations
//===----------------------------------------------------------------------===//

enum class Kind { VOID, I32, I64, U64, F32, PTR };

struct EntrySignature {
  Kind result;
  SmallVector<Kind> args;
};

const llvm::StringMap<EntrySignature> &entrySignatures() {
  static const llvm::StringMap<EntrySignature> table = [] {
    llvm::StringMap<EntrySignature> t;
    constexpr Kind VOID = Kind::VOID, I32 = Kind::I32, I64 = Kind::I64,
                   U64 = Kind::U64, F32 = Kind::F32, PTR = Kind::PTR;
#define LOOMRT_ENTRY(name, result, ...)                                        \
  t[#name] = EntrySignature{result, {__VA_ARGS__}};
#include "runtime/include/loomrt/Entrypoints.def"
    return t;
  }();
  return table;
}

Type typeOf(MLIRContext *ctx, Kind kind) {
  Builder b(ctx);
  switch (kind) {
  case Kind::VOID:
    return Type();
  case Kind::I32:
    return b.getI32Type();
  case Kind::I64:
  case Kind::U64:
    return b.getI64Type();
  case Kind::F32:
    return b.getF32Type();
  case Kind::PTR:
    return LLVM::LLVMPointerType::get(ctx);
  }
  llvm_unreachable("unknown kind");
}

/// The runtime's dtype code of an element type (LOOMRT_F32/BF16/F16).
int32_t dtypeCode(Type elementType) {
  if (elementType.isF32())
    return 0;
  if (elementType.isBF16())
    return 1;
  assert(elementType.isF16() && "tfm verifiers admit f32, bf16, f16 only");
  return 2;
}

//===----------------------------------------------------------------------===//
// Emitting calls
//===----------------------------------------------------------------------===//

Value communicator(Operation *op, StringRef kind,
                   ConversionPatternRewriter &rewriter);

/// Builds runtime calls at one insertion point.
class Emitter {
public:
  Emitter(ConversionPatternRewriter &rewriter, Location loc, ModuleOp module)
      : b(rewriter), loc(loc), module(module) {}

  Value i32(int64_t v) {
    return b.create<arith::ConstantIntOp>(loc, v, b.getI32Type());
  }
  Value i64(int64_t v) {
    return b.create<arith::ConstantIntOp>(loc, v, b.getI64Type());
  }
  Type i32Type() { return b.getI32Type(); }
  /// `p` advanced by `bytes` bytes.
  Value offsetPtr(Value p, int64_t bytes) {
    if (bytes == 0)
      return p;
    // A constant GEP index is an i32; arena offsets of large models pass
    // 2 GiB and go in as an i64 value instead.
    LLVM::GEPArg index = bytes <= std::numeric_limits<int32_t>::max()
                             ? LLVM::GEPArg(int32_t(bytes))
                             : LLVM::GEPArg(i64(bytes));
    return b.create<LLVM::GEPOp>(loc, p.getType(), b.getI8Type(), p,
                                 ArrayRef<LLVM::GEPArg>{index});
  }
  Value addI64(Value v, int64_t c) {
    return b.create<arith::AddIOp>(loc, v, i64(c));
  }
  Value remI64(Value v, int64_t c) {
    return b.create<arith::RemSIOp>(loc, v, i64(c));
  }
  Value mulI64(Value v, int64_t c) {
    return b.create<arith::MulIOp>(loc, v, i64(c));
  }
  /// loomrt_all_to_all on communicator handle `h`: `in` (of `inType`) cut
  /// along `split`, the pieces received joined along `concat` into `out`.
  void allToAll(Value h, Value dtype, RankedTensorType inType, int64_t split,
                int64_t concat, Value in, Value out) {
    call("loomrt_all_to_all",
         {h, dtype, i32(int32_t(inType.getRank())),
          int64Array(inType.getShape()), i32(int32_t(split)),
          i32(int32_t(concat)), ptr(in), ptr(out)});
  }
  Value toI64(Value i32Value) {
    return b.create<arith::ExtSIOp>(loc, b.getI64Type(), i32Value);
  }
  Value toI32(Value i64Value) {
    return b.create<arith::TruncIOp>(loc, b.getI32Type(), i64Value);
  }
  Value subI64(Value lhs, Value rhs) {
    return b.create<arith::SubIOp>(loc, lhs, rhs);
  }
  /// clamp(v, lo, hi) (signed).
  Value clampI64(Value v, int64_t lo, int64_t hi) {
    Value up = b.create<arith::MaxSIOp>(loc, v, i64(lo));
    return b.create<arith::MinSIOp>(loc, up, i64(hi));
  }
  /// `lhs < rhs ? ifLess : otherwise` (signed).
  Value selectLess(Value lhs, Value rhs, Value ifLess, Value otherwise) {
    Value less =
        b.create<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, lhs, rhs);
    return b.create<arith::SelectOp>(loc, less, ifLess, otherwise);
  }
  Value f32(double v) {
    return b.create<arith::ConstantFloatOp>(loc, APFloat(float(v)),
                                            b.getF32Type());
  }
  Value null() {
    return b.create<LLVM::ZeroOp>(loc, LLVM::LLVMPointerType::get(b.getContext()));
  }
  /// The aligned data pointer of a memref (or a null pointer for no value).
  Value ptr(Value memref) {
    if (!memref)
      return null();
    Value index =
        b.create<memref::ExtractAlignedPointerAsIndexOp>(loc, memref);
    Value asInt = b.create<arith::IndexCastOp>(loc, b.getI64Type(), index);
    return b.create<LLVM::IntToPtrOp>(
        loc, LLVM::LLVMPointerType::get(b.getContext()), asInt);
  }
  Value dtype(Value tensorOrMemref) {
    auto shaped = cast<ShapedType>(tensorOrMemref.getType());
    return i32(dtypeCode(shaped.getElementType()));
  }
  Value dtype(Type type) {
    return i32(dtypeCode(cast<ShapedType>(type).getElementType()));
  }
  /// A fresh, uninitialized buffer for a result of tensor type `type`.
  Value alloc(Type tensorType) {
    auto t = cast<RankedTensorType>(tensorType);
    auto memrefType = MemRefType::get(t.getShape(), t.getElementType());
    return b.create<memref::AllocOp>(loc, memrefType, b.getI64IntegerAttr(64));
  }
  /// The handle a communicator argument (a `loomrt_comm *`) points to.
  Value handle(Value commArgument) {
    auto ptr = LLVM::LLVMPointerType::get(b.getContext());
    return b.create<LLVM::LoadOp>(loc, ptr, commArgument);
  }
  /// A pointer to an int64 array holding `values` (a stack buffer).
  Value int64Array(ArrayRef<int64_t> values) {
    auto type = MemRefType::get({int64_t(values.size())}, b.getI64Type());
    Value array = b.create<memref::AllocaOp>(loc, type);
    for (auto [i, v] : llvm::enumerate(values))
      b.create<memref::StoreOp>(loc, i64(v), array,
                                ValueRange{b.create<arith::ConstantIndexOp>(
                                    loc, int64_t(i))});
    return ptr(array);
  }
  void call(StringRef name, ValueRange args) {
    b.create<func::CallOp>(loc, declare(name), declaredResults(name), args);
  }
  /// A call whose one result is used.
  Value callValue(StringRef name, ValueRange args) {
    return b
        .create<func::CallOp>(loc, declare(name), declaredResults(name), args)
        .getResult(0);
  }
  /// An f32 buffer of n elements (softmax statistics), or a scalar (n < 0).
  Value allocF32(int64_t n) {
    auto type = n < 0 ? MemRefType::get({}, b.getF32Type())
                      : MemRefType::get({n}, b.getF32Type());
    return b.create<memref::AllocOp>(loc, type, b.getI64IntegerAttr(64));
  }
  /// The communicator handle of the process group `kind` ("tp").
  FailureOr<Value> groupHandle(Operation *op, StringRef kind) {
    Value comm = communicator(op, kind, b);
    if (!comm)
      return op->emitOpError() << "has no communicator argument for group "
                               << kind << " (run tfm-comms-to-args)";
    return handle(comm);
  }
  /// Where `op`'s positioned dim (SlicePositions.h), `localSize` long on
  /// this rank, starts in the global tensor, and its group's handle (null
  /// when the dim is whole).
  FailureOr<std::pair<Value, Value>> sliceOf(Operation *op, int64_t localSize) {
    auto positioned = lowering::positionedDims(op);
    if (failed(positioned))
      return failure();
    assert(positioned->size() <= 1 && "an op with one positioned dim");
    return sliceOf(op, positioned->empty() ? lowering::PositionedDim()
                                           : positioned->front(),
                   localSize);
  }
  FailureOr<std::pair<Value, Value>>
  sliceOf(Operation *op, const lowering::PositionedDim &d, int64_t localSize) {
    if (d.group.empty())
      return std::make_pair(i64(0), Value());
    FailureOr<Value> h = groupHandle(op, d.group);
    if (failed(h))
      return failure();
    return std::make_pair(sliceStart(*h, localSize), *h);
  }
  /// loomrt_sequence_positions' description of a slice (chunkLayout).
  struct ChunkLayout {
    Value start, chunk;
    int32_t numChunks;
    Value order;
  };
  /// The global sequence positions [B, L] of this rank's L tokens along the
  /// positioned dim `d` (an int32 buffer), or a null pointer when they are
  /// 0, 1, ... (the kernels' default). `layout`, when given, is d's
  /// chunkLayout, already computed.
  FailureOr<Value> sequencePositions(Operation *op,
                                     const lowering::PositionedDim &d,
                                     const ChunkLayout *layout = nullptr) {
    if (d.isIdentity())
      return null();
    auto type = cast<RankedTensorType>(d.value.getType());
    Value buffer = ptr(alloc(RankedTensorType::get(
        {type.getDimSize(tfm::kBatchDim), type.getDimSize(d.dim)},
        b.getI32Type())));
    if (layout) {
      writePositions(d, *layout, buffer);
      return buffer;
    }
    if (failed(writeSequencePositions(op, d, buffer)))
      return failure();
    return buffer;
  }
  /// Where a rank's slice of the positioned dim `d` lies, as
  /// loomrt_sequence_positions and loomrt_attention_chunked_* take it: the
  /// slice's first stored token, the chunk size, the number of chunks and
  /// their order (a null pointer when natural). `ofRank`, when given, is the
  /// group rank whose slice to take instead of this rank's (ring
  /// attention's blocks).
  FailureOr<ChunkLayout> chunkLayout(Operation *op,
                                     const lowering::PositionedDim &d,
                                     Value ofRank = {}) {
    auto type = cast<RankedTensorType>(d.value.getType());
    int64_t local = type.getDimSize(d.dim);
    auto slice = sliceOf(op, d, local);
    if (failed(slice))
      return failure();
    if (ofRank)
      slice->first = b.create<arith::MulIOp>(loc, ofRank, i64(local));
    // The whole dim is the local one times the split's group size.
    Value global = slice->second ? groupTimes(slice->second, local) : i64(local);
    int64_t numChunks = d.chunks.empty() ? 1 : int64_t(d.chunks.size());
    Value chunk = b.create<arith::DivSIOp>(loc, global, i64(numChunks));
    return ChunkLayout{slice->first, chunk, int32_t(numChunks),
                       d.chunks.empty() ? null() : int64Array(d.chunks)};
  }
  /// Writes the positions into the int32 [B, L] buffer `buffer` (a
  /// pointer); `ofRank` as for chunkLayout.
  LogicalResult writeSequencePositions(Operation *op,
                                       const lowering::PositionedDim &d,
                                       Value buffer, Value ofRank = {}) {
    auto layout = chunkLayout(op, d, ofRank);
    if (failed(layout))
      return failure();
    writePositions(d, *layout, buffer);
    return success();
  }
  /// Writes the positions of the slice `layout` of `d` into `buffer`.
  void writePositions(const lowering::PositionedDim &d,
                      const ChunkLayout &layout, Value buffer) {
    auto type = cast<RankedTensorType>(d.value.getType());
    call("loomrt_sequence_positions",
         {i64(type.getDimSize(tfm::kBatchDim)), i64(type.getDimSize(d.dim)),
          layout.start, layout.chunk, i32(layout.numChunks), layout.order,
          buffer});
  }
  /// Where this rank's slice of a split starts (the first vocabulary id of
  /// a vocab-parallel table, say): its index in the group of `commHandle`
  /// times the slice's size.
  Value sliceStart(Value commHandle, int64_t sliceSize) {
    Value rank = callValue("loomrt_comm_rank", {commHandle});
    Value wide = b.create<arith::ExtSIOp>(loc, b.getI64Type(), rank);
    return b.create<arith::MulIOp>(loc, wide, i64(sliceSize));
  }
  /// The size of the group of `commHandle` times `n`.
  Value groupTimes(Value commHandle, int64_t n) {
    Value size = callValue("loomrt_comm_size", {commHandle});
    Value wide = b.create<arith::ExtSIOp>(loc, b.getI64Type(), size);
    return b.create<arith::MulIOp>(loc, wide, i64(n));
  }
  /// `num / den` as an f32 value, or 0 when `den` is 0 (an all-masked batch).
  Value safeDivide(Value num, Value den) {
    Value zero = f32(0.0);
    Value isZero =
        b.create<arith::CmpFOp>(loc, arith::CmpFPredicate::OEQ, den, zero);
    Value q = b.create<arith::DivFOp>(loc, num, den);
    return b.create<arith::SelectOp>(loc, isZero, zero, q);
  }
  // Scalars the compiled code computes with on the host (the loss, its
  // token count, grad_scale) live in backend memory like every tensor, so
  // they cross through loomrt_copy and a host stack slot: the code never
  // dereferences backend memory (a GPU's, on the cuda backend).
  Value load(Value scalarMemref) {
    return loadFrom(ptr(scalarMemref),
                    cast<MemRefType>(scalarMemref.getType()).getElementType());
  }
  /// Element `i` of a 1-d memref.
  Value loadAt(Value memref, int64_t i) {
    Type type = cast<MemRefType>(memref.getType()).getElementType();
    return loadFrom(offsetPtr(ptr(memref), i * scalarBytes(type)), type);
  }
  /// The `type` value at backend pointer `src`.
  Value loadFrom(Value src, Type type) {
    Value slot = b.create<memref::AllocaOp>(loc, MemRefType::get({}, type));
    call("loomrt_copy", {ptr(slot), src, i64(scalarBytes(type))});
    return b.create<memref::LoadOp>(loc, slot, ValueRange());
  }
  void store(Value value, Value scalarMemref) {
    Type type = value.getType();
    Value slot = b.create<memref::AllocaOp>(loc, MemRefType::get({}, type));
    b.create<memref::StoreOp>(loc, value, slot, ValueRange());
    call("loomrt_copy",
         {ptr(scalarMemref), ptr(slot), i64(scalarBytes(type))});
  }
  static int64_t scalarBytes(Type type) {
    return int64_t(type.getIntOrFloatBitWidth() / 8);
  }

private:
  TypeRange declaredResults(StringRef name) {
    declare(name);
    auto func = cast<func::FuncOp>(SymbolTable::lookupSymbolIn(module, name));
    return func.getResultTypes();
  }
  /// Declares `name` from Entrypoints.def on first use.
  StringRef declare(StringRef name) {
    if (SymbolTable::lookupSymbolIn(module, name))
      return name;
    auto it = entrySignatures().find(name);
    // A lowering bug, not bad input: stop with the name rather than crash.
    if (it == entrySignatures().end())
      llvm::report_fatal_error("runtime function " + Twine(name) +
                               " is not declared in Entrypoints.def");
    MLIRContext *ctx = b.getContext();
    SmallVector<Type> args;
    for (Kind k : it->second.args)
      args.push_back(typeOf(ctx, k));
    SmallVector<Type> results;
    if (Type r = typeOf(ctx, it->second.result))
      results.push_back(r);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(module.getBody());
    auto func = b.create<func::FuncOp>(loc, name,
                                       FunctionType::get(ctx, args, results));
    func.setPrivate();
    return name;
  }

  ConversionPatternRewriter &b;
  Location loc;
  ModuleOp module;
};

int64_t numElements(Value v) {
  return cast<ShapedType>(v.getType()).getNumElements();
}
int64_t dim(Value v, int64_t i) {
  auto shaped = cast<ShapedType>(v.getType());
  return shaped.getDimSize(i < 0 ? shaped.getRank() + i : i);
}
/// Product of all dims but the last: the rows of a last-dim op.
int64_t rows(Value v) { return numElements(v) / dim(v, -1); }

//===----------------------------------------------------------------------===//
// One lowering per op
//===----------------------------------------------------------------------===//

/// Lowers one op: emits calls and returns the buffers that replace its
/// results. Specialized for every convertible op below.
template <typename OpT>
FailureOr<SmallVector<Value>> lower(OpT op, typename OpT::Adaptor a,
                                    Emitter &e);

/// [start, end) of the vocabulary a (vocab-parallel) table of `rows` rows
/// holds.
FailureOr<std::pair<Value, Value>> vocabRange(Operation *op, int64_t rows,
                                              Emitter &e) {
  auto slice = e.sliceOf(op, rows);
  if (failed(slice))
    return failure();
  return std::make_pair(slice->first, e.addI64(slice->first, rows));
}

template <>
FailureOr<SmallVector<Value>> lower(EmbeddingOp op, EmbeddingOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  auto range = vocabRange(op, dim(a.getTable(), 0), e);
  if (failed(range))
    return failure();
  e.call("loomrt_embedding_forward",
         {e.dtype(out), e.i64(numElements(a.getIds())), e.i64(dim(out, -1)),
          e.ptr(a.getIds()), range->first, range->second,
          e.ptr(a.getTable()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(EmbeddingGradOp op,
                                    EmbeddingGradOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  auto range = vocabRange(op, dim(out, 0), e);
  if (failed(range))
    return failure();
  e.call("loomrt_embedding_backward",
         {e.dtype(a.getGrad()), e.i64(numElements(a.getIds())),
          e.i64(dim(out, -1)), e.ptr(a.getIds()), range->first,
          range->second, e.ptr(a.getGrad()), e.dtype(out), e.ptr(out),
          e.i32(0)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(PositionIdsOp op, PositionIdsOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  std::optional<int64_t> eod = op.getResetAtEod();
  // A piece of the sequence (context parallelism): its tokens' positions.
  auto dims = lowering::positionedDims(op);
  if (failed(dims))
    return failure();
  if (!dims->front().isIdentity()) {
    if (failed(e.writeSequencePositions(op, dims->front(), e.ptr(out))))
      return failure();
    return SmallVector<Value>{out};
  }
  e.call("loomrt_position_ids",
         {e.i64(dim(out, 0)), e.i64(dim(out, 1)), e.ptr(a.getTokens()),
          e.i32(eod ? *eod : 0), e.i32(eod ? 1 : 0), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(LayerNormOp op, LayerNormOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_layer_norm_forward",
         {e.dtype(out), e.i64(rows(out)), e.i64(dim(out, -1)),
          e.ptr(a.getInput()), e.ptr(a.getWeight()), e.ptr(a.getBias()),
          e.f32(op.getEpsilon().convertToDouble()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(LayerNormGradOp op,
                                    LayerNormGradOp::Adaptor a, Emitter &e) {
  Value dx = e.alloc(op.getInputGrad().getType());
  Value dw = e.alloc(op.getWeightGrad().getType());
  Value db = e.alloc(op.getBiasGrad().getType());
  e.call("loomrt_layer_norm_backward",
         {e.dtype(dx), e.i64(rows(dx)), e.i64(dim(dx, -1)),
          e.ptr(a.getInput()), e.ptr(a.getWeight()), e.ptr(a.getGrad()),
          e.f32(op.getEpsilon().convertToDouble()), e.ptr(dx), e.dtype(dw),
          e.ptr(dw), e.ptr(db), e.i32(0)});
  return SmallVector<Value>{dx, dw, db};
}

template <>
FailureOr<SmallVector<Value>> lower(RmsNormOp op, RmsNormOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_rms_norm_forward",
         {e.dtype(out), e.i64(rows(out)), e.i64(dim(out, -1)),
          e.ptr(a.getInput()), e.ptr(a.getWeight()),
          e.f32(op.getEpsilon().convertToDouble()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(RmsNormGradOp op, RmsNormGradOp::Adaptor a,
                                    Emitter &e) {
  Value dx = e.alloc(op.getInputGrad().getType());
  Value dw = e.alloc(op.getWeightGrad().getType());
  e.call("loomrt_rms_norm_backward",
         {e.dtype(dx), e.i64(rows(dx)), e.i64(dim(dx, -1)),
          e.ptr(a.getInput()), e.ptr(a.getWeight()), e.ptr(a.getGrad()),
          e.f32(op.getEpsilon().convertToDouble()), e.ptr(dx), e.dtype(dw),
          e.ptr(dw), e.i32(0)});
  return SmallVector<Value>{dx, dw};
}

template <>
FailureOr<SmallVector<Value>> lower(LinearOp op, LinearOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_linear_forward",
         {e.dtype(out), e.i64(rows(out)), e.i64(dim(out, -1)),
          e.i64(dim(a.getInput(), -1)), e.ptr(a.getInput()),
          e.ptr(a.getWeight()), e.ptr(a.getBias()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(LinearGradOp op, LinearGradOp::Adaptor a,
                                    Emitter &e) {
  Value dx = e.alloc(op.getInputGrad().getType());
  Value dw = e.alloc(op.getWeightGrad().getType());
  Value db = op.getBiasGrad() ? e.alloc(op.getBiasGrad().getType()) : Value();
  Value m = e.i64(rows(dx)), n = e.i64(dim(a.getGrad(), -1)),
        k = e.i64(dim(dx, -1));
  e.call("loomrt_linear_backward_data",
         {e.dtype(dx), m, n, k, e.ptr(a.getGrad()), e.ptr(a.getWeight()),
          e.ptr(dx), e.i32(0)});
  e.call("loomrt_linear_backward_weight",
         {e.dtype(dx), m, n, k, e.ptr(a.getGrad()), e.ptr(a.getInput()),
          e.dtype(dw), e.ptr(dw), e.ptr(db), e.i32(0)});
  SmallVector<Value> results = {dx, dw};
  if (db)
    results.push_back(db);
  return results;
}

template <typename OpT>
FailureOr<SmallVector<Value>> lowerRope(OpT op, typename OpT::Adaptor a,
                                        Emitter &e, StringRef kernel) {
  Value out = e.alloc(op.getType());
  int64_t headDim = op.getHeadDim();
  // loomrt_rope_scaling: LOOMRT_ROPE_LLAMA3 (1) with its four numbers, or
  // LOOMRT_ROPE_DEFAULT (0), which ignores them.
  Llama3RopeScalingAttr s = op.getScalingAttr();
  e.call(kernel, {e.dtype(out), e.i64(dim(out, 0)), e.i64(dim(out, 1)),
                  e.i64(dim(out, 2) / headDim), e.i64(headDim), e.i64(headDim),
                  e.f32(op.getTheta().convertToDouble()), e.i32(s ? 1 : 0),
                  e.f32(s ? s.getFactor().convertToDouble() : 1.0),
                  e.f32(s ? s.getLowFreqFactor().convertToDouble() : 1.0),
                  e.f32(s ? s.getHighFreqFactor().convertToDouble() : 1.0),
                  e.i64(s ? s.getOriginalMaxPositionEmbeddings() : 0),
                  e.ptr(a.getPositions()), e.ptr(a.getInput()), e.ptr(out)});
  return SmallVector<Value>{out};
}
template <>
FailureOr<SmallVector<Value>> lower(RopeOp op, RopeOp::Adaptor a, Emitter &e) {
  return lowerRope(op, a, e, "loomrt_rope_forward");
}
template <>
FailureOr<SmallVector<Value>> lower(RopeGradOp op, RopeGradOp::Adaptor a,
                                    Emitter &e) {
  return lowerRope(op, a, e, "loomrt_rope_backward");
}

/// The document ids of the queries' and the keys' tokens for a
/// causal_document mask (null pointers for a plain causal mask): those of
/// the whole sequence, computed from its tokens, read at the positions
/// `pos` where those are not 0, 1, ... (context parallelism).
template <typename OpT>
std::pair<Value, Value> documentIds(OpT op, Value tokens,
                                    std::pair<Value, Value> pos, Emitter &e) {
  if (op.getMask() != MaskKind::causal_document)
    return {e.null(), e.null()};
  int64_t batch = dim(tokens, 0), seq = dim(tokens, 1);
  Value doc = e.ptr(e.alloc(op.getTokens().getType()));
  e.call("loomrt_document_ids",
         {e.i64(batch), e.i64(seq), e.ptr(tokens), e.i32(*op.getEod()), doc});
  auto at = [&](Value positions, Value of) {
    if (isa_and_nonnull<LLVM::ZeroOp>(positions.getDefiningOp()))
      return doc; // 0, 1, ...: the whole sequence's own ids
    int64_t local = dim(of, 1);
    Value picked = e.ptr(
        e.alloc(RankedTensorType::get({batch, local}, e.i32Type())));
    e.call("loomrt_gather_positions",
           {e.i64(batch), e.i64(seq), e.i64(local), doc, positions, picked});
    return picked;
  };
  return {at(pos.first, op.getQuery()), at(pos.second, op.getKey())};
}

/// The global positions of the queries' and the keys' tokens (null
/// pointers where they are 0, 1, ...): the causal mask compares them, so a
/// context-parallel rank's queries attend exactly as in the whole sequence.
template <typename OpT>
FailureOr<std::pair<Value, Value>>
queryKeyPositions(OpT op, ArrayRef<lowering::PositionedDim> dims, Emitter &e) {
  auto q = e.sequencePositions(op, dims[0]);
  auto k = e.sequencePositions(op, dims[1]);
  if (failed(q) || failed(k))
    return failure();
  return std::make_pair(*q, *k);
}

/// Whether the queries hold whole chunks of a sequence split over a group
/// and the keys the whole sequence in order: context parallelism's
/// all-gather scheme, which loomrt_attention_chunked_* computes with
/// position-free attention calls (fused attention on the cuda backend).
static bool allGathered(ArrayRef<lowering::PositionedDim> dims) {
  const lowering::PositionedDim &q = dims[0], &k = dims[1];
  return !q.group.empty() && !q.chunks.empty() &&
         int64_t(q.chunks.size()) % q.parts == 0 && k.isIdentity();
}

/// Calls `callee` (loomrt_attention_chunked_forward or _backward) with the
/// layout of the queries' chunks, the heads, the scale, the document ids
/// (gathered at the queries' positions only when there are documents) and
/// `tensors`.
template <typename OpT>
LogicalResult callChunked(OpT op, StringRef callee, Value tokens, Value query,
                          const lowering::PositionedDim &q,
                          ArrayRef<Value> tensors, Emitter &e) {
  auto layout = e.chunkLayout(op, q);
  if (failed(layout))
    return failure();
  Value qPos = e.null();
  if (op.getMask() == MaskKind::causal_document) {
    auto positions = e.sequencePositions(op, q, &*layout);
    if (failed(positions))
      return failure();
    qPos = *positions;
  }
  auto [qDoc, kDoc] = documentIds(op, tokens, {qPos, e.null()}, e);
  SmallVector<Value> args{
      e.dtype(query),          e.i64(dim(query, 0)),    e.i64(dim(query, 1)),
      layout->start,           layout->chunk,           e.i32(layout->numChunks),
      layout->order,           e.i64(op.getNumHeads()), e.i64(op.getNumKvHeads()),
      e.i64(op.getHeadDim()),  e.f32(op.getScale().convertToDouble()),
      qDoc,                    kDoc};
  args.append(tensors.begin(), tensors.end());
  e.call(callee, args);
  return success();
}

template <>
FailureOr<SmallVector<Value>> lower(AttentionOp op, AttentionOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getResult().getType());
  Value lse = e.alloc(op.getLse().getType());
  auto dims = lowering::positionedDims(op);
  if (failed(dims))
    return failure();
  if (allGathered(*dims)) {
    if (failed(callChunked(op, "loomrt_attention_chunked_forward",
                           a.getTokens(), a.getQuery(), (*dims)[0],
                           {e.ptr(a.getQuery()), e.ptr(a.getKey()),
                            e.ptr(a.getValue()), e.ptr(out), e.ptr(lse)},
                           e)))
      return failure();
    return SmallVector<Value>{out, lse};
  }
  auto pos = queryKeyPositions(op, *dims, e);
  if (failed(pos))
    return failure();
  auto [qDoc, kDoc] = documentIds(op, a.getTokens(), *pos, e);
  e.call("loomrt_attention_forward",
         {e.dtype(out), e.i64(dim(out, 0)), e.i64(dim(out, 1)),
          e.i64(dim(a.getKey(), 1)), e.i64(op.getNumHeads()),
          e.i64(op.getNumKvHeads()), e.i64(op.getHeadDim()),
          e.f32(op.getScale().convertToDouble()), e.i32(1), pos->first,
          pos->second, qDoc, kDoc, e.ptr(a.getQuery()), e.ptr(a.getKey()),
          e.ptr(a.getValue()), e.ptr(out), e.ptr(lse)});
  return SmallVector<Value>{out, lse};
}

template <>
FailureOr<SmallVector<Value>> lower(AttentionGradOp op,
                                    AttentionGradOp::Adaptor a, Emitter &e) {
  Value dq = e.alloc(op.getQueryGrad().getType());
  Value dk = e.alloc(op.getKeyGrad().getType());
  Value dv = e.alloc(op.getValueGrad().getType());
  auto dims = lowering::positionedDims(op);
  if (failed(dims))
    return failure();
  if (allGathered(*dims)) {
    if (failed(callChunked(
            op, "loomrt_attention_chunked_backward", a.getTokens(),
            a.getQuery(), (*dims)[0],
            {e.ptr(a.getQuery()), e.ptr(a.getKey()), e.ptr(a.getValue()),
             e.ptr(a.getOut()), e.ptr(a.getLse()), e.ptr(a.getOutGrad()),
             e.ptr(dq), e.ptr(dk), e.ptr(dv)},
            e)))
      return failure();
    return SmallVector<Value>{dq, dk, dv};
  }
  auto pos = queryKeyPositions(op, *dims, e);
  if (failed(pos))
    return failure();
  auto [qDoc, kDoc] = documentIds(op, a.getTokens(), *pos, e);
  e.call("loomrt_attention_backward",
         {e.dtype(dq), e.i64(dim(dq, 0)), e.i64(dim(dq, 1)),
          e.i64(dim(dk, 1)), e.i64(op.getNumHeads()),
          e.i64(op.getNumKvHeads()), e.i64(op.getHeadDim()),
          e.f32(op.getScale().convertToDouble()), e.i32(1), pos->first,
          pos->second, qDoc, kDoc, e.ptr(a.getQuery()), e.ptr(a.getKey()),
          e.ptr(a.getValue()), e.ptr(a.getOut()), e.ptr(a.getLse()),
          e.ptr(a.getOutGrad()), e.ptr(dq), e.ptr(dk), e.ptr(dv), e.i32(0)});
  return SmallVector<Value>{dq, dk, dv};
}

//===----------------------------------------------------------------------===//
// Ring attention (context parallelism's p2p)
//===----------------------------------------------------------------------===//

/// The ring's communicator handle, this rank's place in it and its size.
struct Ring {
  Value handle, rank;
  int64_t size;
};

FailureOr<Ring> ringOf(Operation *op, Emitter &e) {
  auto group = lowering::ringGroupOf(op);
  if (failed(group))
    return failure();
  FailureOr<Value> h = e.groupHandle(op, (*group)->first);
  if (failed(h))
    return failure();
  Value rank = e.toI64(e.callValue("loomrt_comm_rank", {*h}));
  return Ring{*h, rank, (*group)->second};
}

/// (rank + offset) mod size, for any offset.
Value ringPeer(const Ring &ring, int64_t offset, Emitter &e) {
  int64_t n = ring.size, shift = ((offset % n) + n) % n;
  return e.remI64(e.addI64(ring.rank, shift), n);
}

/// One grouped exchange: every input to rank r + offset, every result from
/// r - offset (the runtime posts them in Megatron's even/odd order).
template <>
FailureOr<SmallVector<Value>> lower(RingShiftOp op, RingShiftOp::Adaptor a,
                                    Emitter &e) {
  FailureOr<Ring> ring = ringOf(op, e);
  if (failed(ring))
    return failure();
  int64_t offset = static_cast<int64_t>(op.getOffset()); // signed
  Value to = e.toI32(ringPeer(*ring, offset, e));
  Value from = e.toI32(ringPeer(*ring, -offset, e));
  // Every result buffer exists before the batch: the sends read their
  // inputs only in p2p_end, and an input whose last use is its send must not
  // give its memory to a buffer the batch receives into.
  SmallVector<Value> results;
  for (Type type : op.getResultTypes())
    results.push_back(e.alloc(type));
  e.call("loomrt_p2p_begin", {ring->handle});
  for (auto [in, out] : llvm::zip(a.getInputs(), results)) {
    Value n = e.i64(numElements(out));
    e.call("loomrt_send", {ring->handle, e.dtype(in), e.ptr(in), n, to});
    e.call("loomrt_recv", {ring->handle, e.dtype(out), e.ptr(out), n, from});
  }
  e.call("loomrt_p2p_end", {ring->handle});
  return results;
}

/// One batch of a pipeline schedule: every send to rank r + offset, every
/// result from r + offset (the last rank's next is the first), posted in
/// operand order, then the results.
template <>
FailureOr<SmallVector<Value>> lower(PipelineP2POp op, PipelineP2POp::Adaptor a,
                                    Emitter &e) {
  FailureOr<Ring> ring = ringOf(op, e);
  if (failed(ring))
    return failure();
  // As for ring_shift: every result buffer exists before the batch.
  SmallVector<Value> results;
  for (Type type : op.getResultTypes())
    results.push_back(e.alloc(type));
  // Int32 tensors (position and document ids relayed with the hidden
  // state) move as f32 words of the same size: p2p only copies bytes.
  auto moved = [&](Value buffer) {
    Type element = cast<ShapedType>(buffer.getType()).getElementType();
    return element.isInteger(32) ? e.i32(dtypeCode(Float32Type::get(
                                       buffer.getContext())))
                                 : e.dtype(buffer);
  };
  e.call("loomrt_p2p_begin", {ring->handle});
  for (auto [in, offset] : llvm::zip(a.getSends(), op.getSendOffsets()))
    e.call("loomrt_send",
           {ring->handle, moved(in), e.ptr(in), e.i64(numElements(in)),
            e.toI32(ringPeer(*ring, offset, e))});
  for (auto [out, offset] : llvm::zip(results, op.getRecvOffsets()))
    e.call("loomrt_recv",
           {ring->handle, moved(out), e.ptr(out), e.i64(numElements(out)),
            e.toI32(ringPeer(*ring, offset, e))});
  e.call("loomrt_p2p_end", {ring->handle});
  return results;
}

/// An all-to-all within a level of the hierarchical cp groups: the
/// runtime's all-to-all on that level's communicator.
template <>
FailureOr<SmallVector<Value>> lower(LevelAllToAllOp op,
                                    LevelAllToAllOp::Adaptor a, Emitter &e) {
  FailureOr<Ring> ring = ringOf(op, e);
  if (failed(ring))
    return failure();
  auto inType = cast<RankedTensorType>(op.getInput().getType());
  if (inType.getDimSize(int64_t(op.getSplitDim())) % ring->size != 0)
    return op.emitOpError() << "split dim of " << inType
                            << " does not divide over the group's "
                            << ring->size << " ranks";
  Value out = e.alloc(op.getResult().getType());
  e.allToAll(ring->handle, e.dtype(a.getInput()), inType,
             int64_t(op.getSplitDim()), int64_t(op.getConcatDim()),
             a.getInput(), out);
  return SmallVector<Value>{out};
}

/// The step marker: a runtime call that prints it when tracing is on.
template <>
FailureOr<SmallVector<Value>> lower(PipelineStepOp op, PipelineStepOp::Adaptor,
                                    Emitter &e) {
  e.call("loomrt_pipeline_step",
         {e.i32(op.getBackward() ? 0 : 1),
          e.i64(static_cast<int64_t>(op.getMicrobatch())),
          e.i64(static_cast<int64_t>(op.getChunk()))});
  return SmallVector<Value>();
}

/// A chunk's gradients are final: the rank program starts their
/// data-parallel reduction (the buffers are the step's out-params, which
/// it knows).
template <>
FailureOr<SmallVector<Value>> lower(GradsReadyOp op, GradsReadyOp::Adaptor,
                                    Emitter &e) {
  e.call("loomrt_grads_ready", {e.i64(static_cast<int64_t>(op.getChunk()))});
  return SmallVector<Value>();
}

/// loomrt.h's LOOMRT_SECTION_* (the ABI fixes these values).
enum RingSection : int32_t { kDiagonal = 0, kLower = 1, kUpper = 2 };

/// The section of the tile of rank (r + kv_from)'s block: the diagonal for
/// the rank's own block, else lower for a lower rank's and upper for a
/// higher one's, chosen at run time.
template <typename OpT>
FailureOr<Value> sectionOf(OpT op, Emitter &e) {
  FailureOr<Ring> ring = ringOf(op, e);
  if (failed(ring))
    return failure();
  // I64Attr reads back unsigned; the offset is signed.
  int64_t from = static_cast<int64_t>(op.getKvFrom());
  if (from % ring->size == 0)
    return e.i32(kDiagonal);
  Value owner = ringPeer(*ring, from, e);
  return e.selectLess(owner, ring->rank, e.i32(kLower), e.i32(kUpper));
}

/// A fresh copy of `buffer` (a memref of tensor type `type`).
Value copyOf(Value buffer, Type type, Emitter &e) {
  Value out = e.alloc(type);
  int64_t bytes = numElements(out) *
                  (cast<ShapedType>(type).getElementTypeBitWidth() / 8);
  e.call("loomrt_copy_2d", {e.ptr(out), e.i64(bytes), e.ptr(buffer),
                            e.i64(bytes), e.i64(1), e.i64(bytes)});
  return out;
}

/// A zeroed buffer of tensor type `type`.
Value zeros(Type type, Emitter &e) {
  Value out = e.alloc(type);
  int64_t bytes = numElements(out) *
                  (cast<ShapedType>(type).getElementTypeBitWidth() / 8);
  e.call("loomrt_zero", {e.ptr(out), e.i64(bytes)});
  return out;
}

/// With a document mask, the document ids of this rank's queries and of
/// the block's keys (of rank r + kv_from): those of the whole sequence, from
/// its tokens, read at their global positions; null pointers without one.
template <typename OpT>
FailureOr<std::pair<Value, Value>> sectionDocuments(OpT op, Value tokens,
                                                    Emitter &e) {
  if (!tokens)
    return std::make_pair(e.null(), e.null());
  FailureOr<Ring> ring = ringOf(op, e);
  if (failed(ring))
    return failure();
  int64_t batch = dim(tokens, 0), seq = dim(tokens, 1);
  int64_t local = dim(op.getQuery(), 1);
  // Where the rank's queries lie: from the split of the query's sequence
  // over cp or, on a level of the hierarchical groups (whose layout no
  // #tfm.dist names), the load-balanced layout of the ring: rank p of P
  // holds chunks p and 2P-1-p of 2P.
  std::optional<lowering::PositionedDim> q;
  if (!op.getLevel()) {
    auto dims = lowering::positionedDims(op);
    if (failed(dims))
      return failure();
    q = dims->front();
  }
  auto writePositions = [&](Value pos, Value ofRank) -> LogicalResult {
    if (q)
      return e.writeSequencePositions(op, *q, pos, ofRank);
    Value start = e.mulI64(ofRank ? ofRank : ring->rank, local);
    e.call("loomrt_sequence_positions",
           {e.i64(batch), e.i64(local), start, e.i64(local / 2),
            e.i32(int32_t(2 * ring->size)),
            e.int64Array(tfm::zigzagOrder(ring->size)), pos});
    return success();
  };
  auto ids = RankedTensorType::get({batch, local}, e.i32Type());
  Value doc = e.ptr(e.alloc(RankedTensorType::get({batch, seq}, e.i32Type())));
  e.call("loomrt_document_ids",
         {e.i64(batch), e.i64(seq), e.ptr(tokens), e.i32(*op.getEod()), doc});
  auto at = [&](Value ofRank) -> FailureOr<Value> {
    Value pos = e.ptr(e.alloc(ids));
    if (failed(writePositions(pos, ofRank)))
      return failure();
    Value picked = e.ptr(e.alloc(ids));
    e.call("loomrt_gather_positions",
           {e.i64(batch), e.i64(seq), e.i64(local), doc, pos, picked});
    return picked;
  };
  FailureOr<Value> mine = at(Value());
  if (failed(mine))
    return failure();
  int64_t from = static_cast<int64_t>(op.getKvFrom());
  if (from % ring->size == 0)
    return std::make_pair(*mine, *mine);
  FailureOr<Value> theirs = at(ringPeer(*ring, from, e));
  if (failed(theirs))
    return failure();
  return std::make_pair(*mine, *theirs);
}

template <>
FailureOr<SmallVector<Value>> lower(AttentionSectionOp op,
                                    AttentionSectionOp::Adaptor a, Emitter &e) {
  Value q = a.getQuery();
  int64_t batch = dim(q, 0), local = dim(q, 1);
  auto docs = sectionDocuments(op, a.getTokens(), e);
  if (failed(docs))
    return failure();
  if (a.getMerge().empty()) {
    // The first step: the diagonal, a causal mask on local indices.
    Value out = e.alloc(op.getResult().getType());
    Value lse = e.alloc(op.getResultLse().getType());
    e.call("loomrt_attention_forward",
           {e.dtype(out), e.i64(batch), e.i64(local), e.i64(local),
            e.i64(op.getNumHeads()), e.i64(op.getNumKvHeads()),
            e.i64(op.getHeadDim()), e.f32(op.getScale().convertToDouble()),
            e.i32(1), e.null(), e.null(), docs->first, docs->second, e.ptr(q),
            e.ptr(a.getKey()), e.ptr(a.getValue()), e.ptr(out), e.ptr(lse)});
    return SmallVector<Value>{out, lse};
  }
  FailureOr<Value> section = sectionOf(op, e);
  if (failed(section))
    return failure();
  Value out = copyOf(a.getMerge()[0], op.getResult().getType(), e);
  Value lse = copyOf(a.getMerge()[1], op.getResultLse().getType(), e);
  e.call("loomrt_attention_section_forward",
         {e.dtype(out), e.i64(batch), e.i64(local), e.i64(op.getNumHeads()),
          e.i64(op.getNumKvHeads()), e.i64(op.getHeadDim()),
          e.f32(op.getScale().convertToDouble()), *section, docs->first,
          docs->second, e.ptr(q), e.ptr(a.getKey()), e.ptr(a.getValue()),
          e.ptr(out), e.ptr(lse)});
  return SmallVector<Value>{out, lse};
}

template <>
FailureOr<SmallVector<Value>> lower(AttentionSectionGradOp op,
                                    AttentionSectionGradOp::Adaptor a,
                                    Emitter &e) {
  FailureOr<Value> section = sectionOf(op, e);
  auto docs = sectionDocuments(op, a.getTokens(), e);
  if (failed(section) || failed(docs))
    return failure();
  SmallVector<Value> grads;
  for (auto [i, type] : llvm::enumerate(op.getResultTypes()))
    grads.push_back(a.getGrads().empty() ? zeros(type, e)
                                         : copyOf(a.getGrads()[i], type, e));
  Value q = a.getQuery();
  e.call("loomrt_attention_section_backward",
         {e.dtype(q), e.i64(dim(q, 0)), e.i64(dim(q, 1)),
          e.i64(op.getNumHeads()), e.i64(op.getNumKvHeads()),
          e.i64(op.getHeadDim()), e.f32(op.getScale().convertToDouble()),
          *section, docs->first, docs->second, e.ptr(q), e.ptr(a.getKey()),
          e.ptr(a.getValue()), e.ptr(a.getOut()), e.ptr(a.getLse()),
          e.ptr(a.getOutGrad()),
          e.ptr(grads[0]), e.ptr(grads[1]), e.ptr(grads[2])});
  return grads;
}

int32_t geluCode(GeluApprox approx) { return approx == GeluApprox::tanh; }

template <>
FailureOr<SmallVector<Value>> lower(GeluOp op, GeluOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_gelu_forward",
         {e.dtype(out), e.i32(geluCode(op.getApproximate())),
          e.i64(numElements(out)), e.ptr(a.getInput()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(GeluGradOp op, GeluGradOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_gelu_backward",
         {e.dtype(out), e.i32(geluCode(op.getApproximate())),
          e.i64(numElements(out)), e.ptr(a.getInput()), e.ptr(a.getGrad()),
          e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(SiluOp op, SiluOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_silu_forward", {e.dtype(out), e.i64(numElements(out)),
                                 e.ptr(a.getInput()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(SiluGradOp op, SiluGradOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_silu_backward",
         {e.dtype(out), e.i64(numElements(out)), e.ptr(a.getInput()),
          e.ptr(a.getGrad()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(SwigluOp op, SwigluOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  int64_t f = dim(out, -1);
  e.call("loomrt_swiglu_forward",
         {e.dtype(out), e.i64(rows(out)), e.i64(f), e.i64(f),
          e.ptr(a.getGate()), e.ptr(a.getUp()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(SwigluGradOp op, SwigluGradOp::Adaptor a,
                                    Emitter &e) {
  Value dg = e.alloc(op.getGateGrad().getType());
  Value du = e.alloc(op.getUpGrad().getType());
  int64_t f = dim(dg, -1);
  e.call("loomrt_swiglu_backward",
         {e.dtype(dg), e.i64(rows(dg)), e.i64(f), e.i64(f), e.ptr(a.getGate()),
          e.ptr(a.getUp()), e.ptr(a.getGrad()), e.ptr(dg), e.ptr(du)});
  return SmallVector<Value>{dg, du};
}

template <>
FailureOr<SmallVector<Value>> lower(AddOp op, AddOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_add", {e.dtype(out), e.i64(numElements(out)),
                        e.ptr(a.getLhs()), e.ptr(a.getRhs()), e.ptr(out)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(BiasAddOp op, BiasAddOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_add_bias",
         {e.dtype(out), e.i64(rows(out)), e.i64(dim(out, -1)),
          e.ptr(a.getInput()), e.ptr(a.getBias()), e.ptr(out)});
  return SmallVector<Value>{out};
}

/// Every head of `narrow` is `factor` consecutive heads of `wide`: the
/// copies are strided row copies (a row is one head of one token).
template <>
FailureOr<SmallVector<Value>> lower(RepeatKvOp op, RepeatKvOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  int64_t f = op.getFactor(), d = op.getHeadDim();
  int64_t headBytes = d * int64_t(cast<ShapedType>(out.getType())
                                      .getElementTypeBitWidth() / 8);
  int64_t heads = numElements(a.getInput()) / d;
  Value src = e.ptr(a.getInput()), dst = e.ptr(out);
  for (int64_t j = 0; j < f; ++j)
    e.call("loomrt_copy_2d", {e.offsetPtr(dst, j * headBytes),
                              e.i64(f * headBytes), src, e.i64(headBytes),
                              e.i64(heads), e.i64(headBytes)});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(RepeatKvGradOp op,
                                    RepeatKvGradOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  int64_t f = op.getFactor(), d = op.getHeadDim();
  int64_t headBytes = d * int64_t(cast<ShapedType>(out.getType())
                                      .getElementTypeBitWidth() / 8);
  int64_t heads = numElements(out) / d;
  Value src = e.ptr(a.getGrad());
  // The first copy lands in the result; the others are added to it.
  Value part = e.alloc(op.getType());
  for (int64_t j = 0; j < f; ++j) {
    Value dst = e.ptr(j == 0 ? out : part);
    e.call("loomrt_copy_2d", {dst, e.i64(headBytes),
                              e.offsetPtr(src, j * headBytes),
                              e.i64(f * headBytes), e.i64(heads),
                              e.i64(headBytes)});
    if (j > 0)
      e.call("loomrt_add", {e.dtype(out), e.i64(numElements(out)), e.ptr(out),
                            e.ptr(part), e.ptr(out)});
  }
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(DropoutOp op, DropoutOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  int64_t n = numElements(out);
  // The mask is keyed by each element's index in the global tensor. Whole:
  // one row of n. Split on dim k over a group of size g: rows are the
  // elements before k, a local row is [L_k, inner...] and sits at
  // rank * L_k * inner within a global row of g * L_k * inner.
  Value rows = e.i64(1), cols = e.i64(n), offset = e.i64(0),
        rowStride = e.i64(n);
  auto positioned = lowering::positionedDims(op);
  if (failed(positioned))
    return failure();
  if (!positioned->empty()) {
    int64_t k = positioned->front().dim;
    ArrayRef<int64_t> shape = cast<ShapedType>(op.getType()).getShape();
    int64_t outer = 1, local = 1;
    for (int64_t i = 0; i < int64_t(shape.size()); ++i)
      (i < k ? outer : local) *= shape[i];
    auto slice = e.sliceOf(op, local);
    if (failed(slice))
      return failure();
    rows = e.i64(outer);
    cols = e.i64(local);
    offset = slice->first;
    rowStride = e.groupTimes(slice->second, local);
  }
  e.call("loomrt_dropout_forward",
         {e.dtype(out), rows, cols, e.ptr(a.getInput()), e.ptr(out),
          e.f32(op.getP().convertToDouble()), e.i64(op.getSeed()), offset,
          rowStride});
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(CastOp op, CastOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  e.call("loomrt_cast", {e.dtype(a.getInput()), e.ptr(a.getInput()),
                         e.dtype(out), e.ptr(out), e.i64(numElements(out))});
  return SmallVector<Value>{out};
}

// The cross-entropy's kernels, each on [n, V] logits (a slice of the
// vocabulary when it is split) and [n] f32 row statistics.

/// How many of the Vl logits columns of `op`'s slice of the vocabulary are
/// real vocabulary: all without `unpadded` (no padding), else those with a
/// global id below it, clamp(unpadded - start, 0, Vl) where the slice
/// starts at `start` (a rank's slice may be all padding).
FailureOr<Value> validColumns(Operation *op, int64_t vl, IntegerAttr unpadded,
                              Emitter &e) {
  if (!unpadded)
    return e.i64(vl);
  auto slice = e.sliceOf(op, vl);
  if (failed(slice))
    return failure();
  return e.clampI64(e.subI64(e.i64(unpadded.getInt()), slice->first), 0, vl);
}

void rowMaxKernel(Value logits, Value valid, Value out, Emitter &e) {
  e.call("loomrt_ce_local_max", {e.dtype(logits), e.i64(rows(logits)),
                                 e.i64(dim(logits, -1)), valid, e.ptr(logits),
                                 e.ptr(out)});
}

void sumExpKernel(Value logits, Value valid, Value rowMax, Value out,
                  Emitter &e) {
  e.call("loomrt_ce_local_sum_exp",
         {e.dtype(logits), e.i64(rows(logits)), e.i64(dim(logits, -1)), valid,
          e.ptr(logits), e.ptr(rowMax), e.ptr(out)});
}

void targetKernel(Value logits, Value labels, Value vocabStart, Value out,
                  Emitter &e) {
  e.call("loomrt_ce_local_target",
         {e.dtype(logits), e.i64(rows(logits)), e.i64(dim(logits, -1)),
          e.ptr(logits), e.ptr(labels), vocabStart, e.ptr(out)});
}

/// The masked sum of row losses and the mask's sum, from row statistics
/// (`target` may stand in for anything when only the mask's sum is wanted).
std::pair<Value, Value> lossParts(Value rowMax, Value sumExp, Value target,
                                  Value mask, Emitter &e) {
  Value maskedSum = e.allocF32(-1), maskSum = e.allocF32(-1);
  e.call("loomrt_ce_loss_from_parts",
         {e.i64(numElements(rowMax)), e.ptr(rowMax), e.ptr(sumExp),
          e.ptr(target), e.ptr(mask), e.null(), e.ptr(maskedSum),
          e.ptr(maskSum)});
  return {e.load(maskedSum), e.load(maskSum)};
}

/// The loss from whole row statistics: the masked mean.
Value lossKernel(Value rowMax, Value sumExp, Value target, Value mask,
                 Type lossType, Emitter &e) {
  Value loss = e.alloc(lossType);
  auto [maskedSum, maskSum] = lossParts(rowMax, sumExp, target, mask, e);
  e.store(e.safeDivide(maskedSum, maskSum), loss);
  return loss;
}

/// The cross-entropy of whole logits: its row statistics (which the
/// gradient reads) and the loss from them.
template <>
FailureOr<SmallVector<Value>> lower(CrossEntropyOp op,
                                    CrossEntropyOp::Adaptor a, Emitter &e) {
  Value logits = a.getLogits();
  Value rowMax = e.alloc(op.getRowMax().getType());
  Value sumExp = e.alloc(op.getSumExp().getType());
  Value target = e.alloc(op.getRowMax().getType());
  auto valid = validColumns(op, dim(logits, -1), op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  rowMaxKernel(logits, *valid, rowMax, e);
  sumExpKernel(logits, *valid, rowMax, sumExp, e);
  targetKernel(logits, a.getLabels(), e.i64(0), target, e);
  Value loss = lossKernel(rowMax, sumExp, target, a.getLossMask(),
                          op.getLoss().getType(), e);
  return SmallVector<Value>{loss, rowMax, sumExp};
}

template <>
FailureOr<SmallVector<Value>> lower(CeRowMaxOp op, CeRowMaxOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  auto valid = validColumns(op, dim(a.getLogits(), -1),
                            op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  rowMaxKernel(a.getLogits(), *valid, out, e);
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(CeSumExpOp op, CeSumExpOp::Adaptor a,
                                    Emitter &e) {
  Value out = e.alloc(op.getType());
  auto valid = validColumns(op, dim(a.getLogits(), -1),
                            op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  sumExpKernel(a.getLogits(), *valid, a.getRowMax(), out, e);
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(CeTargetLogitOp op,
                                    CeTargetLogitOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  auto slice = e.sliceOf(op, dim(a.getLogits(), -1));
  if (failed(slice))
    return failure();
  targetKernel(a.getLogits(), a.getLabels(), slice->first, out, e);
  return SmallVector<Value>{out};
}

template <>
FailureOr<SmallVector<Value>> lower(CeLossSumOp op, CeLossSumOp::Adaptor a,
                                    Emitter &e) {
  Value parts = e.alloc(op.getType());
  e.call("loomrt_ce_loss_from_parts",
         {e.i64(numElements(a.getRowMax())), e.ptr(a.getRowMax()),
          e.ptr(a.getSumExp()), e.ptr(a.getTarget()), e.ptr(a.getLossMask()),
          e.null(), e.ptr(parts), e.offsetPtr(e.ptr(parts), sizeof(float))});
  return SmallVector<Value>{parts};
}

template <>
FailureOr<SmallVector<Value>> lower(LossMeanOp op, LossMeanOp::Adaptor a,
                                    Emitter &e) {
  Value loss = e.alloc(op.getType());
  e.store(e.safeDivide(e.loadAt(a.getParts(), 0), e.loadAt(a.getParts(), 1)),
          loss);
  return SmallVector<Value>{loss};
}

template <>
FailureOr<SmallVector<Value>> lower(TokenCountOp op, TokenCountOp::Adaptor a,
                                    Emitter &e) {
  Value count = e.alloc(op.getType());
  e.call("loomrt_mask_sum", {e.i64(numElements(a.getLossMask())),
                             e.ptr(a.getLossMask()), e.ptr(count)});
  return SmallVector<Value>{count};
}

/// The softmax from the forward's row statistics, on this rank's slice of
/// the vocabulary (all of it when whole): no communication.
template <>
FailureOr<SmallVector<Value>> lower(CrossEntropyGradOp op,
                                    CrossEntropyGradOp::Adaptor a, Emitter &e) {
  Value logits = a.getLogits(), out = e.alloc(op.getType());
  int64_t n = rows(logits), vl = dim(logits, -1);
  auto slice = e.sliceOf(op, vl);
  if (failed(slice))
    return failure();
  // The tokens the loss averages: given (with the tokens split, the whole
  // batch's), or this op's mask's sum.
  Value maskSum;
  if (a.getCount()) {
    maskSum = e.load(a.getCount());
  } else {
    Value count = e.allocF32(-1);
    e.call("loomrt_mask_sum", {e.i64(n), e.ptr(a.getLossMask()), e.ptr(count)});
    maskSum = e.load(count);
  }
  auto valid = validColumns(op, vl, op.getUnpaddedVocabSizeAttr(), e);
  if (failed(valid))
    return failure();
  e.call("loomrt_ce_vocab_parallel_backward",
         {e.dtype(out), e.i64(n), e.i64(vl), *valid, e.ptr(logits),
          e.ptr(a.getLabels()), slice->first, e.ptr(a.getRowMax()),
          e.ptr(a.getSumExp()), e.ptr(a.getLossMask()),
          e.safeDivide(e.load(a.getGrad()), maskSum), e.ptr(out)});
  return SmallVector<Value>{out};
}

/// Chunk j of the result is chunk order[j] of the input: one strided copy
/// per chunk (rows of the dims before `dim`).
template <>
FailureOr<SmallVector<Value>> lower(PermuteChunksOp op,
                                    PermuteChunksOp::Adaptor a, Emitter &e) {
  Value out = e.alloc(op.getType());
  auto type = cast<ShapedType>(op.getType());
  int64_t d = op.getDim(), outer = 1, inner = 1;
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (i < d)
      outer *= type.getDimSize(i);
    else if (i > d)
      inner *= type.getDimSize(i);
  int64_t esize = type.getElementTypeBitWidth() / 8;
  ArrayRef<int64_t> order = op.getOrder();
  int64_t chunkBytes = type.getDimSize(d) / int64_t(order.size()) * inner * esize;
  int64_t rowBytes = type.getDimSize(d) * inner * esize;
  Value src = e.ptr(a.getInput()), dst = e.ptr(out);
  for (auto [j, from] : llvm::enumerate(order))
    e.call("loomrt_copy_2d", {e.offsetPtr(dst, int64_t(j) * chunkBytes),
                              e.i64(rowBytes), e.offsetPtr(src, from * chunkBytes),
                              e.i64(rowBytes), e.i64(outer), e.i64(chunkBytes)});
  return SmallVector<Value>{out};
}

/// Lowers through `lower<OpT>` and replaces the op with its buffers.
template <typename OpT>
struct RuntimeCallPattern : OpConversionPattern<OpT> {
  using OpConversionPattern<OpT>::OpConversionPattern;

  LogicalResult
  matchAndRewrite(OpT op, typename OpT::Adaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Emitter e(rewriter, op.getLoc(), op->template getParentOfType<ModuleOp>());
    FailureOr<SmallVector<Value>> results = lower(op, adaptor, e);
    if (failed(results))
      return failure();
    rewriter.replaceOp(op, *results);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// The communicator argument tfm-comms-to-args added for `kind`.
Value communicator(Operation *op, StringRef kind,
                   ConversionPatternRewriter &rewriter) {
  auto func = op->getParentOfType<func::FuncOp>();
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto a = func.getArgAttrOfType<StringAttr>(
            i, tfm::kCommArgAttrName);
        a && a.getValue() == kind)
      return rewriter.getRemappedValue(func.getArgument(i));
  return Value();
}

/// mesh.all_reduce / all_gather / reduce_scatter / all_to_all on float
/// tensors -> the runtime collective on the group's communicator. Gathers,
/// slices and all-to-alls only move data, so they also take int32 tensors
/// (token ids), moved as f32 words: the runtime copies bits.
template <typename OpT>
struct CollectivePattern : OpConversionPattern<OpT> {
  using OpConversionPattern<OpT>::OpConversionPattern;

  LogicalResult
  matchAndRewrite(OpT op, typename OpT::Adaptor a,
                  ConversionPatternRewriter &rewriter) const override {
    auto inType = cast<RankedTensorType>(op.getInput().getType());
    auto outType = cast<RankedTensorType>(op.getResult().getType());
    constexpr bool movesOnly =
        std::is_same_v<OpT, mesh::AllGatherOp> ||
        std::is_same_v<OpT, mesh::AllSliceOp> ||
        std::is_same_v<OpT, mesh::AllToAllOp>;
    Type element = inType.getElementType();
    bool words = movesOnly && element.isInteger(32);
    if (element != outType.getElementType() ||
        (!words && !isa<Float32Type, BFloat16Type, Float16Type>(element)))
      return rewriter.notifyMatchFailure(
          op, "collectives move f32, bf16 or f16 tensors of one type (and "
              "gathers, slices and all-to-alls int32 ones)");
    FailureOr<std::string> kind =
        lowering::groupKindOf(op, op.getMesh(), op.getMeshAxes());
    if (failed(kind))
      return failure();
    Value comm = communicator(op, *kind, rewriter);
    if (!comm)
      return rewriter.notifyMatchFailure(
          op, "no communicator argument for the group (run tfm-comms-to-args)");

    Emitter e(rewriter, op.getLoc(), op->template getParentOfType<ModuleOp>());
    Value in = a.getInput();
    Value dtype = words ? e.i32(dtypeCode(rewriter.getF32Type())) : e.dtype(in);
    Value out = e.alloc(outType);
    Value h = e.handle(comm);
    int64_t rank = inType.getRank();
    if constexpr (std::is_same_v<OpT, mesh::AllReduceOp>) {
      mesh::ReductionKind reduction = op.getReduction();
      if (reduction != mesh::ReductionKind::Sum &&
          reduction != mesh::ReductionKind::Max)
        return rewriter.notifyMatchFailure(op, "only sum and max reductions");
      e.call("loomrt_all_reduce",
             {h, e.dtype(in), e.i32(reduction == mesh::ReductionKind::Max),
              e.ptr(in), e.ptr(out), e.i64(numElements(in))});
    } else if constexpr (std::is_same_v<OpT, mesh::AllGatherOp>) {
      e.call("loomrt_all_gather",
             {h, dtype, e.i32(rank), e.int64Array(inType.getShape()),
              e.i32(op.getGatherAxis().getSExtValue()), e.ptr(in), e.ptr(out)});
    } else if constexpr (std::is_same_v<OpT, mesh::AllSliceOp>) {
      // No communication: this rank copies its slice, rows of the dims
      // before the slice axis times the slice (a strided copy).
      int64_t axis = op.getSliceAxis().getSExtValue();
      auto outShape = outType.getShape();
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < axis; ++i)
        outer *= outShape[i];
      for (int64_t i = axis + 1; i < outType.getRank(); ++i)
        inner *= outShape[i];
      int64_t esize = outType.getElementTypeBitWidth() / 8;
      int64_t rowBytes = outShape[axis] * inner * esize;
      int64_t parts = inType.getDimSize(axis) / outShape[axis];
      Value rank = e.callValue("loomrt_comm_rank", {h});
      Value offset = rewriter.create<arith::MulIOp>(
          op.getLoc(),
          rewriter.create<arith::ExtSIOp>(op.getLoc(), rewriter.getI64Type(),
                                          rank),
          e.i64(rowBytes));
      auto ptrType = LLVM::LLVMPointerType::get(rewriter.getContext());
      Value src = rewriter.create<LLVM::GEPOp>(
          op.getLoc(), ptrType, rewriter.getI8Type(), e.ptr(in),
          ValueRange{offset});
      e.call("loomrt_copy_2d", {e.ptr(out), e.i64(rowBytes), src,
                                e.i64(rowBytes * parts), e.i64(outer),
                                e.i64(rowBytes)});
    } else if constexpr (std::is_same_v<OpT, mesh::ReduceScatterOp>) {
      if (op.getReduction() != mesh::ReductionKind::Sum)
        return rewriter.notifyMatchFailure(op, "reduce_scatter sums only");
      e.call("loomrt_reduce_scatter",
             {h, e.dtype(in), e.i32(rank), e.int64Array(inType.getShape()),
              e.i32(op.getScatterAxis().getSExtValue()), e.ptr(in),
              e.ptr(out)});
    } else {
      e.allToAll(h, dtype, inType, op.getSplitAxis().getSExtValue(),
                 op.getConcatAxis().getSExtValue(), in, out);
    }
    rewriter.replaceOp(op, out);
    return success();
  }
};

struct LowerToRuntimePass
    : lowering::impl::TfmLowerToRuntimeBase<LowerToRuntimePass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    TypeConverter converter;
    converter.addConversion([](Type t) { return t; });
    converter.addConversion([](RankedTensorType t) -> Type {
      return MemRefType::get(t.getShape(), t.getElementType());
    });
    // Tensor values that meet memref values during conversion.
    auto materialize = [](OpBuilder &b, Type type, ValueRange inputs,
                          Location loc) -> Value {
      return b.create<UnrealizedConversionCastOp>(loc, type, inputs)
          .getResult(0);
    };
    converter.addSourceMaterialization(materialize);
    converter.addTargetMaterialization(materialize);

    RewritePatternSet patterns(ctx);
    patterns.add<
        RuntimeCallPattern<EmbeddingOp>, RuntimeCallPattern<EmbeddingGradOp>,
        RuntimeCallPattern<PositionIdsOp>, RuntimeCallPattern<LayerNormOp>,
        RuntimeCallPattern<LayerNormGradOp>, RuntimeCallPattern<RmsNormOp>,
        RuntimeCallPattern<RmsNormGradOp>, RuntimeCallPattern<LinearOp>,
        RuntimeCallPattern<LinearGradOp>, RuntimeCallPattern<RopeOp>,
        RuntimeCallPattern<RopeGradOp>, RuntimeCallPattern<AttentionOp>,
        RuntimeCallPattern<AttentionGradOp>, RuntimeCallPattern<GeluOp>,
        RuntimeCallPattern<GeluGradOp>, RuntimeCallPattern<SiluOp>,
        RuntimeCallPattern<SiluGradOp>, RuntimeCallPattern<SwigluOp>,
        RuntimeCallPattern<SwigluGradOp>, RuntimeCallPattern<AddOp>,
        RuntimeCallPattern<BiasAddOp>, RuntimeCallPattern<RepeatKvOp>,
        RuntimeCallPattern<RepeatKvGradOp>,
        RuntimeCallPattern<DropoutOp>, RuntimeCallPattern<CastOp>,
        RuntimeCallPattern<CrossEntropyOp>, RuntimeCallPattern<CeRowMaxOp>,
        RuntimeCallPattern<CeSumExpOp>, RuntimeCallPattern<CeTargetLogitOp>,
        RuntimeCallPattern<CeLossSumOp>, RuntimeCallPattern<LossMeanOp>,
        RuntimeCallPattern<TokenCountOp>, RuntimeCallPattern<RingShiftOp>,
        RuntimeCallPattern<PipelineP2POp>, RuntimeCallPattern<PipelineStepOp>,
        RuntimeCallPattern<LevelAllToAllOp>,
        RuntimeCallPattern<GradsReadyOp>,
        RuntimeCallPattern<AttentionSectionOp>,
        RuntimeCallPattern<AttentionSectionGradOp>, RuntimeCallPattern<CrossEntropyGradOp>,
        RuntimeCallPattern<PermuteChunksOp>,
        CollectivePattern<mesh::AllReduceOp>,
        CollectivePattern<mesh::AllGatherOp>,
        CollectivePattern<mesh::ReduceScatterOp>,
        CollectivePattern<mesh::AllToAllOp>,
        CollectivePattern<mesh::AllSliceOp>>(converter, ctx);
    populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns,
                                                                   converter);
    populateCallOpTypeConversionPattern(patterns, converter);
    populateReturnOpTypeConversionPattern(patterns, converter);

    ConversionTarget target(*ctx);
    target.addLegalDialect<memref::MemRefDialect, LLVM::LLVMDialect>();
    // Scalar arithmetic is fine; arithmetic on tensors has no lowering here.
    target.addDynamicallyLegalDialect<arith::ArithDialect>(
        [&](Operation *op) { return converter.isLegal(op); });
    target.addIllegalDialect<TfmDialect>();
    target.addIllegalOp<mesh::AllReduceOp, mesh::AllGatherOp,
                        mesh::ReduceScatterOp, mesh::AllToAllOp,
                        mesh::AllSliceOp>();
    target.addLegalOp<mesh::MeshOp>();
    target.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp f) {
      return converter.isSignatureLegal(f.getFunctionType()) &&
             converter.isLegal(&f.getBody());
    });
    target.addDynamicallyLegalOp<func::CallOp, func::ReturnOp>(
        [&](Operation *op) { return converter.isLegal(op); });

    WalkResult reshards = getOperation().walk([](ReshardOp op) {
      op.emitError() << "a tfm.reshard is left; run "
                        "tfm-reshard-to-collectives before lowering";
      return WalkResult::interrupt();
    });
    if (reshards.wasInterrupted())
      return signalPassFailure();
    // Parameters are the runtime's buffers, passed in as arguments; their
    // declarations have no code.
    for (ParamOp param :
         llvm::make_early_inc_range(getOperation().getOps<ParamOp>()))
      param.erase();
    // Full conversion: an op no pattern handles (say a tensor op) is an
    // error here, where it can be named, not in LLVM translation later.
    target.addLegalOp<ModuleOp, UnrealizedConversionCastOp>();
    if (failed(applyFullConversion(getOperation(), target,
                                   std::move(patterns))))
      return signalPassFailure();
    // Meshes only name the groups of collectives; once none refers to a
    // mesh it has no code either.
    for (mesh::MeshOp mesh :
         llvm::make_early_inc_range(getOperation().getOps<mesh::MeshOp>()))
      if (SymbolTable::symbolKnownUseEmpty(mesh, getOperation()))
        mesh.erase();
  }
};

} // namespace
