//===- Memory.h - The buffers a rank program holds at once ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The most backend memory a lowered entry point holds at one time for its
// buffers: at each op, the buffers allocated and not yet freed in its
// function, plus, at a call, the most the callee holds. A pipelined step
// holds the activations of the micro-batches in flight in its own buffers
// and each block's temporaries inside the block's call, so this is the
// peak of the whole step.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_MEMORY_H
#define LOOM_COMPILER_DRIVER_MEMORY_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>

namespace loom::driver {

/// Peak bytes of `entry`'s buffers and those of the functions it calls, on
/// lowered straight-line code (tfm-lower-to-runtime through
/// tfm-plan-buffers: each function's arena and its callers' out-params).
int64_t peakBufferBytes(mlir::func::FuncOp entry);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_MEMORY_H
