//===- StepProfile.cpp - --profile: the runtime's profile per step --------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/StepProfile.h"

#include "runtime/rank/Error.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <vector>

using namespace loom::rank;

StepProfile::StepProfile(bool reports, int32_t rank,
                         const std::string &jsonPath)
    : reports(reports), rank(rank) {
  if (!reports || jsonPath.empty())
    return;
  json = std::fopen(jsonPath.c_str(), "w");
  if (!json)
    throw Error("cannot open --profile-json file " + jsonPath + ": " +
                std::strerror(errno));
}

StepProfile::~StepProfile() {
  if (json)
    std::fclose(json);
}

void StepProfile::beginStep() { loomrt_profile_begin_step(); }

void StepProfile::add(Window &w, const loomrt_profile_step &s) {
  w.steps += 1;
  w.ms += s.ms;
  w.allocations += s.allocations;
  w.hostSyncs += s.host_syncs;
  for (int32_t i = 0; i < s.num_entries; ++i) {
    Totals &t = w.calls[s.entries[i].name];
    t.count += s.entries[i].count;
    t.ms += s.entries[i].ms;
  }
}

void StepProfile::endStep(int64_t step) {
  loomrt_profile_step s;
  loomrt_profile_end_step(&s);
  add(stepsSeen++ == 0 ? first : rest, s);
  if (!json)
    return;
  std::fprintf(json,
               "{\"step\": %" PRId64 ", \"rank\": %d, \"ms\": %.4f, "
               "\"allocations\": %" PRId64 ", \"host_syncs\": %" PRId64
               ", \"calls\": {",
               step, rank, s.ms, s.allocations, s.host_syncs);
  for (int32_t i = 0; i < s.num_entries; ++i)
    std::fprintf(json, "%s\"%s\": {\"count\": %" PRId64 ", \"ms\": %.4f}",
                 i ? ", " : "", s.entries[i].name, s.entries[i].count,
                 s.entries[i].ms);
  std::fprintf(json, "}}\n");
  std::fflush(json);
}

void StepProfile::print(std::FILE *out) const {
  if (!reports || stepsSeen == 0)
    return;
  const Window &w = rest.steps ? rest : first;
  const double n = double(w.steps);
  char window[64] = "step 1";
  if (rest.steps)
    std::snprintf(window, sizeof window,
                  "steps 2-%" PRId64 " (the first step apart)", stepsSeen);
  std::fprintf(out,
               "loom profile: rank %d, %s: %.3f ms per step, %.1f "
               "allocations, %.1f host syncs\n",
               rank, window, w.ms / n, double(w.allocations) / n,
               double(w.hostSyncs) / n);
  std::vector<std::pair<std::string, Totals>> rows(w.calls.begin(),
                                                   w.calls.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto &a, const auto &b) {
    return a.second.ms > b.second.ms;
  });
  std::fprintf(out, "  %-38s %10s %12s %7s\n", "entry point", "calls/step",
               "ms/step", "share");
  double covered = 0.0;
  for (const auto &[name, t] : rows) {
    covered += t.ms;
    std::fprintf(out, "  %-38s %10.1f %12.3f %6.1f%%\n", name.c_str(),
                 double(t.count) / n, t.ms / n,
                 w.ms > 0 ? 100.0 * t.ms / w.ms : 0.0);
  }
  // What no entry point accounts for: the rank program's and the compiled
  // code's own host work between calls (and, on cuda, device idle time).
  std::fprintf(out, "  %-38s %10s %12.3f %6.1f%%\n", "(between calls)", "",
               (w.ms - covered) / n,
               w.ms > 0 ? 100.0 * (w.ms - covered) / w.ms : 0.0);
  std::fflush(out);
}
