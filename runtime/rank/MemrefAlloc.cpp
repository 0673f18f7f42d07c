//===- MemrefAlloc.cpp - Where compiled code's buffers come from -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Rank objects are lowered with MLIR's generic allocation functions
// (finalize-memref-to-llvm use-generic-functions), so every memref.alloc of
// the compiled code, its per-call arena included, is backend memory: device
// memory on the cuda backend. Host scalars stay memref.alloca.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <cstdint>

extern "C" {

void *_mlir_memref_to_llvm_alloc(uint64_t bytes) {
  return loomrt_alloc(int64_t(bytes));
}

// loomrt_alloc aligns to 64 bytes (256 on the cuda backend), which is what
// the lowering asks for (PlanBuffers' kAlignment).
void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t bytes) {
  if (alignment > 64)
    loomrt_abort("compiled code asked for a buffer aligned to more than 64 "
                 "bytes, more than loomrt_alloc guarantees");
  return loomrt_alloc(int64_t(bytes));
}

void _mlir_memref_to_llvm_free(void *ptr) { loomrt_free(ptr); }

} // extern "C"
