//===- Emitter.cpp - Building runtime calls for one op -----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Emitter.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/DialectConversion.h"

#include <limits>

using namespace mlir;
using namespace loom;
using namespace loom::lowering;

int32_t lowering::dtypeCode(Type elementType) {
  if (elementType.isF32())
    return 0;
  if (elementType.isBF16())
    return 1;
  assert(elementType.isF16() && "tfm verifiers admit f32, bf16, f16 only");
  return 2;
}

int64_t lowering::numElements(Value v) {
  return cast<ShapedType>(v.getType()).getNumElements();
}
int64_t lowering::dim(Value v, int64_t i) {
  auto shaped = cast<ShapedType>(v.getType());
  return shaped.getDimSize(i < 0 ? shaped.getRank() + i : i);
}
int64_t lowering::rows(Value v) { return numElements(v) / dim(v, -1); }
int64_t lowering::bytesOf(Type t) {
  auto s = cast<ShapedType>(t);
  return s.getNumElements() *
         int64_t(llvm::divideCeil(s.getElementTypeBitWidth(), 8));
}

namespace {
Type typeOf(MLIRContext *ctx, rt::Kind kind) {
  Builder b(ctx);
  switch (kind) {
  case rt::Kind::VOID:
    return Type();
  case rt::Kind::I32:
    return b.getI32Type();
  case rt::Kind::I64:
  case rt::Kind::U64:
    return b.getI64Type();
  case rt::Kind::F32:
    return b.getF32Type();
  case rt::Kind::F64:
    return b.getF64Type();
  case rt::Kind::PTR:
    return LLVM::LLVMPointerType::get(ctx);
  }
  llvm_unreachable("unknown kind");
}
} // namespace

Emitter::Emitter(Operation *op, ValueRange operands,
                 ConversionPatternRewriter &rewriter)
    : theOp(op), theOperands(operands.begin(), operands.end()), b(rewriter),
      theLoc(op->getLoc()), module(op->getParentOfType<ModuleOp>()),
      resultBuffers(op->getNumResults()) {}

//===----------------------------------------------------------------------===//
// Results
//===----------------------------------------------------------------------===//

Value Emitter::result(unsigned i) {
  if (!resultBuffers[i])
    resultBuffers[i] = alloc(theOp->getResult(i).getType());
  return resultBuffers[i];
}

void Emitter::setResult(unsigned i, Value buffer) {
  assert(!resultBuffers[i] && "result buffer chosen twice");
  resultBuffers[i] = buffer;
}

SmallVector<Value> Emitter::results() {
  SmallVector<Value> all;
  for (unsigned i = 0; i < theOp->getNumResults(); ++i)
    all.push_back(result(i));
  return all;
}

//===----------------------------------------------------------------------===//
// Arguments and arithmetic
//===----------------------------------------------------------------------===//

rt::I32 Emitter::i32(int64_t v) {
  return rt::I32(b.create<arith::ConstantIntOp>(theLoc, v, b.getI32Type()));
}
rt::I64 Emitter::i64(int64_t v) {
  return rt::I64(b.create<arith::ConstantIntOp>(theLoc, v, b.getI64Type()));
}
rt::F32 Emitter::f32(double v) {
  return rt::F32(b.create<arith::ConstantFloatOp>(theLoc, APFloat(float(v)),
                                                  b.getF32Type()));
}
rt::Ptr Emitter::null() {
  return rt::Ptr(
      b.create<LLVM::ZeroOp>(theLoc, LLVM::LLVMPointerType::get(b.getContext())));
}
rt::Ptr Emitter::ptr(Value memref) {
  if (!memref)
    return null();
  return rt::Ptr(b.create<LLVM::IntToPtrOp>(
      theLoc, LLVM::LLVMPointerType::get(b.getContext()), address(memref)));
}
Value Emitter::address(Value memref) {
  Value index = b.create<memref::ExtractAlignedPointerAsIndexOp>(theLoc, memref);
  return b.create<arith::IndexCastOp>(theLoc, b.getI64Type(), index);
}
rt::Ptr Emitter::offsetPtr(Value p, int64_t bytes) {
  if (bytes == 0)
    return rt::Ptr(p);
  // A constant GEP index is an i32; arena offsets of large models pass
  // 2 GiB and go in as an i64 value instead.
  LLVM::GEPArg index = bytes <= std::numeric_limits<int32_t>::max()
                           ? LLVM::GEPArg(int32_t(bytes))
                           : LLVM::GEPArg(i64(bytes).value);
  return rt::Ptr(b.create<LLVM::GEPOp>(theLoc, p.getType(), b.getI8Type(), p,
                                       ArrayRef<LLVM::GEPArg>{index}));
}
rt::Ptr Emitter::offsetPtr(Value p, Value bytes) {
  return rt::Ptr(b.create<LLVM::GEPOp>(theLoc, p.getType(), b.getI8Type(), p,
                                       ArrayRef<LLVM::GEPArg>{bytes}));
}
rt::I32 Emitter::dtype(Value tensorOrMemref) {
  return dtype(tensorOrMemref.getType());
}
rt::I32 Emitter::dtype(Type type) {
  return i32(dtypeCode(cast<ShapedType>(type).getElementType()));
}
rt::Ptr Emitter::storeI64s(ArrayRef<Value> values) {
  auto type = MemRefType::get({int64_t(values.size())}, b.getI64Type());
  Value array = b.create<memref::AllocaOp>(theLoc, type);
  for (auto [i, v] : llvm::enumerate(values))
    b.create<memref::StoreOp>(
        theLoc, v, array,
        ValueRange{b.create<arith::ConstantIndexOp>(theLoc, int64_t(i))});
  return ptr(array);
}
rt::Ptr Emitter::int64Array(ArrayRef<int64_t> values) {
  SmallVector<Value> constants;
  for (int64_t v : values)
    constants.push_back(i64(v));
  return storeI64s(constants);
}
rt::Ptr Emitter::ptrArray(ValueRange memrefs) {
  // The entries as int64 addresses: what memref can hold and the callee
  // reads as pointers (x86-64: 8 bytes either way).
  SmallVector<Value> addresses;
  for (Value m : memrefs)
    addresses.push_back(m ? address(m) : Value(i64(0)));
  return storeI64s(addresses);
}
Type Emitter::i32Type() { return b.getI32Type(); }

Value Emitter::addI64(Value v, int64_t c) {
  return b.create<arith::AddIOp>(theLoc, v, i64(c));
}
Value Emitter::subI64(Value lhs, Value rhs) {
  return b.create<arith::SubIOp>(theLoc, lhs, rhs);
}
Value Emitter::mulI64(Value v, int64_t c) {
  return b.create<arith::MulIOp>(theLoc, v, i64(c));
}
Value Emitter::remI64(Value v, int64_t c) {
  return b.create<arith::RemSIOp>(theLoc, v, i64(c));
}
Value Emitter::indexToI64(Value index) {
  return b.create<arith::IndexCastOp>(theLoc, b.getI64Type(), index);
}
Value Emitter::toI64(Value i32Value) {
  return b.create<arith::ExtSIOp>(theLoc, b.getI64Type(), i32Value);
}
Value Emitter::toI32(Value i64Value) {
  return b.create<arith::TruncIOp>(theLoc, b.getI32Type(), i64Value);
}
Value Emitter::clampI64(Value v, int64_t lo, int64_t hi) {
  Value up = b.create<arith::MaxSIOp>(theLoc, v, i64(lo));
  return b.create<arith::MinSIOp>(theLoc, up, i64(hi));
}
Value Emitter::selectLess(Value lhs, Value rhs, Value ifLess, Value otherwise) {
  Value less =
      b.create<arith::CmpIOp>(theLoc, arith::CmpIPredicate::slt, lhs, rhs);
  return b.create<arith::SelectOp>(theLoc, less, ifLess, otherwise);
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

Value Emitter::alloc(Type tensorType) {
  auto t = cast<RankedTensorType>(tensorType);
  auto memrefType = MemRefType::get(t.getShape(), t.getElementType());
  return b.create<memref::AllocOp>(theLoc, memrefType, b.getI64IntegerAttr(64));
}
Value Emitter::allocF32(int64_t n) {
  auto type = n < 0 ? MemRefType::get({}, b.getF32Type())
                    : MemRefType::get({n}, b.getF32Type());
  return b.create<memref::AllocOp>(theLoc, type, b.getI64IntegerAttr(64));
}
Value Emitter::copyOf(Value buffer, Type type) {
  Value out = alloc(type);
  copyBytes(ptr(out), ptr(buffer), bytesOf(type));
  return out;
}
void Emitter::copyBytes(rt::Ptr dst, rt::Ptr src, int64_t bytes) {
  call(rt::Copy2d{.dst = dst,
                  .dst_stride = i64(bytes),
                  .src = src,
                  .src_stride = i64(bytes),
                  .rows = i64(1),
                  .row_bytes = i64(bytes)});
}
Value Emitter::zeros(Type type) {
  Value out = alloc(type);
  call(rt::Zero{.dst = ptr(out), .bytes = i64(bytesOf(type))});
  return out;
}

//===----------------------------------------------------------------------===//
// Calls
//===----------------------------------------------------------------------===//

void Emitter::declare(StringRef name, rt::Kind result, ArrayRef<rt::Kind> args) {
  if (SymbolTable::lookupSymbolIn(module, name))
    return;
  MLIRContext *ctx = b.getContext();
  SmallVector<Type> argTypes;
  for (rt::Kind k : args)
    argTypes.push_back(typeOf(ctx, k));
  SmallVector<Type> results;
  if (Type r = typeOf(ctx, result))
    results.push_back(r);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  auto func = b.create<func::FuncOp>(theLoc, name,
                                     FunctionType::get(ctx, argTypes, results));
  func.setPrivate();
}

Value Emitter::emitCall(StringRef name, rt::Kind result, ArrayRef<rt::Kind> args,
                        ValueRange values) {
  declare(name, result, args);
  auto func = cast<func::FuncOp>(SymbolTable::lookupSymbolIn(module, name));
  auto call = b.create<func::CallOp>(theLoc, func, values);
  return call.getNumResults() ? call.getResult(0) : Value();
}

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

rt::Ptr Emitter::handle(Value commArgument) {
  auto type = LLVM::LLVMPointerType::get(b.getContext());
  return rt::Ptr(b.create<LLVM::LoadOp>(theLoc, type, commArgument));
}

FailureOr<rt::Ptr> Emitter::groupHandle(StringRef kind) {
  // The communicator argument tfm-comms-to-args added for `kind`.
  auto func = theOp->getParentOfType<func::FuncOp>();
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (auto a = func.getArgAttrOfType<StringAttr>(i, tfm::kCommArgAttrName);
        a && a.getValue() == kind)
      return handle(b.getRemappedValue(func.getArgument(i)));
  return theOp->emitOpError() << "has no communicator argument for group "
                              << kind << " (run tfm-comms-to-args)";
}

Value Emitter::rankIn(rt::Ptr handle) {
  return toI64(callValue(rt::CommRank{.comm = handle}));
}

Value Emitter::sliceStart(rt::Ptr handle, int64_t sliceSize) {
  return b.create<arith::MulIOp>(theLoc, rankIn(handle), i64(sliceSize));
}

Value Emitter::groupTimes(rt::Ptr handle, int64_t n) {
  Value size = toI64(callValue(rt::CommSize{.comm = handle}));
  return b.create<arith::MulIOp>(theLoc, size, i64(n));
}

//===----------------------------------------------------------------------===//
// Slices of distributed dims
//===----------------------------------------------------------------------===//

FailureOr<std::pair<Value, Value>> Emitter::sliceOf(int64_t localSize) {
  auto positioned = positionedDims(theOp);
  if (failed(positioned))
    return failure();
  assert(positioned->size() <= 1 && "an op with one positioned dim");
  return sliceOf(positioned->empty() ? PositionedDim() : positioned->front(),
                 localSize);
}

FailureOr<std::pair<Value, Value>> Emitter::sliceOf(const PositionedDim &d,
                                                    int64_t localSize) {
  if (d.group.empty())
    return std::make_pair(Value(i64(0)), Value());
  FailureOr<rt::Ptr> h = groupHandle(d.group);
  if (failed(h))
    return failure();
  return std::make_pair(sliceStart(*h, localSize), Value(*h));
}

FailureOr<Emitter::ChunkLayout> Emitter::chunkLayout(const PositionedDim &d,
                                                     Value ofRank) {
  auto type = cast<RankedTensorType>(d.value.getType());
  int64_t local = type.getDimSize(d.dim);
  auto slice = sliceOf(d, local);
  if (failed(slice))
    return failure();
  if (ofRank)
    slice->first = b.create<arith::MulIOp>(theLoc, ofRank, i64(local));
  // The whole dim is the local one times the split's group size.
  Value global = slice->second ? groupTimes(rt::Ptr(slice->second), local)
                               : Value(i64(local));
  int64_t numChunks = d.chunks.empty() ? 1 : int64_t(d.chunks.size());
  Value chunk = b.create<arith::DivSIOp>(theLoc, global, i64(numChunks));
  return ChunkLayout{slice->first, chunk, int32_t(numChunks),
                     d.chunks.empty() ? null() : int64Array(d.chunks)};
}

FailureOr<rt::Ptr> Emitter::sequencePositions(const PositionedDim &d,
                                              const ChunkLayout *layout) {
  if (d.isIdentity())
    return null();
  auto type = cast<RankedTensorType>(d.value.getType());
  rt::Ptr buffer = ptr(alloc(RankedTensorType::get(
      {type.getDimSize(tfm::kBatchDim), type.getDimSize(d.dim)},
      b.getI32Type())));
  if (layout) {
    writePositions(d, *layout, buffer);
    return buffer;
  }
  if (failed(writeSequencePositions(d, buffer)))
    return failure();
  return buffer;
}

LogicalResult Emitter::writeSequencePositions(const PositionedDim &d,
                                              rt::Ptr buffer, Value ofRank) {
  auto layout = chunkLayout(d, ofRank);
  if (failed(layout))
    return failure();
  writePositions(d, *layout, buffer);
  return success();
}

void Emitter::writePositions(const PositionedDim &d, const ChunkLayout &layout,
                             rt::Ptr buffer) {
  auto type = cast<RankedTensorType>(d.value.getType());
  call(rt::SequencePositions{.B = i64(type.getDimSize(tfm::kBatchDim)),
                             .L = i64(type.getDimSize(d.dim)),
                             .start = rt::I64(layout.start),
                             .chunk = rt::I64(layout.chunk),
                             .num_chunks = i32(layout.numChunks),
                             .order = layout.order,
                             .pos = buffer});
}
