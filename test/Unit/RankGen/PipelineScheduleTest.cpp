//===- PipelineScheduleTest.cpp - Tests of Megatron's schedules -----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Step orders against the reference's hand-derived tables
// (shared/reference/megatron-cp-pp-ep.md B3: the pp 4 x vpp 2 x 8
// micro-batch table and 1F1B at pp 4, m 8 were checked there against
// Megatron-Core), rank 1's p2p calls of that example, the interleaved
// schedule's micro-batch rules, and the static check over a sweep of plans
// in both p2p modes.
//
//===----------------------------------------------------------------------===//

#include "rankgen/PipelineSchedule.h"
#include "rankgen/PipelineP2P.h"
#include "rankgen/PipelineTimeline.h"

#include "gtest/gtest.h"

#include <sstream>

using namespace loom::rankgen;

namespace {

ScheduleOptions opts(int64_t pp, int64_t vpp, int64_t m, int64_t group = 0,
                     bool forwardOnly = false) {
  ScheduleOptions o;
  o.pp = pp;
  o.vpp = vpp;
  o.numMicrobatches = m;
  o.microbatchGroupSize = group;
  o.forwardOnly = forwardOnly;
  return o;
}

PipelineSchedule make(const ScheduleOptions &o) {
  Result<PipelineSchedule> s = PipelineSchedule::create(o);
  EXPECT_TRUE(s.ok()) << s.error();
  return s.ok() ? s.take() : PipelineSchedule();
}

std::string error(const ScheduleOptions &o) {
  Result<PipelineSchedule> s = PipelineSchedule::create(o);
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : s.error();
}

/// A rank's steps as "F0.0 F1.0 ...".
std::string steps(const PipelineSchedule &s, int64_t rank) {
  std::string out;
  for (const ScheduleStep &step : s.ranks()[size_t(rank)].steps)
    out += (out.empty() ? "" : " ") + step.str();
  return out;
}

/// "F0 F1 ..." for schedules with one chunk: drops the ".0".
std::string flatSteps(const PipelineSchedule &s, int64_t rank) {
  std::string out;
  for (const ScheduleStep &step : s.ranks()[size_t(rank)].steps)
    out += (out.empty() ? "" : " ") + std::string(step.forward ? "F" : "B") +
           std::to_string(step.microbatch);
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// Step orders
//===----------------------------------------------------------------------===//

TEST(PipelineSchedule, NoPipelining) {
  PipelineSchedule s = make(opts(1, 1, 3));
  EXPECT_EQ(s.kind(), ScheduleKind::NoPipelining);
  EXPECT_EQ(steps(s, 0), "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0");
  EXPECT_EQ(steps(make(opts(1, 1, 3, 0, true)), 0), "F0.0 F1.0 F2.0");
  EXPECT_TRUE(s.ranks()[0].actions.size() == 6); // no communication
}

TEST(PipelineSchedule, OneFOneBPp4M8) {
  PipelineSchedule s = make(opts(4, 1, 8));
  EXPECT_EQ(s.kind(), ScheduleKind::OneFOneB);
  EXPECT_EQ(flatSteps(s, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(flatSteps(s, 1), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
  EXPECT_EQ(flatSteps(s, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(flatSteps(s, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(s.ranks()[size_t(r)].warmup, 3 - r);
    EXPECT_EQ(s.ranks()[size_t(r)].steady, 5 + r);
    EXPECT_EQ(s.ranks()[size_t(r)].cooldown, 3 - r);
  }
}

TEST(PipelineSchedule, OneFOneBFewerMicrobatchesThanStages) {
  // w = min(pp - r - 1, m): with m 2 ranks 0 and 1 run everything in
  // warmup, rank 2 warms up one.
  PipelineSchedule s = make(opts(4, 1, 2));
  EXPECT_EQ(flatSteps(s, 0), "F0 F1 B0 B1");
  EXPECT_EQ(s.ranks()[1].warmup, 2);
  EXPECT_EQ(s.ranks()[2].warmup, 1);
  EXPECT_EQ(flatSteps(s, 2), "F0 F1 B0 B1");
  EXPECT_EQ(flatSteps(s, 3), "F0 B0 F1 B1");
}

TEST(PipelineSchedule, OneFOneBForwardOnly) {
  PipelineSchedule s = make(opts(4, 1, 4, 0, true));
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(flatSteps(s, r), "F0 F1 F2 F3");
  // The calls of a middle rank: recv, F, send for every micro-batch.
  std::string calls;
  for (const RankAction &a : s.ranks()[1].actions)
    calls +=
        (calls.empty() ? "" : " ") + (a.isComm ? a.comm.name : a.step.str());
  EXPECT_EQ(calls, "recv_forward F0.0 send_forward recv_forward F1.0 "
                   "send_forward recv_forward F2.0 send_forward recv_forward "
                   "F3.0 send_forward");
}

TEST(PipelineSchedule, InterleavedReferenceTable) {
  // P = 4, V = 2, m = 8, G = 4: the reference's table, rank by rank.
  PipelineSchedule s = make(opts(4, 2, 8));
  EXPECT_EQ(s.kind(), ScheduleKind::Interleaved);
  EXPECT_EQ(s.microbatchGroupSize(), 4);
  EXPECT_EQ(steps(s, 0),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
            "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
            "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(steps(s, 1),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 "
            "F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 F4.1 B0.0 F5.1 B1.0 "
            "F6.1 B2.0 F7.1 B3.0 "
            "B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(steps(s, 2),
            "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 "
            "F2.1 B0.1 F3.1 B1.1 F4.0 B2.1 F5.0 B3.1 F6.0 B0.0 F7.0 B1.0 "
            "F4.1 B2.0 F5.1 B3.0 F6.1 B4.1 F7.1 B5.1 "
            "B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
  EXPECT_EQ(steps(s, 3),
            "F0.0 F1.0 F2.0 F3.0 "
            "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 "
            "F6.0 B2.0 F7.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 "
            "B4.0 B5.0 B6.0 B7.0");
  int64_t warmups[] = {10, 8, 6, 4};
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(s.ranks()[size_t(r)].warmup, warmups[r]);
    EXPECT_EQ(s.ranks()[size_t(r)].steady, 16 - warmups[r]);
    EXPECT_EQ(s.ranks()[size_t(r)].cooldown, warmups[r]);
  }
}

TEST(PipelineSchedule, InterleavedAllWarmup) {
  // P = 4, V = 2, m = 4: ranks 0 and 1 run everything in warmup, rank 2
  // warms up 6, rank 3 4 (the old "m == pp" rule is gone).
  PipelineSchedule s = make(opts(4, 2, 4));
  EXPECT_EQ(s.ranks()[0].warmup, 8);
  EXPECT_EQ(s.ranks()[1].warmup, 8);
  EXPECT_EQ(s.ranks()[2].warmup, 6);
  EXPECT_EQ(s.ranks()[3].warmup, 4);
  EXPECT_EQ(steps(s, 0), "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 "
                         "B0.1 B1.1 B2.1 B3.1 B0.0 B1.0 B2.0 B3.0");
  // An all-warmup rank receives its first gradient with recv_backward.
  bool recvBackward = false;
  for (const RankAction &a : s.ranks()[1].actions)
    recvBackward |= a.isComm && a.comm.name == "recv_backward";
  EXPECT_TRUE(recvBackward);
}

TEST(PipelineSchedule, InterleavedGroupSize) {
  // Megatron's comment: PP 2, N 3, M 5 with VP 2 gives micro-batches
  // 0 1 2 0 1 2 3 4 3 4 on chunks 0 0 0 1 1 1 0 0 1 1.
  PipelineSchedule s = make(opts(2, 2, 5, 3));
  EXPECT_EQ(s.microbatchGroupSize(), 3);
  std::string forwards;
  for (const ScheduleStep &step : s.ranks()[0].steps)
    if (step.forward)
      forwards += (forwards.empty() ? "" : " ") + step.str();
  EXPECT_EQ(forwards, "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 F3.0 F4.0 F3.1 F4.1");
  // w = (2 - 0 - 1) * 2 + (2 - 1) * 3 = 5 on rank 0, 3 on rank 1.
  EXPECT_EQ(s.ranks()[0].warmup, 5);
  EXPECT_EQ(s.ranks()[1].warmup, 3);
}

TEST(PipelineSchedule, InterleavedForwardOnly) {
  PipelineSchedule s = make(opts(4, 2, 8, 0, true));
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(steps(s, r), "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 "
                           "F4.0 F5.0 F6.0 F7.0 F4.1 F5.1 F6.1 F7.1");
    EXPECT_EQ(s.ranks()[size_t(r)].warmup, 16);
  }
}

//===----------------------------------------------------------------------===//
// P2P calls
//===----------------------------------------------------------------------===//

namespace {
/// A batched unit as the reference writes it: "s>2:a3" sends activation 3
/// to rank 2, "r<0:g1" receives gradient 1 from rank 0.
std::string unitText(const P2PUnit &unit) {
  std::string out = "[";
  for (size_t i = 0; i < unit.ops.size(); ++i) {
    const P2POp &op = unit.ops[i];
    out += (i ? ", " : "") +
           std::string(op.kind == P2PKind::Send ? "s>" : "r<") +
           std::to_string(op.peer) + ":" +
           (op.payload.kind == PayloadKind::Activation ? "a" : "g") +
           std::to_string(op.payload.microbatch);
  }
  return out + "]";
}
} // namespace

TEST(PipelineSchedule, InterleavedRank1Calls) {
  // The reference's p2p calls of rank 1 (P 4, V 2, m 8), batched, in
  // Megatron's op order send_prev, recv_prev, send_next, recv_next.
  PipelineSchedule s = make(opts(4, 2, 8));
  std::vector<P2PProgram> programs = pipelineP2PPrograms(s, P2PMode::Batched);
  const P2PProgram &rank1 = programs[1];
  ASSERT_EQ(rank1.size(), 1u + 8u + 8u + 8u);
  EXPECT_EQ(rank1[0].label, "recv_forward after the start");
  EXPECT_EQ(unitText(rank1[0]), "[r<0:a0]");
  // Warmup: 7 send_forward_recv_forward, then the last one also receives
  // the first gradient.
  EXPECT_EQ(unitText(rank1[1]), "[r<0:a1, s>2:a0]");
  EXPECT_EQ(rank1[1].label, "send_forward_recv_forward after F0.0");
  EXPECT_EQ(unitText(rank1[4]), "[r<0:a0, s>2:a3]"); // a0 for chunk 1
  EXPECT_EQ(rank1[4].ops[0].payload.stage, 4);       // rank 0's chunk 1
  EXPECT_EQ(unitText(rank1[8]), "[r<0:a4, s>2:a3, r<2:g0]");
  EXPECT_EQ(rank1[8].label,
            "send_forward_backward_recv_forward_backward after F3.1");
  // Steady: [s>2:a4, s>0:g0, r<0:a5, r<2:g1] in Megatron's order; the last
  // steady call receives no activation.
  EXPECT_EQ(unitText(rank1[9]), "[s>0:g0, r<0:a5, s>2:a4, r<2:g1]");
  EXPECT_EQ(rank1[9].label,
            "send_forward_backward_recv_forward_backward after B0.1");
  EXPECT_EQ(unitText(rank1[16]), "[s>0:g3, s>2:a7, r<2:g4]");
  // Cooldown: 7 send_backward_recv_backward, the last only sends g7.
  EXPECT_EQ(unitText(rank1[17]), "[s>0:g4, r<2:g5]");
  EXPECT_EQ(unitText(rank1[24]), "[s>0:g7]");
  EXPECT_EQ(rank1[24].label, "send_backward_recv_backward after B7.0");

  // Rank 3 sends its chunk-0 outputs around the ring to rank 0.
  EXPECT_EQ(unitText(programs[3][1]), "[r<2:a1, s>0:a0]");
  EXPECT_EQ(programs[3][1].ops[1].payload.stage, 3);
}

TEST(PipelineSchedule, UnbatchedEvenOddOrder) {
  // 1F1B steady state at pp 4: even rank 2 posts send_next before
  // recv_next, odd rank 3 recv_prev before send_prev; at pp 2 the even
  // rank's receives and the odd rank's sends use WORLD.
  std::vector<P2PProgram> programs =
      pipelineP2PPrograms(make(opts(2, 1, 2)), P2PMode::Unbatched);
  // Rank 0 (even): send_forward F0, then send_forward_recv_backward after F1:
  // send_next on pp, recv_next on world.
  ASSERT_EQ(programs[0].size(), 4u);
  EXPECT_EQ(programs[0][0].ops[0].str(),
            "send_next act mb 0 of stage 0 to rank 1 on pp");
  EXPECT_EQ(programs[0][1].ops[0].str(),
            "send_next act mb 1 of stage 0 to rank 1 on pp");
  EXPECT_EQ(programs[0][2].ops[0].str(),
            "recv_next grad mb 0 of stage 1 from rank 1 on world");
  // Rank 1 (odd): its receives use pp, its sends world.
  EXPECT_EQ(programs[1][0].ops[0].str(),
            "recv_prev act mb 0 of stage 0 from rank 0 on pp");
  EXPECT_EQ(programs[1][1].ops[0].str(),
            "recv_prev act mb 1 of stage 0 from rank 0 on pp");
  EXPECT_EQ(programs[1][2].ops[0].str(),
            "send_prev grad mb 0 of stage 1 to rank 0 on world");
}

//===----------------------------------------------------------------------===//
// The static check over a sweep of plans
//===----------------------------------------------------------------------===//

TEST(PipelineSchedule, SweepPassesTheStaticCheck) {
  // Every schedule is matched and deadlock-free in the unbatched (even/odd)
  // mode, and in the batched mode except interleaving at pp 2, where rank 0
  // batches a gradient and an activation to the same peer in the opposite
  // order to rank 1's receives (reference B5; at m = pp rank 0 runs all in
  // warmup and never batches the two).
  int checked = 0;
  for (int64_t pp = 1; pp <= 5; ++pp)
    for (int64_t vpp = 1; vpp <= 3; ++vpp)
      for (int64_t m = 1; m <= 12; ++m)
        for (bool forwardOnly : {false, true}) {
          ScheduleOptions o = opts(pp, vpp, m, 0, forwardOnly);
          o.shape = {8, 2, 64};
          o.dtype = "bf16";
          Result<PipelineSchedule> s = PipelineSchedule::create(o);
          if (!s)
            continue;
          std::ostringstream what;
          what << "pp " << pp << " vpp " << vpp << " m " << m
               << (forwardOnly ? " forward-only" : "");
          Result<bool> unbatched = checkPipelineP2P(*s, P2PMode::Unbatched);
          EXPECT_TRUE(unbatched.ok())
              << what.str() << ": " << unbatched.error();
          Result<bool> batched = checkPipelineP2P(*s, P2PMode::Batched);
          if (pp == 2 && vpp > 1 && !forwardOnly && m > pp)
            EXPECT_FALSE(batched.ok()) << what.str();
          else
            EXPECT_TRUE(batched.ok()) << what.str() << ": " << batched.error();
          // The order runs: every dependency is met in the ranks' orders.
          Result<PipelineTimeline> timeline = computeTimeline(*s);
          EXPECT_TRUE(timeline.ok()) << what.str() << ": " << timeline.error();
          ++checked;
        }
  EXPECT_GT(checked, 150);
}

TEST(PipelineSchedule, Pp2Vpp2BatchedSwapsActivationAndGradient) {
  ScheduleOptions o = opts(2, 2, 4);
  o.shape = {8, 2, 64};
  o.dtype = "bf16";
  PipelineSchedule s = make(o);
  Result<bool> batched = checkPipelineP2P(s, P2PMode::Batched);
  ASSERT_FALSE(batched.ok());
  // Derived by hand: after B0.1 rank 0 batches send_prev(g0 of stage 2)
  // before send_next(a2 of stage 0), both to rank 1; after B1.1 rank 1
  // batches recv_prev(a2) before recv_next(g0). The 5th message on channel
  // 0->1 is the gradient where rank 1 expects the activation.
  EXPECT_EQ(
      batched.error(),
      "interleaved 1F1B with batched p2p fails the static check (ranks are "
      "pp ranks): "
      "channel pp 0->1, message 4: rank 0 unit 4 "
      "(send_forward_backward_recv_forward_backward after B0.1) sends "
      "grad mb 0 of stage 2 [8x2x64 bf16] (send_prev), but rank 1 unit 4 "
      "(send_forward_backward_recv_forward_backward after B1.1) expects "
      "act mb 2 of stage 0 [8x2x64 bf16] (recv_prev) (and 7 more)");
  EXPECT_TRUE(checkPipelineP2P(s, P2PMode::Unbatched).ok());
}

TEST(PipelineSchedule, Timeline) {
  // 1F1B pp 2, m 2 with F = 2, B = 4:
  //   rank 0: F0 [0,2) F1 [2,4) B0 [8,12) B1 [14,18)
  //   rank 1: F0 [2,4) B0 [4,8) F1 [8,10) B1 [10,14)
  Result<PipelineTimeline> t = computeTimeline(make(opts(2, 1, 2)));
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->makespan, 18);
  std::vector<int64_t> starts;
  for (const auto &rank : t->ranks)
    for (const TimedStep &step : rank)
      starts.push_back(step.start);
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 2, 8, 14, 2, 4, 8, 10}));
  // Busy 12 of 18 on each rank.
  EXPECT_DOUBLE_EQ(t->bubbleFraction, 1.0 - 24.0 / 36.0);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(PipelineSchedule, Errors) {
  EXPECT_EQ(error(opts(0, 1, 4)), "pp must be at least 1, got 0");
  EXPECT_EQ(error(opts(2, 0, 4)), "vpp must be at least 1, got 0");
  EXPECT_EQ(error(opts(2, 1, 0)),
            "the number of micro-batches must be at least 1, got 0");
  EXPECT_EQ(error(opts(1, 2, 4)), "vpp 2 needs pipeline parallelism (pp > 1)");
  EXPECT_EQ(error(opts(4, 1, 8, 4)),
            "--microbatch-group-size-per-vp-stage applies to the interleaved "
            "schedule only (vpp > 1)");
  EXPECT_EQ(error(opts(4, 2, 3)),
            "the interleaved schedule needs pp <= micro-batch group size <= "
            "micro-batches, but pp is 4, the group size 4 and 3 micro-batches");
  EXPECT_EQ(error(opts(4, 2, 8, 3)),
            "the interleaved schedule needs pp <= micro-batch group size <= "
            "micro-batches, but pp is 4, the group size 3 and 8 micro-batches");
  EXPECT_EQ(error(opts(4, 2, 6)),
            "6 micro-batches in groups of 4 leave a last group of 2, fewer "
            "than pp 4 (the interleaved schedule would stall)");
  EXPECT_EQ(error(opts(4, 2, int64_t(1) << 20)),
            "pp 4, vpp 2 and 1048576 micro-batches exceed the supported "
            "schedule size");
}
