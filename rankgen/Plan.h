//===- Plan.h - A parallel plan, as Megatron's flags describe it -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The one description of a parallel plan: the parallel sizes and rank order
// (ParallelConfig), sequence parallelism, context parallelism's
// communication per layer, the pipeline's layer split and schedule, and the
// vocabulary padding, with Megatron-LM's meanings. The tools parse their
// flags into it once (compiler/Support/PlanFlags.h), the compiler keeps it
// in the IR as #tfm.plan and the passes read it from there; names and
// spellings of its choices are parsed here and nowhere else.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_PLAN_H
#define LOOM_RANKGEN_PLAN_H

#include "rankgen/ParallelLayout.h"
#include "rankgen/Result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {
namespace rankgen {

/// Context-parallel attention (Megatron's --cp-comm-type): TransformerEngine's
/// ring of k/v hops, all-gathered k/v, Ulysses all-to-alls, or all-to-alls
/// within groups and a ring across them.
enum class CpCommType { P2P, AllGather, A2A, A2AP2P };

/// "p2p", "allgather", "a2a", "a2a+p2p".
const char *cpCommTypeName(CpCommType type);
/// Parses one of the names above (and TransformerEngine's "all_gather").
Result<CpCommType> parseCpCommType(const std::string &name);
/// Whether the type runs a ring of p2p hops (p2p, a2a+p2p).
bool isRing(CpCommType type);

/// Megatron-Core's pipeline p2p transport (PipelineP2P.h says how each
/// posts its ops).
enum class P2PMode { Batched, Unbatched };

/// "batched", "unbatched".
const char *p2pModeName(P2PMode mode);
/// Parses "batched" or "unbatched".
Result<P2PMode> parseP2PMode(const std::string &name);

struct Plan {
  /// The parallel sizes, rank order, hierarchical cp sizes and distributed
  /// optimizer instances (what ParallelLayout builds the groups from).
  ParallelConfig sizes;
  /// Virtual pipeline stages (model chunks) per pp rank.
  int64_t vpp = 1;
  /// Megatron's --sequence-parallel.
  bool sequenceParallel = false;
  /// Context-parallel communication: none (p2p everywhere), one for every
  /// layer, or one per layer.
  std::vector<CpCommType> cpCommTypes;

  // The pipeline: Megatron's layer-split flags (PipelineLayout.h) and the
  // schedule (PipelineSchedule.h).
  std::optional<int64_t> firstStageLayers, lastStageLayers;
  bool accountForEmbedding = false, accountForLoss = false;
  std::string pipelineLayout;
  /// Micro-batches per step (gradient accumulation).
  int64_t numMicrobatches = 1;
  /// The interleaved schedule's micro-batch group (0: pp).
  int64_t microbatchGroupSize = 0;
  P2PMode p2pMode = P2PMode::Batched;

  /// Megatron's --make-vocab-size-divisible-by: the vocabulary is padded to
  /// a multiple of this times tp.
  int64_t makeVocabSizeDivisibleBy = 128;

  /// The communication of layer `layer` (p2p when none is given).
  CpCommType cpCommTypeOfLayer(int64_t layer) const;
  /// What the sequence must be a multiple of to split (Megatron's
  /// get_padding): 2 x cp chunks, each over tp with SP; tp with SP alone.
  int64_t sequenceMultiple() const;
};

/// Checks what no parallel layout checks: sizes and counts of at least 1
/// (vpp > 1 only with pipelining), a2a+p2p with its hierarchical sizes.
/// Messages name the flag (--tp, --num-microbatches, ...).
Result<bool> checkPlan(const Plan &plan);

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_PLAN_H
