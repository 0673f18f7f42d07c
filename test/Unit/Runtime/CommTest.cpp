//===- CommTest.cpp - Collectives and p2p under mpirun --------------------===//
//
// Run as `mpirun -np N loomrt-comm-tests` (N = 2 or 4). Every rank runs every
// test; only rank 0 prints. Tests use EXPECT_* only, never ASSERT_*: a rank
// that returned early would leave the others waiting in a collective. The
// result is agreed on with an all-reduce, so every rank exits alike.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Runtime/TestUtil.h"

#include <algorithm>
#include <numeric>

using namespace loomrt_test;

namespace {
int worldRank() { return loomrt_world_rank(); }
int worldSize() { return loomrt_world_size(); }

/// A deterministic value for element i of rank r's data.
float val(int r, int64_t i) { return float(r * 1000 + i); }

/// Row-major strides of a shape.
std::vector<int64_t> strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

int64_t numel(const std::vector<int64_t> &shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                         std::multiplies<int64_t>());
}

/// Multi-index of flat index i.
std::vector<int64_t> unflatten(int64_t i, const std::vector<int64_t> &shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

int64_t flatten(const std::vector<int64_t> &idx,
                const std::vector<int64_t> &shape) {
  int64_t f = 0;
  auto st = strides(shape);
  for (size_t d = 0; d < idx.size(); ++d)
    f += idx[d] * st[d];
  return f;
}
} // namespace

TEST(CommTest, WorldAndGroupsFromLists) {
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  EXPECT_EQ(loomrt_comm_size(world), W);
  EXPECT_EQ(loomrt_comm_rank(world), me);

  // Pairs {0,1},{2,3},... listed in reverse so group rank order is the list
  // order, not the world order.
  std::vector<int32_t> sizes, ranks;
  for (int g = 0; g < W / 2; ++g) {
    sizes.push_back(2);
    ranks.push_back(2 * g + 1);
    ranks.push_back(2 * g);
  }
  loomrt_comm pair =
      loomrt_comm_create(int32_t(sizes.size()), sizes.data(), ranks.data());
  ASSERT_NE(pair, nullptr); // Before any collective on `pair`: safe on all.
  EXPECT_EQ(loomrt_comm_size(pair), 2);
  EXPECT_EQ(loomrt_comm_rank(pair), me % 2 == 0 ? 1 : 0);
  EXPECT_EQ(loomrt_comm_world_rank_of(pair, 0), (me / 2) * 2 + 1);
  float x = float(me), sum = 0;
  loomrt_all_reduce(pair, LOOMRT_F32, LOOMRT_SUM, &x, &sum, 1);
  EXPECT_EQ(sum, float((me / 2) * 4 + 1)) << "sum of the pair's world ranks";
  loomrt_comm_destroy(pair);

  // Only rank 0 is in a group: everybody else gets NULL.
  std::vector<int32_t> one = {1}, zero = {0};
  loomrt_comm solo = loomrt_comm_create(1, one.data(), zero.data());
  EXPECT_EQ(solo == nullptr, me != 0);
  if (solo) {
    EXPECT_EQ(loomrt_comm_size(solo), 1);
    loomrt_comm_destroy(solo);
  }
}

TEST(CommTest, AllReduceSumMaxAndInPlace) {
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  const int64_t n = 1000;
  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16}) {
    SCOPED_TRACE(dtypeName(dt));
    std::vector<float> mine(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      mine[i] = float((i % 7) + me); // small integers: exact in every dtype
    Buf send(dt, mine), recv(dt, size_t(n));
    loomrt_all_reduce(world, dt, LOOMRT_SUM, send.data(), recv.data(), n);
    std::vector<float> got = recv.values();
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(got[i], float(W * (i % 7) + W * (W - 1) / 2)) << i;
    loomrt_all_reduce(world, dt, LOOMRT_MAX, send.data(), send.data(), n);
    got = send.values();
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(got[i], float((i % 7) + W - 1)) << i;
  }
}

TEST(CommTest, Broadcast) {
  loomrt_comm world = loomrt_comm_world();
  const int root = worldSize() - 1;
  std::vector<float> v(100);
  for (int64_t i = 0; i < 100; ++i)
    v[i] = val(worldRank(), i);
  Buf b(LOOMRT_BF16, v);
  loomrt_broadcast(world, LOOMRT_BF16, b.data(), 100, root);
  std::vector<float> want = rounded(v, LOOMRT_BF16);
  for (int64_t i = 0; i < 100; ++i)
    want[i] = rounded({val(root, i)}, LOOMRT_BF16)[0];
  EXPECT_EQ(b.values(), want);
}

TEST(CommTest, AllGatherAlongEveryDim) {
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  const std::vector<int64_t> local = {2, 3, 4};
  for (int dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    std::vector<float> send(size_t(numel(local)));
    for (int64_t i = 0; i < numel(local); ++i)
      send[i] = val(me, i);
    std::vector<int64_t> full = local;
    full[dim] *= W;
    std::vector<float> recv(size_t(numel(full)), -1.0f);
    loomrt_all_gather(world, LOOMRT_F32, 3, local.data(), dim, send.data(),
                      recv.data());
    for (int64_t i = 0; i < numel(full); ++i) {
      auto idx = unflatten(i, full);
      const int r = int(idx[dim] / local[dim]);
      idx[dim] %= local[dim];
      EXPECT_EQ(recv[i], val(r, flatten(idx, local))) << "element " << i;
    }
  }
}

TEST(CommTest, ReduceScatterAlongEveryDim) {
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  for (int dim = 0; dim < 3; ++dim) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    std::vector<int64_t> full = {2, 3, 2};
    full[dim] *= W;
    std::vector<float> send(size_t(numel(full)));
    for (int64_t i = 0; i < numel(full); ++i)
      send[i] = float(i + me); // sum over ranks: W*i + W(W-1)/2
    std::vector<int64_t> part = full;
    part[dim] /= W;
    Buf recv(LOOMRT_F16, size_t(numel(part)));
    loomrt_reduce_scatter(world, LOOMRT_F16, 3, full.data(), dim,
                          Buf(LOOMRT_F16, send).data(), recv.data());
    std::vector<float> got = recv.values();
    for (int64_t i = 0; i < numel(part); ++i) {
      auto idx = unflatten(i, part);
      idx[dim] += me * part[dim];
      const int64_t g = flatten(idx, full);
      EXPECT_EQ(got[i], float(W * g + W * (W - 1) / 2)) << "element " << i;
    }
  }
}

TEST(CommTest, AllToAllSplitOneDimConcatAnother) {
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  // Ulysses: [S/P, B, N, D] split heads (2), concat sequence (0); and the
  // reverse; and plain split == concat.
  const int pairs[][2] = {{2, 0}, {0, 2}, {1, 1}, {2, 1}};
  for (auto [split, concat] : pairs) {
    SCOPED_TRACE("split " + std::to_string(split) + " concat " +
                 std::to_string(concat));
    std::vector<int64_t> shape = {2, 3, 2, 2};
    shape[split] *= W;
    std::vector<float> send(size_t(numel(shape)));
    for (int64_t i = 0; i < numel(shape); ++i)
      send[i] = val(me, i);
    std::vector<int64_t> chunk = shape;
    chunk[split] /= W;
    std::vector<int64_t> out = chunk;
    out[concat] *= W;
    std::vector<float> recv(size_t(numel(out)), -1.0f);
    loomrt_all_to_all(world, LOOMRT_F32, 4, shape.data(), split, concat,
                      send.data(), recv.data());
    // recv slice r along concat = sender r's slice `me` along split.
    for (int64_t i = 0; i < numel(out); ++i) {
      auto idx = unflatten(i, out);
      const int r = int(idx[concat] / chunk[concat]);
      idx[concat] %= chunk[concat];
      idx[split] += me * chunk[split];
      EXPECT_EQ(recv[i], val(r, flatten(idx, shape))) << "element " << i;
    }
  }
}

TEST(CommTest, BatchedP2PRingBothDirections) {
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  const int next = (me + 1) % W, prev = (me + W - 1) % W;
  const int64_t n = 50000; // large enough to exceed eager buffering
  std::vector<float> toNext(static_cast<size_t>(n)),
      toPrev(static_cast<size_t>(n)), fromPrev(static_cast<size_t>(n)),
      fromNext(static_cast<size_t>(n)), second(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    toNext[i] = val(me, i);
    toPrev[i] = -val(me, i);
  }
  // Pipeline steady state: everybody sends both ways at once; a second
  // message to the same peer must match the second recv.
  std::vector<float> toNext2(size_t(n), float(me) + 0.5f);
  loomrt_p2p_begin(world);
  loomrt_send(world, LOOMRT_F32, toNext.data(), n, next);
  loomrt_recv(world, LOOMRT_F32, fromPrev.data(), n, prev);
  loomrt_send(world, LOOMRT_F32, toPrev.data(), n, prev);
  loomrt_recv(world, LOOMRT_F32, fromNext.data(), n, next);
  loomrt_send(world, LOOMRT_F32, toNext2.data(), n, next);
  loomrt_recv(world, LOOMRT_F32, second.data(), n, prev);
  loomrt_p2p_end(world);
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad += fromPrev[i] != val(prev, i);
    bad += fromNext[i] != -val(next, i);
    bad += second[i] != float(prev) + 0.5f;
  }
  EXPECT_EQ(bad, 0);

  // Unbatched: a single send or recv runs immediately.
  std::vector<uint16_t> token(3, uint16_t(me));
  if (me == 0)
    loomrt_send(world, LOOMRT_BF16, token.data(), 3, 1);
  else if (me == 1)
    loomrt_recv(world, LOOMRT_BF16, token.data(), 3, 0);
  if (me <= 1) {
    EXPECT_EQ(token[2], 0);
  }
}

TEST(CommTest, VocabParallelCrossEntropyMatchesFullLoss) {
  // The Megatron recipe with real all-reduces: each rank owns V/P columns.
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  const int64_t n = 5, Vl = 6, V = Vl * W;
  std::vector<float> logits = randomVec(size_t(n * V), 99, -4.0f, 4.0f);
  std::vector<int32_t> labels = {0, int32_t(V - 1), 3, int32_t(V / 2), 7};
  std::vector<float> mask = {1, 1, 0, 1, 1};
  std::vector<float> local;
  for (int64_t i = 0; i < n; ++i)
    local.insert(local.end(), logits.begin() + i * V + me * Vl,
                 logits.begin() + i * V + (me + 1) * Vl);
  std::vector<float> mx(static_cast<size_t>(n)), se(static_cast<size_t>(n)),
      tg(static_cast<size_t>(n));
  loomrt_ce_local_max(LOOMRT_F32, n, Vl, Vl, local.data(), mx.data());
  loomrt_all_reduce(world, LOOMRT_F32, LOOMRT_MAX, mx.data(), mx.data(), n);
  loomrt_ce_local_sum_exp(LOOMRT_F32, n, Vl, Vl, local.data(), mx.data(),
                          se.data());
  loomrt_all_reduce(world, LOOMRT_F32, LOOMRT_SUM, se.data(), se.data(), n);
  loomrt_ce_local_target(LOOMRT_F32, n, Vl, local.data(), labels.data(),
                         me * Vl, tg.data());
  loomrt_all_reduce(world, LOOMRT_F32, LOOMRT_SUM, tg.data(), tg.data(), n);
  float num = 0, den = 0, full = 0;
  loomrt_ce_loss_from_parts(n, mx.data(), se.data(), tg.data(), mask.data(),
                            nullptr, &num, &den);
  loomrt_cross_entropy_forward(LOOMRT_F32, n, V, logits.data(), labels.data(),
                               mask.data(), &full, nullptr);
  EXPECT_NEAR(num / den, full, 1e-5);

  std::vector<float> dfull(size_t(n * V)), dlocal(size_t(n * Vl));
  const float scale = 1.0f / den;
  loomrt_cross_entropy_backward(LOOMRT_F32, n, V, logits.data(), labels.data(),
                                mask.data(), 1.0f, dfull.data());
  loomrt_ce_vocab_parallel_backward(
      LOOMRT_F32, n, Vl, Vl, local.data(), labels.data(), me * Vl, mx.data(),
      se.data(), mask.data(), &scale, dlocal.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < Vl; ++j)
      EXPECT_NEAR(dlocal[i * Vl + j], dfull[i * V + me * Vl + j], 1e-6);
}

TEST(CommTest, RingAttentionForwardMatchesFullAttention) {
  // Context parallel: rank r holds queries and keys of sequence chunk r;
  // k/v travel around the ring with batched p2p, partials are merged.
  const int W = worldSize(), me = worldRank();
  loomrt_comm world = loomrt_comm_world();
  const int64_t Sl = 3, S = Sl * W, N = 2, D = 4;
  const float scale = 0.5f;
  std::vector<float> q = randomVec(size_t(S * N * D), 1),
                     k = randomVec(size_t(S * N * D), 2),
                     v = randomVec(size_t(S * N * D), 3);
  std::vector<float> oFull(q.size()), lseFull(size_t(N * S));
  loomrt_attention_forward(LOOMRT_F32, 1, S, S, N, N, D, scale, 1, nullptr,
                           nullptr, nullptr, nullptr, q.data(), k.data(),
                           v.data(), oFull.data(), lseFull.data());
  auto chunk = [&](const std::vector<float> &t, int r) {
    return std::vector<float>(t.begin() + r * Sl * N * D,
                              t.begin() + (r + 1) * Sl * N * D);
  };
  std::vector<float> ql = chunk(q, me), kl = chunk(k, me), vl = chunk(v, me);
  std::vector<int32_t> qPos(static_cast<size_t>(Sl)),
      kPos(static_cast<size_t>(Sl));
  for (int64_t i = 0; i < Sl; ++i)
    qPos[i] = int32_t(me * Sl + i);
  std::vector<float> o(ql.size()), lse(size_t(N * Sl));
  std::vector<float> oPart(ql.size()), lsePart(size_t(N * Sl));
  std::vector<float> kIn(kl.size()), vIn(vl.size());
  int owner = me;
  for (int step = 0; step < W; ++step) {
    for (int64_t i = 0; i < Sl; ++i)
      kPos[i] = int32_t(owner * Sl + i);
    float *oOut = step == 0 ? o.data() : oPart.data();
    float *lOut = step == 0 ? lse.data() : lsePart.data();
    loomrt_attention_forward(LOOMRT_F32, 1, Sl, Sl, N, N, D, scale, 1,
                             qPos.data(), kPos.data(), nullptr, nullptr,
                             ql.data(), kl.data(), vl.data(), oOut, lOut);
    if (step > 0)
      loomrt_attention_merge(LOOMRT_F32, 1, Sl, N, D, o.data(), lse.data(),
                             oPart.data(), lsePart.data());
    if (step + 1 == W)
      break;
    loomrt_p2p_begin(world);
    loomrt_send(world, LOOMRT_F32, kl.data(), int64_t(kl.size()), (me + 1) % W);
    loomrt_send(world, LOOMRT_F32, vl.data(), int64_t(vl.size()), (me + 1) % W);
    loomrt_recv(world, LOOMRT_F32, kIn.data(), int64_t(kIn.size()),
                (me + W - 1) % W);
    loomrt_recv(world, LOOMRT_F32, vIn.data(), int64_t(vIn.size()),
                (me + W - 1) % W);
    loomrt_p2p_end(world);
    kl.swap(kIn);
    vl.swap(vIn);
    owner = (owner + W - 1) % W;
  }
  expectClose(o, chunk(oFull, me), 1e-5, 1e-5, "o");
  for (int64_t h = 0; h < N; ++h)
    for (int64_t i = 0; i < Sl; ++i)
      EXPECT_NEAR(lse[h * Sl + i], lseFull[h * S + me * Sl + i], 1e-5);
}

// Expert parallelism: 2 experts per rank; rank r has count(r, e) rows of
// expert e (zero for some pairs, and expert 1 empty everywhere), each row
// tagged with its source rank, expert and index. The dispatch must lay out
// each rank's experts' rows by local expert, then source rank, zero past
// them, with the experts' totals as counts; the combine must return every
// row to its place (and zero the rows past the counts).
/// One round trip through the all-to-all dispatcher or (`allgather`)
/// Megatron's allgather dispatcher, which must move the same rows.
void moeRoundTrip(bool allgather) {
  const int W = worldSize(), me = worldRank();
  const int64_t E = 2 * W, H = 3, local = 2;
  auto count = [](int64_t r, int64_t e) -> int32_t {
    return e == 1 ? 0 : int32_t((r * 3 + e * 5) % 4);
  };
  auto tag = [](int64_t r, int64_t e, int64_t i, int64_t h) {
    return float(r * 10000 + e * 100 + i) + 0.25f * float(h);
  };
  std::vector<int32_t> all(size_t(W * E));
  int64_t most = 0;
  for (int64_t r = 0; r < W; ++r) {
    int64_t rows = 0;
    for (int64_t e = 0; e < E; ++e)
      rows += all[size_t(r * E + e)] = count(r, e);
    most = std::max(most, rows);
  }
  int64_t sent = 0;
  for (int64_t e = 0; e < E; ++e)
    sent += count(me, e);
  // Every rank's N alike (the all-gather's shape), past every rank's counts.
  const int64_t N = most + 2, M = W * N;
  std::vector<float> rows(size_t(N * H), -1.0f);
  int64_t at = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < count(me, e); ++i, ++at)
      for (int64_t h = 0; h < H; ++h)
        rows[size_t(at * H + h)] = tag(me, e, i, h);
  std::vector<float> dispatched(size_t(M * H), -1.0f);
  std::vector<float> gathered(size_t(W * N * H), -1.0f);
  std::vector<int32_t> localCounts(size_t(local), -1);
  if (allgather)
    loomrt_moe_dispatch_allgather(loomrt_comm_world(), LOOMRT_F32, E, N, H, M,
                                  all.data(), rows.data(), gathered.data(),
                                  dispatched.data(), localCounts.data());
  else
    loomrt_moe_dispatch(loomrt_comm_world(), LOOMRT_F32, E, N, H, M,
                        all.data(), rows.data(), dispatched.data(),
                        localCounts.data());
  int64_t row = 0;
  for (int64_t j = 0; j < local; ++j) {
    int64_t e = me * local + j, total = 0;
    for (int64_t s = 0; s < W; ++s)
      for (int64_t i = 0; i < count(s, e); ++i, ++row, ++total)
        for (int64_t h = 0; h < H; ++h)
          EXPECT_EQ(dispatched[size_t(row * H + h)], tag(s, e, i, h))
              << "expert " << e << " from rank " << s << " row " << i;
    EXPECT_EQ(localCounts[size_t(j)], total) << "expert " << e;
  }
  for (int64_t k = row * H; k < M * H; ++k)
    EXPECT_EQ(dispatched[size_t(k)], 0.0f) << "past the received rows";

  std::vector<float> back(size_t(N * H), -1.0f);
  if (allgather)
    loomrt_moe_combine_allgather(loomrt_comm_world(), LOOMRT_F32, E, N, H, M,
                                 all.data(), dispatched.data(),
                                 gathered.data(), back.data());
  else
    loomrt_moe_combine(loomrt_comm_world(), LOOMRT_F32, E, N, H, M, all.data(),
                       dispatched.data(), back.data());
  for (int64_t k = 0; k < sent * H; ++k)
    EXPECT_EQ(back[size_t(k)], rows[size_t(k)]) << "element " << k;
  for (int64_t k = sent * H; k < N * H; ++k)
    EXPECT_EQ(back[size_t(k)], 0.0f) << "past the counts";
}

TEST(CommTest, MoeDispatchAndCombineRoundTrip) { moeRoundTrip(false); }
TEST(CommTest, MoeAllgatherDispatchAndCombineRoundTrip) { moeRoundTrip(true); }

int main(int argc, char **argv) {
  loomrt_init(&argc, &argv);
  // The tests pair ranks and send to rank 1: they need an even world.
  if (worldSize() < 2 || worldSize() % 2 != 0) {
    if (worldRank() == 0)
      std::fprintf(stderr,
                   "loomrt-comm-tests: run under mpirun with an even "
                   "number of ranks (2 or 4), not %d\n",
                   worldSize());
    loomrt_finalize();
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  if (worldRank() != 0) {
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0;
  // Every rank reports the job's verdict, so a failure seen only on rank 3
  // still fails the test when rank 0 was fine.
  float anyFailed = float(failed);
  loomrt_all_reduce(loomrt_comm_world(), LOOMRT_F32, LOOMRT_MAX, &anyFailed,
                    &anyFailed, 1);
  if (worldRank() == 0 && anyFailed != 0 && !failed)
    std::fprintf(stderr, "loomrt-comm-tests: a test failed on another rank\n");
  loomrt_finalize();
  return anyFailed != 0 ? 1 : 0;
}
