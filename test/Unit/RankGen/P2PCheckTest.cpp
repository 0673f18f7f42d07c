//===- P2PCheckTest.cpp - Tests of the static p2p check -------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The checker on small hand-written programs (each diagnostic kind with its
// message) and on schedules broken by hand: an op removed, two micro-batches
// swapped, every rank posting its sends first, every rank using the even
// order.
//
//===----------------------------------------------------------------------===//

#include "rankgen/P2PCheck.h"
#include "rankgen/PipelineP2P.h"
#include "rankgen/PipelineSchedule.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace loom::rankgen;
using Kind = P2PDiagnostic::Kind;

namespace {

Payload act(int64_t mb, int64_t stage) {
  return Payload{PayloadKind::Activation, mb, stage, {4, 2, 8}, "f32"};
}
Payload grad(int64_t mb, int64_t stage) {
  return Payload{PayloadKind::Gradient, mb, stage, {4, 2, 8}, "f32"};
}
P2POp send(int64_t peer, Payload p) {
  return P2POp{P2PKind::Send, peer, "pp", p, "send"};
}
P2POp recv(int64_t peer, Payload p) {
  return P2POp{P2PKind::Recv, peer, "pp", p, "recv"};
}

std::vector<Kind> kinds(const std::vector<P2PDiagnostic> &diagnostics) {
  std::vector<Kind> out;
  for (const P2PDiagnostic &d : diagnostics)
    out.push_back(d.kind);
  return out;
}

std::vector<P2PProgram> schedulePrograms(int64_t pp, int64_t vpp, int64_t m,
                                         P2PMode mode) {
  ScheduleOptions o;
  o.pp = pp;
  o.vpp = vpp;
  o.numMicrobatches = m;
  Result<PipelineSchedule> s = PipelineSchedule::create(o);
  EXPECT_TRUE(s.ok()) << s.error();
  return s.ok() ? pipelineP2PPrograms(*s, mode) : std::vector<P2PProgram>{};
}

/// Every batched unit split into one unit per op, sends first: what a rank
/// that posts and waits on its sends before its receives does.
std::vector<P2PProgram> sendsFirst(const std::vector<P2PProgram> &programs) {
  std::vector<P2PProgram> out;
  for (const P2PProgram &program : programs) {
    P2PProgram split;
    for (const P2PUnit &unit : program) {
      std::vector<P2POp> ops = unit.ops;
      std::stable_partition(ops.begin(), ops.end(), [](const P2POp &op) {
        return op.kind == P2PKind::Send;
      });
      for (const P2POp &op : ops)
        split.push_back({unit.label, {op}});
    }
    out.push_back(split);
  }
  return out;
}

/// Every batched unit split into one unit per op in the even ranks' order
/// (send_next, recv_prev, send_prev, recv_next) on every rank.
std::vector<P2PProgram>
evenOrderEverywhere(const std::vector<P2PProgram> &programs) {
  std::vector<P2PProgram> out;
  for (const P2PProgram &program : programs) {
    P2PProgram split;
    for (const P2PUnit &unit : program)
      for (const char *name :
           {"send_next", "recv_prev", "send_prev", "recv_next"})
        for (const P2POp &op : unit.ops)
          if (op.name == name)
            split.push_back({unit.label, {op}});
    out.push_back(split);
  }
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// Small programs
//===----------------------------------------------------------------------===//

TEST(P2PCheck, MatchedExchange) {
  // Rank 0 sends then receives; rank 1 receives then sends.
  std::vector<P2PProgram> programs = {
      {{"a", {send(1, act(0, 0))}}, {"b", {recv(1, grad(0, 1))}}},
      {{"c", {recv(0, act(0, 0))}}, {"d", {send(0, grad(0, 1))}}}};
  EXPECT_TRUE(checkP2P(programs).empty());
  EXPECT_TRUE(checkP2P({}).empty());
}

TEST(P2PCheck, BatchedExchangeDoesNotBlock) {
  // Both send first, but each in one batch with its receive: the batches
  // complete together.
  std::vector<P2PProgram> programs = {
      {{"x", {send(1, act(0, 0)), recv(1, grad(0, 1))}}},
      {{"y", {send(0, grad(0, 1)), recv(0, act(0, 0))}}}};
  EXPECT_TRUE(checkP2P(programs).empty());
}

TEST(P2PCheck, SendsFirstDeadlock) {
  std::vector<P2PProgram> programs = {
      {{"a", {send(1, act(0, 0))}}, {"b", {recv(1, grad(0, 1))}}},
      {{"c", {send(0, grad(0, 1))}}, {"d", {recv(0, act(0, 0))}}}};
  std::vector<P2PDiagnostic> d = checkP2P(programs);
  ASSERT_EQ(kinds(d), std::vector<Kind>{Kind::Deadlock});
  EXPECT_EQ(d[0].message,
            "deadlock: rank 0 blocks in unit 0 (a) of 2 on send act mb 0 of "
            "stage 0 [4x2x8 f32] to rank 1 on pp (its partner is rank 1 unit "
            "1 (d)); rank 1 blocks in unit 0 (c) of 2 on send grad mb 0 of "
            "stage 1 [4x2x8 f32] to rank 0 on pp (its partner is rank 0 unit 1 "
            "(b))");
}

TEST(P2PCheck, PayloadMismatch) {
  // The same shape, an activation where a gradient is expected.
  std::vector<P2PProgram> programs = {{{"a", {send(1, grad(0, 0))}}},
                                      {{"b", {recv(0, act(0, 0))}}}};
  std::vector<P2PDiagnostic> d = checkP2P(programs);
  ASSERT_EQ(kinds(d), std::vector<Kind>{Kind::PayloadMismatch});
  EXPECT_EQ(d[0].message,
            "channel pp 0->1, message 0: rank 0 unit 0 (a) sends grad mb 0 of "
            "stage 0 [4x2x8 f32] (send), but rank 1 unit 0 (b) expects act mb "
            "0 of stage 0 [4x2x8 f32] (recv)");
  // Shape and dtype count too.
  Payload other = act(0, 0);
  other.dtype = "bf16";
  programs = {{{"a", {send(1, act(0, 0))}}}, {{"b", {recv(0, other)}}}};
  EXPECT_EQ(kinds(checkP2P(programs)),
            std::vector<Kind>{Kind::PayloadMismatch});
}

TEST(P2PCheck, UnmatchedSend) {
  std::vector<P2PProgram> programs = {
      {{"a", {send(1, act(0, 0))}}, {"b", {send(1, act(1, 0))}}},
      {{"c", {recv(0, act(0, 0))}}}};
  std::vector<P2PDiagnostic> d = checkP2P(programs);
  ASSERT_EQ(kinds(d), (std::vector<Kind>{Kind::Unmatched, Kind::Deadlock}));
  EXPECT_EQ(d[0].message,
            "channel pp 0->1: rank 0 sends 2 messages but rank 1 receives 1; "
            "the first unmatched is rank 0 unit 1 (b): send act mb 1 of stage "
            "0 [4x2x8 f32] to rank 1 on pp");
  EXPECT_EQ(d[1].message,
            "deadlock: rank 0 blocks in unit 1 (b) of 2 on send act mb 1 of "
            "stage 0 [4x2x8 f32] to rank 1 on pp (never matched)");
}

TEST(P2PCheck, ChannelsAreSeparatePerCommunicator) {
  // The same ranks on two communicators are two FIFO channels.
  P2POp worldSend = send(1, grad(0, 0));
  worldSend.communicator = "world";
  P2POp worldRecv = recv(0, grad(0, 0));
  worldRecv.communicator = "world";
  std::vector<P2PProgram> programs = {{{"a", {worldSend, send(1, act(0, 0))}}},
                                      {{"b", {recv(0, act(0, 0)), worldRecv}}}};
  EXPECT_TRUE(checkP2P(programs).empty());
  // On one communicator FIFO swaps them.
  programs[0][0].ops[0].communicator = "pp";
  programs[1][0].ops[1].communicator = "pp";
  EXPECT_EQ(kinds(checkP2P(programs)),
            (std::vector<Kind>{Kind::PayloadMismatch, Kind::PayloadMismatch}));
}

TEST(P2PCheck, BadPeer) {
  std::vector<P2PProgram> programs = {{{"a", {send(2, act(0, 0))}}}, {}};
  std::vector<P2PDiagnostic> d = checkP2P(programs);
  ASSERT_EQ(kinds(d), std::vector<Kind>{Kind::BadPeer});
  EXPECT_EQ(d[0].message, "rank 0 unit 0 (a): send act mb 0 of stage 0 "
                          "[4x2x8 f32] to rank 2 on pp names a rank outside "
                          "[0, 2)");
}

//===----------------------------------------------------------------------===//
// Schedules broken by hand
//===----------------------------------------------------------------------===//

TEST(P2PCheck, ScheduleWithAnOpRemoved) {
  // 1F1B pp 4, m 8, batched: drop rank 2's receive of micro-batch 5's
  // activation. Rank 1's send is left unmatched and the pipeline hangs.
  std::vector<P2PProgram> programs =
      schedulePrograms(4, 1, 8, P2PMode::Batched);
  ASSERT_TRUE(checkP2P(programs).empty());
  bool removed = false;
  for (P2PUnit &unit : programs[2])
    for (auto it = unit.ops.begin(); it != unit.ops.end() && !removed; ++it)
      if (it->kind == P2PKind::Recv &&
          it->payload.kind == PayloadKind::Activation &&
          it->payload.microbatch == 5) {
        unit.ops.erase(it);
        removed = true;
        break;
      }
  ASSERT_TRUE(removed);
  std::vector<P2PDiagnostic> d = checkP2P(programs);
  // Rank 2 expects micro-batch 6 where 5 arrives, and so on; one send stays
  // unmatched and ranks block on it.
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d.front().kind, Kind::PayloadMismatch);
  EXPECT_NE(d.front().message.find("sends act mb 5 of stage 1"),
            std::string::npos)
      << d.front().message;
  EXPECT_NE(d.front().message.find("expects act mb 6 of stage 1"),
            std::string::npos)
      << d.front().message;
  EXPECT_NE(std::find(kinds(d).begin(), kinds(d).end(), Kind::Unmatched),
            kinds(d).end());
}

TEST(P2PCheck, ScheduleWithMicrobatchesSwapped) {
  // Rank 0 sends micro-batches 1 and 0 in the wrong order.
  std::vector<P2PProgram> programs =
      schedulePrograms(4, 1, 8, P2PMode::Batched);
  std::vector<P2POp *> sends;
  for (P2PUnit &unit : programs[0])
    for (P2POp &op : unit.ops)
      if (op.kind == P2PKind::Send && op.payload.microbatch <= 1)
        sends.push_back(&op);
  ASSERT_EQ(sends.size(), 2u);
  std::swap(sends[0]->payload, sends[1]->payload);
  std::vector<P2PDiagnostic> d = checkP2P(programs);
  ASSERT_EQ(kinds(d),
            (std::vector<Kind>{Kind::PayloadMismatch, Kind::PayloadMismatch}));
  EXPECT_EQ(d[0].message,
            "channel pp 0->1, message 0: rank 0 unit 0 (send_forward after "
            "F0.0) sends act mb 1 of stage 0 (send_next), but rank 1 unit 0 "
            "(recv_forward after the start) expects act mb 0 of stage 0 "
            "(recv_prev)");
}

TEST(P2PCheck, AllSendsFirstDeadlocks1F1B) {
  std::vector<P2PProgram> programs =
      sendsFirst(schedulePrograms(4, 1, 8, P2PMode::Batched));
  std::vector<P2PDiagnostic> d = checkP2P(programs);
  ASSERT_EQ(kinds(d), std::vector<Kind>{Kind::Deadlock});
  // Rank 2 sends micro-batch 1's activation while rank 3 sends micro-batch
  // 0's gradient back: neither receives.
  EXPECT_NE(d[0].message.find(
                "rank 2 blocks in unit 3 (send_forward_recv_backward after "
                "F1.0)"),
            std::string::npos)
      << d[0].message;
  EXPECT_NE(d[0].message.find("rank 3 blocks in unit 1 "
                              "(send_backward_recv_forward after B0.0)"),
            std::string::npos)
      << d[0].message;
}

TEST(P2PCheck, EvenOrderEverywhereDeadlocksInterleaving) {
  // Without the parity alternation every rank's first op is a send.
  std::vector<P2PProgram> programs =
      evenOrderEverywhere(schedulePrograms(4, 2, 8, P2PMode::Batched));
  EXPECT_EQ(kinds(checkP2P(programs)), std::vector<Kind>{Kind::Deadlock});
  // With it (Megatron's _p2p_ops) the same schedule is sound.
  EXPECT_TRUE(checkP2P(schedulePrograms(4, 2, 8, P2PMode::Unbatched)).empty());
}

TEST(P2PCheck, Pp2Vpp2BatchedSwap) {
  // Reference B5: at pp 2 rank 0 batches send_prev(grad) before
  // send_next(act) to the same peer, rank 1 recv_prev(act) before
  // recv_next(grad): FIFO pairs the gradient with the activation.
  std::vector<P2PDiagnostic> d =
      checkP2P(schedulePrograms(2, 2, 4, P2PMode::Batched));
  ASSERT_FALSE(d.empty());
  for (const P2PDiagnostic &diagnostic : d)
    EXPECT_EQ(diagnostic.kind, Kind::PayloadMismatch) << diagnostic.message;
  bool swapped = false;
  for (const P2PDiagnostic &diagnostic : d)
    swapped |= diagnostic.message.find("sends grad") != std::string::npos &&
               diagnostic.message.find("expects act") != std::string::npos;
  EXPECT_TRUE(swapped);
}
