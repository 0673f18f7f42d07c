//===- PipelineP2P.cpp - A schedule's p2p ops in Megatron's modes ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Transcribes _batched_p2p_ops and _p2p_ops. Communicators are named "pp"
// (the pipeline group) and "world" (torch.distributed.group.WORLD).
//
//===----------------------------------------------------------------------===//

#include "rankgen/PipelineP2P.h"

using namespace loom::rankgen;

namespace {
enum Slot { SendPrev, RecvPrev, SendNext, RecvNext };

const std::optional<Payload> &slotPayload(const CommCall &call, Slot slot) {
  switch (slot) {
  case SendPrev:
    return call.sendPrev;
  case RecvPrev:
    return call.recvPrev;
  case SendNext:
    return call.sendNext;
  case RecvNext:
    return call.recvNext;
  }
  return call.sendPrev;
}

const char *slotName(Slot slot) {
  static const char *names[] = {"send_prev", "recv_prev", "send_next",
                                "recv_next"};
  return names[slot];
}

P2POp makeOp(Slot slot, const Payload &payload, int64_t rank, int64_t pp,
             const char *communicator) {
  P2POp op;
  op.kind =
      slot == SendPrev || slot == SendNext ? P2PKind::Send : P2PKind::Recv;
  bool towardsPrev = slot == SendPrev || slot == RecvPrev;
  op.peer = towardsPrev ? (rank - 1 + pp) % pp : (rank + 1) % pp;
  op.communicator = communicator;
  op.payload = payload;
  op.name = slotName(slot);
  return op;
}
} // namespace

std::vector<P2PProgram>
loom::rankgen::pipelineP2PPrograms(const PipelineSchedule &schedule,
                                   P2PMode mode) {
  int64_t pp = schedule.options().pp;
  std::vector<P2PProgram> programs;
  for (const RankSchedule &rank : schedule.ranks()) {
    int64_t r = rank.ppRank;
    bool even = r % 2 == 0;
    P2PProgram program;
    std::string lastStep = "the start";
    for (const RankAction &action : rank.actions) {
      if (!action.isComm) {
        lastStep = action.step.str();
        continue;
      }
      std::string label = action.comm.name + " after " + lastStep;
      if (mode == P2PMode::Batched) {
        P2PUnit unit{label, {}};
        for (Slot slot : {SendPrev, RecvPrev, SendNext, RecvNext})
          if (const auto &payload = slotPayload(action.comm, slot))
            unit.ops.push_back(makeOp(slot, *payload, r, pp, "pp"));
        program.push_back(std::move(unit));
        continue;
      }
      // _p2p_ops: at pp 2, even-rank sends and odd-rank receives use the pp
      // group, even-rank receives and odd-rank sends WORLD.
      const char *evenSendOddRecv = "pp";
      const char *evenRecvOddSend = pp == 2 ? "world" : "pp";
      static const Slot evenOrder[] = {SendNext, RecvPrev, SendPrev, RecvNext};
      static const Slot oddOrder[] = {RecvPrev, SendNext, RecvNext, SendPrev};
      for (Slot slot : even ? evenOrder : oddOrder) {
        const auto &payload = slotPayload(action.comm, slot);
        if (!payload)
          continue;
        bool send = slot == SendPrev || slot == SendNext;
        const char *communicator =
            send == even ? evenSendOddRecv : evenRecvOddSend;
        program.push_back(
            {label, {makeOp(slot, *payload, r, pp, communicator)}});
      }
    }
    programs.push_back(std::move(program));
  }
  return programs;
}

Result<bool> loom::rankgen::checkPipelineP2P(const PipelineSchedule &schedule,
                                             P2PMode mode) {
  std::vector<P2PDiagnostic> diagnostics =
      checkP2P(pipelineP2PPrograms(schedule, mode));
  if (diagnostics.empty())
    return true;
  std::string message = std::string(scheduleKindName(schedule.kind())) +
                        " with " + p2pModeName(mode) +
                        " p2p fails the static check (ranks are pp ranks): " +
                        diagnostics.front().message;
  if (diagnostics.size() > 1)
    message += " (and " + std::to_string(diagnostics.size() - 1) + " more)";
  return fail(message);
}
