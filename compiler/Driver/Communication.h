//===- Communication.h - What a rank program communicates --------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The communication of an entry point, counted on the IR that will run: after
// tfm-prepare-lowering every collective, ring hop, hierarchical all-to-all
// and pipeline p2p batch is an op (nothing is modelled), and a pipelined
// step reaches its blocks through calls, counted once per call. Forward and
// backward are told apart by the step's tfm.pipeline_step markers, or by
// the locations tfm-inline-blocks gives the ops of backward blocks; what
// follows the first backward op (the gradients' reductions) is backward.
// loom-compile --report and --report-json print it.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_COMMUNICATION_H
#define LOOM_COMPILER_DRIVER_COMMUNICATION_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <string>

namespace loom::driver {

/// How often and how many bytes.
struct Traffic {
  int64_t count = 0, bytes = 0;

  Traffic &operator+=(const Traffic &o) {
    count += o.count;
    bytes += o.bytes;
    return *this;
  }
  Traffic times(int64_t k) const { return {count * k, bytes * k}; }
  llvm::json::Object json() const {
    return llvm::json::Object{{"count", count}, {"bytes", bytes}};
  }
};

/// Each kind of communication. Gathers, reduce-scatters and all-to-alls
/// count their whole tensor (Megatron's b*s*h), sends what one rank sends.
struct CollectiveVolume {
  Traffic allReduce, allGather, reduceScatter, allToAll, send;

  bool empty() const {
    return !allReduce.count && !allGather.count && !reduceScatter.count &&
           !allToAll.count && !send.count;
  }
  CollectiveVolume &operator+=(const CollectiveVolume &o);
  CollectiveVolume times(int64_t k) const;
  /// "2 all-reduce(s) of 4096 bytes in all[, 1 all-gather(s) of ...]".
  std::string str() const;
  /// {"all_reduce": {"count": c, "bytes": b}, ...}
  llvm::json::Object json() const;
};

/// What an entry point communicates when it runs once.
struct EntryVolume {
  CollectiveVolume forward, backward;
  /// The pipeline's sends between stages (activations forward, gradients
  /// backward), apart from the collectives.
  Traffic pipelineSends;
  /// Whether the entry has a backward (a train step).
  bool hasBackward = false;

  CollectiveVolume total() const {
    CollectiveVolume t = forward;
    t += backward;
    return t;
  }
  EntryVolume times(int64_t k) const;
};

/// Counts `entry` on prepared IR, through every function it calls.
EntryVolume countCommunication(mlir::func::FuncOp entry);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_COMMUNICATION_H
