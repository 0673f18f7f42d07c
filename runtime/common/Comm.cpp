//===- Comm.cpp - Communicators, collectives' checks, p2p batches ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The communication entry points for every backend. Process groups come
// from MPI: MPI_Comm_split of a private duplicate of MPI_COMM_WORLD (so
// runtime traffic never matches a user's messages), color = group index,
// key = position in the list. Every MPI communicator uses MPI_ERRORS_RETURN
// and every MPI call is checked, so a failure ends the job with the name of
// the call instead of a hang. The backend's transport (Transport.h) moves
// the data: MPI on cpu, NCCL on cuda (a communicator per group, set up over
// the group's MPI communicator).
//
// The ABI front has checked every loomrt_comm argument (checkedComm) and
// dtype before these functions run; they check the rest.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Comm.h"

#include "runtime/common/Errors.h"
#include "runtime/common/Groups.h"
#include "runtime/common/Transport.h"
#include "runtime/common/Watchdog.h"

#include "runtime/abi/Common.h.inc"

#include <algorithm>
#include <climits>
#include <set>

using namespace loomrt;

namespace {
bool weInitializedMpi = false;
loomrt_comm worldComm = nullptr;
std::set<loomrt_comm> liveComms;

int checkedCount(const char *fn, int64_t n) {
  if (n < 0 || n > INT_MAX)
    fatal(fn, "element count %lld is outside [0, INT_MAX]", (long long)n);
  return int(n);
}

loomrt_comm registerComm(MPI_Comm mpiComm, std::vector<int32_t> worldRanks) {
  checkMpi(MPI_Comm_set_errhandler(mpiComm, MPI_ERRORS_RETURN),
           "MPI_Comm_set_errhandler");
  auto *c = new loomrt_comm_impl;
  c->mpi = mpiComm;
  checkMpi(MPI_Comm_rank(mpiComm, &c->rank), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(mpiComm, &c->size), "MPI_Comm_size");
  c->worldRanks = std::move(worldRanks);
  c->state = transport::open(c);
  liveComms.insert(c);
  return c;
}

void freeComm(loomrt_comm c) {
  liveComms.erase(c);
  transport::close(c);
  if (c->mpi != MPI_COMM_NULL)
    MPI_Comm_free(&c->mpi);
  delete c;
}

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
} // namespace

loomrt_comm loomrt::checkedComm(const char *fn, loomrt_comm c) {
  if (!worldComm)
    fatal(fn, "loomrt_init has not been called");
  if (!c)
    fatal(fn, "NULL communicator (this rank is in no group of it)");
  if (!liveComms.count(c))
    fatal(fn, "communicator %p was destroyed or never created",
          static_cast<void *>(c));
  return c;
}

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

void common::loomrt_init(int *argc, char ***argv) {
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
  transport::init();
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

void common::loomrt_finalize() {
  transport::quiesce(__func__);
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

int32_t common::loomrt_world_rank() { return worldComm ? worldComm->rank : 0; }

int32_t common::loomrt_world_size() { return worldComm ? worldComm->size : 1; }

loomrt_comm common::loomrt_comm_world() {
  if (!worldComm)
    fatal(__func__, "loomrt_init has not been called");
  return worldComm;
}

loomrt_comm common::loomrt_comm_create(int32_t num_groups,
                                       const int32_t *group_sizes,
                                       const int32_t *group_ranks) {
  loomrt_comm world = checkedComm(__func__, worldComm);
  std::vector<int32_t> members;
  MPI_Comm split =
      splitIntoGroups(__func__, world->mpi, world->rank, world->size,
                      num_groups, group_sizes, group_ranks, members);
  if (split == MPI_COMM_NULL)
    return nullptr;
  return registerComm(split, std::move(members));
}

void common::loomrt_comm_destroy(loomrt_comm comm) {
  if (!comm)
    return;
  checkedComm(__func__, comm);
  if (comm == worldComm)
    fatal(__func__, "the world communicator is freed by loomrt_finalize");
  if (comm->inBatch)
    fatal(__func__, "a p2p batch is still open on this communicator");
  transport::quiesce(__func__); // no work on comm may be in flight
  freeComm(comm);
}

int32_t common::loomrt_comm_rank(loomrt_comm comm) { return comm->rank; }

int32_t common::loomrt_comm_size(loomrt_comm comm) { return comm->size; }

int32_t common::loomrt_comm_world_rank_of(loomrt_comm comm, int32_t r) {
  if (r < 0 || r >= comm->size)
    fatal(__func__, "group rank %d is outside a group of %d", int(r),
          comm->size);
  return comm->worldRanks[size_t(r)];
}

void common::loomrt_barrier(loomrt_comm comm) {
  transport::quiesce(__func__);
  MPI_Request request;
  checkMpi(MPI_Ibarrier(comm->mpi, &request), "MPI_Ibarrier");
  watchdog::Operation op{__func__, "barrier", ++comm->collectives,
                         &comm->worldRanks};
  MPI_Status status;
  checkMpi(watchdog::waitAll(op, 1, &request, &status), "MPI_Ibarrier");
}

void common::loomrt_set_timeout(double seconds) {
  if (!(seconds >= 0))
    fatal(__func__, "timeout %g is not a number of seconds >= 0", seconds);
  watchdog::setTimeout(seconds);
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

void common::loomrt_all_reduce(loomrt_comm comm, loomrt_dtype dtype, int32_t op,
                               const void *send, void *recv, int64_t n) {
  transport::CallScope scope(__func__, "send, recv", {send, recv});
  const int count = checkedCount(__func__, n);
  if (op != LOOMRT_SUM && op != LOOMRT_MAX)
    fatal(__func__, "unknown reduction %d", int(op));
  LOOMRT_CHECK(count == 0 || (send && recv), "NULL buffer");
  transport::allReduce(__func__, comm, dtype, op, send, recv, count);
}

void common::loomrt_broadcast(loomrt_comm comm, loomrt_dtype dtype, void *buf,
                              int64_t n, int32_t root) {
  transport::CallScope scope(__func__, "buf", {buf});
  const int count = checkedCount(__func__, n);
  if (root < 0 || root >= comm->size)
    fatal(__func__, "root %d is outside a group of %d", int(root), comm->size);
  LOOMRT_CHECK(count == 0 || buf, "NULL buffer");
  transport::broadcast(__func__, comm, dtype, buf, count, root);
}

void common::loomrt_all_gather(loomrt_comm comm, loomrt_dtype dtype,
                               int32_t ndim, const int64_t *shape, int32_t dim,
                               const void *send, void *recv) {
  transport::CallScope scope(__func__, "send, recv", {send, recv});
  const Split s = splitAround(__func__, ndim, shape, dim);
  const int block = checkedCount(__func__, s.outer * s.dim * s.inner);
  checkedCount(__func__, int64_t(block) * comm->size);
  LOOMRT_CHECK(block == 0 || (send && recv), "NULL buffer");
  transport::allGather(__func__, comm, dtype, s, block, send, recv);
}

void common::loomrt_reduce_scatter(loomrt_comm comm, loomrt_dtype dtype,
                                   int32_t ndim, const int64_t *shape,
                                   int32_t dim, const void *send, void *recv) {
  transport::CallScope scope(__func__, "send, recv", {send, recv});
  const Split s = splitAround(__func__, ndim, shape, dim);
  if (s.dim % comm->size != 0)
    fatal(__func__, "extent %lld of dim %d is not divisible by %d ranks",
          (long long)s.dim, int(dim), comm->size);
  const int64_t total = s.outer * s.dim * s.inner;
  checkedCount(__func__, total);
  const int block = int(s.outer * (s.dim / comm->size) * s.inner);
  LOOMRT_CHECK(total == 0 || (send && recv), "NULL buffer");
  transport::reduceScatter(__func__, comm, dtype, s, total, block, send, recv);
}

void common::loomrt_all_to_all(loomrt_comm comm, loomrt_dtype dtype,
                               int32_t ndim, const int64_t *shape,
                               int32_t split_dim, int32_t concat_dim,
                               const void *send, void *recv) {
  transport::CallScope scope(__func__, "send, recv", {send, recv});
  const int64_t P = comm->size;
  const Split in = splitAround(__func__, ndim, shape, split_dim);
  splitAround(__func__, ndim, shape, concat_dim);
  if (in.dim % P != 0)
    fatal(__func__, "extent %lld of split dim %d is not divisible by %d ranks",
          (long long)in.dim, int(split_dim), int(P));
  const int64_t total = in.outer * in.dim * in.inner;
  checkedCount(__func__, total);
  const int block = int(total / P);
  LOOMRT_CHECK(total == 0 || (send && recv), "NULL buffer");
  // Block r (shape with split_dim / P) lands at offset r along concat_dim
  // of the result.
  int64_t chunkShape[8];
  std::copy(shape, shape + ndim, chunkShape);
  chunkShape[split_dim] /= P;
  const Split out = splitAround(__func__, ndim, chunkShape, concat_dim);
  transport::allToAll(__func__, comm, dtype, in, out, total, block, send, recv);
}

//===----------------------------------------------------------------------===//
// Grouped point-to-point
//===----------------------------------------------------------------------===//

namespace {
void issueBatch(loomrt_comm c) {
  std::vector<P2POp> ops;
  ops.swap(c->pending);
  // Seed 003 section 5.3: even ranks post sends first, odd ranks recvs
  // first, the order Megatron's _p2p_ops uses with NCCL (with nonblocking
  // MPI any order completes; both backends issue identical sequences).
  const bool sendsFirst = c->rank % 2 == 0;
  std::stable_partition(ops.begin(), ops.end(), [&](const P2POp &op) {
    return op.isSend == sendsFirst;
  });
  std::vector<int32_t> members = {c->worldRanks[size_t(c->rank)]};
  for (const P2POp &op : ops)
    if (std::find(members.begin(), members.end(),
                  c->worldRanks[size_t(op.peer)]) == members.end())
      members.push_back(c->worldRanks[size_t(op.peer)]);
  const watchdog::Operation wait{"loomrt_p2p_end", "p2p batch", ++c->batches,
                                 &members, "ranks (world)"};
  transport::runBatch(c, ops, wait);
}

void record(const char *fn, loomrt_comm c, bool isSend, loomrt_dtype dtype,
            const void *buf, int64_t n, int32_t peer) {
  const int count = checkedCount(fn, n);
  if (peer < 0 || peer >= c->size)
    fatal(fn, "peer %d is outside a group of %d", int(peer), c->size);
  LOOMRT_CHECK(count == 0 || buf, "%s: NULL buffer", fn);
  c->pending.push_back(
      {isSend, const_cast<void *>(buf), count, dtype, int(peer)});
  if (!c->inBatch)
    issueBatch(c);
}
} // namespace

void common::loomrt_p2p_begin(loomrt_comm comm) {
  if (comm->inBatch)
    fatal(__func__, "p2p batches do not nest");
  comm->inBatch = true;
}

void common::loomrt_send(loomrt_comm comm, loomrt_dtype dtype, const void *buf,
                         int64_t n, int32_t peer) {
  transport::CallScope scope(__func__, "buf", {buf});
  record(__func__, comm, true, dtype, buf, n, peer);
}

void common::loomrt_recv(loomrt_comm comm, loomrt_dtype dtype, void *buf,
                         int64_t n, int32_t peer) {
  transport::CallScope scope(__func__, "buf", {buf});
  record(__func__, comm, false, dtype, buf, n, peer);
}

void common::loomrt_p2p_end(loomrt_comm comm) {
  transport::CallScope scope(__func__, "", {});
  if (!comm->inBatch)
    fatal(__func__, "no batch was begun");
  comm->inBatch = false;
  issueBatch(comm);
}

//===----------------------------------------------------------------------===//
// Nonblocking sums
//===----------------------------------------------------------------------===//

loomrt_request common::loomrt_all_reduce_start(loomrt_comm comm, float *buf,
                                               int64_t n) {
  transport::CallScope scope(__func__, "buf", {buf});
  const int count = checkedCount(__func__, n);
  LOOMRT_CHECK(count == 0 || buf, "NULL buffer");
  auto *r = new loomrt_request_impl{__func__, "all_reduce", comm,
                                    ++comm->collectives};
  r->pending = transport::allReduceStart(r, buf, count);
  return r;
}

loomrt_request common::loomrt_reduce_scatter_start(loomrt_comm comm,
                                                   const float *send,
                                                   float *recv,
                                                   const int64_t *counts) {
  transport::CallScope scope(__func__, "send, recv", {send, recv});
  LOOMRT_CHECK(counts, "NULL counts");
  int64_t total = 0;
  for (int k = 0; k < comm->size; ++k) {
    checkedCount(__func__, counts[k]);
    total += counts[k];
  }
  checkedCount(__func__, total);
  LOOMRT_CHECK(total == 0 || send, "NULL send buffer");
  LOOMRT_CHECK(counts[comm->rank] == 0 || recv, "NULL receive buffer");
  auto *r = new loomrt_request_impl{__func__, "reduce_scatter", comm,
                                    ++comm->collectives};
  r->pending = transport::reduceScatterStart(r, send, recv, counts);
  return r;
}

void common::loomrt_wait(loomrt_request request) {
  LOOMRT_CHECK(request, "NULL request");
  transport::wait(request);
  delete request;
}
