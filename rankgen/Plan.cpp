//===- Plan.cpp - A parallel plan, as Megatron's flags describe it -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "rankgen/Plan.h"

using namespace loom::rankgen;

const char *loom::rankgen::cpCommTypeName(CpCommType type) {
  switch (type) {
  case CpCommType::P2P:
    return "p2p";
  case CpCommType::AllGather:
    return "allgather";
  case CpCommType::A2A:
    return "a2a";
  case CpCommType::A2AP2P:
    return "a2a+p2p";
  }
  return "?";
}

Result<CpCommType> loom::rankgen::parseCpCommType(const std::string &name) {
  for (CpCommType t : {CpCommType::P2P, CpCommType::AllGather, CpCommType::A2A,
                       CpCommType::A2AP2P})
    if (name == cpCommTypeName(t))
      return t;
  // TransformerEngine spells it all_gather, Megatron's help allgather.
  if (name == "all_gather")
    return CpCommType::AllGather;
  return fail("unknown cp comm type '" + name +
              "'; expected p2p, allgather, a2a or a2a+p2p");
}

bool loom::rankgen::isRing(CpCommType type) {
  return type == CpCommType::P2P || type == CpCommType::A2AP2P;
}

const char *loom::rankgen::p2pModeName(P2PMode mode) {
  return mode == P2PMode::Batched ? "batched" : "unbatched";
}

Result<P2PMode> loom::rankgen::parseP2PMode(const std::string &name) {
  if (name == "batched")
    return P2PMode::Batched;
  if (name == "unbatched")
    return P2PMode::Unbatched;
  return fail("unknown p2p mode '" + name + "'; expected batched or unbatched");
}

CpCommType Plan::cpCommTypeOfLayer(int64_t layer) const {
  if (cpCommTypes.empty())
    return CpCommType::P2P;
  if (cpCommTypes.size() == 1)
    return cpCommTypes.front();
  return cpCommTypes.at(size_t(layer));
}

int64_t Plan::sequenceMultiple() const {
  int64_t tp = sizes.tp, cp = sizes.cp;
  if (cp > 1)
    return sequenceParallel ? 2 * cp * tp : 2 * cp;
  return sequenceParallel ? tp : 1;
}

Result<bool> loom::rankgen::checkPlan(const Plan &p) {
  const ParallelConfig &s = p.sizes;
  std::pair<const char *, int64_t> positive[] = {
      {"--tp", s.tp},
      {"--cp", s.cp},
      {"--pp", s.pp},
      {"--vpp", p.vpp},
      {"--ep", s.ep},
      {"--num-microbatches", p.numMicrobatches},
      {"--make-vocab-size-divisible-by", p.makeVocabSizeDivisibleBy}};
  for (auto [flag, value] : positive)
    if (value < 1)
      return fail(std::string(flag) + " " + std::to_string(value) +
                  " must be at least 1");
  // dp 0 is derived from the world size, when there is one.
  if (s.dp < 0 || (s.dp == 0 && s.worldSize == 0))
    return fail("--dp " + std::to_string(s.dp) + " must be at least 1");
  if (s.etp < 0) // 0: the default, tp
    return fail("--etp " + std::to_string(s.etp) + " must be at least 1");
  for (int64_t size : s.hierarchicalCpSizes)
    if (size < 1)
      return fail("--hierarchical-context-parallel-sizes: size " +
                  std::to_string(size) + " must be at least 1");
  if (p.vpp != 1 && s.pp == 1)
    return fail("--vpp " + std::to_string(p.vpp) +
                " needs pipeline parallelism (--pp 2 or more)");
  if (p.microbatchGroupSize < 0)
    return fail("--microbatch-group-size-per-vp-stage " +
                std::to_string(p.microbatchGroupSize) +
                " must be at least 1");
  for (CpCommType t : p.cpCommTypes)
    if (t == CpCommType::A2AP2P && s.hierarchicalCpSizes.empty())
      return fail("--cp-comm-type a2a+p2p needs "
                  "--hierarchical-context-parallel-sizes");
  return true;
}
