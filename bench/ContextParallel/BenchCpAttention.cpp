//===- BenchCpAttention.cpp - Load balance of causal context parallelism --===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// One process plays every cp rank of one long causal sequence in turn and
// times each rank's attention work on the cpu backend (single-threaded
// kernels by default, so the ranks' times compare):
//
//   p2p        Megatron's load-balanced layout (rank r holds chunks r and
//              2cp-1-r of 2cp), TransformerEngine's ring: the DIAGONAL tile
//              (plain causal forward, as Loom's lowering does) plus one
//              LOWER (j < r) or UPPER (j > r) section per other rank, merged;
//              backward: one loomrt_attention_section_backward per block.
//   naive      contiguous split without the zigzag: rank r holds tokens
//              [r S/cp, (r+1) S/cp) against keys [0, (r+1) S/cp).
//   allgather  the load-balanced queries against the whole gathered sequence,
//              keys in natural order (Loom reorders the gathered chunks), as
//              Loom runs it: loomrt_attention_chunked_forward/backward, per
//              query chunk g the keys before it unmasked and its diagonal
//              causal, merged.
//   allgather-positions  the same in one causal call by positions (Loom's
//              lowering before the chunked calls; not in the default list).
//   a2a        Ulysses as Loom runs it: Nq/cp query heads (kv heads repeated
//              when cp does not divide them) over the whole sequence in
//              order (Loom reorders the exchanged chunks, as TE does).
//   a2a+p2p    hierarchical (--a2a-size A, default 2): rank r = p A + a
//              runs the p2p ring of P = cp / A ranks on the load-balanced
//              layout of a 2P split (A times the tokens) with heads
//              [a Nq/A, (a+1) Nq/A) (and the same share of kv heads), as
//              Loom does after the level-0 all-to-all.
//
// Defaults: S = 4096 (B = 1), 8 query heads, 8 and then 2 kv heads, head
// dim 64, f32, cp 1, 2, 4, 3 repetitions: about 2 minutes on 2 cores (S =
// 8192 takes 4 times as long). Each time is the median of --reps
// repetitions after --warmup untimed ones, run round-robin over the ranks so
// that a slow spell of a shared machine hits them alike. Next to the times
// it prints
// the score elements the kernel computes per rank (it trims, per block of
// 128 queries, the keys after the last one any of them sees, so key order
// matters) against the causally visible ones, and the bytes each rank moves
// per layer and micro-batch for each cp comm type (analytic, no MPI).
//
//   bench-cp-attention [--seq S] [--heads Nq] [--kv-heads 8,2] [--head-dim D]
//                      [--cp 1,2,4] [--reps N] [--warmup N] [--threads T]
//                      [--schemes p2p,naive,allgather,a2a,a2a+p2p,
//                                 allgather-positions]
//                      [--a2a-size A] [--forward-only]
//                      [--clock cpu|wall]
//
// Times are process CPU time by default (--clock cpu): with one kernel
// thread that is the rank's compute time even on a loaded shared machine;
// use --clock wall with --threads > 1.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <time.h>

namespace {

constexpr int64_t kQueryBlock = 128; // runtime/cpu/Attention.cpp's blocking

struct Options {
  int64_t S = 4096, Nq = 8, D = 64;
  std::vector<int64_t> kvHeads = {8, 2};
  std::vector<int64_t> cps = {1, 2, 4};
  std::vector<std::string> schemes = {"p2p", "naive", "allgather", "a2a",
                                      "a2a+p2p"};
  int64_t a2aSize = 2; // a2a+p2p's level-0 group
  int reps = 3;
  int warmup = 1;
  int threads = 1;
  bool backward = true;
  bool cpuClock = true;
};

std::vector<std::string> splitList(const char *s) {
  std::vector<std::string> out;
  std::string cur;
  for (const char *p = s;; ++p) {
    if (*p == ',' || *p == ' ' || *p == '\0') {
      if (!cur.empty())
        out.push_back(cur);
      cur.clear();
      if (*p == '\0')
        break;
    } else {
      cur += *p;
    }
  }
  return out;
}

std::vector<int64_t> intList(const char *s) {
  std::vector<int64_t> out;
  for (const std::string &x : splitList(s))
    out.push_back(std::atoll(x.c_str()));
  return out;
}

[[noreturn]] void usage(const char *msg) {
  std::fprintf(stderr,
               "bench-cp-attention: %s\nusage: bench-cp-attention [--seq S] "
               "[--heads Nq] [--kv-heads 8,2] [--head-dim D] [--cp 1,2,4] "
               "[--reps N] [--warmup N] [--threads T] "
               "[--schemes p2p,naive,allgather,a2a,a2a+p2p,allgather-positions] "
               "[--a2a-size A] "
               "[--forward-only] [--clock cpu|wall]\n",
               msg);
  std::exit(2);
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--seq")
      o.S = std::atoll(value());
    else if (a == "--heads")
      o.Nq = std::atoll(value());
    else if (a == "--kv-heads")
      o.kvHeads = intList(value());
    else if (a == "--head-dim")
      o.D = std::atoll(value());
    else if (a == "--cp")
      o.cps = intList(value());
    else if (a == "--reps")
      o.reps = std::max(1, std::atoi(value()));
    else if (a == "--warmup")
      o.warmup = std::max(0, std::atoi(value()));
    else if (a == "--threads")
      o.threads = std::atoi(value());
    else if (a == "--schemes")
      o.schemes = splitList(value());
    else if (a == "--a2a-size")
      o.a2aSize = std::atoll(value());
    else if (a == "--forward-only")
      o.backward = false;
    else if (a == "--clock") {
      std::string c = value();
      if (c != "cpu" && c != "wall")
        usage("--clock takes cpu or wall");
      o.cpuClock = c == "cpu";
    } else if (a == "--help" || a == "-h")
      usage("help");
    else
      usage(("unknown flag " + a).c_str());
  }
  if (o.S <= 0 || o.Nq <= 0 || o.D <= 0 || o.kvHeads.empty() || o.cps.empty())
    usage("sizes must be positive");
  for (int64_t kv : o.kvHeads)
    if (kv <= 0 || o.Nq % kv != 0)
      usage("every --kv-heads value must divide --heads");
  for (int64_t cp : o.cps)
    if (cp <= 0 || o.S % (2 * cp) != 0)
      usage("--seq must divide into 2*cp chunks for every cp");
  for (const std::string &s : o.schemes)
    if (s != "p2p" && s != "naive" && s != "allgather" && s != "a2a" &&
        s != "a2a+p2p" && s != "allgather-positions")
      usage(("unknown scheme " + s).c_str());
  if (o.a2aSize < 1)
    usage("--a2a-size must be at least 1");
  return o;
}

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// --clock cpu: CPU time of the process (all its threads), which with one
/// kernel thread is that thread's compute time and does not count the time
/// other processes of a shared machine take from it; --clock wall: elapsed
/// time.
bool gCpuClock = true;

double nowMs() {
  if (gCpuClock) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Time in ms of one run of `body`, `reset` (untimed) before it.
double timeMs(const std::function<void()> &body,
              const std::function<void()> &reset = {}) {
  if (reset)
    reset();
  const double t0 = nowMs();
  body();
  return nowMs() - t0;
}

//===----------------------------------------------------------------------===//
// Work model: the score elements the cpu kernel computes for one call (per
// query head) and the causally visible ones.
//===----------------------------------------------------------------------===//

struct Work {
  double computed = 0, visible = 0;
  Work &operator+=(const Work &w) {
    computed += w.computed;
    visible += w.visible;
    return *this;
  }
  Work scaled(double f) const { return {computed * f, visible * f}; }
};

/// Mirrors Mask::keyEnd of runtime/cpu/Attention.cpp: per block of
/// kQueryBlock queries, keys up to the last one whose position does not
/// exceed the block's largest query position (a suffix trim only).
Work workOf(const std::vector<int32_t> &qPos, const std::vector<int32_t> &kPos,
            bool causal) {
  Work w;
  const int64_t S = int64_t(qPos.size()), Sk = int64_t(kPos.size());
  std::vector<int32_t> sorted(kPos);
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i0 = 0; i0 < S; i0 += kQueryBlock) {
    const int64_t rows = std::min(kQueryBlock, S - i0);
    int64_t end = Sk;
    if (causal) {
      const int32_t maxQ =
          *std::max_element(qPos.begin() + i0, qPos.begin() + i0 + rows);
      while (end > 0 && kPos[size_t(end - 1)] > maxQ)
        --end;
    }
    w.computed += double(rows) * double(end);
    for (int64_t i = i0; i < i0 + rows; ++i)
      w.visible +=
          causal
              ? double(std::upper_bound(sorted.begin(), sorted.end(), qPos[i]) -
                       sorted.begin())
              : double(Sk);
  }
  return w;
}

std::vector<int32_t> iota(int64_t begin, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = int32_t(begin + i);
  return v;
}

/// Positions of the load-balanced layout's rank r: chunks r and 2cp-1-r.
std::vector<int32_t> zigzagPositions(int64_t S, int64_t cp, int64_t r) {
  const int64_t c = S / (2 * cp);
  std::vector<int32_t> p = iota(r * c, c), hi = iota((2 * cp - 1 - r) * c, c);
  p.insert(p.end(), hi.begin(), hi.end());
  return p;
}

//===----------------------------------------------------------------------===//
// Tensors
//===----------------------------------------------------------------------===//

std::vector<float> randomVec(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

/// Rows `pos` (token indices) of a [S, width] tensor, columns
/// [col, col + cols).
std::vector<float> gather(const std::vector<float> &x, int64_t width,
                          const std::vector<int32_t> &pos, int64_t col,
                          int64_t cols) {
  std::vector<float> out(pos.size() * size_t(cols));
  for (size_t i = 0; i < pos.size(); ++i)
    std::memcpy(out.data() + i * size_t(cols),
                x.data() + size_t(pos[i]) * size_t(width) + size_t(col),
                size_t(cols) * sizeof(float));
  return out;
}

/// kv heads repeated `factor` times each, consecutively (Loom's RepeatKvOp:
/// query head h reads repeated head h / (Nq / (Nkv * factor))).
std::vector<float> repeatHeads(const std::vector<float> &x, int64_t S,
                               int64_t heads, int64_t D, int64_t factor) {
  if (factor == 1)
    return x;
  std::vector<float> out(size_t(S * heads * factor * D));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t f = 0; f < factor; ++f)
        std::memcpy(
            out.data() + size_t((s * heads * factor + h * factor + f) * D),
            x.data() + size_t((s * heads + h) * D), size_t(D) * sizeof(float));
  return out;
}

struct Global {
  int64_t S, Nq, Nkv, D;
  int64_t a2aSize = 2;
  std::vector<float> q, k, v, dout;
  float scale;
};

//===----------------------------------------------------------------------===//
// One rank's work
//===----------------------------------------------------------------------===//

/// A rank's inputs (owned by its closures), its forward and backward, and
/// the work model of its calls.
struct RankJob {
  Work work;
  std::function<void()> forward, backward, resetBackward;
};

struct RankResult {
  double fwd = 0, bwd = 0;
  Work work;
};

const float kNegInf = -std::numeric_limits<float>::infinity();

/// Ring attention (p2p) of rank r: the diagonal as a plain causal forward
/// (Loom's lowering of the first ring step), then one section per other
/// block in ring order; backward one section per block, the diagonal last.
/// Rank r of a ring of `cp` ranks on the load-balanced layout, with query
/// heads [q0, q0 + nq) and kv heads [kv0, kv0 + nkv) (all of them for p2p;
/// a share for a2a+p2p, whose ring runs after the heads were traded).
RankJob p2pRank(const Global &g, int64_t cp, int64_t r, int64_t q0,
                int64_t nq, int64_t kv0, int64_t nkv) {
  struct State {
    std::vector<float> q, dout, out, dq, lse;
    std::vector<std::vector<float>> k, v, dk, dv;
  };
  auto st = std::make_shared<State>();
  const int64_t L = g.S / cp, c = L / 2;
  const int64_t qW = nq * g.D, kvW = nkv * g.D;
  std::vector<int32_t> pos = zigzagPositions(g.S, cp, r);
  st->q = gather(g.q, g.Nq * g.D, pos, q0 * g.D, qW);
  st->dout = gather(g.dout, g.Nq * g.D, pos, q0 * g.D, qW);
  st->out.assign(size_t(L * qW), 0.0f);
  st->dq.assign(size_t(L * qW), 0.0f);
  st->lse.assign(size_t(nq * L), kNegInf);
  for (int64_t j = 0; j < cp; ++j) {
    std::vector<int32_t> pj = zigzagPositions(g.S, cp, j);
    st->k.push_back(gather(g.k, g.Nkv * g.D, pj, kv0 * g.D, kvW));
    st->v.push_back(gather(g.v, g.Nkv * g.D, pj, kv0 * g.D, kvW));
    st->dk.emplace_back(size_t(L * kvW), 0.0f);
    st->dv.emplace_back(size_t(L * kvW), 0.0f);
  }
  auto section = [r](int64_t j) {
    return j == r  ? LOOMRT_SECTION_DIAGONAL
           : j < r ? LOOMRT_SECTION_LOWER
                   : LOOMRT_SECTION_UPPER;
  };
  const Global *gp = &g;

  RankJob job;
  // Work: the diagonal on local indices, then half a tile per other block.
  job.work += workOf(iota(0, L), iota(0, L), true).scaled(double(nq));
  job.work += Work{double(L * c), double(L * c)}.scaled(double(nq * (cp - 1)));
  job.forward = [st, gp, cp, r, L, nq, nkv, section] {
    const Global &g = *gp;
    State &s = *st;
    loomrt_attention_forward(LOOMRT_F32, 1, L, L, nq, nkv, g.D, g.scale, 1,
                             nullptr, nullptr, nullptr, nullptr, s.q.data(),
                             s.k[size_t(r)].data(), s.v[size_t(r)].data(),
                             s.out.data(), s.lse.data());
    // Ring order: block j = r-1, r-2, ... arrives at step r - j (mod cp).
    for (int64_t i = 1; i < cp; ++i) {
      const int64_t j = (r - i + cp) % cp;
      loomrt_attention_section_forward(
          LOOMRT_F32, 1, L, nq, nkv, g.D, g.scale, section(j), nullptr, nullptr,
          s.q.data(),
          s.k[size_t(j)].data(), s.v[size_t(j)].data(), s.out.data(),
          s.lse.data());
    }
  };
  job.backward = [st, gp, cp, r, L, nq, nkv, section] {
    const Global &g = *gp;
    State &s = *st;
    // Backward ring: block j = r+1, r+2, ..., the diagonal last.
    for (int64_t i = 0; i < cp; ++i) {
      const int64_t j = (r + 1 + i) % cp;
      loomrt_attention_section_backward(
          LOOMRT_F32, 1, L, nq, nkv, g.D, g.scale, section(j), nullptr, nullptr,
          s.q.data(),
          s.k[size_t(j)].data(), s.v[size_t(j)].data(), s.out.data(),
          s.lse.data(), s.dout.data(), s.dq.data(), s.dk[size_t(j)].data(),
          s.dv[size_t(j)].data());
    }
  };
  // The sections accumulate: zero the gradients before each backward.
  job.resetBackward = [st] {
    std::fill(st->dq.begin(), st->dq.end(), 0.0f);
    for (size_t j = 0; j < st->dk.size(); ++j) {
      std::fill(st->dk[j].begin(), st->dk[j].end(), 0.0f);
      std::fill(st->dv[j].begin(), st->dv[j].end(), 0.0f);
    }
  };
  return job;
}

/// One plain attention call per rank: `qPos` rows of the queries (heads
/// [h0, h0 + nq)) against `kPos` rows of the keys (kv heads [kh0, kh0 + nkv)
/// of `kAll`/`vAll`, whose rows are `kvHeadsW` floats), causal by positions.
RankJob plainRank(const Global &g, const std::vector<int32_t> &qPos,
                  const std::vector<int32_t> &kPos, int64_t h0, int64_t nq,
                  const std::vector<float> &kAll,
                  const std::vector<float> &vAll, int64_t kvHeadsW, int64_t kh0,
                  int64_t nkv) {
  struct State {
    std::vector<float> q, dout, k, v, out, dq, dk, dv, lse;
    std::vector<int32_t> qPos, kPos;
    const int32_t *qp = nullptr, *kp = nullptr;
  };
  auto st = std::make_shared<State>();
  const int64_t Sq = int64_t(qPos.size()), Sk = int64_t(kPos.size());
  const int64_t qW = g.Nq * g.D;
  st->q = gather(g.q, qW, qPos, h0 * g.D, nq * g.D);
  st->dout = gather(g.dout, qW, qPos, h0 * g.D, nq * g.D);
  st->k = gather(kAll, kvHeadsW, kPos, kh0 * g.D, nkv * g.D);
  st->v = gather(vAll, kvHeadsW, kPos, kh0 * g.D, nkv * g.D);
  st->out.assign(st->q.size(), 0.0f);
  st->dq.assign(st->q.size(), 0.0f);
  st->dk.assign(st->k.size(), 0.0f);
  st->dv.assign(st->k.size(), 0.0f);
  st->lse.assign(size_t(nq * Sq), kNegInf);
  st->qPos = qPos;
  st->kPos = kPos;
  // NULL positions mean 0..n-1: pass none when they are.
  auto natural = [](const std::vector<int32_t> &p) {
    for (size_t i = 0; i < p.size(); ++i)
      if (p[i] != int32_t(i))
        return false;
    return true;
  };
  st->qp = natural(qPos) ? nullptr : st->qPos.data();
  st->kp = natural(kPos) ? nullptr : st->kPos.data();
  const int64_t D = g.D;
  const float scale = g.scale;

  RankJob job;
  job.work = workOf(qPos, kPos, true).scaled(double(nq));
  job.forward = [st, Sq, Sk, nq, nkv, D, scale] {
    State &s = *st;
    loomrt_attention_forward(LOOMRT_F32, 1, Sq, Sk, nq, nkv, D, scale, 1, s.qp,
                             s.kp, nullptr, nullptr, s.q.data(), s.k.data(),
                             s.v.data(), s.out.data(), s.lse.data());
  };
  job.backward = [st, Sq, Sk, nq, nkv, D, scale] {
    State &s = *st;
    loomrt_attention_backward(
        LOOMRT_F32, 1, Sq, Sk, nq, nkv, D, scale, 1, s.qp, s.kp, nullptr,
        nullptr, s.q.data(), s.k.data(), s.v.data(), s.out.data(), s.lse.data(),
        s.dout.data(), s.dq.data(), s.dk.data(), s.dv.data(), /*accumulate=*/0);
  };
  return job;
}

/// The all-gather scheme of rank r as Loom runs it: its two load-balanced
/// chunks (stored chunks 2r, 2r+1 of the order 0, 2cp-1, 1, 2cp-2, ...)
/// against the whole sequence in order, through the chunked entry points.
RankJob chunkedRank(const Global &g, int64_t cp, int64_t r) {
  struct State {
    std::vector<float> q, dout, out, dq, dk, dv, lse;
    std::vector<int64_t> order;
  };
  auto st = std::make_shared<State>();
  const int64_t L = g.S / cp, c = L / 2, qW = g.Nq * g.D;
  std::vector<int32_t> pos = zigzagPositions(g.S, cp, r);
  st->q = gather(g.q, qW, pos, 0, qW);
  st->dout = gather(g.dout, qW, pos, 0, qW);
  st->out.assign(st->q.size(), 0.0f);
  st->dq.assign(st->q.size(), 0.0f);
  st->dk.assign(g.k.size(), 0.0f);
  st->dv.assign(g.v.size(), 0.0f);
  st->lse.assign(size_t(g.Nq * L), kNegInf);
  for (int64_t j = 0; j < cp; ++j) {
    st->order.push_back(j);
    st->order.push_back(2 * cp - 1 - j);
  }
  const Global *gp = &g;
  RankJob job;
  // Per chunk g: g*c keys whole, then the c x c diagonal.
  for (int64_t h = 0; h < 2; ++h) {
    const int64_t gc = st->order[size_t(2 * r + h)];
    job.work += Work{double(c * gc * c), double(c * gc * c)}.scaled(double(g.Nq));
    job.work += workOf(iota(0, c), iota(0, c), true).scaled(double(g.Nq));
  }
  job.forward = [st, gp, cp, r, L, c] {
    const Global &g = *gp;
    State &s = *st;
    loomrt_attention_chunked_forward(
        LOOMRT_F32, 1, L, r * L, c, int32_t(2 * cp), s.order.data(), g.Nq,
        g.Nkv, g.D, g.scale, nullptr, nullptr, s.q.data(), g.k.data(),
        g.v.data(), s.out.data(), s.lse.data());
  };
  job.backward = [st, gp, cp, r, L, c] {
    const Global &g = *gp;
    State &s = *st;
    loomrt_attention_chunked_backward(
        LOOMRT_F32, 1, L, r * L, c, int32_t(2 * cp), s.order.data(), g.Nq,
        g.Nkv, g.D, g.scale, nullptr, nullptr, s.q.data(), g.k.data(),
        g.v.data(), s.out.data(), s.lse.data(), s.dout.data(), s.dq.data(),
        s.dk.data(), s.dv.data());
  };
  return job;
}

/// The a2a kv repeat factor (Loom repeats kv heads that cp does not divide;
/// TE refuses). 0: a2a impossible (query heads do not divide over cp, or
/// neither of kv heads and cp divides the other).
int64_t a2aFactor(int64_t Nq, int64_t Nkv, int64_t cp) {
  if (Nq % cp != 0)
    return 0;
  if (Nkv % cp == 0)
    return 1;
  return cp % Nkv == 0 ? cp / Nkv : 0;
}

/// Whether a2a+p2p with level-0 groups of A runs at `cp`: A divides cp
/// with a ring of at least 2 (else it is plain a2a or p2p), and the query
/// and kv heads split over A (Loom and TE require it).
bool hierarchicalFits(int64_t Nq, int64_t Nkv, int64_t cp, int64_t A) {
  return A > 1 && cp % A == 0 && cp / A > 1 && Nq % A == 0 && Nkv % A == 0;
}

/// Every rank's job of `scheme` at `cp` (cp 1: the whole sequence).
std::vector<RankJob> makeJobs(const Global &g, const std::string &scheme,
                              int64_t cp) {
  std::vector<RankJob> jobs;
  const int64_t kvW = g.Nkv * g.D;
  if (cp == 1) {
    jobs.push_back(plainRank(g, iota(0, g.S), iota(0, g.S), 0, g.Nq, g.k, g.v,
                             kvW, 0, g.Nkv));
    return jobs;
  }
  std::vector<float> kRep, vRep;
  int64_t factor = 1;
  if (scheme == "a2a") {
    factor = a2aFactor(g.Nq, g.Nkv, cp);
    kRep = repeatHeads(g.k, g.S, g.Nkv, g.D, factor);
    vRep = repeatHeads(g.v, g.S, g.Nkv, g.D, factor);
  }
  for (int64_t r = 0; r < cp; ++r) {
    if (scheme == "p2p") {
      jobs.push_back(p2pRank(g, cp, r, 0, g.Nq, 0, g.Nkv));
    } else if (scheme == "a2a+p2p") {
      // Rank p A + a: ring rank p of P, head share a of A.
      const int64_t A = g.a2aSize, P = cp / A, p = r / A, a = r % A;
      jobs.push_back(p2pRank(g, P, p, a * g.Nq / A, g.Nq / A, a * g.Nkv / A,
                             g.Nkv / A));
    } else if (scheme == "naive") {
      const int64_t n = g.S / cp;
      jobs.push_back(plainRank(g, iota(r * n, n), iota(0, (r + 1) * n), 0, g.Nq,
                               g.k, g.v, kvW, 0, g.Nkv));
    } else if (scheme == "allgather") {
      jobs.push_back(chunkedRank(g, cp, r));
    } else if (scheme == "allgather-positions") {
      jobs.push_back(plainRank(g, zigzagPositions(g.S, cp, r), iota(0, g.S), 0,
                               g.Nq, g.k, g.v, kvW, 0, g.Nkv));
    } else { // a2a
      const int64_t nkv = g.Nkv * factor / cp, nq = g.Nq / cp;
      jobs.push_back(plainRank(g, iota(0, g.S), iota(0, g.S), r * nq, nq, kRep,
                               vRep, g.Nkv * factor * g.D, r * nkv, nkv));
    }
  }
  return jobs;
}

/// Times every rank: the repetitions run round-robin over the ranks (rep 0
/// of every rank, then rep 1, ...), so that a slow spell of a shared machine
/// falls on all ranks alike; each rank's time is its median.
std::vector<RankResult> measure(std::vector<RankJob> &jobs, const Options &o) {
  const size_t n = jobs.size();
  std::vector<std::vector<double>> fwd(n), bwd(n);
  // The first --warmup rounds are not counted (a rank's first call runs
  // about 20% slower).
  for (int rep = 0; rep < o.warmup + o.reps; ++rep)
    for (size_t r = 0; r < n; ++r) {
      const double t = timeMs(jobs[r].forward);
      if (rep >= o.warmup)
        fwd[r].push_back(t);
    }
  // Each backward needs its rank's forward results, which are in place.
  if (o.backward)
    for (int rep = 0; rep < o.warmup + o.reps; ++rep)
      for (size_t r = 0; r < n; ++r) {
        const double t = timeMs(jobs[r].backward, jobs[r].resetBackward);
        if (rep >= o.warmup)
          bwd[r].push_back(t);
      }
  std::vector<RankResult> out(n);
  for (size_t r = 0; r < n; ++r) {
    out[r].fwd = median(fwd[r]);
    out[r].bwd = o.backward ? median(bwd[r]) : 0.0;
    out[r].work = jobs[r].work;
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

std::string perRank(const std::vector<RankResult> &rs,
                    double RankResult::*field, int64_t maxCp) {
  std::string s;
  char buf[32];
  for (int64_t i = 0; i < maxCp; ++i) {
    if (i < int64_t(rs.size())) {
      const double t = rs[size_t(i)].*field;
      std::snprintf(buf, sizeof buf, t < 100 ? "%8.1f" : "%8.0f", t);
    } else {
      std::snprintf(buf, sizeof buf, "%8s", "");
    }
    s += buf;
  }
  return s;
}

double ratio(const std::vector<double> &v) {
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo > 0 ? *hi / *lo : 0.0;
}

std::vector<double> field(const std::vector<RankResult> &rs,
                          double RankResult::*f) {
  std::vector<double> v;
  for (const RankResult &r : rs)
    v.push_back(r.*f);
  return v;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/// How the byte counts of printBytes are computed (printed once).
void printByteFormulas() {
  std::printf(
      "\nBytes each rank sends per layer and micro-batch (it receives as "
      "many);\nL = S/cp local tokens, es = bytes per element (4, f32), KV = "
      "2*B*L*Nkv*D*es\n(its k and v block):\n"
      "  p2p        fwd (cp-1)*KV    cp-1 ring hops of k,v\n"
      "             bwd 2*(cp-1)*KV  cp-1 hops of k,v + cp-1 hops of dk,dv\n"
      "  allgather  fwd (cp-1)*KV    all-gather of k,v (ring algorithm)\n"
      "             bwd 2*(cp-1)*KV  all-gather again + reduce-scatter of "
      "dk,dv\n"
      "  a2a        each all-to-all sends (cp-1)/cp of a local [B,L,heads*D] "
      "tensor;\n"
      "             Nkv' = Nkv, or cp when cp does not divide Nkv (Loom "
      "repeats each kv\n             head cp/Nkv times; TE refuses)\n"
      "             fwd      4 (q,k,v in; o out):   "
      "(cp-1)/cp*B*L*D*es*(2*Nq + 2*Nkv')\n"
      "             bwd Loom 8 (q,k,v,o,dout in; dq,dk,dv out):\n"
      "                                             "
      "(cp-1)/cp*B*L*D*es*(4*Nq + 4*Nkv')\n"
      "             bwd TE   4 (dout in; dq,dk,dv out): "
      "(cp-1)/cp*B*L*D*es*(2*Nq + 2*Nkv')\n"
      "  a2a+p2p    A = --a2a-size, P = cp/A; all-to-alls within the A "
      "ranks of a group\n"
      "             send (A-1)/A of a local tensor, the ring moves blocks of "
      "KV bytes\n"
      "             (A times the tokens, 1/A of the kv heads):\n"
      "             fwd 5 (q,k,v in; o,lse out) + (P-1)*KV:\n"
      "                 (A-1)/A*B*L*es*(D*(2*Nq + 2*Nkv) + Nq) + (P-1)*KV\n"
      "             bwd 7 (q,o,dout,lse in; dq,dk,dv out) + 2*(P-1)*KV:\n"
      "                 (A-1)/A*B*L*es*(D*(4*Nq + 2*Nkv) + Nq) + "
      "2*(P-1)*KV\n");
}

/// The bytes each rank sends, in MiB, for every cp of `o` and Nkv.
void printBytes(const Options &o, int64_t Nkv) {
  const double es = 4; // f32
  std::printf("\nMiB each rank sends per layer and micro-batch (formulas at "
              "the top; B=1, f32):\n");
  std::printf("  %-3s %12s %12s %12s %12s %12s %12s %14s %12s %12s\n", "cp",
              "p2p fwd", "p2p bwd", "ag fwd", "ag bwd", "a2a fwd", "a2a bwd",
              "a2a bwd TE", "hier fwd", "hier bwd");
  for (int64_t cp : o.cps) {
    const double L = double(o.S / cp);
    const double KV = 2 * L * double(Nkv * o.D) * es;
    const double p2pF = double(cp - 1) * KV, p2pB = 2 * double(cp - 1) * KV;
    const int64_t f = a2aFactor(o.Nq, Nkv, cp);
    char a2aF[32], a2aB[32], a2aTE[32];
    if (f == 0) {
      std::snprintf(a2aF, sizeof a2aF, "n/a");
      std::snprintf(a2aB, sizeof a2aB, "n/a");
      std::snprintf(a2aTE, sizeof a2aTE, "n/a");
    } else {
      const double share = double(cp - 1) / double(cp) * L * double(o.D) * es;
      const double kvp = double(Nkv * f);
      std::snprintf(a2aF, sizeof a2aF, "%.2f",
                    mib(share * (2 * double(o.Nq) + 2 * kvp)));
      std::snprintf(a2aB, sizeof a2aB, "%.2f",
                    mib(share * (4 * double(o.Nq) + 4 * kvp)));
      // TE asserts that cp divides the kv heads.
      if (f == 1)
        std::snprintf(a2aTE, sizeof a2aTE, "%.2f",
                      mib(share * (2 * double(o.Nq) + 2 * kvp)));
      else
        std::snprintf(a2aTE, sizeof a2aTE, "refused");
    }
    char hierF[32] = "n/a", hierB[32] = "n/a";
    if (hierarchicalFits(o.Nq, Nkv, cp, o.a2aSize)) {
      const double A = double(o.a2aSize), P = double(cp) / A;
      const double share = (A - 1) / A * L * es;
      std::snprintf(hierF, sizeof hierF, "%.2f",
                    mib(share * (double(o.D) * (2 * double(o.Nq) +
                                                2 * double(Nkv)) +
                                 double(o.Nq)) +
                        (P - 1) * KV));
      std::snprintf(hierB, sizeof hierB, "%.2f",
                    mib(share * (double(o.D) * (4 * double(o.Nq) +
                                                2 * double(Nkv)) +
                                 double(o.Nq)) +
                        2 * (P - 1) * KV));
    }
    std::printf("  %-3lld %12.2f %12.2f %12.2f %12.2f %12s %12s %14s %12s "
                "%12s\n",
                (long long)cp, mib(p2pF), mib(p2pB), mib(p2pF), mib(p2pB), a2aF,
                a2aB, a2aTE, hierF, hierB);
  }
}

void runVariant(const Options &o, int64_t Nkv) {
  Global g;
  g.S = o.S;
  g.Nq = o.Nq;
  g.Nkv = Nkv;
  g.D = o.D;
  g.a2aSize = o.a2aSize;
  g.scale = 1.0f / std::sqrt(float(o.D));
  g.q = randomVec(size_t(o.S * o.Nq * o.D), 1);
  g.k = randomVec(size_t(o.S * Nkv * o.D), 2);
  g.v = randomVec(size_t(o.S * Nkv * o.D), 3);
  g.dout = randomVec(size_t(o.S * o.Nq * o.D), 4);

  const int64_t maxCp = *std::max_element(o.cps.begin(), o.cps.end());
  std::printf("\n== S=%lld B=1 Nq=%lld Nkv=%lld D=%lld f32, %d thread(s), "
              "median of %d ==\n",
              (long long)o.S, (long long)o.Nq, (long long)Nkv, (long long)o.D,
              loomrt_get_num_threads(), o.reps);

  // cp 1: the whole sequence, one causal call (every scheme's cp 1).
  std::vector<RankJob> wholeJob = makeJobs(g, "", 1);
  const RankResult whole = measure(wholeJob, o)[0];
  const double wholeFB = whole.fwd + whole.bwd;

  std::string hdr;
  for (int64_t i = 0; i < maxCp; ++i)
    hdr += "      r" + std::to_string(i);
  std::printf("%-9s %2s | %-5s%s | %7s %7s | %9s %7s | %8s %8s %7s\n", "scheme",
              "cp", "pass", hdr.c_str(), "max/min", "slowest", "cp1/slow",
              "ideal", "vis m/m", "work m/m", "cmp/vis");
  auto row = [&](const char *name, int64_t cp, const char *pass,
                 const std::vector<RankResult> &rs, double RankResult::*f,
                 double cp1, bool first) {
    std::vector<double> t = field(rs, f);
    const double slow = *std::max_element(t.begin(), t.end());
    std::vector<double> computed, visible;
    double comp = 0, vis = 0;
    for (const RankResult &r : rs) {
      computed.push_back(r.work.computed);
      visible.push_back(r.work.visible);
      comp += r.work.computed;
      vis += r.work.visible;
    }
    char work[64] = "";
    if (first)
      std::snprintf(work, sizeof work, "%8.2f %8.2f %7.2f", ratio(visible),
                    ratio(computed), comp / vis);
    std::printf(
        slow < 100 ? "%-9s %2lld | %-5s%s | %7.2f %7.1f | %8.2fx %6lldx | %s\n"
                   : "%-9s %2lld | %-5s%s | %7.2f %7.0f | %8.2fx %6lldx | %s\n",
        name, (long long)cp, pass, perRank(rs, f, maxCp).c_str(), ratio(t),
        slow, cp1 / slow, (long long)cp, work);
  };
  std::vector<RankResult> wholeRanks{whole};
  row("whole", 1, "fwd", wholeRanks, &RankResult::fwd, whole.fwd, true);
  if (o.backward) {
    row("", 1, "bwd", wholeRanks, &RankResult::bwd, whole.bwd, false);
    std::vector<RankResult> fb{whole};
    fb[0].fwd = wholeFB;
    row("", 1, "f+b", fb, &RankResult::fwd, wholeFB, false);
  }
  std::fflush(stdout);

  for (const std::string &scheme : o.schemes) {
    for (int64_t cp : o.cps) {
      if (cp == 1)
        continue;
      if (scheme == "a2a+p2p" &&
          !hierarchicalFits(o.Nq, Nkv, cp, o.a2aSize)) {
        std::printf("%-9s %2lld | n/a: a2a groups of %lld do not divide cp "
                    "or split %lld query / %lld kv heads\n",
                    scheme.c_str(), (long long)cp, (long long)o.a2aSize,
                    (long long)o.Nq, (long long)Nkv);
        continue;
      }
      if (scheme == "a2a" && a2aFactor(o.Nq, Nkv, cp) == 0) {
        std::printf("%-9s %2lld | n/a: %lld query / %lld kv heads do not "
                    "split over cp\n",
                    scheme.c_str(), (long long)cp, (long long)o.Nq,
                    (long long)Nkv);
        continue;
      }
      std::vector<RankResult> ranks;
      {
        std::vector<RankJob> jobs = makeJobs(g, scheme, cp);
        ranks = measure(jobs, o);
      }
      row(scheme.c_str(), cp, "fwd", ranks, &RankResult::fwd, whole.fwd, true);
      if (o.backward) {
        row("", cp, "bwd", ranks, &RankResult::bwd, whole.bwd, false);
        std::vector<RankResult> fb = ranks;
        for (RankResult &r : fb)
          r.fwd += r.bwd;
        row("", cp, "f+b", fb, &RankResult::fwd, wholeFB, false);
      }
      std::fflush(stdout);
    }
  }
  printBytes(o, Nkv);
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  gCpuClock = o.cpuClock;
  loomrt_set_num_threads(o.threads);
  const auto start = std::chrono::steady_clock::now();
  std::printf(
      "Causal attention under context parallelism, every cp rank's work run "
      "in turn on\nthe cpu backend (%s, ms per rank, median of %d).\n"
      "  max/min   slowest rank over fastest (the load balance)\n"
      "  slowest   the critical path; cp1/slow = whole-sequence time over it "
      "(the\n            speedup bound; ideal = cp)\n"
      "  vis m/m   max/min over ranks of the causally visible score "
      "elements\n"
      "  work m/m  max/min over ranks of the score elements the kernel "
      "computes (it\n            trims, per block of %lld queries, only the "
      "keys after the last one\n            any of them sees)\n"
      "  cmp/vis   computed over visible score elements, all ranks\n",
      o.cpuClock ? "process CPU time" : "wall time", o.reps,
      (long long)kQueryBlock);
  printByteFormulas();
  for (int64_t kv : o.kvHeads)
    runVariant(o, kv);
  std::printf(
      "\n(whole run: %.1f s wall)\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  return 0;
}
