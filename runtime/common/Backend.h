//===- Backend.h - What a backend implements --------------------*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/. A backend is a shared library made of runtime/common
// (the ABI front and what every backend shares) and its own definitions of
// the functions declared here, one per entry point of loomrt.h that is not
// common code: the same name and parameters, in namespace loomrt::backend,
// generated from loomrt.h (runtime/abi/loomrt_abi.py backend), e.g.
//
//   void loomrt::backend::loomrt_scale(loomrt_dtype dtype, void *x,
//                                      int64_t n, float alpha) { ... }
//
// so a definition whose signature drifts from loomrt.h does not compile. The
// front (Front.cpp) has already checked the arguments when it calls one:
// the dtypes, and the entry point's rule (Rules.h). A backend checks only
// its own limits (grid dimensions, cuBLAS's int counts). Communication is
// runtime/common's too; a backend provides its transport (Transport.h).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_BACKEND_H
#define LOOM_RUNTIME_COMMON_BACKEND_H

#include "runtime/abi/Backend.h.inc"

#endif // LOOM_RUNTIME_COMMON_BACKEND_H
