//===- Profile.cpp - loomrt_profile_begin_step / _end_step ----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// During a step every outermost entry point call appends (entry, start
// mark, end mark); the step's end turns the marks into milliseconds once,
// so the cuda backend waits for its events a single time per step.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Profile.h"

#include "runtime/abi/Common.h.inc"
#include "runtime/common/Errors.h"

#include <cstddef>
#include <vector>

namespace loomrt::profile {

bool gActive = false;
int64_t gAllocations = 0;
int64_t gHostSyncs = 0;

namespace {

struct Call {
  int32_t entry;
  int32_t start, end;
};

struct State {
  int32_t depth = 0;
  int32_t stepStart = 0;
  std::vector<Call> calls;
  std::vector<int64_t> counts;
  std::vector<double> ms;
  std::vector<loomrt_profile_entry> entries;
};

State &state() {
  static State s;
  return s;
}

} // namespace

void enter(int32_t entry) {
  State &s = state();
  if (s.depth++ == 0)
    s.calls.push_back({entry, backend::profiling::mark(), -1});
}

void leave() {
  State &s = state();
  if (--s.depth == 0)
    s.calls.back().end = backend::profiling::mark();
}

} // namespace loomrt::profile

using namespace loomrt;

void loomrt::common::loomrt_profile_begin_step() {
  profile::State &s = profile::state();
  LOOMRT_CHECK(!profile::gActive,
               "loomrt_profile_begin_step: a step is already being profiled");
  s.calls.clear();
  s.depth = 0;
  profile::gAllocations = 0;
  profile::gHostSyncs = 0;
  backend::profiling::reset();
  s.stepStart = backend::profiling::mark();
  profile::gActive = true;
}

void loomrt::common::loomrt_profile_end_step(loomrt_profile_step *out) {
  profile::State &s = profile::state();
  LOOMRT_CHECK(profile::gActive,
               "loomrt_profile_end_step: no step is being profiled "
               "(loomrt_profile_begin_step first)");
  LOOMRT_CHECK(s.depth == 0,
               "loomrt_profile_end_step: called inside an entry point");
  profile::gActive = false;
  int32_t stepEnd = backend::profiling::mark();
  backend::profiling::finish();

  s.counts.assign(std::size_t(profile::kNumEntries), 0);
  s.ms.assign(std::size_t(profile::kNumEntries), 0.0);
  for (const profile::Call &c : s.calls) {
    s.counts[std::size_t(c.entry)] += 1;
    s.ms[std::size_t(c.entry)] += backend::profiling::elapsedMs(c.start, c.end);
  }
  s.entries.clear();
  for (int32_t e = 0; e < profile::kNumEntries; ++e)
    if (s.counts[std::size_t(e)])
      s.entries.push_back(
          {profile::kEntryNames[e], s.counts[std::size_t(e)], s.ms[std::size_t(e)]});
  *out = loomrt_profile_step{};
  out->ms = backend::profiling::elapsedMs(s.stepStart, stepEnd);
  out->allocations = profile::gAllocations;
  out->host_syncs = profile::gHostSyncs;
  out->num_entries = int32_t(s.entries.size());
  out->entries = s.entries.data();
}
