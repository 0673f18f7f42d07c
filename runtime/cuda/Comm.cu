//===- Comm.cu - NCCL communicators, collectives, p2p ----------*- CUDA -*-===//
//
// One NCCL communicator per process group. Group membership comes from MPI
// exactly as on the cpu backend (MPI_Comm_split of a private duplicate of
// MPI_COMM_WORLD, color = group index, key = position in the list); group
// rank 0 then creates an ncclUniqueId and broadcasts it over the group's
// MPI communicator, and every member calls ncclCommInitRank. The MPI
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

#include "runtime/cuda/Common.h"
#include "runtime/common/Groups.h"
#include "runtime/common/Watchdog.h"

#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <set>
#include <vector>

using namespace loomrt;

#define NCCL_CHECK(call)                                                       \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess)                                                     \
      ::loomrt::fatal(__func__, "%s: %s", #call, ncclGetErrorString(r_));      \
  } while (0)

namespace loomrt {
/// One recorded send or recv of a p2p batch.
struct P2POp {
  bool isSend;
  void *buf;
  size_t count;
  ncclDataType_t type;
  int peer;
};
} // namespace loomrt

struct loomrt_comm_impl {
  MPI_Comm mpi = MPI_COMM_NULL;
  ncclComm_t nccl = nullptr;
  int rank = 0, size = 1;
  std::vector<int32_t> worldRanks; // group rank -> world rank
  bool inBatch = false;
  std::vector<P2POp> pending;
  // Operations queued so far, for the watchdog's reports (noteCollective).
  uint64_t collectives = 0, batches = 0;
};

namespace {
bool weInitializedMpi = false;
loomrt_comm worldComm = nullptr;
std::set<loomrt_comm> liveComms;

loomrt_comm checkedComm(const char *fn, loomrt_comm c) {
  if (!worldComm)
    fatal(fn, "loomrt_init has not been called");
  if (!c)
    fatal(fn, "NULL communicator (this rank is in no group of it)");
  if (!liveComms.count(c))
    fatal(fn, "communicator %p was destroyed or never created",
          static_cast<void *>(c));
  return c;
}

// The cpu backend's limit (MPI's int counts), kept so both backends accept
// the same programs.
size_t checkedCount(const char *fn, int64_t n) {
  if (n < 0 || n > INT_MAX)
    fatal(fn, "element count %lld is outside [0, INT_MAX]", (long long)n);
  return size_t(n);
}

ncclDataType_t ncclType(loomrt_dtype dtype) {
  return dtype == LOOMRT_F32    ? ncclFloat32
         : dtype == LOOMRT_BF16 ? ncclBfloat16
                                : ncclFloat16;
}

/// Creates the NCCL communicator of an MPI communicator's members.
loomrt_comm registerComm(MPI_Comm mpiComm, std::vector<int32_t> worldRanks) {
  checkMpi(MPI_Comm_set_errhandler(mpiComm, MPI_ERRORS_RETURN),
           "MPI_Comm_set_errhandler");
  auto *c = new loomrt_comm_impl;
  c->mpi = mpiComm;
  checkMpi(MPI_Comm_rank(mpiComm, &c->rank), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(mpiComm, &c->size), "MPI_Comm_size");
  c->worldRanks = std::move(worldRanks);
  ctx(); // NCCL binds the communicator to the current device.
  ncclUniqueId id;
  if (c->rank == 0)
    NCCL_CHECK(ncclGetUniqueId(&id));
  checkMpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpiComm), "MPI_Bcast");
  NCCL_CHECK(ncclCommInitRank(&c->nccl, c->size, id, c->rank));
  liveComms.insert(c);
  return c;
}

void freeComm(loomrt_comm c) {
  liveComms.erase(c);
  if (c->nccl)
    ncclCommDestroy(c->nccl);
  if (c->mpi != MPI_COMM_NULL)
    MPI_Comm_free(&c->mpi);
  delete c;
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

/// A row-major tensor seen as [outer, dim, inner] around one dimension.
struct Split {
  int64_t outer = 1, dim = 1, inner = 1;
};

Split splitAround(const char *fn, int32_t ndim, const int64_t *shape,
                  int32_t d) {
  if (ndim < 1 || ndim > 8 || !shape)
    fatal(fn, "ndim %d is not in [1, 8]", int(ndim));
  if (d < 0 || d >= ndim)
    fatal(fn, "dim %d is out of bounds for rank %d", int(d), int(ndim));
  Split s;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      fatal(fn, "negative extent %lld in dim %d", (long long)shape[i], int(i));
    if (i < d)
      s.outer *= shape[i];
    else if (i > d)
      s.inner *= shape[i];
  }
  s.dim = shape[d];
  return s;
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

} // namespace

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

extern "C" void loomrt_init(int *argc, char ***argv) {
  int up = 0;
  MPI_Initialized(&up);
  if (!up) {
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) !=
        MPI_SUCCESS)
      fatal(__func__, "MPI_Init_thread failed");
    weInitializedMpi = true;
  }
  if (worldComm)
    return;
  checkMpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
           "MPI_Comm_set_errhandler");
  // One GPU per rank: the i-th rank on a node takes device i (modulo the
  // device count), unless runtime calls before loomrt_init already created
  // the context on the current device.
  if (!contextCreated()) {
    MPI_Comm node;
    checkMpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
                                 MPI_INFO_NULL, &node),
             "MPI_Comm_split_type");
    int localRank = 0;
    checkMpi(MPI_Comm_rank(node, &localRank), "MPI_Comm_rank");
    MPI_Comm_free(&node);
    requestDevice(localRank);
  }
  MPI_Comm dup;
  checkMpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
  int size = 0;
  checkMpi(MPI_Comm_size(dup, &size), "MPI_Comm_size");
  std::vector<int32_t> ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i)
    ranks[size_t(i)] = i;
  worldComm = registerComm(dup, std::move(ranks));
  watchdog::start(MPI_COMM_WORLD);
}

extern "C" void loomrt_finalize(void) {
  if (contextCreated())
    syncAll(__func__);
  watchdog::stop();
  while (!liveComms.empty())
    freeComm(*liveComms.begin());
  worldComm = nullptr;
  int down = 0;
  MPI_Finalized(&down);
  if (weInitializedMpi && !down)
    MPI_Finalize();
  weInitializedMpi = false;
}

extern "C" int32_t loomrt_world_rank(void) {
  return worldComm ? worldComm->rank : 0;
}

extern "C" int32_t loomrt_world_size(void) {
  return worldComm ? worldComm->size : 1;
}

extern "C" loomrt_comm loomrt_comm_world(void) {
  if (!worldComm)
    fatal(__func__, "loomrt_init has not been called");
  return worldComm;
}

extern "C" loomrt_comm loomrt_comm_create(int32_t num_groups,
                                          const int32_t *group_sizes,
                                          const int32_t *group_ranks) {
  loomrt_comm world = checkedComm(__func__, worldComm);
  std::vector<int32_t> members;
  MPI_Comm split = splitIntoGroups(__func__, world->mpi, world->rank,
                                   world->size, num_groups, group_sizes,
                                   group_ranks, members);
  if (split == MPI_COMM_NULL)
    return nullptr;
  return registerComm(split, std::move(members));
}

extern "C" void loomrt_comm_destroy(loomrt_comm comm) {
  if (!comm)
    return;
  checkedComm(__func__, comm);
  if (comm == worldComm)
    fatal(__func__, "the world communicator is freed by loomrt_finalize");
  if (comm->inBatch)
    fatal(__func__, "a p2p batch is still open on this communicator");
  syncAll(__func__); // no NCCL work of this communicator may be in flight
  freeComm(comm);
}

extern "C" int32_t loomrt_comm_rank(loomrt_comm comm) {
  return checkedComm(__func__, comm)->rank;
}

extern "C" int32_t loomrt_comm_size(loomrt_comm comm) {
  return checkedComm(__func__, comm)->size;
}

extern "C" int32_t loomrt_comm_world_rank_of(loomrt_comm comm, int32_t r) {
  loomrt_comm c = checkedComm(__func__, comm);
  if (r < 0 || r >= c->size)
    fatal(__func__, "group rank %d is outside a group of %d", int(r), c->size);
  return c->worldRanks[size_t(r)];
}

extern "C" void loomrt_barrier(loomrt_comm comm) {
  loomrt_comm c = checkedComm(__func__, comm);
  // "Every member has called it" includes the GPU work issued before.
  syncAll(__func__);
  MPI_Request request;
  checkMpi(MPI_Ibarrier(c->mpi, &request), "MPI_Ibarrier");
  watchdog::Operation op{__func__, "barrier", ++c->collectives,
                         &c->worldRanks};
  MPI_Status status;
  checkMpi(watchdog::waitAll(op, 1, &request, &status), "MPI_Ibarrier");
}

extern "C" void loomrt_set_timeout(double seconds) {
  if (!(seconds >= 0))
    fatal(__func__, "timeout %g is not a number of seconds >= 0", seconds);
  watchdog::setTimeout(seconds);
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

extern "C" void loomrt_all_reduce(loomrt_comm comm, loomrt_dtype dtype,
                                  int32_t op, const void *send, void *recv,
                                  int64_t n) {
  loomrt_comm c = checkedComm(__func__, comm);
  checkedDtypeSize(__func__, dtype);
  const size_t count = checkedCount(__func__, n);
  if (op != LOOMRT_SUM && op != LOOMRT_MAX)
    fatal(__func__, "unknown reduction %d", int(op));
  if (count == 0)
    return;
  LOOMRT_CHECK(send && recv, "NULL buffer");
  const ncclRedOp_t ncclOp = op == LOOMRT_SUM ? ncclSum : ncclMax;
  if (dtype == LOOMRT_F32 || op == LOOMRT_MAX) {
    collective(__func__, "all_reduce", c, [&](cudaStream_t s) {
      NCCL_CHECK(ncclAllReduce(send, recv, count, ncclType(dtype), ncclOp,
                               c->nccl, s));
    });
    return;
  }
  Scratch wide(int64_t(count) * 4);
  convert(dtype, send, LOOMRT_F32, wide.as<float>(), int64_t(count));
  collective(__func__, "all_reduce", c, [&](cudaStream_t s) {
    NCCL_CHECK(ncclAllReduce(wide.as<float>(), wide.as<float>(), count,
                             ncclFloat32, ncclSum, c->nccl, s));
  });
  convert(LOOMRT_F32, wide.as<float>(), dtype, recv, int64_t(count));
}

/// A reduction queued on the reduce stream by a *_start call; loomrt_wait
/// makes the compute stream's later work wait for it.
struct loomrt_request_impl {
  cudaEvent_t done = nullptr;
};

namespace {
/// Issues `issue(reduceStream)` after the compute stream's earlier work
/// and returns the request that marks its end.
template <typename Fn> loomrt_request onReduceStream(Fn issue) {
  Context &c = ctx();
  streamWait(c.reduce, c.compute);
  issue(c.reduce);
  auto *r = new loomrt_request_impl;
  CUDA_CHECK(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(r->done, c.reduce));
  return r;
}
} // namespace

extern "C" loomrt_request loomrt_all_reduce_start(loomrt_comm comm, float *buf,
                                                  int64_t n) {
  loomrt_comm c = checkedComm(__func__, comm);
  const size_t count = checkedCount(__func__, n);
  LOOMRT_CHECK(count == 0 || buf, "NULL buffer");
  noteCollective(__func__, "all_reduce", ++c->collectives, c->worldRanks);
  return onReduceStream([&](cudaStream_t s) {
    if (count)
      NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, c->nccl,
                               s));
  });
}

extern "C" loomrt_request loomrt_reduce_scatter_start(loomrt_comm comm,
                                                      const float *send,
                                                      float *recv,
                                                      const int64_t *counts) {
  loomrt_comm c = checkedComm(__func__, comm);
  LOOMRT_CHECK(counts, "NULL counts");
  for (int k = 0; k < c->size; ++k)
    checkedCount(__func__, counts[k]);
  noteCollective(__func__, "reduce_scatter", ++c->collectives, c->worldRanks);
  // NCCL's reduce-scatter takes equal blocks only: one reduce to each
  // member, grouped into one operation.
  return onReduceStream([&](cudaStream_t s) {
    NCCL_CHECK(ncclGroupStart());
    size_t offset = 0;
    for (int k = 0; k < c->size; ++k) {
      if (counts[k])
        NCCL_CHECK(ncclReduce(send + offset, recv, size_t(counts[k]),
                              ncclFloat32, ncclSum, k, c->nccl, s));
      offset += size_t(counts[k]);
    }
    NCCL_CHECK(ncclGroupEnd());
  });
}

extern "C" void loomrt_wait(loomrt_request request) {
  LOOMRT_CHECK(request, "NULL request");
  CUDA_CHECK(cudaStreamWaitEvent(ctx().compute, request->done, 0));
  CUDA_CHECK(cudaEventDestroy(request->done));
  delete request;
}

extern "C" void loomrt_broadcast(loomrt_comm comm, loomrt_dtype dtype,
                                 void *buf, int64_t n, int32_t root) {
  loomrt_comm c = checkedComm(__func__, comm);
  checkedDtypeSize(__func__, dtype);
  const size_t count = checkedCount(__func__, n);
  if (root < 0 || root >= c->size)
    fatal(__func__, "root %d is outside a group of %d", int(root), c->size);
  if (count == 0)
    return;
  LOOMRT_CHECK(buf, "NULL buffer");
  collective(__func__, "broadcast", c, [&](cudaStream_t s) {
    NCCL_CHECK(
        ncclBroadcast(buf, buf, count, ncclType(dtype), root, c->nccl, s));
  });
}

extern "C" void loomrt_all_gather(loomrt_comm comm, loomrt_dtype dtype,
                                  int32_t ndim, const int64_t *shape,
                                  int32_t dim, const void *send, void *recv) {
  loomrt_comm c = checkedComm(__func__, comm);
  const int64_t esz = checkedDtypeSize(__func__, dtype);
  const Split s = splitAround(__func__, ndim, shape, dim);
  const size_t block = checkedCount(__func__, s.outer * s.dim * s.inner);
  checkedCount(__func__, int64_t(block) * c->size);
  if (block == 0)
    return;
  LOOMRT_CHECK(send && recv, "NULL buffer");
  // Gathering along dim 0 (or any dim with nothing in front) is already the
  // rank-ordered concatenation NCCL produces.
  if (s.outer == 1) {
    collective(__func__, "all_gather", c, [&](cudaStream_t st) {
      NCCL_CHECK(
          ncclAllGather(send, recv, block, ncclType(dtype), c->nccl, st));
    });
    return;
  }
  Scratch blocks(int64_t(block) * c->size * esz);
  collective(__func__, "all_gather", c, [&](cudaStream_t st) {
    NCCL_CHECK(ncclAllGather(send, blocks.as<void>(), block, ncclType(dtype),
                             c->nccl, st));
  });
  permuteBlocks(blocks.as<char>(), static_cast<char *>(recv), c->size, s, s.dim,
                esz, /*unpack=*/true);
}

extern "C" void loomrt_reduce_scatter(loomrt_comm comm, loomrt_dtype dtype,
                                      int32_t ndim, const int64_t *shape,
                                      int32_t dim, const void *send,
                                      void *recv) {
  loomrt_comm c = checkedComm(__func__, comm);
  checkedDtypeSize(__func__, dtype);
  const Split s = splitAround(__func__, ndim, shape, dim);
  if (s.dim % c->size != 0)
    fatal(__func__, "extent %lld of dim %d is not divisible by %d ranks",
          (long long)s.dim, int(dim), c->size);
  const int64_t dl = s.dim / c->size;
  const int64_t total = s.outer * s.dim * s.inner;
  checkedCount(__func__, total);
  const size_t block = size_t(s.outer * dl * s.inner);
  if (total == 0)
    return;
  LOOMRT_CHECK(send && recv, "NULL buffer");
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
                  c->size, s, dl, 4, /*unpack=*/false);
    sendF32 = packed.as<float>();
  }
  Scratch outBuf(wide ? int64_t(block) * 4 : 0);
  float *outF32 = wide ? outBuf.as<float>() : static_cast<float *>(recv);
  collective(__func__, "reduce_scatter", c, [&](cudaStream_t st) {
    NCCL_CHECK(ncclReduceScatter(sendF32, outF32, block, ncclFloat32, ncclSum,
                                 c->nccl, st));
  });
  if (wide)
    convert(LOOMRT_F32, outF32, dtype, recv, int64_t(block));
}

extern "C" void loomrt_all_to_all(loomrt_comm comm, loomrt_dtype dtype,
                                  int32_t ndim, const int64_t *shape,
                                  int32_t split_dim, int32_t concat_dim,
                                  const void *send, void *recv) {
  loomrt_comm c = checkedComm(__func__, comm);
  const int64_t esz = checkedDtypeSize(__func__, dtype);
  const int64_t P = c->size;
  const Split in = splitAround(__func__, ndim, shape, split_dim);
  splitAround(__func__, ndim, shape, concat_dim);
  if (in.dim % P != 0)
    fatal(__func__, "extent %lld of split dim %d is not divisible by %d ranks",
          (long long)in.dim, int(split_dim), int(P));
  const int64_t total = in.outer * in.dim * in.inner;
  checkedCount(__func__, total);
  const size_t block = size_t(total / P);
  if (total == 0)
    return;
  LOOMRT_CHECK(send && recv, "NULL buffer");
  // Pack: slice r of split_dim becomes the r-th contiguous send block.
  Scratch packed(in.outer != 1 ? total * esz : 0);
  const char *sendPtr = static_cast<const char *>(send);
  if (in.outer != 1) {
    permuteBlocks(sendPtr, packed.as<char>(), P, in, in.dim / P, esz,
                  /*unpack=*/false);
    sendPtr = packed.as<char>();
  }
  // Unpack: block r (shape with split_dim / P) lands at offset r along
  // concat_dim of the result.
  int64_t chunkShape[8];
  std::copy(shape, shape + ndim, chunkShape);
  chunkShape[split_dim] /= P;
  const Split out = splitAround(__func__, ndim, chunkShape, concat_dim);
  Scratch received(out.outer != 1 ? total * esz : 0);
  char *recvPtr =
      out.outer != 1 ? received.as<char>() : static_cast<char *>(recv);
  // All-to-all as one group of sends and recvs (every NCCL version has
  // these; ncclAlltoAll only exists since 2.28).
  const size_t bytes = block * size_t(esz);
  collective(__func__, "all_to_all", c, [&](cudaStream_t st) {
    NCCL_CHECK(ncclGroupStart());
    for (int64_t r = 0; r < P; ++r) {
      NCCL_CHECK(ncclSend(sendPtr + r * bytes, block, ncclType(dtype), int(r),
                          c->nccl, st));
      NCCL_CHECK(ncclRecv(recvPtr + r * bytes, block, ncclType(dtype), int(r),
                          c->nccl, st));
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

namespace {
// One ncclGroupStart/End around the whole batch: NCCL then progresses all
// operations together, so exchanging with both neighbours cannot deadlock.
// Unlike MPI, NCCL cannot detect a recv that expects a different size than
// the matching send (the cpu backend aborts on a short message); a
// mismatched schedule is caught there, in the cpu tests of every plan.
void issueBatch(loomrt_comm c) {
  std::vector<P2POp> ops;
  ops.swap(c->pending);
  // Seed 003 section 5.3: even ranks post sends first, odd ranks recvs
  // first, the order Megatron's _p2p_ops uses with NCCL.
  const bool sendsFirst = c->rank % 2 == 0;
  std::stable_partition(ops.begin(), ops.end(), [&](const P2POp &op) {
    return op.isSend == sendsFirst;
  });
  onCommStream([&](cudaStream_t st) {
    NCCL_CHECK(ncclGroupStart());
    for (const P2POp &op : ops) {
      if (op.count == 0)
        continue;
      if (op.isSend)
        NCCL_CHECK(ncclSend(op.buf, op.count, op.type, op.peer, c->nccl, st));
      else
        NCCL_CHECK(ncclRecv(op.buf, op.count, op.type, op.peer, c->nccl, st));
    }
    NCCL_CHECK(ncclGroupEnd());
  });
  std::vector<int32_t> members = {c->worldRanks[size_t(c->rank)]};
  for (const P2POp &op : ops)
    if (std::find(members.begin(), members.end(),
                  c->worldRanks[size_t(op.peer)]) == members.end())
      members.push_back(c->worldRanks[size_t(op.peer)]);
  noteCollective("loomrt_p2p_end", "p2p batch", ++c->batches, members);
}

void record(const char *fn, loomrt_comm comm, bool isSend, loomrt_dtype dtype,
            const void *buf, int64_t n, int32_t peer) {
  loomrt_comm c = checkedComm(fn, comm);
  checkedDtypeSize(fn, dtype);
  const size_t count = checkedCount(fn, n);
  if (peer < 0 || peer >= c->size)
    fatal(fn, "peer %d is outside a group of %d", int(peer), c->size);
  LOOMRT_CHECK(count == 0 || buf, "%s: NULL buffer", fn);
  c->pending.push_back(
      {isSend, const_cast<void *>(buf), count, ncclType(dtype), int(peer)});
  if (!c->inBatch)
    issueBatch(c);
}
} // namespace

extern "C" void loomrt_p2p_begin(loomrt_comm comm) {
  loomrt_comm c = checkedComm(__func__, comm);
  if (c->inBatch)
    fatal(__func__, "p2p batches do not nest");
  c->inBatch = true;
}

extern "C" void loomrt_send(loomrt_comm comm, loomrt_dtype dtype,
                            const void *buf, int64_t n, int32_t peer) {
  record(__func__, comm, true, dtype, buf, n, peer);
}

extern "C" void loomrt_recv(loomrt_comm comm, loomrt_dtype dtype, void *buf,
                            int64_t n, int32_t peer) {
  record(__func__, comm, false, dtype, buf, n, peer);
}

extern "C" void loomrt_p2p_end(loomrt_comm comm) {
  loomrt_comm c = checkedComm(__func__, comm);
  if (!c->inBatch)
    fatal(__func__, "no batch was begun");
  c->inBatch = false;
  issueBatch(c);
}
