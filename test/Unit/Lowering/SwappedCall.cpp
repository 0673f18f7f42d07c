//===- SwappedCall.cpp - A runtime call with swapped arguments ---*- C++ -*-===//
//
// Must NOT compile (test/Unit/Lowering/CMakeLists.txt checks the error): the
// designated initializers name M before N, out of loomrt_linear_forward's
// order, the mistake positional arguments let through.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Calls.h"

namespace rt = loom::lowering::rt;

rt::LinearForward swapped(mlir::Value i32, mlir::Value i64, mlir::Value p) {
  return rt::LinearForward{.dtype = rt::I32(i32),
                           .N = rt::I64(i64),
                           .M = rt::I64(i64),
                           .K = rt::I64(i64),
                           .x = rt::Ptr(p),
                           .W = rt::Ptr(p),
                           .bias = rt::Ptr(p),
                           .y = rt::Ptr(p)};
}
