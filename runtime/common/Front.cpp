//===- Front.cpp - The extern "C" definition of every entry point ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loomrt.h's entry points, generated from its declarations (runtime/abi/
// loomrt_abi.py front): each one opens the profiler's scope (Profile.h:
// nothing unless a step is profiled), runs the checks its parameter types imply
// (loomrt_dtype: a valid dtype; loomrt_comm: a live communicator), then its
// own rule (Rules.h), then its implementation, a backend's (Backend.h) or
// runtime/common's (Common.h.inc). Compiled once and linked into every
// backend, so the argument checks and their messages are the same on all.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/common/Comm.h"
#include "runtime/common/Errors.h"
#include "runtime/common/Profile.h"
#include "runtime/common/Rules.h"

#include "runtime/abi/Common.h.inc"

#include "runtime/abi/Front.inc"
