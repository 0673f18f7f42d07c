//===- Groups.cpp - Process groups from explicit rank lists -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Groups.h"

#include "runtime/common/Errors.h"

#include <map>

using namespace loomrt;

static uint64_t fnv1a(uint64_t h, int64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= uint64_t(v >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}

MPI_Comm loomrt::splitIntoGroups(const char *fn, MPI_Comm world, int worldRank,
                                 int worldSize, int32_t numGroups,
                                 const int32_t *groupSizes,
                                 const int32_t *groupRanks,
                                 std::vector<int32_t> &members) {
  if (numGroups < 0 || (numGroups > 0 && (!groupSizes || !groupRanks)))
    fatal(fn, "bad group list (num_groups = %d)", int(numGroups));
  std::map<int32_t, int32_t> groupOf;
  int32_t myGroup = -1, myPos = 0;
  int64_t myStart = 0;
  uint64_t hash = 1469598103934665603ull;
  hash = fnv1a(hash, numGroups);
  int64_t off = 0;
  for (int32_t g = 0; g < numGroups; ++g) {
    if (groupSizes[g] <= 0)
      fatal(fn, "group %d has size %d", int(g), int(groupSizes[g]));
    hash = fnv1a(hash, groupSizes[g]);
    for (int32_t p = 0; p < groupSizes[g]; ++p) {
      const int32_t r = groupRanks[off + p];
      if (r < 0 || r >= worldSize)
        fatal(fn, "rank %d in group %d is outside the world of %d", int(r),
              int(g), worldSize);
      auto [it, inserted] = groupOf.emplace(r, g);
      if (!inserted)
        fatal(fn, "rank %d is listed in groups %d and %d", int(r),
              int(it->second), int(g));
      hash = fnv1a(hash, r);
      if (r == worldRank) {
        myGroup = g;
        myPos = p;
        myStart = off;
      }
    }
    off += groupSizes[g];
  }
  uint64_t lo = hash, hi = hash;
  checkMpi(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, world),
           "MPI_Allreduce");
  checkMpi(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, world),
           "MPI_Allreduce");
  if (lo != hi)
    fatal(fn, "ranks passed different group lists");
  MPI_Comm split;
  checkMpi(MPI_Comm_split(world, myGroup < 0 ? MPI_UNDEFINED : myGroup, myPos,
                          &split),
           "MPI_Comm_split");
  if (split != MPI_COMM_NULL)
    members.assign(groupRanks + myStart,
                   groupRanks + myStart + groupSizes[myGroup]);
  return split;
}
