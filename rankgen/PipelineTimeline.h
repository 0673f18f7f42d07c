//===- PipelineTimeline.h - When each schedule step runs --------*- C++ -*-===//
//-*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Start and end times of every step of a schedule, for pictures and bubble
// counts: each rank runs its steps in order, a forward starts once the
// previous stage finished the same micro-batch's forward and a backward once
// the next stage finished its backward (the last stage's backward follows
// its own forward). Communication is free; a forward costs `forwardCost`
// time units and a backward `backwardCost` (2 and 4 by default: Megatron's
// pictures draw backward twice as long as forward).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_PIPELINETIMELINE_H
#define LOOM_RANKGEN_PIPELINETIMELINE_H

#include "rankgen/PipelineSchedule.h"
#include "rankgen/Result.h"

#include <cstdint>
#include <vector>

namespace loom {
namespace rankgen {

struct TimedStep {
  ScheduleStep step;
  int64_t start = 0, end = 0;
};

struct PipelineTimeline {
  /// Indexed by pp rank, each rank's steps in its order.
  std::vector<std::vector<TimedStep>> ranks;
  int64_t makespan = 0;
  /// Idle time of all ranks before the makespan over pp * makespan: the
  /// pipeline bubble.
  double bubbleFraction = 0;
};

/// Fails if the steps' dependencies cannot be met in the ranks' orders.
Result<PipelineTimeline> computeTimeline(const PipelineSchedule &schedule,
                                         int64_t forwardCost = 2,
                                         int64_t backwardCost = 4);

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_PIPELINETIMELINE_H
