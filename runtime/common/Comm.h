//===- Comm.h - Communicators, p2p batches, requests ------------*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/. The communication entry points are runtime/common's
// (Comm.cpp): the communicator registry, loomrt_init/finalize, the checks of
// every call, p2p batch recording and posting order, the watchdog's sequence
// numbers and the requests of the *_start calls. A backend only moves the
// data, behind the small interface of Transport.h.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_COMM_H
#define LOOM_RUNTIME_COMMON_COMM_H

#include "loomrt/loomrt.h"

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace loomrt {

namespace transport {
/// The backend's own part of a communicator (its NCCL communicator on cuda;
/// none on cpu). Defined by the backend.
struct CommState;
/// The backend's own part of a request of a *_start call. Defined by the
/// backend.
struct Pending;
} // namespace transport

/// One recorded send or recv of a p2p batch; count is checked to fit an int.
struct P2POp {
  bool isSend;
  void *buf;
  int count;
  loomrt_dtype dtype;
  int peer;
};

/// A row-major tensor seen as [outer, dim, inner] around one dimension.
struct Split {
  int64_t outer = 1, dim = 1, inner = 1;
};

/// Aborts unless loomrt_init has been called and c is a live communicator;
/// returns c. The check the ABI front runs on every loomrt_comm argument.
loomrt_comm checkedComm(const char *fn, loomrt_comm c);

} // namespace loomrt

/// A process group: its MPI communicator (a split of a private duplicate of
/// MPI_COMM_WORLD; barriers, group setup) and the backend's part.
struct loomrt_comm_impl {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::vector<int32_t> worldRanks; // group rank -> world rank
  bool inBatch = false;
  std::vector<loomrt::P2POp> pending;
  // Operations issued so far, for the watchdog's reports: every member
  // counts the same collectives; p2p batches are per rank. The transport
  // takes a collective's number (++collectives) when it issues one.
  uint64_t collectives = 0, batches = 0;
  loomrt::transport::CommState *state = nullptr;
};

/// A collective issued by a *_start call, completed by loomrt_wait.
struct loomrt_request_impl {
  const char *fn, *name; // "loomrt_all_reduce_start", "all_reduce"
  loomrt_comm comm;
  uint64_t sequence; // the collective's number on comm
  loomrt::transport::Pending *pending = nullptr;
};

#endif // LOOM_RUNTIME_COMMON_COMM_H
