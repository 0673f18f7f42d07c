//===- PipelineP2P.h - A schedule's p2p ops in Megatron's modes -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The isend/irecv ops Megatron-Core's P2PCommunicator posts for each call of
// a schedule, in its two modes (p2p_communication.py):
//
//   batched ..... one batch_isend_irecv per call, its ops in the order
//                 send_prev, recv_prev, send_next, recv_next (the core
//                 library's default, batch_p2p_comm=True)
//   unbatched ... one isend/irecv at a time (_p2p_ops), even pp ranks
//                 posting send_next, recv_prev, send_prev, recv_next and odd
//                 ones recv_prev, send_next, recv_next, send_prev, so a
//                 rank's first op meets its neighbour's; at pp 2 the even
//                 ranks' receives and the odd ranks' sends go over WORLD
//                 (separate channels let the two directions overlap)
//
// Peers are pp ranks; next = (r + 1) % pp and prev = (r - 1) % pp, a ring.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_PIPELINEP2P_H
#define LOOM_RANKGEN_PIPELINEP2P_H

#include "rankgen/P2PCheck.h"
#include "rankgen/PipelineSchedule.h"
#include "rankgen/Plan.h"
#include "rankgen/Result.h"

#include <string>
#include <vector>

namespace loom {
namespace rankgen {

/// Every pp rank's program as checker units, each labelled with the call
/// and the step before it ("send_forward_recv_backward after F3.0").
std::vector<P2PProgram> pipelineP2PPrograms(const PipelineSchedule &schedule,
                                            P2PMode mode);

/// Checks a schedule's p2p traffic in `mode` (P2PCheck.h). Fails with the
/// first diagnostics (and how many there are) when it is not proven sound.
Result<bool> checkPipelineP2P(const PipelineSchedule &schedule, P2PMode mode);

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_PIPELINEP2P_H
