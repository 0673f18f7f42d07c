//===- Report.cpp - loom-compile --report and --report-json -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Report.h"

#include "rankgen/PipelineP2P.h"
#include "rankgen/PipelineTimeline.h"

#include "llvm/Support/FormatVariadic.h"

using namespace loom;
using namespace loom::driver;

std::string loom::driver::rankRanges(llvm::ArrayRef<int64_t> ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (!s.empty())
      s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i)
      s += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

namespace {

/// The entry a training step is made of: the train step when there is one.
const EntryReport *stepEntry(const ProgramReport &p) {
  const EntryReport *step = nullptr;
  for (const EntryReport &e : p.entries)
    if (!step || e.volume.hasBackward)
      step = &e;
  return step;
}

/// How each expert is split: over the expert tp group, or whole while the
/// tp ranks route their own tokens.
std::string expertSplit(const Report &r) {
  const rankgen::ParallelConfig &c = r.plan.sizes;
  int64_t etp = c.expertTp();
  if (etp > 1)
    return llvm::formatv(", each split over tp {0}", etp).str();
  if (c.tp > 1)
    return llvm::formatv(", each whole: the tp {0} ranks route their own "
                         "tokens",
                         c.tp)
        .str();
  return "";
}

void printHeader(llvm::raw_ostream &os, const Report &r) {
  const rankgen::ParallelConfig &c = r.plan.sizes;
  os << "plan: tp " << c.tp << ", cp " << c.cp << ", dp " << c.dp << ", pp "
     << c.pp;
  if (c.ep > 1)
    os << ", ep " << c.ep;
  os << " (world size " << r.worldSize << ")\n";
  int64_t m = r.plan.numMicrobatches;
  os << llvm::formatv("batch: micro-batch size {0} x {1} micro-batch{2} x dp "
                      "{3} = global batch {4}\n",
                      r.microBatchSize, m, m == 1 ? "" : "es", c.dp,
                      r.microBatchSize * m * c.dp);
  if (r.paddedSeqLength != r.seqLength) {
    bool cpSplit = c.cp > 1, sp = r.plan.sequenceParallel;
    os << llvm::formatv(
        "sequence: {0} tokens padded to {1} (a multiple of {2}: {3}); {4} "
        "masked tokens a sample\n",
        r.seqLength, r.paddedSeqLength, r.plan.sequenceMultiple(),
        cpSplit ? (sp ? "the 2 x cp chunks, each over tp with SP"
                      : "the 2 x cp chunks")
                : "the tp pieces of sequence parallelism",
        r.paddedSeqLength - r.seqLength);
  }
  if (!r.schedule)
    return;
  // Per pp rank: the micro-batches whose activations wait for their
  // backward at the worst moment (pp - r in 1F1B), and the idle share of
  // the schedule with a backward costing two forwards.
  auto timeline = rankgen::computeTimeline(*r.schedule, 1, 2);
  os << llvm::formatv(
      "pipeline: {0}, pp {1} x vpp {2}, {3} micro-batches, {4} p2p; bubble "
      "{5:P1} of the step (backward = 2 x forward)\n",
      rankgen::scheduleKindName(r.schedule->kind()), c.pp, r.plan.vpp, m,
      rankgen::p2pModeName(r.plan.p2pMode),
      timeline ? timeline->bubbleFraction : 0.0);
  for (const rankgen::RankSchedule &rs : r.schedule->ranks()) {
    int64_t live = 0, most = 0;
    for (const rankgen::ScheduleStep &st : rs.steps) {
      live += st.forward ? 1 : -1;
      most = std::max(most, live);
    }
    int64_t bytes = 0;
    for (const ProgramReport &p : r.programs)
      if (p.ppRank == rs.ppRank)
        bytes = p.parameterBytes;
    os << llvm::formatv("  pp rank {0}: parameters {1} bytes, at most {2} "
                        "micro-batch chunk(s) of activations in flight ({3} "
                        "warmup forwards)\n",
                        rs.ppRank, bytes, most, rs.warmup);
  }
}

void printProgram(llvm::raw_ostream &os, const Report &r,
                  const ProgramReport &p) {
  os << (p.ranks.size() == 1 ? "rank " : "ranks ") << rankRanges(p.ranks);
  if (p.ppRank)
    os << " (pp rank " << *p.ppRank << ")";
  os << ": parameters " << p.parameterBytes << " bytes";
  if (r.moe)
    os << " (experts " << p.expertParameterBytes << ")";
  for (const EntryReport &e : p.entries)
    os << ", @" << e.name << " peak buffers " << e.peakBytes << " bytes";
  os << "\n";
  for (const EntryReport &e : p.entries) {
    llvm::StringRef per = r.schedule ? "step" : "micro-batch";
    os << "  @" << e.name << " per " << per << ": " << e.volume.total().str()
       << "\n";
    if (e.volume.hasBackward)
      os << "    forward: " << e.volume.forward.str() << "\n"
         << "    backward: " << e.volume.backward.str() << "\n";
    if (e.volume.pipelineSends.count)
      os << llvm::formatv("    pipeline p2p: {0} send(s) of {1} bytes\n",
                          e.volume.pipelineSends.count,
                          e.volume.pipelineSends.bytes);
  }
  for (const EntryReport &e : p.entries)
    if (e.savedBytes)
      os << llvm::formatv("  @{0} keeps {1} bytes of activations {2} for "
                          "backward ({3})\n",
                          e.name, *e.savedBytes,
                          r.schedule ? "over all its micro-batches"
                                     : "per micro-batch",
                          r.recomputation);
  if (const auto &d = r.expertDispatch;
      d && r.plan.sizes.ep > 1 && d->allgather) {
    int64_t ep = r.plan.sizes.ep;
    os << llvm::formatv(
        "  experts: {0} of {1} on each rank (ep {2}{5}); per MoE layer and "
        "micro-batch the allgather dispatcher gathers every rank's rows ({3} "
        "bytes, {4} of them from other ranks, whatever the routing) and the "
        "combine reduce-scatters as many back\n",
        d->numExperts / ep, d->numExperts, ep, d->boundBytes,
        d->rowBytes * (ep - 1),
        expertSplit(r));
  } else if (const auto &d = r.expertDispatch; d && r.plan.sizes.ep > 1) {
    int64_t ep = r.plan.sizes.ep;
    os << llvm::formatv(
        "  experts: {0} of {1} on each rank (ep {2}{6}); per MoE layer and "
        "micro-batch the dispatch sends this rank's rows ({3} bytes) to their "
        "experts' ranks and the combine brings them back, {4} bytes of each "
        "to other ranks with even routing; this rank's experts receive at "
        "most {5} bytes (ep x the rows: the dropless bound its buffers "
        "hold)\n",
        d->numExperts / ep, d->numExperts, ep, d->rowBytes,
        d->rowBytes * (ep - 1) / ep, d->boundBytes,
        expertSplit(r));
  } else if (r.moe) {
    os << "  experts: every expert on every rank (ep 1"
       << expertSplit(r)
       << "): tokens are dispatched locally, 0 bytes sent\n";
  }
  if (r.repeatedKv)
    os << llvm::formatv("  kv heads repeated to one per tp rank in {0} "
                        "attention op(s): k and v all-gathered before, their "
                        "gradients after (docs/ARCHITECTURE.md)\n",
                        r.repeatedKv);
}

llvm::json::Object entryJson(const EntryReport &e) {
  EntryVolume step = e.volume.times(e.runsPerStep);
  return llvm::json::Object{{"name", e.name},
                            {"runs_per_step", e.runsPerStep},
                            {"peak_bytes", e.peakBytes},
                            {"forward", step.forward.json()},
                            {"backward", step.backward.json()},
                            {"pipeline_send", step.pipelineSends.json()}};
}

} // namespace

void loom::driver::printReport(llvm::raw_ostream &os, const Report &r) {
  printHeader(os, r);
  for (const ProgramReport &p : r.programs)
    printProgram(os, r, p);
}

/// The experts' placement and dispatch (null for a dense model).
static llvm::json::Value expertsJson(const Report &r) {
  if (!r.moe)
    return nullptr;
  int64_t ep = r.plan.sizes.ep;
  llvm::json::Object o{{"ep", ep}, {"etp", r.plan.sizes.expertTp()}};
  if (const auto &d = r.expertDispatch; d && ep > 1) {
    o["num_experts"] = d->numExperts;
    o["per_rank"] = d->numExperts / ep;
    o["dispatcher"] = d->allgather ? "allgather" : "alltoall";
    o["dispatch_bytes_per_layer"] = d->rowBytes;
    // All-to-all: what even routing sends away; allgather: what every rank
    // receives from the others, whatever the routing.
    o["expected_remote_bytes_per_layer"] =
        d->allgather ? d->rowBytes * (ep - 1) : d->rowBytes * (ep - 1) / ep;
    o["received_bound_bytes_per_layer"] = d->boundBytes;
  }
  return o;
}

llvm::json::Value loom::driver::reportJson(const Report &r) {
  llvm::json::Array programs;
  for (const ProgramReport &p : r.programs) {
    llvm::json::Object program{
        {"ranks", llvm::json::Array(p.ranks)},
        {"parameters_bytes", p.parameterBytes},
    };
    if (r.moe)
      program["expert_parameters_bytes"] = p.expertParameterBytes;
    if (p.ppRank)
      program["pp_rank"] = *p.ppRank;
    int64_t peak = 0;
    llvm::json::Array entries;
    for (const EntryReport &e : p.entries) {
      peak = std::max(peak, e.peakBytes);
      entries.push_back(entryJson(e));
    }
    program["peak_bytes"] = peak;
    if (const EntryReport *step = stepEntry(p)) {
      EntryVolume v = step->volume.times(step->runsPerStep);
      CollectiveVolume all = v.total();
      // Every byte the rank sends point to point: ring hops and the
      // pipeline's activations and gradients.
      all.send += v.pipelineSends;
      program["per_step"] = all.json();
      program["forward"] = v.forward.json();
      program["backward"] = v.backward.json();
      program["pipeline_send"] = v.pipelineSends.json();
    }
    program["entries"] = std::move(entries);
    programs.push_back(std::move(program));
  }
  const rankgen::ParallelConfig &c = r.plan.sizes;
  return llvm::json::Object{
      {"plan", llvm::json::Object{{"tp", c.tp},
                                  {"cp", c.cp},
                                  {"dp", c.dp},
                                  {"pp", c.pp},
                                  {"vpp", r.plan.vpp},
                                  {"sequence_parallel",
                                   r.plan.sequenceParallel},
                                  {"num_microbatches",
                                   r.plan.numMicrobatches}}},
      {"experts", expertsJson(r)},
      {"world_size", r.worldSize},
      {"micro_batch_size", r.microBatchSize},
      {"seq_length", r.paddedSeqLength},
      {"programs", std::move(programs)}};
}
