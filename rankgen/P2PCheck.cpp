//===- P2PCheck.cpp - Static matching and deadlock check of p2p -----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Matching pairs the k-th send and the k-th receive of each channel. The
// progress proof then simulates the ranks: a rank's current unit is posted;
// an op whose partner sits in its peer's current (posted) unit completes,
// together with the partner; a unit whose ops have all completed lets its
// rank go on. Repeated to a fixpoint, ranks left short of their end are
// deadlocked: each waits on a partner that is never posted (or that does not
// exist). The partner of an op is fixed by matching, so the simulation needs
// no search: any execution of the programs completes exactly the same ops.
//
//===----------------------------------------------------------------------===//

#include "rankgen/P2PCheck.h"

#include <map>
#include <tuple>

using namespace loom::rankgen;

static std::string str(int64_t v) { return std::to_string(v); }

std::string Payload::str() const {
  std::string out = kind == PayloadKind::Activation ? "act" : "grad";
  out += " mb " + ::str(microbatch) + " of stage " + ::str(stage);
  if (!shape.empty() || !dtype.empty()) {
    out += " [";
    for (size_t i = 0; i < shape.size(); ++i)
      out += (i ? "x" : "") + ::str(shape[i]);
    if (!dtype.empty())
      out += (shape.empty() ? "" : " ") + dtype;
    out += "]";
  }
  return out;
}

std::string P2POp::str() const {
  std::string out =
      name.empty() ? (kind == P2PKind::Send ? "send" : "recv") : name;
  out += " " + payload.str() + (kind == P2PKind::Send ? " to" : " from") +
         " rank " + ::str(peer);
  if (!communicator.empty())
    out += " on " + communicator;
  return out;
}

namespace {
/// Where an op sits: rank, unit, op index within the unit.
struct OpRef {
  int64_t rank = -1;
  size_t unit = 0, op = 0;
};

/// (communicator, source, destination).
using Channel = std::tuple<std::string, int64_t, int64_t>;

std::string channelName(const Channel &c) {
  return std::get<0>(c) + " " + str(std::get<1>(c)) + "->" +
         str(std::get<2>(c));
}

std::string unitName(const std::vector<P2PProgram> &programs, OpRef ref) {
  const P2PUnit &unit = programs[size_t(ref.rank)][ref.unit];
  return "unit " + str(int64_t(ref.unit)) +
         (unit.label.empty() ? "" : " (" + unit.label + ")");
}

const P2POp &opAt(const std::vector<P2PProgram> &programs, OpRef ref) {
  return programs[size_t(ref.rank)][ref.unit].ops[ref.op];
}
} // namespace

std::vector<P2PDiagnostic>
loom::rankgen::checkP2P(const std::vector<P2PProgram> &programs) {
  std::vector<P2PDiagnostic> diagnostics;
  int64_t numRanks = int64_t(programs.size());

  // Sends and receives of every channel, each in its rank's program order.
  std::map<Channel, std::pair<std::vector<OpRef>, std::vector<OpRef>>> channels;
  bool badPeer = false;
  for (int64_t r = 0; r < numRanks; ++r) {
    const P2PProgram &program = programs[size_t(r)];
    for (size_t u = 0; u < program.size(); ++u) {
      for (size_t i = 0; i < program[u].ops.size(); ++i) {
        const P2POp &op = program[u].ops[i];
        OpRef ref{r, u, i};
        if (op.peer < 0 || op.peer >= numRanks) {
          diagnostics.push_back({P2PDiagnostic::Kind::BadPeer,
                                 "rank " + str(r) + " " +
                                     unitName(programs, ref) + ": " + op.str() +
                                     " names a rank outside [0, " +
                                     str(numRanks) + ")"});
          badPeer = true;
          continue;
        }
        if (op.kind == P2PKind::Send)
          channels[{op.communicator, r, op.peer}].first.push_back(ref);
        else
          channels[{op.communicator, op.peer, r}].second.push_back(ref);
      }
    }
  }
  if (badPeer)
    return diagnostics;

  // (a) FIFO matching per channel.
  std::map<std::tuple<int64_t, size_t, size_t>, OpRef> partner;
  for (const auto &[channel, ops] : channels) {
    const auto &[sends, recvs] = ops;
    size_t paired = std::min(sends.size(), recvs.size());
    for (size_t k = 0; k < paired; ++k) {
      partner[{sends[k].rank, sends[k].unit, sends[k].op}] = recvs[k];
      partner[{recvs[k].rank, recvs[k].unit, recvs[k].op}] = sends[k];
      const P2POp &send = opAt(programs, sends[k]);
      const P2POp &recv = opAt(programs, recvs[k]);
      if (send.payload != recv.payload)
        diagnostics.push_back(
            {P2PDiagnostic::Kind::PayloadMismatch,
             "channel " + channelName(channel) + ", message " +
                 str(int64_t(k)) + ": rank " + str(sends[k].rank) + " " +
                 unitName(programs, sends[k]) + " sends " + send.payload.str() +
                 " (" + send.name + "), but rank " + str(recvs[k].rank) + " " +
                 unitName(programs, recvs[k]) + " expects " +
                 recv.payload.str() + " (" + recv.name + ")"});
    }
    if (sends.size() != recvs.size()) {
      bool moreSends = sends.size() > recvs.size();
      OpRef first = moreSends ? sends[paired] : recvs[paired];
      diagnostics.push_back(
          {P2PDiagnostic::Kind::Unmatched,
           "channel " + channelName(channel) + ": rank " +
               str(std::get<1>(channel)) + " sends " +
               str(int64_t(sends.size())) + " messages but rank " +
               str(std::get<2>(channel)) + " receives " +
               str(int64_t(recvs.size())) + "; the first unmatched is rank " +
               str(first.rank) + " " + unitName(programs, first) + ": " +
               opAt(programs, first).str()});
    }
  }

  // (b) Progress under rendezvous semantics.
  std::vector<size_t> position(static_cast<size_t>(numRanks), 0);
  std::vector<std::vector<std::vector<bool>>> done(
      static_cast<size_t>(numRanks));
  for (int64_t r = 0; r < numRanks; ++r)
    for (const P2PUnit &unit : programs[size_t(r)])
      done[size_t(r)].emplace_back(unit.ops.size(), false);
  auto posted = [&](OpRef ref) {
    return position[size_t(ref.rank)] == ref.unit;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < numRanks; ++r) {
      size_t u = position[size_t(r)];
      if (u == programs[size_t(r)].size())
        continue;
      for (size_t i = 0; i < programs[size_t(r)][u].ops.size(); ++i) {
        if (done[size_t(r)][u][i])
          continue;
        auto found = partner.find({r, u, i});
        if (found == partner.end() || !posted(found->second))
          continue;
        OpRef other = found->second;
        done[size_t(r)][u][i] = true;
        done[size_t(other.rank)][other.unit][other.op] = true;
        progress = true;
      }
    }
    for (int64_t r = 0; r < numRanks; ++r) {
      size_t &u = position[size_t(r)];
      while (u < programs[size_t(r)].size()) {
        const std::vector<bool> &ops = done[size_t(r)][u];
        bool complete = true;
        for (bool d : ops)
          complete &= d;
        if (!complete)
          break;
        ++u;
        progress = true;
      }
    }
  }

  std::string blocked;
  for (int64_t r = 0; r < numRanks; ++r) {
    size_t u = position[size_t(r)];
    if (u == programs[size_t(r)].size())
      continue;
    OpRef here{r, u, 0};
    blocked += (blocked.empty() ? "" : "; ") + std::string("rank ") + str(r) +
               " blocks in " + unitName(programs, here) + " of " +
               str(int64_t(programs[size_t(r)].size())) + " on";
    const P2PUnit &unit = programs[size_t(r)][u];
    bool firstOp = true;
    for (size_t i = 0; i < unit.ops.size(); ++i) {
      if (done[size_t(r)][u][i])
        continue;
      auto found = partner.find({r, u, i});
      blocked += (firstOp ? " " : ", ") + unit.ops[i].str() +
                 (found == partner.end()
                      ? " (never matched)"
                      : " (its partner is rank " + str(found->second.rank) +
                            " " + unitName(programs, found->second) + ")");
      firstOp = false;
    }
  }
  if (!blocked.empty())
    diagnostics.push_back(
        {P2PDiagnostic::Kind::Deadlock, "deadlock: " + blocked});
  return diagnostics;
}
