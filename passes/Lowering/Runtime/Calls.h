//===- Calls.h - Typed runtime calls -----------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// One struct per loomrt.h entry point, generated from the header itself
// (runtime/abi/loomrt_abi.py), with a field per argument named as the header
// names it. Lowerings fill them with designated initializers:
//
//   e.call(rt::SiluForward{.dtype = e.dtype(out), .n = e.i64(n),
//                          .x = e.ptr(in), .y = e.ptr(out)});
//
// so a call whose arguments are swapped (out of the header's order), missing
// (no field type has a default) or of the wrong kind (an I64 where a Ptr
// belongs: the wrappers convert from mlir::Value only explicitly) does not
// compile. The Emitter declares the callee from the struct on first use.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_RUNTIME_CALLS_H
#define LOOM_PASSES_LOWERING_RUNTIME_CALLS_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

#include <array>

namespace loom::lowering::rt {

/// How an argument or result crosses the C ABI: int32_t (and loomrt_dtype),
/// int64_t, uint64_t (an i64 in the IR), float, double, any pointer.
enum class Kind { VOID, I32, I64, U64, F32, F64, PTR };

/// An argument of one kind: an mlir::Value the Emitter made (e.i64(...),
/// e.ptr(...)) or one the lowering computed, wrapped explicitly.
template <Kind K> struct Arg {
  explicit Arg(mlir::Value value) : value(value) {}
  /// Usable where a plain value is (arithmetic on a size, say).
  operator mlir::Value() const { return value; }
  mlir::Value value;
};
using I32 = Arg<Kind::I32>;
using I64 = Arg<Kind::I64>;
using U64 = Arg<Kind::I64>;
using F32 = Arg<Kind::F32>;
using F64 = Arg<Kind::F64>;
using Ptr = Arg<Kind::PTR>;

#include "passes/Lowering/RuntimeCalls.h.inc"

} // namespace loom::lowering::rt

#endif // LOOM_PASSES_LOWERING_RUNTIME_CALLS_H
