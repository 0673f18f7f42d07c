//===- Comm.cpp - MPI communicators, collectives, p2p -----------*- C++ -*-===//
//
// One MPI communicator per process group, split from a private duplicate of
// MPI_COMM_WORLD so runtime traffic never matches a user's messages. Every
// communicator uses MPI_ERRORS_RETURN and every MPI call is checked, so a
// failure ends the job with the name of the call instead of a hang.
//
// Every wait for other ranks is nonblocking MPI completed under the
// watchdog (runtime/common/Watchdog.h): with loomrt_set_timeout, a rank that
// never arrives ends the job with a report instead of a hang.
//
// bf16/f16 payloads travel as 16-bit words; reductions widen them to f32
// first (MPI has no 16-bit float types, and f32 is the accumulation type).
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"
#include "runtime/common/Groups.h"
#include "runtime/common/Watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <map>
#include <set>

using namespace loomrt;

namespace loomrt {
/// One recorded send or recv of a p2p batch.
struct P2POp {
  bool isSend;
  void *buf;
  int count;
  MPI_Datatype type;
  int peer;
};
} // namespace loomrt

struct loomrt_comm_impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::vector<int32_t> worldRanks; // group rank -> world rank
  bool inBatch = false;
  std::vector<P2POp> pending;
  // Operations issued so far, for the watchdog's reports: every member
  // counts the same collectives; p2p batches are per rank.
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

int checkedCount(const char *fn, int64_t n) {
  if (n < 0 || n > INT_MAX)
    fatal(fn, "element count %lld is outside [0, INT_MAX]", (long long)n);
  return int(n);
}

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

loomrt_comm registerComm(MPI_Comm mpiComm, std::vector<int32_t> worldRanks) {
  checkMpi(MPI_Comm_set_errhandler(mpiComm, MPI_ERRORS_RETURN),
           "MPI_Comm_set_errhandler");
  auto *c = new loomrt_comm_impl;
  c->comm = mpiComm;
  checkMpi(MPI_Comm_rank(mpiComm, &c->rank), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(mpiComm, &c->size), "MPI_Comm_size");
  c->worldRanks = std::move(worldRanks);
  liveComms.insert(c);
  return c;
}

void freeComm(loomrt_comm c) {
  liveComms.erase(c);
  if (c->comm != MPI_COMM_NULL)
    MPI_Comm_free(&c->comm);
  delete c;
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
  // After MPI_Init, whose handlers ours passes foreign faults on to.
  contract::installFaultHandler();
  checkMpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
           "MPI_Comm_set_errhandler");
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
  MPI_Comm split = splitIntoGroups(__func__, world->comm, world->rank,
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
  MPI_Request request;
  checkMpi(MPI_Ibarrier(c->comm, &request), "MPI_Ibarrier");
  complete(__func__, "barrier", c, request, "MPI_Ibarrier");
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
  LOOMRT_DEVICE_CALL(send, recv);
  loomrt_comm c = checkedComm(__func__, comm);
  checkedDtypeSize(__func__, dtype);
  const int count = checkedCount(__func__, n);
  if (op != LOOMRT_SUM && op != LOOMRT_MAX)
    fatal(__func__, "unknown reduction %d", int(op));
  LOOMRT_CHECK(count == 0 || (send && recv), "NULL buffer");
  const MPI_Op mpiOp = op == LOOMRT_SUM ? MPI_SUM : MPI_MAX;
  MPI_Request request;
  if (dtype == LOOMRT_F32) {
    checkMpi(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, count,
                            MPI_FLOAT, mpiOp, c->comm, &request),
             "MPI_Iallreduce");
    complete(__func__, "all_reduce", c, request, "MPI_Iallreduce");
    return;
  }
  std::vector<float> wide(static_cast<size_t>(count));
  toF32(dtype, send, wide.data(), count);
  checkMpi(MPI_Iallreduce(MPI_IN_PLACE, wide.data(), count, MPI_FLOAT, mpiOp,
                          c->comm, &request),
           "MPI_Iallreduce");
  complete(__func__, "all_reduce", c, request, "MPI_Iallreduce");
  fromF32(wide.data(), dtype, recv, count);
}

/// A collective issued by a *_start call, completed by loomrt_wait.
struct loomrt_request_impl {
  const char *fn, *name;
  loomrt_comm comm;
  uint64_t sequence;
  MPI_Request request;
  std::vector<int> counts; // reduce-scatter: MPI keeps a pointer to them
};

extern "C" loomrt_request loomrt_all_reduce_start(loomrt_comm comm, float *buf,
                                                  int64_t n) {
  LOOMRT_DEVICE_CALL(buf);
  loomrt_comm c = checkedComm(__func__, comm);
  const int count = checkedCount(__func__, n);
  LOOMRT_CHECK(count == 0 || buf, "NULL buffer");
  auto *r = new loomrt_request_impl{__func__, "all_reduce", c,
                                    ++c->collectives, MPI_REQUEST_NULL, {}};
  checkMpi(MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM,
                          c->comm, &r->request),
           "MPI_Iallreduce");
  return r;
}

extern "C" loomrt_request loomrt_reduce_scatter_start(loomrt_comm comm,
                                                      const float *send,
                                                      float *recv,
                                                      const int64_t *counts) {
  LOOMRT_DEVICE_CALL(send, recv);
  loomrt_comm c = checkedComm(__func__, comm);
  LOOMRT_CHECK(counts, "NULL counts");
  auto *r = new loomrt_request_impl{__func__, "reduce_scatter", c,
                                    ++c->collectives, MPI_REQUEST_NULL, {}};
  int64_t total = 0;
  for (int k = 0; k < c->size; ++k) {
    r->counts.push_back(checkedCount(__func__, counts[k]));
    total += counts[k];
  }
  checkedCount(__func__, total);
  LOOMRT_CHECK(total == 0 || send, "NULL send buffer");
  LOOMRT_CHECK(counts[c->rank] == 0 || recv, "NULL receive buffer");
  // MPI forbids aliasing send and receive buffers, and a member with
  // nothing to receive may pass none.
  float unused = 0.0f;
  checkMpi(MPI_Ireduce_scatter(send, recv ? recv : &unused, r->counts.data(),
                               MPI_FLOAT, MPI_SUM, c->comm, &r->request),
           "MPI_Ireduce_scatter");
  return r;
}

extern "C" void loomrt_wait(loomrt_request request) {
  LOOMRT_CHECK(request, "NULL request");
  loomrt_comm c = checkedComm(__func__, request->comm);
  watchdog::Operation op{request->fn, request->name, request->sequence,
                         &c->worldRanks};
  MPI_Status status;
  checkMpi(watchdog::waitAll(op, 1, &request->request, &status),
           request->fn);
  delete request;
}

extern "C" void loomrt_broadcast(loomrt_comm comm, loomrt_dtype dtype,
                                 void *buf, int64_t n, int32_t root) {
  LOOMRT_DEVICE_CALL(buf);
  loomrt_comm c = checkedComm(__func__, comm);
  checkedDtypeSize(__func__, dtype);
  const int count = checkedCount(__func__, n);
  if (root < 0 || root >= c->size)
    fatal(__func__, "root %d is outside a group of %d", int(root), c->size);
  LOOMRT_CHECK(count == 0 || buf, "NULL buffer");
  MPI_Request request;
  checkMpi(MPI_Ibcast(buf, count, rawType(dtype), root, c->comm, &request),
           "MPI_Ibcast");
  complete(__func__, "broadcast", c, request, "MPI_Ibcast");
}

extern "C" void loomrt_all_gather(loomrt_comm comm, loomrt_dtype dtype,
                                  int32_t ndim, const int64_t *shape,
                                  int32_t dim, const void *send, void *recv) {
  LOOMRT_DEVICE_CALL(send, recv);
  loomrt_comm c = checkedComm(__func__, comm);
  const int64_t esz = checkedDtypeSize(__func__, dtype);
  const Split s = splitAround(__func__, ndim, shape, dim);
  const int block = checkedCount(__func__, s.outer * s.dim * s.inner);
  checkedCount(__func__, int64_t(block) * c->size);
  LOOMRT_CHECK(block == 0 || (send && recv), "NULL buffer");
  // Gathering along dim 0 (or any dim with nothing in front) is already the
  // rank-ordered concatenation MPI produces.
  MPI_Request request;
  if (s.outer == 1) {
    checkMpi(MPI_Iallgather(send, block, rawType(dtype), recv, block,
                            rawType(dtype), c->comm, &request),
             "MPI_Iallgather");
    complete(__func__, "all_gather", c, request, "MPI_Iallgather");
    return;
  }
  std::vector<char> blocks(size_t(block) * size_t(c->size) * size_t(esz));
  checkMpi(MPI_Iallgather(send, block, rawType(dtype), blocks.data(), block,
                          rawType(dtype), c->comm, &request),
           "MPI_Iallgather");
  complete(__func__, "all_gather", c, request, "MPI_Iallgather");
  permuteBlocks(blocks.data(), static_cast<char *>(recv), c->size, s, s.dim,
                esz, /*unpack=*/true);
}

extern "C" void loomrt_reduce_scatter(loomrt_comm comm, loomrt_dtype dtype,
                                      int32_t ndim, const int64_t *shape,
                                      int32_t dim, const void *send,
                                      void *recv) {
  LOOMRT_DEVICE_CALL(send, recv);
  loomrt_comm c = checkedComm(__func__, comm);
  checkedDtypeSize(__func__, dtype);
  const Split s = splitAround(__func__, ndim, shape, dim);
  if (s.dim % c->size != 0)
    fatal(__func__, "extent %lld of dim %d is not divisible by %d ranks",
          (long long)s.dim, int(dim), c->size);
  const int64_t dl = s.dim / c->size;
  const int64_t total = s.outer * s.dim * s.inner;
  checkedCount(__func__, total);
  const int block = int(s.outer * dl * s.inner);
  LOOMRT_CHECK(total == 0 || (send && recv), "NULL buffer");
  // Reduce in f32: f32 data is used in place, bf16/f16 widened.
  In wide(dtype, send, total);
  const float *sendF32 = wide.get();
  std::vector<float> packed;
  if (s.outer != 1) {
    packed.resize(size_t(total));
    permuteBlocks(reinterpret_cast<const char *>(wide.get()),
                  reinterpret_cast<char *>(packed.data()), c->size, s, dl, 4,
                  /*unpack=*/false);
    sendF32 = packed.data();
  }
  Out out(dtype, recv, block, false);
  MPI_Request request;
  checkMpi(MPI_Ireduce_scatter_block(sendF32, out.get(), block, MPI_FLOAT,
                                     MPI_SUM, c->comm, &request),
           "MPI_Ireduce_scatter_block");
  complete(__func__, "reduce_scatter", c, request,
           "MPI_Ireduce_scatter_block");
  out.commit();
}

extern "C" void loomrt_all_to_all(loomrt_comm comm, loomrt_dtype dtype,
                                  int32_t ndim, const int64_t *shape,
                                  int32_t split_dim, int32_t concat_dim,
                                  const void *send, void *recv) {
  LOOMRT_DEVICE_CALL(send, recv);
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
  const int block = int(total / P);
  LOOMRT_CHECK(total == 0 || (send && recv), "NULL buffer");
  // Pack: slice r of split_dim becomes the r-th contiguous send block.
  std::vector<char> packed, received;
  const char *sendPtr = static_cast<const char *>(send);
  if (in.outer != 1) {
    packed.resize(size_t(total * esz));
    permuteBlocks(sendPtr, packed.data(), P, in, in.dim / P, esz,
                  /*unpack=*/false);
    sendPtr = packed.data();
  }
  // Unpack: block r (shape with split_dim / P) lands at offset r along
  // concat_dim of the result.
  int64_t chunkShape[8];
  std::copy(shape, shape + ndim, chunkShape);
  chunkShape[split_dim] /= P;
  const Split out = splitAround(__func__, ndim, chunkShape, concat_dim);
  char *recvPtr = static_cast<char *>(recv);
  if (out.outer != 1) {
    received.resize(size_t(total * esz));
    recvPtr = received.data();
  }
  MPI_Request request;
  checkMpi(MPI_Ialltoall(sendPtr, block, rawType(dtype), recvPtr, block,
                         rawType(dtype), c->comm, &request),
           "MPI_Ialltoall");
  complete(__func__, "all_to_all", c, request, "MPI_Ialltoall");
  if (out.outer != 1)
    permuteBlocks(received.data(), static_cast<char *>(recv), P, out, out.dim,
                  esz, /*unpack=*/true);
}

//===----------------------------------------------------------------------===//
// Grouped point-to-point
//===----------------------------------------------------------------------===//

namespace {
void issueBatch(loomrt_comm c) {
  std::vector<P2POp> ops;
  ops.swap(c->pending);
  // Seed 003 section 5.3: even ranks post sends first, odd ranks recvs
  // first. With nonblocking MPI any order completes; keeping the NCCL order
  // makes both backends issue identical sequences.
  const bool sendsFirst = c->rank % 2 == 0;
  std::stable_partition(ops.begin(), ops.end(), [&](const P2POp &op) {
    return op.isSend == sendsFirst;
  });
  std::vector<MPI_Request> reqs(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp &op = ops[i];
    if (op.isSend)
      checkMpi(
          MPI_Isend(op.buf, op.count, op.type, op.peer, 0, c->comm, &reqs[i]),
          "MPI_Isend");
    else
      checkMpi(
          MPI_Irecv(op.buf, op.count, op.type, op.peer, 0, c->comm, &reqs[i]),
          "MPI_Irecv");
  }
  std::vector<MPI_Status> statuses(ops.size());
  std::vector<int32_t> members = {c->worldRanks[size_t(c->rank)]};
  for (const P2POp &op : ops)
    if (std::find(members.begin(), members.end(),
                  c->worldRanks[size_t(op.peer)]) == members.end())
      members.push_back(c->worldRanks[size_t(op.peer)]);
  watchdog::Operation wait{"loomrt_p2p_end", "p2p batch", ++c->batches,
                           &members, "ranks (world)"};
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
    MPI_Get_count(&statuses[i], ops[i].type, &got);
    if (got != ops[i].count)
      fatal("loomrt_p2p_end",
            "received %d elements from group rank %d, expected %d", got,
            ops[i].peer, ops[i].count);
  }
}

void record(const char *fn, loomrt_comm comm, bool isSend, loomrt_dtype dtype,
            const void *buf, int64_t n, int32_t peer) {
  loomrt_comm c = checkedComm(fn, comm);
  checkedDtypeSize(fn, dtype);
  const int count = checkedCount(fn, n);
  if (peer < 0 || peer >= c->size)
    fatal(fn, "peer %d is outside a group of %d", int(peer), c->size);
  LOOMRT_CHECK(count == 0 || buf, "%s: NULL buffer", fn);
  c->pending.push_back(
      {isSend, const_cast<void *>(buf), count, rawType(dtype), int(peer)});
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
  LOOMRT_DEVICE_CALL(buf);
  record(__func__, comm, true, dtype, buf, n, peer);
}

extern "C" void loomrt_recv(loomrt_comm comm, loomrt_dtype dtype, void *buf,
                            int64_t n, int32_t peer) {
  LOOMRT_DEVICE_CALL(buf);
  record(__func__, comm, false, dtype, buf, n, peer);
}

extern "C" void loomrt_p2p_end(loomrt_comm comm) {
  LOOMRT_DEVICE_CALL();
  loomrt_comm c = checkedComm(__func__, comm);
  if (!c->inBatch)
    fatal(__func__, "no batch was begun");
  c->inBatch = false;
  issueBatch(c);
}
