//===- ManifestFuzzer.cpp - Fuzz the manifest reader ----------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// parseManifest on arbitrary text. A bad manifest must be a
// loom::rank::Error; any other exception escapes and libFuzzer reports
// it. An accepted manifest must keep the promises of Manifest.h, which the
// rank program relies on without checking again.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Manifest.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace loom::rank;

namespace {

void require(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "accepted manifest breaks: %s\n", what);
    std::abort();
  }
}

void checkInvariants(const Manifest &m) {
  require(int64_t(m.ranks.size()) == m.worldSize, "one RankInfo per rank");
  for (const ParamSpec &p : m.params) {
    require(m.findParam(p.name) == &p, "findParam finds every parameter");
    for (const Shard &s : p.shards) {
      require(s.rank >= 0 && s.rank < m.worldSize, "shards name real ranks");
      require(p.shardOf(s.rank) == &s, "shardOf finds every shard");
      for (size_t d = 0; d < p.shape.size(); ++d)
        require(s.box.offset[d] >= 0 && s.box.shape[d] >= 0 &&
                    s.box.offset[d] + s.box.shape[d] <= p.shape[d],
                "shards lie inside their parameter");
    }
  }
  for (const HfTensor &t : m.hfTensors)
    for (size_t i : t.pieces)
      require(i < m.params.size(), "HF pieces index params");
  for (const RankInfo &r : m.ranks) {
    require(r.entries.count("forward") == 1, "every rank has a forward entry");
    require(r.localSeqLength() > 0, "every rank holds part of the sequence");
    auto [dp, index] = m.dataParallel(r.rank);
    require(dp >= 1 && index >= 0 && index < dp, "dp index inside dp size");
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  try {
    checkInvariants(parseManifest(text, "fuzz.json"));
  } catch (const Error &) {
  }
  return 0;
}
