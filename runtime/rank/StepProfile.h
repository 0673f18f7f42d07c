//===- StepProfile.h - --profile: the runtime's profile per step -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Around each step the rank program opens a profiled step of the runtime
// (loomrt_profile_begin_step / _end_step, loomrt.h). On the reported rank it
// writes each step's record to --profile-json and, after the run, prints a
// table of the entry points by total time, per step: averaged over the
// steps after the first (which allocates and warms up), or the first alone
// when it is the only one.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_RANK_STEPPROFILE_H
#define LOOM_RUNTIME_RANK_STEPPROFILE_H

#include "loomrt/loomrt.h"

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

namespace loom::rank {

class StepProfile {
public:
  /// `reports`: this rank prints and writes; `jsonPath`: JSON lines, or
  /// empty. Throws Error when the file cannot be opened.
  StepProfile(bool reports, int32_t rank, const std::string &jsonPath);
  ~StepProfile();
  StepProfile(const StepProfile &) = delete;
  StepProfile &operator=(const StepProfile &) = delete;

  void beginStep();
  /// Ends step `step` (the iteration number the log shows).
  void endStep(int64_t step);
  /// The table, on the reporting rank.
  void print(std::FILE *out) const;

private:
  struct Totals {
    int64_t count = 0;
    double ms = 0.0;
  };
  struct Window {
    int64_t steps = 0, allocations = 0, hostSyncs = 0;
    double ms = 0.0;
    std::map<std::string, Totals> calls;
  };
  void add(Window &w, const loomrt_profile_step &s);

  bool reports;
  int32_t rank;
  std::FILE *json = nullptr;
  int64_t stepsSeen = 0;
  Window first, rest;
};

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_STEPPROFILE_H
