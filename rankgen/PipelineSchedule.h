//===- PipelineSchedule.h - Megatron-Core's pipeline schedules --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Each pp rank's program under Megatron-Core's schedules
// (pipeline_parallel/schedules.py), as data: its forward and backward steps
// `F<microbatch>.<chunk>` / `B<microbatch>.<chunk>` in order, and between
// them the P2PCommunicator calls it makes (send_forward_recv_backward, ...),
// each with what it sends and what it expects to receive.
//
//   pp 1 ........ forward_backward_no_pipelining: F0.0 B0.0 F1.0 B1.0 ...
//   pp > 1 ...... 1F1B (forward_backward_pipelining_without_interleaving):
//                 min(pp - r - 1, M) warmup forwards, then one forward and
//                 one backward at a time, then the remaining backwards;
//                 pp 4, M 8, rank 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4..B7
//   vpp > 1 ..... interleaved 1F1B (..._with_interleaving) over the table of
//                 get_schedule_table(M, vpp, G): micro-batches in groups of
//                 G (--microbatch-group-size-per-vp-stage, default pp), each
//                 group through every chunk in turn
//
// Forward-only variants (evaluation) drop the backward steps. The schedule
// is what Megatron's non-overlapped p2p path runs (overlap_p2p_comm off);
// PipelineP2P.h turns the calls into the isend/irecv ops of its batched and
// unbatched modes.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_PIPELINESCHEDULE_H
#define LOOM_RANKGEN_PIPELINESCHEDULE_H

#include "rankgen/P2PCheck.h"
#include "rankgen/Result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {
namespace rankgen {

/// Upper bound on micro-batches x virtual stages: steps are materialized.
constexpr int64_t kMaxScheduleSteps = int64_t(1) << 20;

enum class ScheduleKind { NoPipelining, OneFOneB, Interleaved };

/// "no pipelining", "1F1B", "interleaved 1F1B".
const char *scheduleKindName(ScheduleKind kind);

struct ScheduleOptions {
  int64_t pp = 1;
  int64_t vpp = 1;
  int64_t numMicrobatches = 1;
  /// --microbatch-group-size-per-vp-stage; 0 for the default, pp.
  int64_t microbatchGroupSize = 0;
  bool forwardOnly = false;
  /// What every p2p message looks like (Megatron sends [s/cp(/tp), b, h] of
  /// pipeline_dtype); only carried into the payloads.
  std::vector<int64_t> shape;
  std::string dtype;
};

/// A forward or backward step of one micro-batch on one model chunk.
struct ScheduleStep {
  bool forward = true;
  int64_t microbatch = 0;
  int64_t chunk = 0;

  bool operator==(const ScheduleStep &o) const {
    return forward == o.forward && microbatch == o.microbatch &&
           chunk == o.chunk;
  }
  /// "F3.1".
  std::string str() const;
};

/// One P2PCommunicator call: its name and the tensors it moves. A recv
/// payload is what this rank expects to arrive, derived from its own
/// bookkeeping (Megatron appends every received tensor to the queue of the
/// chunk it is for), so the checker can compare it with what the peer sends.
struct CommCall {
  std::string name; ///< e.g. "send_forward_recv_backward"
  std::optional<Payload> sendPrev, recvPrev, sendNext, recvNext;
};

/// A compute step or a communication call.
struct RankAction {
  bool isComm = false;
  ScheduleStep step; ///< when !isComm
  CommCall comm;     ///< when isComm
};

struct RankSchedule {
  int64_t ppRank = 0;
  /// Phase lengths in virtual micro-batches: warmup forwards, steady
  /// forward+backward pairs, cooldown backwards.
  int64_t warmup = 0, steady = 0, cooldown = 0;
  std::vector<ScheduleStep> steps;
  std::vector<RankAction> actions;
};

class PipelineSchedule {
public:
  /// Checks the options as Megatron-Core does (the interleaved schedule's
  /// constraints on the micro-batch count are errors that name them) and
  /// builds every rank's program.
  static Result<PipelineSchedule> create(const ScheduleOptions &options);

  ScheduleKind kind() const { return kind_; }
  const ScheduleOptions &options() const { return options_; }
  /// The effective --microbatch-group-size-per-vp-stage.
  int64_t microbatchGroupSize() const { return groupSize_; }
  /// Indexed by pp rank.
  const std::vector<RankSchedule> &ranks() const { return ranks_; }

private:
  ScheduleKind kind_ = ScheduleKind::NoPipelining;
  ScheduleOptions options_;
  int64_t groupSize_ = 0;
  std::vector<RankSchedule> ranks_;
};

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_PIPELINESCHEDULE_H
