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
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

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

rankgen::Payload payloadOf(ArrayRef<int64_t> triples, size_t i, Type type) {
  rankgen::Payload p;
  p.kind = triples[3 * i] == 0 ? rankgen::PayloadKind::Activation
                               : rankgen::PayloadKind::Gradient;
  p.microbatch = triples[3 * i + 1];
  p.stage = triples[3 * i + 2];
  auto shaped = cast<ShapedType>(type);
  p.shape.assign(shaped.getShape().begin(), shaped.getShape().end());
  p.dtype = dtypeOf(type);
  return p;
}

/// Rank r's program: its batches in order.
rankgen::P2PProgram programOf(func::FuncOp f, int64_t rank, int64_t pp) {
  rankgen::P2PProgram program;
  int64_t index = 0;
  f.walk([&](tfm::PipelineP2POp op) {
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
      s.payload = payloadOf(op.getSendPayloads(), i, v.getType());
      s.name = op.getSendOffsets()[i] < 0 ? "send_prev" : "send_next";
      unit.ops.push_back(std::move(s));
    }
    for (auto [i, v] : llvm::enumerate(op.getResults())) {
      rankgen::P2POp r;
      r.kind = rankgen::P2PKind::Recv;
      r.peer = peer(op.getRecvOffsets()[i]);
      r.communicator = op.getAxis().str();
      r.payload = payloadOf(op.getRecvPayloads(), i, v.getType());
      r.name = op.getRecvOffsets()[i] < 0 ? "recv_prev" : "recv_next";
      unit.ops.push_back(std::move(r));
    }
    program.push_back(std::move(unit));
  });
  return program;
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
      if (!programs[base].emplace(rank.getInt(), f).second) {
        f.emitError() << "a second function for pp rank " << rank.getInt()
                      << " of @" << base;
        return signalPassFailure();
      }
    }
    bool failedAny = false;
    for (auto &[base, ranks] : programs) {
      int64_t pp = int64_t(ranks.size());
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
