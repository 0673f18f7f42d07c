//===- Groups.h - Process groups from explicit rank lists -------*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/: the MPI half of loomrt_comm_create, shared by both
// backends (the cuda one then builds an NCCL communicator over the group).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_GROUPS_H
#define LOOM_RUNTIME_COMMON_GROUPS_H

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace loomrt {

/// Validates the partition (sizes positive, ranks inside the world, none
/// listed twice, the same lists on every rank: compared by hash so a
/// mismatch is an error, not wrong groups or a hang) and splits `world` into
/// one communicator per group, ordered as listed. Returns MPI_COMM_NULL when
/// no group holds `worldRank`; otherwise `members` receives the group's
/// world ranks in group-rank order. Collective over `world`.
MPI_Comm splitIntoGroups(const char *fn, MPI_Comm world, int worldRank,
                         int worldSize, int32_t numGroups,
                         const int32_t *groupSizes, const int32_t *groupRanks,
                         std::vector<int32_t> &members);

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_GROUPS_H
