//===- Watchdog.h - A deadline on every wait for other ranks ----*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/: Megatron's --distributed-timeout-minutes (PyTorch's
// NCCL watchdog) for both backends. A rank that waits for other ranks
// (a collective, a p2p batch, a barrier; on cuda, queued NCCL work) spins in
// waitFor, which answers the questions of ranks that timed out. Past the
// deadline a rank asks every member of the group what it is waiting in:
// members waiting in the same operation have arrived, the others are named
// with what they wait in instead, or as not answering (stopped, dead, or
// still computing). Then the job is aborted with that report.
//
// Questions travel on a private duplicate of MPI_COMM_WORLD, polled from
// the waiting thread itself: MPI stays MPI_THREAD_FUNNELED and a run
// without a timeout exchanges no messages at all.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_WATCHDOG_H
#define LOOM_RUNTIME_COMMON_WATCHDOG_H

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loomrt::watchdog {

/// Collective over `world`, in loomrt_init: duplicates it for questions.
void start(MPI_Comm world);
/// In loomrt_finalize.
void stop();
/// Seconds a wait may last; 0 (the default) waits forever.
void setTimeout(double seconds);
double timeout();

/// What a rank waits in. describe() gives the same text on every member
/// that waits in the same operation: the call, its sequence number on the
/// communicator and the group. Built only when someone asks.
struct Operation {
  const char *fn;   // "loomrt_all_reduce": the error names it
  const char *name; // "all_reduce"
  uint64_t seq;     // per communicator and kind of operation
  const std::vector<int32_t> *members; // world ranks to ask (self included)
  const char *membersAre = "group of world ranks";

  /// "all_reduce #7 over the group of world ranks [0, 1]".
  std::string describe() const;
};

/// "[0, 1, 3]".
std::string rankList(const std::vector<int32_t> &worldRanks);

/// Returns once done() is true. Polls done(), answering questions, until
/// the timeout; then reports who did not arrive and aborts the job.
void waitFor(const Operation &op, const std::function<bool()> &done);

/// waitFor over MPI requests (MPI_Testall), with their statuses.
/// Returns MPI_Testall's code.
int waitAll(const Operation &op, int n, MPI_Request *requests,
            MPI_Status *statuses);

} // namespace loomrt::watchdog

#endif // LOOM_RUNTIME_COMMON_WATCHDOG_H
