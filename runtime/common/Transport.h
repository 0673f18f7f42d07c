//===- Transport.h - What a backend's communication provides ----*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/. runtime/common/Comm.cpp implements every
// communication entry point (registry, checks, bookkeeping) and calls these
// functions, which each backend defines: the cpu backend with MPI
// (cpu/Comm.cpp), the cuda one with NCCL (cuda/Comm.cu). They get checked
// arguments: a live communicator, valid dtypes, counts within an int,
// non-NULL buffers wherever there is data to move.
//
// Every wait for other ranks runs under the watchdog (Watchdog.h); a
// collective takes its sequence number with ++c->collectives when it is
// issued (a transport that skips an empty collective takes none).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_TRANSPORT_H
#define LOOM_RUNTIME_COMMON_TRANSPORT_H

#include "runtime/common/Comm.h"
#include "runtime/common/Watchdog.h"

#include <initializer_list>
#include <vector>

namespace loomrt::transport {

/// In loomrt_init, once MPI is up and MPI_COMM_WORLD returns errors, before
/// the world communicator exists: the cpu backend installs its
/// device-contract fault handler, the cuda one picks the rank's GPU.
void init();

/// Waits for the rank's queued work where a backend queues it (cuda): before
/// loomrt_finalize or loomrt_comm_destroy free communicators, and before a
/// barrier ("every member has called it" includes the work issued before).
void quiesce(const char *fn);

/// Sets up the backend's part of a new communicator (c->mpi, rank, size
/// and worldRanks are set; collective over c's members), and frees it before
/// c->mpi is freed.
CommState *open(loomrt_comm c);
void close(loomrt_comm c);

/// Brackets a communication entry point that passes the buffers `tensors`
/// (named by the comma-separated `names`): the cpu backend's device-contract
/// check (cpu/DeviceContract.h) opens its arena and checks they are backend
/// memory; the cuda backend does nothing.
class CallScope {
public:
  CallScope(const char *fn, const char *names,
            std::initializer_list<const void *> tensors);
  ~CallScope();
  CallScope(const CallScope &) = delete;
  CallScope &operator=(const CallScope &) = delete;

private:
  bool entered = false;
};

// The collectives of loomrt.h, blocking (cpu) or ordered (cuda). `fn` names
// the entry point in errors and watchdog reports.
void allReduce(const char *fn, loomrt_comm c, loomrt_dtype dtype, int32_t op,
               const void *send, void *recv, int count);
void broadcast(const char *fn, loomrt_comm c, loomrt_dtype dtype, void *buf,
               int count, int32_t root);
/// s: the local slice around the gathered dim; block = its element count.
void allGather(const char *fn, loomrt_comm c, loomrt_dtype dtype,
               const Split &s, int block, const void *send, void *recv);
/// s: the full tensor around the scattered dim (s.dim % c->size == 0);
/// total and block: its element count and the received slice's.
void reduceScatter(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                   const Split &s, int64_t total, int block, const void *send,
                   void *recv);
/// in: send around split_dim; out: one received block around concat_dim;
/// total and block: send's element count and one block's.
void allToAll(const char *fn, loomrt_comm c, loomrt_dtype dtype,
              const Split &in, const Split &out, int64_t total, int block,
              const void *send, void *recv);

/// Posts a p2p batch (already in Megatron's posting order: even group ranks
/// send first) and completes it; `wait` describes it for the watchdog.
void runBatch(loomrt_comm c, const std::vector<P2POp> &ops,
              const watchdog::Operation &wait);

/// Issue r's collective (r->comm, r->sequence are set) and return what
/// wait() completes; wait() then frees it (the caller frees r).
Pending *allReduceStart(loomrt_request r, float *buf, int count);
/// counts[k] fits an int for every member k, and so does their sum.
Pending *reduceScatterStart(loomrt_request r, const float *send, float *recv,
                            const int64_t *counts);
void wait(loomrt_request r);

} // namespace loomrt::transport

#endif // LOOM_RUNTIME_COMMON_TRANSPORT_H
