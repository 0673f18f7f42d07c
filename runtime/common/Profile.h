//===- Profile.h - Counting and timing entry points during a step -*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/. The profiler behind loomrt_profile_begin_step and
// loomrt_profile_end_step (loomrt.h). The ABI front (Front.inc) opens a
// Scope in every timed entry point; backends report their allocations and
// host waits. Only the outermost entry point of a call chain is recorded, so
// an entry point written in others (runtime/common's attention sections)
// counts once, with everything it runs.
//
// Each backend provides the step's timeline (namespace profiling below):
// marks the cpu backend stamps with the host clock and the cuda backend
// records as events on its compute stream, read once when the step ends.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_PROFILE_H
#define LOOM_RUNTIME_COMMON_PROFILE_H

#include <cstdint>

namespace loomrt::profile {

/// Whether a step is being profiled; read on every entry point.
extern bool gActive;

/// The ABI's entry points in loomrt.h order (generated into Front.inc).
extern const char *const kEntryNames[];
extern const int32_t kNumEntries;

void enter(int32_t entry);
void leave();

/// Times entry point `entry` from construction to destruction while a step
/// is profiled.
class Scope {
public:
  explicit Scope(int32_t entry) : on(gActive) {
    if (on)
      enter(entry);
  }
  ~Scope() {
    if (on)
      leave();
  }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;

private:
  bool on;
};

/// A backend allocation (loomrt_alloc, backend scratch) during a step.
inline void allocation() {
  extern int64_t gAllocations;
  if (gActive)
    ++gAllocations;
}

/// The host waited for the device (or, on the cpu backend, a call that
/// would make it wait returned).
inline void hostSync() {
  extern int64_t gHostSyncs;
  if (gActive)
    ++gHostSyncs;
}

} // namespace loomrt::profile

/// The step's timeline, one per backend.
namespace loomrt::backend::profiling {

/// Forgets the last step's marks.
void reset();
/// Records a point on the timeline now (on the cuda backend: when the
/// compute stream reaches it) and returns its index.
int32_t mark();
/// Waits until every mark has been reached; not a counted host sync.
void finish();
/// Milliseconds from mark `a` to mark `b`, after finish().
double elapsedMs(int32_t a, int32_t b);

} // namespace loomrt::backend::profiling

#endif // LOOM_RUNTIME_COMMON_PROFILE_H
