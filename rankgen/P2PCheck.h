//===- P2PCheck.h - Static matching and deadlock check of p2p ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A compile-time proof that point-to-point traffic between ranks is sound.
// The input is every rank's program as a sequence of communication units: a
// unit is one grouped batch (torch.distributed.batch_isend_irecv: all its ops
// posted together, the unit done when every one of them has completed) or a
// single isend/irecv that is waited on. The check proves
//
//  (a) matching: on every channel (communicator, source, destination) the
//      k-th send pairs with the k-th receive, as NCCL matches p2p (FIFO per
//      channel, no tags); every send has its receive and both sides agree on
//      the payload (activation or gradient, micro-batch, producing stage,
//      shape, dtype). A same-shaped activation arriving where a gradient was
//      expected is caught here: at run time it would be silent wrong data;
//  (b) progress: under rendezvous semantics (an op completes only when its
//      partner is posted; sends are never buffered, which is what a static
//      proof must assume) every rank runs to its end. Otherwise the blocked
//      ranks, their units and the ops they wait on are reported.
//
// The checker is generic over op sequences: the pipeline schedules of
// PipelineP2P.h produce them today, and a pass can extract them from IR.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_P2PCHECK_H
#define LOOM_RANKGEN_P2PCHECK_H

#include <cstdint>
#include <string>
#include <vector>

namespace loom {
namespace rankgen {

enum class PayloadKind { Activation, Gradient };

/// What a message carries, as both sides understand it: the sender what it
/// sends, the receiver what it expects to arrive.
struct Payload {
  PayloadKind kind = PayloadKind::Activation;
  int64_t microbatch = 0;
  /// The global (virtual) pipeline stage that produced the tensor: vp*pp + r
  /// for chunk vp on pp rank r.
  int64_t stage = 0;
  std::vector<int64_t> shape;
  std::string dtype;

  bool operator==(const Payload &o) const {
    return kind == o.kind && microbatch == o.microbatch && stage == o.stage &&
           shape == o.shape && dtype == o.dtype;
  }
  bool operator!=(const Payload &o) const { return !(*this == o); }
  /// "act mb 3 of stage 5 [4x2x64 bf16]".
  std::string str() const;
};

enum class P2PKind { Send, Recv };

/// One isend or irecv.
struct P2POp {
  P2PKind kind = P2PKind::Send;
  int64_t peer = 0;         ///< the other rank
  std::string communicator; ///< channels are (communicator, src, dst)
  Payload payload;
  std::string name; ///< e.g. "send_next", for messages

  /// "send_next act mb 3 of stage 5 [...] to rank 2 on pp".
  std::string str() const;
};

/// One grouped batch, or a single op.
struct P2PUnit {
  std::string label; ///< where in the rank's program, for messages
  std::vector<P2POp> ops;
};

/// A rank's program: its units in the order it posts them.
using P2PProgram = std::vector<P2PUnit>;

struct P2PDiagnostic {
  enum class Kind {
    BadPeer,         ///< a peer outside [0, number of ranks)
    Unmatched,       ///< a channel carries more sends than receives or back
    PayloadMismatch, ///< a send and its receive disagree on the payload
    Deadlock,        ///< some ranks block forever
  };
  Kind kind;
  std::string message;
};

/// Checks the programs of ranks 0..programs.size()-1. No diagnostics means
/// the traffic is proven matched and deadlock-free.
std::vector<P2PDiagnostic> checkP2P(const std::vector<P2PProgram> &programs);

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_P2PCHECK_H
