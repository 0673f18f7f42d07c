//===- PipelineTimeline.cpp - When each schedule step runs ----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// List scheduling in the ranks' fixed orders: repeatedly start every rank's
// next step whose dependency has finished, until all have run. A step whose
// dependency never runs (an order that cannot execute) stops the loop and is
// reported.
//
//===----------------------------------------------------------------------===//

#include "rankgen/PipelineTimeline.h"

#include <algorithm>
#include <map>
#include <tuple>

using namespace loom::rankgen;

Result<PipelineTimeline>
loom::rankgen::computeTimeline(const PipelineSchedule &schedule,
                               int64_t forwardCost, int64_t backwardCost) {
  int64_t pp = schedule.options().pp;
  int64_t lastStage = pp * schedule.options().vpp - 1;
  const std::vector<RankSchedule> &ranks = schedule.ranks();

  // End time of (forward?, micro-batch, global stage) once it has run.
  std::map<std::tuple<bool, int64_t, int64_t>, int64_t> finished;
  PipelineTimeline timeline;
  timeline.ranks.resize(ranks.size());
  std::vector<size_t> next(ranks.size(), 0);
  std::vector<int64_t> clock(ranks.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < ranks.size(); ++r) {
      while (next[r] < ranks[r].steps.size()) {
        const ScheduleStep &step = ranks[r].steps[next[r]];
        int64_t stage = step.chunk * pp + int64_t(r);
        std::tuple<bool, int64_t, int64_t> dependency;
        bool hasDependency = true;
        if (step.forward) {
          dependency = {true, step.microbatch, stage - 1};
          hasDependency = stage > 0;
        } else if (stage == lastStage) {
          dependency = {true, step.microbatch, stage};
        } else {
          dependency = {false, step.microbatch, stage + 1};
        }
        int64_t ready = 0;
        if (hasDependency) {
          auto found = finished.find(dependency);
          if (found == finished.end())
            break;
          ready = found->second;
        }
        int64_t start = std::max(clock[r], ready);
        int64_t end = start + (step.forward ? forwardCost : backwardCost);
        timeline.ranks[r].push_back({step, start, end});
        finished[{step.forward, step.microbatch, stage}] = end;
        clock[r] = end;
        ++next[r];
        progress = true;
      }
    }
  }
  int64_t busy = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (next[r] < ranks[r].steps.size())
      return fail("pp rank " + std::to_string(r) + " cannot run " +
                  ranks[r].steps[next[r]].str() +
                  ": its input is never produced before it");
    timeline.makespan = std::max(timeline.makespan, clock[r]);
    for (const TimedStep &t : timeline.ranks[r])
      busy += t.end - t.start;
  }
  if (timeline.makespan > 0)
    timeline.bubbleFraction =
        1.0 - double(busy) / double(timeline.makespan * int64_t(ranks.size()));
  return timeline;
}
