//===- VerifyPipelineP2P.cpp - Prove the pipeline's p2p matched ----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm-verify-pipeline-p2p: reads each pp rank's function as the sequence
// of its tfm.pipeline_p2p batches and hands them to RankGen's checker
// (P2PCheck.h), which proves FIFO payload matching per channel and
// progress under rendezvous semantics, or names the ranks, the batches and
// the payloads that fail. It checks the IR as compiled, so a schedule
// edited by hand, or reordered by a later pass, is checked too.
//
// The proof is of the program as it runs: every tfm.pipeline_p2p sits in
// the entry block of a pp rank's function (one block), where each runs
// once in program order, or in the body of an scf.for there with constant
// bounds (the steady phase), which the proof runs trip by trip with the
// trip's micro-batch offset, so it proves the trip count compiled. One
// inside another region, a branch or another function (an outlined block
// called per micro-batch) runs a number of times the verifier does not
// know, so it is refused with that reason rather than proven for one trip
// count. Peers are the next or previous pp
// rank (offsets +1 and -1, wrapping around as the interleaved schedule's
// last rank sends to the first), never the rank itself, and the functions
// of an entry are exactly the pp ranks of the mesh axis the batches name.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"
#include "rankgen/P2PCheck.h"

#include "llvm/ADT/MapVector.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

namespace loom::pipeline {
#define GEN_PASS_DEF_TFMVERIFYPIPELINEP2P
#include "passes/Pipeline/Passes.h.inc"
} // namespace loom::pipeline

using namespace mlir;
using namespace loom;

namespace {

std::string dtypeOf(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << cast<ShapedType>(t).getElementType();
  return s;
}

rankgen::Payload payloadOf(ArrayRef<int64_t> triples, size_t i, Type type,
                           int64_t shift) {
  rankgen::Payload p;
  p.kind = triples[3 * i] == 0 ? rankgen::PayloadKind::Activation
                               : rankgen::PayloadKind::Gradient;
  p.microbatch = triples[3 * i + 1] + shift;
  p.stage = triples[3 * i + 2];
  auto shaped = cast<ShapedType>(type);
  p.shape.assign(shaped.getShape().begin(), shaped.getShape().end());
  p.dtype = dtypeOf(type);
  return p;
}

/// Rank r's program: its batches in order. The batches' peers were
/// checked (checkBatch).
/// The trips of a loop of the steady phase: its index's values (checkBatch
/// checked that its bounds are constants).
SmallVector<int64_t> tripsOf(scf::ForOp loop) {
  auto value = [](Value v) {
    return v.getDefiningOp<arith::ConstantIndexOp>().value();
  };
  SmallVector<int64_t> trips;
  int64_t step = value(loop.getStep());
  for (int64_t i = value(loop.getLowerBound()); i < value(loop.getUpperBound());
       i += step)
    trips.push_back(i);
  return trips;
}

/// Rank r's program: its batches in the order they run, a loop's once per
/// trip with the trip's micro-batch offset.
rankgen::P2PProgram programOf(func::FuncOp f, int64_t rank, int64_t pp) {
  rankgen::P2PProgram program;
  int64_t index = 0;
  auto add = [&](tfm::PipelineP2POp op, int64_t shift) {
    rankgen::P2PUnit unit;
    unit.label =
        "batch " + std::to_string(index++) + " of @" + f.getName().str();
    auto peer = [&](int64_t offset) {
      return ((rank + offset) % pp + pp) % pp;
    };
    for (auto [i, v] : llvm::enumerate(op.getSends())) {
      rankgen::P2POp s;
      s.kind = rankgen::P2PKind::Send;
      s.peer = peer(op.getSendOffsets()[i]);
      s.communicator = op.getAxis().str();
      s.payload = payloadOf(op.getSendPayloads(), i, v.getType(), shift);
      s.name = op.getSendOffsets()[i] < 0 ? "send_prev" : "send_next";
      unit.ops.push_back(std::move(s));
    }
    for (auto [i, v] : llvm::enumerate(op.getResults())) {
      rankgen::P2POp r;
      r.kind = rankgen::P2PKind::Recv;
      r.peer = peer(op.getRecvOffsets()[i]);
      r.communicator = op.getAxis().str();
      r.payload = payloadOf(op.getRecvPayloads(), i, v.getType(), shift);
      r.name = op.getRecvOffsets()[i] < 0 ? "recv_prev" : "recv_next";
      unit.ops.push_back(std::move(r));
    }
    program.push_back(std::move(unit));
  };
  for (Operation &op : f.getBody().front()) {
    if (auto batch = dyn_cast<tfm::PipelineP2POp>(op)) {
      add(batch, 0);
      continue;
    }
    if (auto loop = dyn_cast<scf::ForOp>(op))
      for (int64_t trip : tripsOf(loop))
        for (auto batch : loop.getBody()->getOps<tfm::PipelineP2POp>())
          add(batch, batch.getBase() ? trip : 0);
  }
  return program;
}

/// A loop the proof can run: an scf.for in a function's entry block with
/// constant bounds, whose index is the micro-batch offset of the batches
/// that have one.
bool isProvableLoop(scf::ForOp loop, tfm::PipelineP2POp op) {
  auto constant = [](Value v) {
    return v.getDefiningOp<arith::ConstantIndexOp>() != nullptr;
  };
  return isa<func::FuncOp>(loop->getParentOp()) &&
         constant(loop.getLowerBound()) && constant(loop.getUpperBound()) &&
         constant(loop.getStep()) &&
         (!op.getBase() || op.getBase() == loop.getInductionVar());
}

/// Where a batch may be, and whom it may name: the entry block of a pp
/// rank's function (each batch run once) or the body of one loop there
/// with constant bounds (each batch run once per trip, its micro-batches
/// shifted by the loop's index), peers the next and previous pp rank of an
/// axis of `pp` ranks.
LogicalResult checkBatch(tfm::PipelineP2POp op, int64_t pp) {
  auto f = dyn_cast<func::FuncOp>(op->getParentOp());
  if (auto loop = dyn_cast<scf::ForOp>(op->getParentOp());
      loop && isProvableLoop(loop, op))
    f = cast<func::FuncOp>(loop->getParentOp());
  else if (op.getBase())
    return op.emitOpError()
           << "shifts its micro-batches by a value that is not the index of "
              "a loop the p2p proof can run (constant bounds, in a pp rank's "
              "function)";
  if (!f) {
    Operation *around = op->getParentOp();
    return op.emitOpError()
           << "is inside '" << around->getName()
           << "', which may run it any number of times; the p2p proof "
              "covers straight-line schedules and loops with constant "
              "bounds in a pp rank's function, so it refuses this rather "
              "than prove one trip count";
  }
  if (!f->hasAttr(tfm::kPipelineRankAttrName))
    return op.emitOpError()
           << "is in @" << f.getName()
           << ", which is not a pp rank's function (tfm.pipeline_rank): it "
              "would run once per call, which the p2p proof does not see";
  if (!f.getBody().hasOneBlock())
    return op.emitOpError()
           << "is in @" << f.getName() << ", which has "
           << f.getBody().getBlocks().size()
           << " blocks; the p2p proof covers straight-line schedules only";
  auto rank = f->getAttrOfType<IntegerAttr>(tfm::kPipelineRankAttrName).getInt();
  for (auto [what, offsets] :
       {std::pair<StringRef, ArrayRef<int64_t>>{"sends to", op.getSendOffsets()},
        {"receives from", op.getRecvOffsets()}})
    for (int64_t offset : offsets) {
      int64_t peer = ((rank + offset) % pp + pp) % pp;
      if (peer == rank)
        return op.emitOpError()
               << "on pp rank " << rank << " " << what
               << " itself (offset " << offset << " of " << pp
               << " pp ranks): a rank's own stages pass values in its "
                  "function, not by p2p";
      if (offset != 1 && offset != -1)
        return op.emitOpError()
               << "on pp rank " << rank << " " << what << " pp rank "
               << peer << " (offset " << offset
               << "): pipeline p2p goes to the next or the previous pp rank "
                  "(offset 1 or -1)";
    }
  return success();
}

struct VerifyPipelineP2PPass
    : pipeline::impl::TfmVerifyPipelineP2PBase<VerifyPipelineP2PPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // One program per entry: @train_step_pp0, @train_step_pp1, ...
    llvm::MapVector<StringRef, std::map<int64_t, func::FuncOp>> programs;
    for (auto f : module.getOps<func::FuncOp>()) {
      auto rank = f->getAttrOfType<IntegerAttr>(tfm::kPipelineRankAttrName);
      if (!rank)
        continue;
      StringRef base = f.getName();
      std::string suffix = "_pp" + std::to_string(rank.getInt());
      if (!base.consume_back(suffix)) {
        f.emitError() << "a pp rank's function must be named <entry>" << suffix;
        return signalPassFailure();
      }
      // Two functions of one entry and rank would share their name, which
      // the symbol table refuses.
      programs[base].emplace(rank.getInt(), f);
    }
    // The pp axis every batch names: its mesh's size of it is pp.
    std::optional<int64_t> meshPp;
    std::string axisName;
    WalkResult walked = module.walk([&](tfm::PipelineP2POp op) {
      FailureOr<tfm::MeshAxesInfo> mesh =
          tfm::MeshAxesInfo::lookup(op, op.getMeshAttr());
      if (failed(mesh))
        return WalkResult::interrupt();
      if (!mesh->index(op.getAxis())) {
        op.emitOpError() << "names axis \"" << op.getAxis()
                         << "\", which mesh " << op.getMeshAttr()
                         << " does not have";
        return WalkResult::interrupt();
      }
      int64_t pp = mesh->size(op.getAxis());
      if (meshPp && (*meshPp != pp || axisName != op.getAxis())) {
        op.emitOpError() << "passes over axis \"" << op.getAxis() << "\" of "
                         << pp << " ranks, another batch over \"" << axisName
                         << "\" of " << *meshPp
                         << ": a schedule's batches share one pp axis";
        return WalkResult::interrupt();
      }
      meshPp = pp;
      axisName = op.getAxis().str();
      if (failed(checkBatch(op, pp)))
        return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (walked.wasInterrupted())
      return signalPassFailure();
    bool failedAny = false;
    for (auto &[base, ranks] : programs) {
      int64_t pp = int64_t(ranks.size());
      if (meshPp && *meshPp != pp) {
        ranks.begin()->second.emitError()
            << "@" << base << " has functions for " << pp
            << " pp ranks, but its batches pass over axis \"" << axisName
            << "\" of " << *meshPp << " ranks: every pp rank needs its function";
        return signalPassFailure();
      }
      std::vector<rankgen::P2PProgram> ps;
      for (int64_t r = 0; r < pp; ++r) {
        auto it = ranks.find(r);
        if (it == ranks.end()) {
          ranks.begin()->second.emitError()
              << "@" << base << " has functions for " << pp
              << " pp ranks but none for pp rank " << r;
          return signalPassFailure();
        }
        ps.push_back(programOf(it->second, r, pp));
      }
      // The first violation, which causes the rest, and how many follow.
      std::vector<rankgen::P2PDiagnostic> found = rankgen::checkP2P(ps);
      if (found.empty())
        continue;
      InFlightDiagnostic diag =
          ranks.begin()->second.emitError()
          << "pipeline p2p of @" << base
          << " (ranks are pp ranks): " << found.front().message;
      if (found.size() > 1)
        diag << " (and " << found.size() - 1 << " more)";
      failedAny = true;
    }
    if (failedAny)
      signalPassFailure();
  }
};

} // namespace
