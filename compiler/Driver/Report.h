//===- Report.h - loom-compile --report and --report-json -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Memory and communication of every distinct rank program: the ranks of a
// plan run one program per pp rank (the same code on every tp, cp and dp
// rank), so the report has one block per pp rank ("ranks 0-15 (pp rank
// 0)"), counted through every function a step calls (Communication.h,
// Memory.h), as text and as JSON.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_REPORT_H
#define LOOM_COMPILER_DRIVER_REPORT_H

#include "compiler/Driver/Communication.h"

#include "rankgen/PipelineSchedule.h"
#include "rankgen/Plan.h"

#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::driver {

/// One entry point of a rank program.
struct EntryReport {
  std::string name;
  /// How often a step runs it: the micro-batches, or once for a pipelined
  /// step (which runs them all).
  int64_t runsPerStep = 1;
  /// What one run communicates.
  EntryVolume volume;
  /// The most buffer memory one run holds, its callees' included.
  int64_t peakBytes = 0;
  /// Activations a train step keeps for its backward (unpipelined: per
  /// micro-batch; pipelined: over all its micro-batches).
  std::optional<int64_t> savedBytes;
};

/// One distinct rank program.
struct ProgramReport {
  std::vector<int64_t> ranks;
  /// The pp rank whose stage it runs (pipelined plans only).
  std::optional<int64_t> ppRank;
  int64_t parameterBytes = 0;
  /// Of which the experts' weights (mixture-of-experts models).
  int64_t expertParameterBytes = 0;
  std::vector<EntryReport> entries;
};

struct Report {
  rankgen::Plan plan;
  int64_t worldSize = 0;
  int64_t microBatchSize = 0, seqLength = 0, paddedSeqLength = 0;
  /// The pipeline's schedule (pipelined plans only).
  std::optional<rankgen::PipelineSchedule> schedule;
  std::string recomputation;
  int64_t repeatedKv = 0;
  /// The model has mixture-of-experts layers.
  bool moe = false;
  /// Expert parallelism: the experts, and per MoE layer and micro-batch the
  /// bytes of a rank's dispatched rows (what its dispatch sends and its
  /// combine receives) and of what its experts may receive at most.
  struct ExpertDispatch {
    int64_t numExperts = 0;
    int64_t rowBytes = 0, boundBytes = 0;
    bool allgather = false; // Megatron's allgather dispatcher
  };
  std::optional<ExpertDispatch> expertDispatch;
  std::vector<ProgramReport> programs;
};

/// The text --report prints.
void printReport(llvm::raw_ostream &os, const Report &report);

/// What --report-json writes: {"programs": [{"ranks": [...], "pp_rank": r,
/// "parameters_bytes": n, "peak_bytes": n, "per_step": {"all_reduce":
/// {"count": c, "bytes": b}, ...}, "forward": ..., "backward": ...,
/// "pipeline_send": ..., "entries": [...]}], ...}; bytes as the text counts
/// them, per training step (the train step when compiled, else forward).
llvm::json::Value reportJson(const Report &report);

/// "0-3, 8-11" for sorted ranks.
std::string rankRanges(llvm::ArrayRef<int64_t> ranks);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_REPORT_H
