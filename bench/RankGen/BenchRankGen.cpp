//===- BenchRankGen.cpp - Time building every process group ---------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Prints how long ParallelLayout::create takes to build every group kind
// Megatron-Core creates (dense, expert, embedding, hierarchical cp) plus the
// rank-to-group tables, for worlds up to 1,048,576 ranks. The target is well
// under a second for 65,536 ranks.
//
//   bench-rankgen [repetitions]
//
//===----------------------------------------------------------------------===//

#include "rankgen/ParallelLayout.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace loom::rankgen;

namespace {

struct Case {
  const char *name;
  ParallelConfig config;
};

ParallelConfig make(int64_t world, int64_t tp, int64_t cp, int64_t pp,
                    int64_t ep, int64_t etp, const char *order,
                    std::vector<int64_t> hcp = {}) {
  ParallelConfig c;
  c.worldSize = world;
  c.tp = tp;
  c.cp = cp;
  c.pp = pp;
  c.ep = ep;
  c.etp = etp;
  c.order = order;
  c.hierarchicalCpSizes = std::move(hcp);
  return c;
}

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

int main(int argc, char **argv) {
  int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const Case cases[] = {
      {"tp8 cp2 pp4 ep8 etp1", make(1024, 8, 2, 4, 8, 1, kDefaultOrder)},
      {"tp8 cp4 pp8 ep16 etp2", make(8192, 8, 4, 8, 16, 2, kDefaultOrder)},
      {"tp8 cp4 pp8 ep16 etp2 hcp 2,2",
       make(65536, 8, 4, 8, 16, 2, kDefaultOrder, {2, 2})},
      {"tp8 cp2 pp16 ep16 etp1 (dp last)",
       make(65536, 8, 2, 16, 16, 1, kTpPpDpOrder)},
      {"tp8 cp8 pp16 ep64 etp1", make(1048576, 8, 8, 16, 64, 1, kDefaultOrder)},
  };

  std::printf("bench-rankgen: ParallelLayout::create (every group kind and "
              "rank lookup table), best of %d\n",
              repetitions);
  std::printf("%10s  %-34s %6s %12s %12s\n", "world", "configuration", "kinds",
              "best ms", "median ms");
  for (const Case &c : cases) {
    std::vector<double> times;
    size_t kinds = 0;
    for (int i = 0; i < repetitions; ++i) {
      auto start = std::chrono::steady_clock::now();
      Result<ParallelLayout> layout = ParallelLayout::create(c.config);
      double ms = millisecondsSince(start);
      if (!layout) {
        std::fprintf(stderr, "bench-rankgen: error: %s\n",
                     layout.error().c_str());
        return 1;
      }
      kinds = layout->kinds().size();
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    std::printf("%10lld  %-34s %6zu %12.2f %12.2f\n",
                static_cast<long long>(c.config.worldSize), c.name, kinds,
                times.front(), times[times.size() / 2]);
  }

  // The raw generator alone: all 32 token combinations of a 65,536 world.
  Result<RankGenerator> gen =
      RankGenerator::create({8, 4, 1, 256, 8}, kDefaultOrder);
  if (!gen) {
    std::fprintf(stderr, "bench-rankgen: error: %s\n", gen.error().c_str());
    return 1;
  }
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    auto start = std::chrono::steady_clock::now();
    size_t total = 0;
    for (DimMask mask = 0; mask < 32; ++mask)
      total += gen->groupsFor(mask).flat().size();
    times.push_back(millisecondsSince(start));
    if (total != 32u * 65536u)
      return 1;
  }
  std::sort(times.begin(), times.end());
  std::printf("%10d  %-34s %6d %12.2f %12.2f\n", 65536,
              "RankGenerator, all 32 token sets", 32, times.front(),
              times[times.size() / 2]);
  return 0;
}
