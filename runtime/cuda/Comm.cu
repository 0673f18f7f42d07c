//===- Comm.cu - The NCCL transport ----------------------------*- CUDA -*-===//
//
// The cuda backend's side of communication (runtime/common/Transport.h):
// one NCCL communicator per process group. Group membership comes from MPI
// as on the cpu backend (runtime/common/Comm.cpp); group rank 0 then
// creates an ncclUniqueId and broadcasts it over the group's MPI
// communicator, and every member calls ncclCommInitRank. The MPI
// communicator is kept for barriers and for setting up NCCL.
//
// Streams: all NCCL work runs on the context's comm stream, ordered against
// the compute stream with events in both directions (the comm stream waits
// for the kernels that produced the send buffers; the compute stream waits
// for the collective before anything reads the result). The host does not
// block, yet every later runtime call sees the result, because every call
// is issued on the compute stream. One comm stream for all communicators
// keeps collectives of different groups in program order on every rank,
// which is what NCCL needs to never deadlock across communicators.
//
// Reductions accumulate in f32, as the ABI specifies: bf16/f16 sums are
// widened into f32 scratch, reduced, and rounded back once (NCCL's native
// 16-bit sums would round at every hop of the ring). Max is exact in any
// precision and runs on the native type. Pure data movement (broadcast,
// gathers, all-to-all, p2p) moves the 16-bit words as they are.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Transport.h"
#include "runtime/cuda/Common.h"

#include <mpi.h>
#include <nccl.h>

#include <vector>

using namespace loomrt;

#define NCCL_CHECK(call)                                                       \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess)                                                     \
      ::loomrt::fatal(__func__, "%s: %s", #call, ncclGetErrorString(r_));      \
  } while (0)

/// A communicator's NCCL side.
struct loomrt::transport::CommState {
  ncclComm_t nccl = nullptr;
};

/// A reduction queued on the reduce stream by a *_start call; loomrt_wait
/// makes the compute stream's later work wait for it.
struct loomrt::transport::Pending {
  cudaEvent_t done = nullptr;
};

namespace {
ncclComm_t ncclOf(loomrt_comm c) { return c->state->nccl; }

ncclDataType_t ncclType(loomrt_dtype dtype) {
  return dtype == LOOMRT_F32    ? ncclFloat32
         : dtype == LOOMRT_BF16 ? ncclBfloat16
                                : ncclFloat16;
}

/// Runs issue(commStream) after the compute stream's earlier work, and
/// makes the compute stream's later work wait for it.
template <typename Fn> void onCommStream(Fn issue) {
  Context &c = ctx();
  streamWait(c.comm, c.compute);
  issue(c.comm);
  streamWait(c.compute, c.comm);
}

/// onCommStream for one collective of `comm`, recorded for the watchdog.
template <typename Fn>
void collective(const char *fn, const char *name, loomrt_comm comm,
                Fn issue) {
  onCommStream(issue);
  noteCollective(fn, name, ++comm->collectives, comm->worldRanks);
}

/// Copies P blocks laid out [P][outer][dl][inner] into [outer][P*dl][inner]
/// (unpack = true) or the reverse, on the compute stream: one strided 2D
/// copy per block.
void permuteBlocks(const char *src, char *dst, int64_t P, const Split &s,
                   int64_t dl, int64_t esz, bool unpack) {
  const size_t run = size_t(dl * s.inner * esz);
  if (run == 0 || s.outer == 0)
    return;
  for (int64_t r = 0; r < P; ++r) {
    const size_t blocked = size_t(r * s.outer) * run, strided = size_t(r) * run;
    if (unpack)
      CUDA_CHECK(cudaMemcpy2DAsync(dst + strided, size_t(P) * run,
                                   src + blocked, run, run, size_t(s.outer),
                                   cudaMemcpyDeviceToDevice, stream()));
    else
      CUDA_CHECK(cudaMemcpy2DAsync(dst + blocked, run, src + strided,
                                   size_t(P) * run, run, size_t(s.outer),
                                   cudaMemcpyDeviceToDevice, stream()));
  }
}

/// Issues `issue(reduceStream)` after the compute stream's earlier work
/// and returns what marks its end.
template <typename Fn> transport::Pending *onReduceStream(Fn issue) {
  Context &c = ctx();
  streamWait(c.reduce, c.compute);
  issue(c.reduce);
  auto *p = new transport::Pending;
  CUDA_CHECK(cudaEventCreateWithFlags(&p->done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(p->done, c.reduce));
  return p;
}
} // namespace

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

void transport::init() {
  // One GPU per rank: the i-th rank on a node takes device i (modulo the
  // device count), unless runtime calls before loomrt_init already created
  // the context on the current device.
  if (contextCreated())
    return;
  MPI_Comm node;
  checkMpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
                               MPI_INFO_NULL, &node),
           "MPI_Comm_split_type");
  int localRank = 0;
  checkMpi(MPI_Comm_rank(node, &localRank), "MPI_Comm_rank");
  MPI_Comm_free(&node);
  requestDevice(localRank);
}

void transport::quiesce(const char *fn) {
  if (contextCreated())
    syncAll(fn);
}

transport::CommState *transport::open(loomrt_comm c) {
  ctx(); // NCCL binds the communicator to the current device.
  auto *state = new CommState;
  ncclUniqueId id;
  if (c->rank == 0)
    NCCL_CHECK(ncclGetUniqueId(&id));
  checkMpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, c->mpi), "MPI_Bcast");
  NCCL_CHECK(ncclCommInitRank(&state->nccl, c->size, id, c->rank));
  return state;
}

void transport::close(loomrt_comm c) {
  if (c->state && c->state->nccl)
    ncclCommDestroy(c->state->nccl);
  delete c->state;
  c->state = nullptr;
}

// Device memory is out of the host's reach anyway: nothing to check.
transport::CallScope::CallScope(const char *, const char *,
                                std::initializer_list<const void *>) {}

transport::CallScope::~CallScope() {}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

void transport::allReduce(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                          int32_t op, const void *send, void *recv, int count) {
  if (count == 0)
    return;
  const ncclRedOp_t ncclOp = op == LOOMRT_SUM ? ncclSum : ncclMax;
  if (dtype == LOOMRT_F32 || op == LOOMRT_MAX) {
    collective(fn, "all_reduce", c, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(send, recv, size_t(count), ncclType(dtype),
                               ncclOp, ncclOf(c), s));
    });
    return;
  }
  Scratch wide(int64_t(count) * 4);
  convert(dtype, send, LOOMRT_F32, wide.as<float>(), count);
  collective(fn, "all_reduce", c, [&](cudaStream_t s) {
    NCCL_CHECK(ncclAllReduce(wide.as<float>(), wide.as<float>(), size_t(count),
                             ncclFloat32, ncclSum, ncclOf(c), s));
  });
  convert(LOOMRT_F32, wide.as<float>(), dtype, recv, count);
}

void transport::broadcast(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                          void *buf, int count, int32_t root) {
  if (count == 0)
    return;
  collective(fn, "broadcast", c, [&](cudaStream_t s) {
    NCCL_CHECK(ncclBroadcast(buf, buf, size_t(count), ncclType(dtype), root,
                             ncclOf(c), s));
  });
}

void transport::allGather(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                          const Split &s, int block, const void *send,
                          void *recv) {
  if (block == 0)
    return;
  const int64_t esz = dtypeSize(dtype);
  // Gathering along dim 0 (or any dim with nothing in front) is already the
  // rank-ordered concatenation NCCL produces.
  if (s.outer == 1) {
    collective(fn, "all_gather", c, [&](cudaStream_t st) {
      NCCL_CHECK(ncclAllGather(send, recv, size_t(block), ncclType(dtype),
                               ncclOf(c), st));
    });
    return;
  }
  Scratch blocks(int64_t(block) * c->size * esz);
  collective(fn, "all_gather", c, [&](cudaStream_t st) {
    NCCL_CHECK(ncclAllGather(send, blocks.as<void>(), size_t(block),
                             ncclType(dtype), ncclOf(c), st));
  });
  permuteBlocks(blocks.as<char>(), static_cast<char *>(recv), c->size, s, s.dim,
                esz, /*unpack=*/true);
}

void transport::reduceScatter(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                              const Split &s, int64_t total, int block,
                              const void *send, void *recv) {
  if (total == 0)
    return;
  // Reduce in f32: f32 data is used in place, bf16/f16 widened; slices of
  // an inner dim are packed into contiguous per-rank blocks first.
  const bool wide = dtype != LOOMRT_F32;
  Scratch widened(wide ? total * 4 : 0);
  const float *sendF32 = static_cast<const float *>(send);
  if (wide) {
    convert(dtype, send, LOOMRT_F32, widened.as<float>(), total);
    sendF32 = widened.as<float>();
  }
  Scratch packed(s.outer != 1 ? total * 4 : 0);
  if (s.outer != 1) {
    permuteBlocks(reinterpret_cast<const char *>(sendF32), packed.as<char>(),
                  c->size, s, s.dim / c->size, 4, /*unpack=*/false);
    sendF32 = packed.as<float>();
  }
  Scratch outBuf(wide ? int64_t(block) * 4 : 0);
  float *outF32 = wide ? outBuf.as<float>() : static_cast<float *>(recv);
  collective(fn, "reduce_scatter", c, [&](cudaStream_t st) {
    NCCL_CHECK(ncclReduceScatter(sendF32, outF32, size_t(block), ncclFloat32,
                                 ncclSum, ncclOf(c), st));
  });
  if (wide)
    convert(LOOMRT_F32, outF32, dtype, recv, int64_t(block));
}

void transport::allToAll(const char *fn, loomrt_comm c, loomrt_dtype dtype,
                         const Split &in, const Split &out, int64_t total,
                         int block, const void *send, void *recv) {
  if (total == 0)
    return;
  const int64_t esz = dtypeSize(dtype), P = c->size;
  // Pack: slice r of split_dim becomes the r-th contiguous send block.
  Scratch packed(in.outer != 1 ? total * esz : 0);
  const char *sendPtr = static_cast<const char *>(send);
  if (in.outer != 1) {
    permuteBlocks(sendPtr, packed.as<char>(), P, in, in.dim / P, esz,
                  /*unpack=*/false);
    sendPtr = packed.as<char>();
  }
  // Unpack: block r lands at offset r along concat_dim of the result.
  Scratch received(out.outer != 1 ? total * esz : 0);
  char *recvPtr =
      out.outer != 1 ? received.as<char>() : static_cast<char *>(recv);
  // All-to-all as one group of sends and recvs (every NCCL version has
  // these; ncclAlltoAll only exists since 2.28).
  const size_t bytes = size_t(block) * size_t(esz);
  collective(fn, "all_to_all", c, [&](cudaStream_t st) {
    NCCL_CHECK(ncclGroupStart());
    for (int64_t r = 0; r < P; ++r) {
      NCCL_CHECK(ncclSend(sendPtr + r * bytes, size_t(block), ncclType(dtype),
                          int(r), ncclOf(c), st));
      NCCL_CHECK(ncclRecv(recvPtr + r * bytes, size_t(block), ncclType(dtype),
                          int(r), ncclOf(c), st));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
  if (out.outer != 1)
    permuteBlocks(received.as<char>(), static_cast<char *>(recv), P, out,
                  out.dim, esz, /*unpack=*/true);
}

//===----------------------------------------------------------------------===//
// Grouped point-to-point
//===----------------------------------------------------------------------===//

// One ncclGroupStart/End around the whole batch: NCCL then progresses all
// operations together, so exchanging with both neighbours cannot deadlock.
// Unlike MPI, NCCL cannot detect a recv that expects a different size than
// the matching send (the cpu backend aborts on a short message); a
// mismatched schedule is caught there, in the cpu tests of every plan.
void transport::runBatch(loomrt_comm c, const std::vector<P2POp> &ops,
                         const watchdog::Operation &wait) {
  onCommStream([&](cudaStream_t st) {
    NCCL_CHECK(ncclGroupStart());
    for (const P2POp &op : ops) {
      if (op.count == 0)
        continue;
      if (op.isSend)
        NCCL_CHECK(ncclSend(op.buf, size_t(op.count), ncclType(op.dtype),
                            op.peer, ncclOf(c), st));
      else
        NCCL_CHECK(ncclRecv(op.buf, size_t(op.count), ncclType(op.dtype),
                            op.peer, ncclOf(c), st));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
  noteCollective(wait.fn, wait.name, wait.seq, *wait.members);
}

//===----------------------------------------------------------------------===//
// Nonblocking sums
//===----------------------------------------------------------------------===//

transport::Pending *transport::allReduceStart(loomrt_request r, float *buf,
                                              int count) {
  loomrt_comm c = r->comm;
  noteCollective(r->fn, r->name, r->sequence, c->worldRanks);
  return onReduceStream([&](cudaStream_t s) {
    if (count)
      NCCL_CHECK(ncclAllReduce(buf, buf, size_t(count), ncclFloat32, ncclSum,
                               ncclOf(c), s));
  });
}

transport::Pending *transport::reduceScatterStart(loomrt_request r,
                                                  const float *send,
                                                  float *recv,
                                                  const int64_t *counts) {
  loomrt_comm c = r->comm;
  noteCollective(r->fn, r->name, r->sequence, c->worldRanks);
  // NCCL's reduce-scatter takes equal blocks only: one reduce to each
  // member, grouped into one operation.
  return onReduceStream([&](cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    size_t offset = 0;
    for (int k = 0; k < c->size; ++k) {
      if (counts[k])
        NCCL_CHECK(ncclReduce(send + offset, recv, size_t(counts[k]),
                              ncclFloat32, ncclSum, k, ncclOf(c), s));
      offset += size_t(counts[k]);
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

void transport::wait(loomrt_request r) {
  CUDA_CHECK(cudaStreamWaitEvent(ctx().compute, r->pending->done, 0));
  CUDA_CHECK(cudaEventDestroy(r->pending->done));
  delete r->pending;
}
