//===- PipelineSchedule.cpp - Megatron-Core's pipeline schedules ----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A transcription of schedules.py's three schedules with overlap_p2p_comm
// off, one rank at a time. Each builder walks Megatron's loops and records
// the compute steps and P2PCommunicator calls in the order the rank makes
// them; a call Megatron skips on a stage (send_forward on the last, ...) is
// not recorded.
//
// Payloads: a sent tensor is the output (activation) or input gradient of
// the step just run, produced by this rank's global stage c*pp + r. A
// received tensor is the next one in the queue of the chunk Megatron files
// it under (input_tensors[c] / output_tensor_grads[c] are FIFO), i.e. the
// n-th activation received for chunk c is micro-batch n's, produced by
// global stage c*pp + r - 1 (the ring wraps: chunk c on rank 0 reads chunk
// c-1 of rank pp-1), and likewise for gradients from stage c*pp + r + 1.
//
//===----------------------------------------------------------------------===//

#include "rankgen/PipelineSchedule.h"

using namespace loom::rankgen;

static std::string str(int64_t v) { return std::to_string(v); }

const char *loom::rankgen::scheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::NoPipelining:
    return "no pipelining";
  case ScheduleKind::OneFOneB:
    return "1F1B";
  case ScheduleKind::Interleaved:
    return "interleaved 1F1B";
  }
  return "";
}

std::string ScheduleStep::str() const {
  return (forward ? "F" : "B") + ::str(microbatch) + "." + ::str(chunk);
}

namespace {
/// Records one rank's program, with the receive queues that give every
/// received tensor its payload.
class Recorder {
public:
  Recorder(const ScheduleOptions &o, int64_t rank, int64_t vpp)
      : o(o), rank(rank), recvActs(size_t(vpp), 0), recvGrads(size_t(vpp), 0) {
    out.ppRank = rank;
  }

  void compute(bool forward, int64_t microbatch, int64_t chunk) {
    ScheduleStep step{forward, microbatch, chunk};
    out.steps.push_back(step);
    RankAction action;
    action.step = step;
    out.actions.push_back(action);
  }

  /// The activation F(microbatch, chunk) on this rank sends on.
  Payload activation(int64_t microbatch, int64_t chunk) const {
    return payload(PayloadKind::Activation, microbatch, chunk * o.pp + rank);
  }
  /// The input gradient B(microbatch, chunk) on this rank sends back.
  Payload gradient(int64_t microbatch, int64_t chunk) const {
    return payload(PayloadKind::Gradient, microbatch, chunk * o.pp + rank);
  }
  /// The next activation this rank receives for `chunk`.
  Payload nextActivation(int64_t chunk) {
    return payload(PayloadKind::Activation, recvActs[size_t(chunk)]++,
                   chunk * o.pp + rank - 1);
  }
  /// The next output gradient this rank receives for `chunk`.
  Payload nextGradient(int64_t chunk) {
    return payload(PayloadKind::Gradient, recvGrads[size_t(chunk)]++,
                   chunk * o.pp + rank + 1);
  }

  void comm(CommCall call) {
    if (!call.sendPrev && !call.recvPrev && !call.sendNext && !call.recvNext)
      return;
    RankAction action;
    action.isComm = true;
    action.comm = std::move(call);
    out.actions.push_back(std::move(action));
  }

  RankSchedule out;

private:
  Payload payload(PayloadKind kind, int64_t microbatch, int64_t stage) const {
    return Payload{kind, microbatch, stage, o.shape, o.dtype};
  }

  const ScheduleOptions &o;
  int64_t rank;
  std::vector<int64_t> recvActs, recvGrads;
};

CommCall call(const char *name) {
  CommCall c;
  c.name = name;
  return c;
}

/// forward_backward_no_pipelining: every micro-batch forward then backward.
RankSchedule noPipelining(const ScheduleOptions &o) {
  Recorder rec(o, 0, 1);
  for (int64_t i = 0; i < o.numMicrobatches; ++i) {
    rec.compute(true, i, 0);
    if (!o.forwardOnly)
      rec.compute(false, i, 0);
  }
  rec.out.steady = o.numMicrobatches;
  return std::move(rec.out);
}

/// forward_backward_pipelining_without_interleaving on pp rank r.
RankSchedule oneFOneB(const ScheduleOptions &o, int64_t r) {
  Recorder rec(o, r, 1);
  int64_t m = o.numMicrobatches;
  bool first = r == 0, last = r == o.pp - 1;
  int64_t warmup = std::min(o.pp - r - 1, m), remaining = m - warmup;
  rec.out.warmup = warmup;
  rec.out.steady = remaining;
  rec.out.cooldown = o.forwardOnly ? 0 : warmup;

  auto recvForward = [&] {
    CommCall c = call("recv_forward");
    if (!first)
      c.recvPrev = rec.nextActivation(0);
    rec.comm(c);
  };
  auto sendForward = [&](int64_t mb) {
    CommCall c = call("send_forward");
    if (!last)
      c.sendNext = rec.activation(mb, 0);
    rec.comm(c);
  };
  auto sendBackward = [&](int64_t mb) {
    CommCall c = call("send_backward");
    if (!first)
      c.sendPrev = rec.gradient(mb, 0);
    rec.comm(c);
  };

  for (int64_t i = 0; i < warmup; ++i) {
    recvForward();
    rec.compute(true, i, 0);
    sendForward(i);
  }
  if (remaining > 0)
    recvForward();
  for (int64_t i = 0; i < remaining; ++i) {
    bool lastIteration = i == remaining - 1;
    rec.compute(true, warmup + i, 0);
    if (o.forwardOnly) {
      sendForward(warmup + i);
      if (!lastIteration)
        recvForward();
      continue;
    }
    CommCall fb = call("send_forward_recv_backward");
    if (!last) {
      fb.sendNext = rec.activation(warmup + i, 0);
      fb.recvNext = rec.nextGradient(0);
    }
    rec.comm(fb);
    rec.compute(false, i, 0);
    if (lastIteration) {
      sendBackward(i);
    } else {
      CommCall bf = call("send_backward_recv_forward");
      if (!first) {
        bf.sendPrev = rec.gradient(i, 0);
        bf.recvPrev = rec.nextActivation(0);
      }
      rec.comm(bf);
    }
  }
  if (!o.forwardOnly) {
    for (int64_t i = 0; i < warmup; ++i) {
      CommCall c = call("recv_backward");
      if (!last)
        c.recvNext = rec.nextGradient(0);
      rec.comm(c);
      rec.compute(false, remaining + i, 0);
      sendBackward(remaining + i);
    }
  }
  return std::move(rec.out);
}

/// forward_backward_pipelining_with_interleaving on pp rank r, with
/// overlap_p2p_comm off.
RankSchedule interleaved(const ScheduleOptions &o, int64_t groupSize,
                         int64_t r) {
  int64_t pp = o.pp, vpp = o.vpp, m = o.numMicrobatches;
  Recorder rec(o, r, vpp);

  // get_schedule_table: (micro-batch, chunk) per virtual step.
  std::vector<std::pair<int64_t, int64_t>> table;
  for (int64_t start = 0; start < m; start += groupSize) {
    int64_t end = start + groupSize >= m ? m : start + groupSize;
    for (int64_t c = 0; c < vpp; ++c)
      for (int64_t mb = start; mb < end; ++mb)
        table.push_back({mb, c});
  }
  int64_t total = m * vpp;
  auto chunkOf = [&](int64_t k, bool forward) {
    int64_t c = table[size_t(k % total)].second;
    return forward ? c : vpp - 1 - c;
  };
  // Backward step k pops the oldest saved forward of its chunk, which is
  // micro-batch table[k].first (every chunk runs its micro-batches in order).
  auto microbatchOf = [&](int64_t k) { return table[size_t(k)].first; };

  // get_pp_rank_microbatches.
  int64_t warmup =
      o.forwardOnly ? total : (pp - r - 1) * 2 + (vpp - 1) * groupSize;
  bool allWarmup = warmup >= total;
  if (allWarmup)
    warmup = total;
  int64_t remaining = total - warmup;
  rec.out.warmup = warmup;
  rec.out.steady = remaining;
  rec.out.cooldown = o.forwardOnly ? 0 : total - remaining;

  bool firstRank = r == 0, lastRank = r == pp - 1;
  auto isFirstStage = [&](int64_t c) { return c == 0 && firstRank; };
  auto isLastStage = [&](int64_t c) { return c == vpp - 1 && lastRank; };

  // recv_tensor_from_previous_stage: whether a tensor arrives after virtual
  // step k, and the chunk it is for.
  auto recvFromPrevious = [&](int64_t k, bool forward) {
    bool recv = true;
    bool leading = forward ? firstRank : lastRank;
    int64_t lastChunk = forward ? vpp - 1 : 0;
    int64_t next;
    if (leading) {
      // The leading stage is pp - 1 steps ahead of the stage that feeds it.
      if (k < pp - 1) {
        recv = false;
        next = chunkOf(k + 1, forward);
      } else {
        next = chunkOf(k - (pp - 1), forward);
      }
      if (next == lastChunk)
        recv = false;
      next += forward ? 1 : -1;
    } else {
      next = chunkOf(k + 1, forward);
    }
    return std::pair<bool, int64_t>{recv, next};
  };

  // recv_forward for chunk 0 before the loop.
  CommCall first = call("recv_forward");
  if (!isFirstStage(0))
    first.recvPrev = rec.nextActivation(0);
  rec.comm(first);

  for (int64_t k = 0; k < warmup; ++k) {
    int64_t c = chunkOf(k, true);
    rec.compute(true, microbatchOf(k), c);
    auto [recvPrev, nextChunk] = recvFromPrevious(k, true);
    if (k == total - 1)
      recvPrev = false;
    std::optional<Payload> out;
    if (!isLastStage(c))
      out = rec.activation(microbatchOf(k), c);
    if (k == warmup - 1 && !o.forwardOnly && !allWarmup) {
      CommCall fb = call("send_forward_backward_recv_forward_backward");
      fb.sendNext = out;
      if (recvPrev)
        fb.recvPrev = rec.nextActivation(nextChunk);
      if (!lastRank)
        fb.recvNext = rec.nextGradient(vpp - 1);
      rec.comm(fb);
    } else {
      CommCall ff = call("send_forward_recv_forward");
      ff.sendNext = out;
      if (recvPrev)
        ff.recvPrev = rec.nextActivation(nextChunk);
      rec.comm(ff);
    }
  }

  for (int64_t k = 0; k < remaining; ++k) {
    int64_t forwardK = k + warmup;
    int64_t fc = chunkOf(forwardK, true), bc = chunkOf(k, false);
    rec.compute(true, microbatchOf(forwardK), fc);
    rec.compute(false, microbatchOf(k), bc);
    CommCall fb = call("send_forward_backward_recv_forward_backward");
    if (!isLastStage(fc))
      fb.sendNext = rec.activation(microbatchOf(forwardK), fc);
    if (!isFirstStage(bc))
      fb.sendPrev = rec.gradient(microbatchOf(k), bc);
    auto [recvPrev, nextForwardChunk] = recvFromPrevious(forwardK, true);
    auto [recvNext, nextBackwardChunk] = recvFromPrevious(k, false);
    if (k == remaining - 1)
      recvPrev = false;
    if (recvPrev)
      fb.recvPrev = rec.nextActivation(nextForwardChunk);
    if (recvNext)
      fb.recvNext = rec.nextGradient(nextBackwardChunk);
    rec.comm(fb);
  }

  if (!o.forwardOnly) {
    if (allWarmup) {
      CommCall rb = call("recv_backward");
      if (!isLastStage(vpp - 1))
        rb.recvNext = rec.nextGradient(vpp - 1);
      rec.comm(rb);
    }
    for (int64_t k = remaining; k < total; ++k) {
      int64_t c = chunkOf(k, false);
      auto [recvNext, nextChunk] = recvFromPrevious(k, false);
      if (k == total - 1)
        recvNext = false;
      rec.compute(false, microbatchOf(k), c);
      CommCall bb = call("send_backward_recv_backward");
      if (!isFirstStage(c))
        bb.sendPrev = rec.gradient(microbatchOf(k), c);
      if (recvNext)
        bb.recvNext = rec.nextGradient(nextChunk);
      rec.comm(bb);
    }
  }
  return std::move(rec.out);
}
} // namespace

Result<PipelineSchedule> PipelineSchedule::create(const ScheduleOptions &o) {
  if (o.pp < 1)
    return fail("pp must be at least 1, got " + str(o.pp));
  if (o.vpp < 1)
    return fail("vpp must be at least 1, got " + str(o.vpp));
  if (o.numMicrobatches < 1)
    return fail("the number of micro-batches must be at least 1, got " +
                str(o.numMicrobatches));
  if (o.vpp > 1 && o.pp == 1)
    return fail("vpp " + str(o.vpp) + " needs pipeline parallelism (pp > 1)");
  if (o.numMicrobatches > kMaxScheduleSteps / o.vpp || o.pp > kMaxScheduleSteps)
    return fail("pp " + str(o.pp) + ", vpp " + str(o.vpp) + " and " +
                str(o.numMicrobatches) +
                " micro-batches exceed the supported schedule size");
  if (o.microbatchGroupSize != 0 && o.vpp == 1)
    return fail("--microbatch-group-size-per-vp-stage applies to the "
                "interleaved schedule only (vpp > 1)");

  PipelineSchedule schedule;
  schedule.options_ = o;
  if (o.pp == 1) {
    schedule.kind_ = ScheduleKind::NoPipelining;
    schedule.ranks_.push_back(noPipelining(o));
    return schedule;
  }
  if (o.vpp == 1) {
    schedule.kind_ = ScheduleKind::OneFOneB;
    for (int64_t r = 0; r < o.pp; ++r)
      schedule.ranks_.push_back(oneFOneB(o, r));
    return schedule;
  }

  // Megatron-Core's checks in forward_backward_pipelining_with_interleaving.
  int64_t group = o.microbatchGroupSize == 0 ? o.pp : o.microbatchGroupSize;
  if (group < o.pp || group > o.numMicrobatches)
    return fail("the interleaved schedule needs pp <= micro-batch group size "
                "<= micro-batches, but pp is " +
                str(o.pp) + ", the group size " + str(group) + " and " +
                str(o.numMicrobatches) + " micro-batches");
  int64_t lastGroup = o.numMicrobatches % group;
  if (lastGroup > 0 && lastGroup < o.pp)
    return fail(str(o.numMicrobatches) + " micro-batches in groups of " +
                str(group) + " leave a last group of " + str(lastGroup) +
                ", fewer than pp " + str(o.pp) +
                " (the interleaved schedule would stall)");
  schedule.kind_ = ScheduleKind::Interleaved;
  schedule.groupSize_ = group;
  for (int64_t r = 0; r < o.pp; ++r)
    schedule.ranks_.push_back(interleaved(o, group, r));
  return schedule;
}
