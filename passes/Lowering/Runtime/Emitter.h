//===- Emitter.h - Building runtime calls for one op -------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm-lower-to-runtime replaces every op by runtime calls on buffers. An
// op's lowering (RuntimeLoweringInterface) gets an Emitter at the op: the
// op's operands as buffers, its results' buffers (allocated when first
// asked for, so in the order the lowering uses them) and builders for the
// call arguments (constants, pointers, dtype codes, int64 arrays), typed
// runtime calls (Calls.h), communicator handles and where this rank's
// slice of a distributed dim lies.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_RUNTIME_EMITTER_H
#define LOOM_PASSES_LOWERING_RUNTIME_EMITTER_H

#include "passes/Lowering/Runtime/Calls.h"
#include "passes/Lowering/SlicePositions.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"

namespace mlir {
class ConversionPatternRewriter;
} // namespace mlir

namespace loom::lowering {

/// The runtime's dtype code of an element type (LOOMRT_F32/BF16/F16).
int32_t dtypeCode(mlir::Type elementType);

/// Elements of a shaped value, a dim of it (negative: from the end) and the
/// product of all dims but the last (the rows of a last-dim op).
int64_t numElements(mlir::Value v);
int64_t dim(mlir::Value v, int64_t i);
int64_t rows(mlir::Value v);
/// The bytes of a value of shaped type `t`.
int64_t bytesOf(mlir::Type t);

class Emitter {
public:
  /// Builds calls in place of `op`, whose operands are `operands` (buffers).
  Emitter(mlir::Operation *op, mlir::ValueRange operands,
          mlir::ConversionPatternRewriter &rewriter);

  mlir::Operation *op() const { return theOp; }
  mlir::ValueRange operands() const { return theOperands; }
  mlir::ConversionPatternRewriter &rewriter() const { return b; }
  mlir::Location loc() const { return theLoc; }

  /// The buffer of result `i`: a fresh buffer of its type, made the first
  /// time it is asked for.
  mlir::Value result(unsigned i);
  /// Makes `buffer` the buffer of result `i` (not asked for before).
  void setResult(unsigned i, mlir::Value buffer);
  /// Every result's buffer, allocating those never asked for.
  llvm::SmallVector<mlir::Value> results();

  // Arguments.
  rt::I32 i32(int64_t v);
  rt::I64 i64(int64_t v);
  rt::F32 f32(double v);
  rt::Ptr null();
  /// The aligned data pointer of a memref (a null pointer for no value).
  rt::Ptr ptr(mlir::Value memref);
  /// `p` advanced by `bytes` bytes.
  rt::Ptr offsetPtr(mlir::Value p, int64_t bytes);
  /// `p` advanced by an int64 number of bytes known at run time.
  rt::Ptr offsetPtr(mlir::Value p, mlir::Value bytes);
  /// The dtype code of a tensor's or memref's elements.
  rt::I32 dtype(mlir::Value tensorOrMemref);
  rt::I32 dtype(mlir::Type shapedType);
  /// A pointer to an int64 array holding `values` (a stack buffer).
  rt::Ptr int64Array(llvm::ArrayRef<int64_t> values);
  /// A pointer to an array of the memrefs' data pointers (a stack buffer;
  /// a null value gives a null entry).
  rt::Ptr ptrArray(mlir::ValueRange memrefs);
  mlir::Type i32Type();

  // Arithmetic on int64 and f32 values the code computes at run time.
  mlir::Value addI64(mlir::Value v, int64_t c);
  mlir::Value subI64(mlir::Value lhs, mlir::Value rhs);
  mlir::Value mulI64(mlir::Value v, int64_t c);
  mlir::Value remI64(mlir::Value v, int64_t c);
  mlir::Value toI64(mlir::Value i32Value);
  mlir::Value toI32(mlir::Value i64Value);
  /// An index value (a loop's) as an int64.
  mlir::Value indexToI64(mlir::Value index);
  /// clamp(v, lo, hi) (signed).
  mlir::Value clampI64(mlir::Value v, int64_t lo, int64_t hi);
  /// `lhs < rhs ? ifLess : otherwise` (signed).
  mlir::Value selectLess(mlir::Value lhs, mlir::Value rhs, mlir::Value ifLess,
                         mlir::Value otherwise);

  // Buffers.
  /// A fresh, uninitialized buffer for a value of tensor type `type`.
  mlir::Value alloc(mlir::Type tensorType);
  /// An f32 buffer of n elements (softmax statistics), or a scalar (n < 0).
  mlir::Value allocF32(int64_t n);
  /// A fresh copy of `buffer` (of tensor type `type`) and a zeroed buffer.
  mlir::Value copyOf(mlir::Value buffer, mlir::Type type);
  /// `bytes` bytes from `src` to `dst`.
  void copyBytes(rt::Ptr dst, rt::Ptr src, int64_t bytes);
  mlir::Value zeros(mlir::Type type);

  // Calls.
  template <typename Call> void call(const Call &c) {
    emitCall(Call::kName, Call::kResult, Call::kArgs, c.operands());
  }
  /// A call whose one result is used.
  template <typename Call> mlir::Value callValue(const Call &c) {
    return emitCall(Call::kName, Call::kResult, Call::kArgs, c.operands());
  }

  // Communicators.
  /// The handle a communicator argument (a `loomrt_comm *`) points to.
  rt::Ptr handle(mlir::Value commArgument);
  /// The communicator handle of the process group `kind` ("tp"); an error
  /// at the op when the function has no argument for it.
  mlir::FailureOr<rt::Ptr> groupHandle(llvm::StringRef kind);
  /// This rank's index in the group of `handle`, as an int64.
  mlir::Value rankIn(rt::Ptr handle);
  /// Where this rank's slice of a split starts (the first vocabulary id of
  /// a vocab-parallel table, say): its index in the group of `handle`
  /// times the slice's size.
  mlir::Value sliceStart(rt::Ptr handle, int64_t sliceSize);
  /// The size of the group of `handle` times `n`.
  mlir::Value groupTimes(rt::Ptr handle, int64_t n);

  // Slices of distributed dims (SlicePositions.h).
  /// Where the op's positioned dim, `localSize` long on this rank, starts in
  /// the global tensor, and its group's handle (null when the dim is whole).
  mlir::FailureOr<std::pair<mlir::Value, mlir::Value>>
  sliceOf(int64_t localSize);
  mlir::FailureOr<std::pair<mlir::Value, mlir::Value>>
  sliceOf(const PositionedDim &d, int64_t localSize);
  /// loomrt_sequence_positions' description of a slice.
  struct ChunkLayout {
    mlir::Value start, chunk;
    int32_t numChunks;
    rt::Ptr order;
  };
  /// Where a rank's slice of the positioned dim `d` lies, as
  /// loomrt_sequence_positions and loomrt_attention_chunked_* take it: the
  /// slice's first stored token, the chunk size, the number of chunks and
  /// their order (a null pointer when natural). `ofRank`, when given, is the
  /// group rank whose slice to take instead of this rank's (ring
  /// attention's blocks).
  mlir::FailureOr<ChunkLayout> chunkLayout(const PositionedDim &d,
                                           mlir::Value ofRank = {});
  /// The global sequence positions [B, L] of this rank's L tokens along
  /// `d` (an int32 buffer), or a null pointer when they are 0, 1, ... (the
  /// kernels' default). `layout`, when given, is d's chunkLayout.
  mlir::FailureOr<rt::Ptr> sequencePositions(const PositionedDim &d,
                                             const ChunkLayout *layout =
                                                 nullptr);
  /// Writes the positions of d's slice (of rank `ofRank`, as for
  /// chunkLayout) into the int32 [B, L] buffer `buffer` (a pointer).
  mlir::LogicalResult writeSequencePositions(const PositionedDim &d,
                                             rt::Ptr buffer,
                                             mlir::Value ofRank = {});
  void writePositions(const PositionedDim &d, const ChunkLayout &layout,
                      rt::Ptr buffer);

private:
  mlir::Value emitCall(llvm::StringRef name, rt::Kind result,
                       llvm::ArrayRef<rt::Kind> args, mlir::ValueRange values);
  /// The aligned data pointer of a memref as an int64.
  mlir::Value address(mlir::Value memref);
  /// A pointer to a stack array of int64 values.
  rt::Ptr storeI64s(llvm::ArrayRef<mlir::Value> values);
  /// Declares `name` on first use.
  void declare(llvm::StringRef name, rt::Kind result,
               llvm::ArrayRef<rt::Kind> args);

  mlir::Operation *theOp;
  mlir::SmallVector<mlir::Value> theOperands;
  mlir::ConversionPatternRewriter &b;
  mlir::Location theLoc;
  mlir::ModuleOp module;
  llvm::SmallVector<mlir::Value> resultBuffers;
};

} // namespace loom::lowering

#endif // LOOM_PASSES_LOWERING_RUNTIME_EMITTER_H
