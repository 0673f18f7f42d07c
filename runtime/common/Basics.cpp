//===- Basics.cpp - loomrt_dtype_size, loomrt_abort -------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The entry points of loomrt.h that need nothing of a backend beyond the
// error reporting of Errors.h (kept free of the generated headers, so test
// programs can link it alone).
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Errors.h"

#include "runtime/abi/Common.h.inc"

using namespace loomrt;

int64_t common::loomrt_dtype_size(loomrt_dtype dtype) {
  return dtypeSize(dtype); // checked by the front
}

void common::loomrt_abort(const char *message) {
  abortJob(message ? message : "(no message)");
}
