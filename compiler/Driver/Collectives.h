//===- Collectives.h - What an entry point communicates ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The communication of an entry point per micro-batch, read off its sharded
// IR alone: every collective a rank runs is a mesh op there. loom-compile
// --report prints it.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_COLLECTIVES_H
#define LOOM_COMPILER_DRIVER_COLLECTIVES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <cstdint>
#include <string>

namespace loom::driver {

/// Counts and bytes of each kind of collective.
struct CollectiveVolume {
  int64_t allReduces = 0, allReduceBytes = 0;
  int64_t allGathers = 0, allGatherBytes = 0;
  int64_t reduceScatters = 0, reduceScatterBytes = 0;
  int64_t allToAlls = 0, allToAllBytes = 0;
  /// Point-to-point sends (ring attention's hops), each of one tensor.
  int64_t sends = 0, sendBytes = 0;

  bool empty() const {
    return !allReduces && !allGathers && !reduceScatters && !allToAlls &&
           !sends;
  }
  CollectiveVolume &operator+=(const CollectiveVolume &o);
  /// "2 all-reduce(s) of 4096 bytes in all[, 1 all-gather(s) of ...]".
  std::string str() const;
};

/// An entry point's collectives: those of the forward (its forward blocks)
/// and of the backward (backward blocks and what follows the first of them:
/// the reduction of parameter gradients). Gathers, reduce-scatters and
/// all-to-alls are counted by their whole tensor (Megatron's b*s*h), sends
/// by what one rank sends. Ring attention (one op until
/// tfm-expand-ring-attention writes its steps) counts as that pass writes
/// it over a ring of n ranks: n - 1 hops of k and v forward, n - 1 of k, v,
/// dk and dv backward.
struct EntryVolume {
  CollectiveVolume forward, backward;
  /// Whether the entry has backward blocks (a train step).
  bool hasBackward = false;
  CollectiveVolume total() const {
    CollectiveVolume t = forward;
    t += backward;
    return t;
  }
};

EntryVolume collectiveVolume(mlir::func::FuncOp entry);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_COLLECTIVES_H
