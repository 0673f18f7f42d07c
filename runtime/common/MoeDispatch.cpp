//===- MoeDispatch.cpp - Expert parallelism's token exchanges ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loomrt_moe_dispatch and loomrt_moe_combine, the same on every backend:
// the host reads every rank's counts per expert, then one grouped p2p batch
// (loomrt_send / loomrt_recv, which the backend's transport runs: MPI or
// NCCL) moves each expert's rows straight to their place, so no repacking
// pass is needed on either side. Per pair of ranks the messages go in
// expert order on both sides, which is the order MPI and NCCL match them in.
// The _allgather variants (Megatron's allgather dispatcher) move every
// rank's rows with one all-gather and one reduce-scatter instead, and the
// backend copies this rank's experts' rows out of (and back into) the
// gathered buffer reading the counts where they lie: no host wait.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Composed.h"
#include "runtime/common/Errors.h"

#include "runtime/abi/Common.h.inc"

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace loomrt;

namespace {

/// Who sends what to whom, read off every rank's counts.
struct Exchange {
  int64_t P, r, E, local; ///< group size, this rank, experts, experts per rank
  std::vector<int32_t> counts; ///< [P][E] on the host
  int64_t esz, rowBytes;

  int64_t count(int64_t rank, int64_t expert) const {
    return counts[size_t(rank * E + expert)];
  }
  /// First row of expert e in rank s's rows (grouped by expert).
  int64_t rowOf(int64_t s, int64_t e) const {
    int64_t row = 0;
    for (int64_t i = 0; i < e; ++i)
      row += count(s, i);
    return row;
  }
  int64_t sentRow(int64_t e) const { return rowOf(r, e); }
  /// First row from source s of local expert j in the dispatched rows
  /// (grouped by local expert, then source).
  int64_t receivedRow(int64_t j, int64_t s) const {
    int64_t row = 0;
    for (int64_t jj = 0; jj <= j; ++jj)
      for (int64_t ss = 0; ss < (jj == j ? s : P); ++ss)
        row += count(ss, r * local + jj);
    return row;
  }
  int64_t sentTotal() const { return sentRow(E); }
  int64_t receivedTotal() const { return receivedRow(local - 1, P); }
};

Exchange readExchange(const char *fn, loomrt_comm comm, loomrt_dtype dtype,
                      int64_t E, int64_t N, int64_t H, int64_t M,
                      const int32_t *allCounts) {
  Exchange x;
  x.P = ::loomrt_comm_size(comm);
  x.r = ::loomrt_comm_rank(comm);
  x.E = E;
  if (E < 1 || E % x.P != 0)
    fatal(fn, "%lld experts do not divide over %lld ranks", (long long)E,
          (long long)x.P);
  if (N < 0 || H < 1 || M < 0)
    fatal(fn, "bad sizes N %lld, H %lld, M %lld", (long long)N, (long long)H,
          (long long)M);
  x.local = E / x.P;
  x.counts.resize(size_t(x.P * E));
  ::loomrt_copy(x.counts.data(), allCounts,
              int64_t(x.counts.size() * sizeof(int32_t)));
  for (int32_t c : x.counts)
    if (c < 0)
      fatal(fn, "a count of rows is negative (%d)", int(c));
  x.esz = ::loomrt_dtype_size(dtype);
  x.rowBytes = H * x.esz;
  if (x.sentTotal() > N)
    fatal(fn, "this rank's counts add up to %lld rows but it has %lld",
          (long long)x.sentTotal(), (long long)N);
  if (x.receivedTotal() > M)
    fatal(fn, "this rank's experts receive %lld rows but the dispatched "
          "buffer holds %lld", (long long)x.receivedTotal(), (long long)M);
  return x;
}

/// One p2p batch between every rank's rows, grouped by expert, and the
/// dispatched rows of the ranks holding those experts: to the experts
/// (`toExperts`: `rows` are sent, `dispatched` received) or back.
void exchange(loomrt_comm comm, loomrt_dtype dtype, const Exchange &x,
              int64_t H, const void *rows, void *rowsOut,
              const void *dispatched, void *dispatchedOut, bool toExperts) {
  ::loomrt_p2p_begin(comm);
  // This rank's rows of each rank's experts, expert by expert.
  for (int64_t q = 0; q < x.P; ++q)
    for (int64_t j = 0; j < x.local; ++j) {
      int64_t e = q * x.local + j, n = x.count(x.r, e);
      int64_t offset = x.sentRow(e) * x.rowBytes;
      if (n > 0 && toExperts)
        ::loomrt_send(comm, dtype, at(rows, offset), n * H, int32_t(q));
      else if (n > 0)
        ::loomrt_recv(comm, dtype, at(rowsOut, offset), n * H, int32_t(q));
    }
  // Each rank's rows of this rank's experts, each at its place.
  for (int64_t s = 0; s < x.P; ++s)
    for (int64_t j = 0; j < x.local; ++j) {
      int64_t n = x.count(s, x.r * x.local + j);
      int64_t offset = x.receivedRow(j, s) * x.rowBytes;
      if (n > 0 && toExperts)
        ::loomrt_recv(comm, dtype, at(dispatchedOut, offset), n * H,
                      int32_t(s));
      else if (n > 0)
        ::loomrt_send(comm, dtype, at(dispatched, offset), n * H, int32_t(s));
    }
  ::loomrt_p2p_end(comm);
}

/// local_counts [E/P]: the rows of this rank's experts, from every rank.
void uploadLocalCounts(const Exchange &x, int32_t *localCounts) {
  std::vector<int32_t> mine(size_t(x.local), 0);
  for (int64_t j = 0; j < x.local; ++j)
    for (int64_t s = 0; s < x.P; ++s)
      mine[size_t(j)] += x.count(s, x.r * x.local + j);
  // Into backend memory without a wait: only the counts' read waits.
  ::loomrt_upload(localCounts, mine.data(),
                  int64_t(mine.size() * sizeof(int32_t)));
}

} // namespace

void common::loomrt_moe_dispatch(loomrt_comm comm, loomrt_dtype dtype,
                                 int64_t E, int64_t N, int64_t H, int64_t M,
                                 const int32_t *all_counts, const void *rows,
                                 void *dispatched, int32_t *local_counts) {
  Exchange x = readExchange(__func__, comm, dtype, E, N, H, M, all_counts);
  exchange(comm, dtype, x, H, rows, nullptr, nullptr, dispatched,
           /*toExperts=*/true);
  int64_t received = x.receivedTotal();
  ::loomrt_zero(at(dispatched, received * x.rowBytes),
                (M - received) * x.rowBytes);
  uploadLocalCounts(x, local_counts);
}

void common::loomrt_moe_combine(loomrt_comm comm, loomrt_dtype dtype,
                                int64_t E, int64_t N, int64_t H, int64_t M,
                                const int32_t *all_counts,
                                const void *dispatched, void *rows) {
  Exchange x = readExchange(__func__, comm, dtype, E, N, H, M, all_counts);
  exchange(comm, dtype, x, H, nullptr, rows, dispatched, nullptr,
           /*toExperts=*/false);
  int64_t sent = x.sentTotal();
  ::loomrt_zero(at(rows, sent * x.rowBytes), (N - sent) * x.rowBytes);
}

void common::loomrt_moe_dispatch_allgather(
    loomrt_comm comm, loomrt_dtype dtype, int64_t E, int64_t N, int64_t H,
    int64_t M, const int32_t *all_counts, const void *rows, void *gathered,
    void *dispatched, int32_t *local_counts) {
  const int64_t shape[2] = {N, H};
  ::loomrt_all_gather(comm, dtype, 2, shape, 0, rows, gathered);
  ::loomrt_moe_take_expert_rows(dtype, ::loomrt_comm_size(comm),
                                ::loomrt_comm_rank(comm), E, N, H, M,
                                all_counts, gathered, dispatched,
                                local_counts);
}

void common::loomrt_moe_combine_allgather(
    loomrt_comm comm, loomrt_dtype dtype, int64_t E, int64_t N, int64_t H,
    int64_t M, const int32_t *all_counts, const void *dispatched,
    void *gathered, void *rows) {
  // Every row but those of this rank's experts is zero, so the sum over
  // the ranks is each row's one value, exactly.
  const int64_t P = ::loomrt_comm_size(comm);
  ::loomrt_moe_put_expert_rows(dtype, P, ::loomrt_comm_rank(comm), E, N, H, M,
                               all_counts, dispatched, gathered);
  const int64_t shape[2] = {P * N, H};
  ::loomrt_reduce_scatter(comm, dtype, 2, shape, 0, gathered, rows);
}
