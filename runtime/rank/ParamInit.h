//===- ParamInit.h - Plan-independent parameter initialization --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Every element of every parameter is a pure function of (seed, parameter
// name, global row-major element index), so a rank initializes its shard
// without talking to anyone and every parallel plan starts from the same
// global tensors. Normal values come from a counter-based generator
// (splitmix64 of key + counter) and Box-Muller, both branches: elements 2p
// and 2p+1 are the cosine and sine of pair p.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_PARAMINIT_H
#define LOOM_RUNTIME_RANK_PARAMINIT_H

#include "runtime/rank/Manifest.h"

namespace loom::rank {

/// splitmix64's output function: a bijective 64-bit mixer.
uint64_t mix64(uint64_t x);

/// Per-parameter stream key from the seed and the parameter name.
uint64_t streamKey(uint64_t seed, const std::string &name);

/// A standard normal value, element `index` of stream `key`.
double normalAt(uint64_t key, uint64_t index);

/// A uniform value in [0, 1), draw `index` of stream `key`.
double uniformAt(uint64_t key, uint64_t index);

/// Fills `out` (the param's dtype, numElements(box.shape) elements) with the
/// initial values of `box` of `param`.
void initializeBox(const ParamSpec &param, const Box &box, uint64_t seed,
                   void *out);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_PARAMINIT_H
