//===- Comm.cpp - The MPI transport ----------------------------*- C++ -*-===//
//
// The cpu backend's side of communication (runtime/common/Transport.h):
// collectives and p2p batches on each group's MPI communicator
// (runtime/common/Comm.cpp keeps the registry and checks the calls).
//
// Every wait for other ranks is nonblocking MPI completed under the
// watchdog (runtime/common/Watchdog.h): with loomrt_set_timeout, a rank that
// never arrives ends the job with a report instead of a hang.
//
// bf16/f16 payloads travel as 16-bit words; reductions widen them to f32
// first (MPI has no 16-bit float types, and f32 is the accumulation type).
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Transport.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <mpi.h>

#include <algorithm>

using namespace loomrt;

/// A nonblocking collective of a *_start call.
struct loomrt::transport::Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int> counts; // reduce-scatter: MPI keeps a pointer to them
};

namespace {
/// Waits for the nonblocking collective `request` of `c` under the
/// watchdog; `call` names the MPI function in errors.
void complete(const char *fn, const char *name, loomrt_comm c,
              MPI_Request request, const char *call) {
  watchdog::Operation op{fn, name, ++c->collectives, &c->worldRanks};
  MPI_Status status;
  checkMpi(watchdog::waitAll(op, 1, &request, &status), call);
}

/// The MPI type that moves (not reduces) elements of dtype.
MPI_Datatype rawType(loomrt_dtype dtype) {
  return dtype == LOOMRT_F32 ? MPI_FLOAT : MPI_UINT16_T;
}

/// Copies P blocks laid out [P][outer][dl][inner] into [outer][P*dl][inner]
/// (unpack = true) or the reverse (unpack = false).
void permuteBlocks(const char *src, char *dst, int64_t P, const Split &s,
                   int64_t dl, int64_t esz, bool unpack) {
  const int64_t run = dl * s.inner * esz;
  for (int64_t r = 0; r < P; ++r)
    for (int64_t o = 0; o < s.outer; ++o) {
      const int64_t blocked = ((r * s.outer + o) * dl) * s.inner * esz;
      const int64_t strided = ((o * P + r) * dl) * s.inner * esz;
      if (unpack)
        std::memcpy(dst + strided, src + blocked, size_t(run));
      else
        std::memcpy(dst + blocked, src + strided, size_t(run));
    }
}
} // namespace

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

// After MPI_Init, whose handlers ours passes foreign faults on to.
void transport::init() { contract::installFaultHandler(); }

void transport::quiesce(const char *) {}

// The group's MPI communicator is all the transport needs.
transport::CommState *transport::open(loomrt_comm) { return nullptr; }

void transport::close(loomrt_comm) {}

transport::CallScope::CallScope(const char *fn, const char *names,
                                std::initializer_list<const void *> tensors)
    : entered(contract::enabled()) {
  if (entered)
    contract::enter(fn, names, tensors);
}

transport::CallScope::~CallScope() {
  if (entered)
    contract::leave();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

void transport::allReduce(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                          int32_t op, const void *send, void *recv, int count) {
  const MPI_Op mpiOp = op == LOOMRT_SUM ? MPI_SUM : MPI_MAX;
  MPI_Request request;
  if (dtype == LOOMRT_F32) {
    checkMpi(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, count,
                            MPI_FLOAT, mpiOp, c->mpi, &request),
             "MPI_Iallreduce");
    complete(fn, "all_reduce", c, request, "MPI_Iallreduce");
    return;
  }
  std::vector<float> wide(static_cast<size_t>(count));
  toF32(dtype, send, wide.data(), count);
  checkMpi(MPI_Iallreduce(MPI_IN_PLACE, wide.data(), count, MPI_FLOAT, mpiOp,
                          c->mpi, &request),
           "MPI_Iallreduce");
  complete(fn, "all_reduce", c, request, "MPI_Iallreduce");
  fromF32(wide.data(), dtype, recv, count);
}

void transport::broadcast(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                          void *buf, int count, int32_t root) {
  MPI_Request request;
  checkMpi(MPI_Ibcast(buf, count, rawType(dtype), root, c->mpi, &request),
           "MPI_Ibcast");
  complete(fn, "broadcast", c, request, "MPI_Ibcast");
}

void transport::allGather(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                          const Split &s, int block, const void *send,
                          void *recv) {
  const int64_t esz = dtypeSize(dtype);
  // Gathering along dim 0 (or any dim with nothing in front) is already the
  // rank-ordered concatenation MPI produces.
  MPI_Request request;
  if (s.outer == 1) {
    checkMpi(MPI_Iallgather(send, block, rawType(dtype), recv, block,
                            rawType(dtype), c->mpi, &request),
             "MPI_Iallgather");
    complete(fn, "all_gather", c, request, "MPI_Iallgather");
    return;
  }
  std::vector<char> blocks(size_t(block) * size_t(c->size) * size_t(esz));
  checkMpi(MPI_Iallgather(send, block, rawType(dtype), blocks.data(), block,
                          rawType(dtype), c->mpi, &request),
           "MPI_Iallgather");
  complete(fn, "all_gather", c, request, "MPI_Iallgather");
  permuteBlocks(blocks.data(), static_cast<char *>(recv), c->size, s, s.dim,
                esz, /*unpack=*/true);
}

void transport::reduceScatter(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                              const Split &s, int64_t total, int block,
                              const void *send, void *recv) {
  // Reduce in f32: f32 data is used in place, bf16/f16 widened.
  In wide(dtype, send, total);
  const float *sendF32 = wide.get();
  std::vector<float> packed;
  if (s.outer != 1) {
    packed.resize(size_t(total));
    permuteBlocks(reinterpret_cast<const char *>(wide.get()),
                  reinterpret_cast<char *>(packed.data()), c->size, s,
                  s.dim / c->size, 4, /*unpack=*/false);
    sendF32 = packed.data();
  }
  Out out(dtype, recv, block, false);
  MPI_Request request;
  checkMpi(MPI_Ireduce_scatter_block(sendF32, out.get(), block, MPI_FLOAT,
                                     MPI_SUM, c->mpi, &request),
           "MPI_Ireduce_scatter_block");
  complete(fn, "reduce_scatter", c, request, "MPI_Ireduce_scatter_block");
  out.commit();
}

void transport::allToAll(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                         const Split &in, const Split &out, int64_t total,
                         int block, const void *send, void *recv) {
  const int64_t esz = dtypeSize(dtype), P = c->size;
  // Pack: slice r of split_dim becomes the r-th contiguous send block.
  std::vector<char> packed, received;
  const char *sendPtr = static_cast<const char *>(send);
  if (in.outer != 1) {
    packed.resize(size_t(total * esz));
    permuteBlocks(sendPtr, packed.data(), P, in, in.dim / P, esz,
                  /*unpack=*/false);
    sendPtr = packed.data();
  }
  char *recvPtr = static_cast<char *>(recv);
  if (out.outer != 1) {
    received.resize(size_t(total * esz));
    recvPtr = received.data();
  }
  MPI_Request request;
  checkMpi(MPI_Ialltoall(sendPtr, block, rawType(dtype), recvPtr, block,
                         rawType(dtype), c->mpi, &request),
           "MPI_Ialltoall");
  complete(fn, "all_to_all", c, request, "MPI_Ialltoall");
  if (out.outer != 1)
    permuteBlocks(received.data(), static_cast<char *>(recv), P, out, out.dim,
                  esz, /*unpack=*/true);
}

//===----------------------------------------------------------------------===//
// Grouped point-to-point
//===----------------------------------------------------------------------===//

void transport::runBatch(loomrt_comm c, const std::vector<P2POp> &ops,
                         const watchdog::Operation &wait) {
  std::vector<MPI_Request> reqs(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp &op = ops[i];
    if (op.isSend)
      checkMpi(MPI_Isend(op.buf, op.count, rawType(op.dtype), op.peer, 0,
                         c->mpi, &reqs[i]),
               "MPI_Isend");
    else
      checkMpi(MPI_Irecv(op.buf, op.count, rawType(op.dtype), op.peer, 0,
                         c->mpi, &reqs[i]),
               "MPI_Irecv");
  }
  std::vector<MPI_Status> statuses(ops.size());
  int rc = watchdog::waitAll(wait, int(reqs.size()), reqs.data(),
                             statuses.data());
  if (rc == MPI_ERR_IN_STATUS)
    for (const MPI_Status &st : statuses)
      checkMpi(st.MPI_ERROR, "MPI_Testall");
  checkMpi(rc, "MPI_Testall");
  // A shorter message than the recv expects is legal MPI but always a
  // mismatched schedule in a compiled program.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].isSend)
      continue;
    int got = 0;
    MPI_Get_count(&statuses[i], rawType(ops[i].dtype), &got);
    if (got != ops[i].count)
      fatal("loomrt_p2p_end",
            "received %d elements from group rank %d, expected %d", got,
            ops[i].peer, ops[i].count);
  }
}

//===----------------------------------------------------------------------===//
// Nonblocking sums
//===----------------------------------------------------------------------===//

transport::Pending *transport::allReduceStart(loomrt_request r, float *buf,
                                              int count) {
  auto *p = new Pending;
  checkMpi(MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM,
                          r->comm->mpi, &p->request),
           "MPI_Iallreduce");
  return p;
}

transport::Pending *transport::reduceScatterStart(loomrt_request r,
                                                  const float *send,
                                                  float *recv,
                                                  const int64_t *counts) {
  loomrt_comm c = r->comm;
  auto *p = new Pending;
  for (int k = 0; k < c->size; ++k)
    p->counts.push_back(int(counts[k]));
  // MPI forbids aliasing send and receive buffers, and a member with
  // nothing to receive may pass none.
  float unused = 0.0f;
  checkMpi(MPI_Ireduce_scatter(send, recv ? recv : &unused, p->counts.data(),
                               MPI_FLOAT, MPI_SUM, c->mpi, &p->request),
           "MPI_Ireduce_scatter");
  return p;
}

void transport::wait(loomrt_request r) {
  // The watchdog's report names the group's members: the communicator must
  // still be alive.
  loomrt_comm c = checkedComm("loomrt_wait", r->comm);
  watchdog::Operation op{r->fn, r->name, r->sequence, &c->worldRanks};
  MPI_Status status;
  checkMpi(watchdog::waitAll(op, 1, &r->pending->request, &status), r->fn);
  delete r->pending;
}
