//===- PipelineLayout.cpp - Layers of each pipeline stage -----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Megatron-Core computes each stage's layer count (get_num_layers_to_build)
// and its first layer (get_transformer_layer_offset) with one closed formula
// per way of splitting. Every one of those offsets equals the number of
// layers in the earlier virtual stages (all pp ranks of earlier chunks, then
// the lower pp ranks of this chunk), so Loom computes the counts with
// Megatron's rules and the offsets as that prefix sum. The two agree wherever
// Megatron's offset formula is defined (test/Unit/RankGen checks it over
// sweeps); at pp 2 with uneven first and last stages and vpp, where Megatron
// divides by the zero middle stages, the prefix sum still gives the obvious
// assignment.
//
//===----------------------------------------------------------------------===//

#include "rankgen/PipelineLayout.h"

#include <cctype>

using namespace loom::rankgen;

static std::string str(int64_t v) { return std::to_string(v); }

//===----------------------------------------------------------------------===//
// Layout strings
//===----------------------------------------------------------------------===//

namespace {
/// Appends `text` `times` times, failing once the result would exceed the
/// expansion limit (a "t*999999999" must not exhaust memory).
bool appendRepeated(std::string &out, const std::string &text, uint64_t times) {
  if (!text.empty() &&
      times > uint64_t(kMaxPipelineLayers - int64_t(out.size())) / text.size())
    return false;
  for (uint64_t i = 0; i < times; ++i)
    out += text;
  return true;
}

/// Reads the digits at `s[i...]` (at least one) as a repeat count; returns
/// the index after them, or npos when there are none. Counts beyond the
/// expansion limit saturate (the append then fails).
size_t readCount(const std::string &s, size_t i, uint64_t &count) {
  size_t j = i;
  count = 0;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) {
    if (count <= uint64_t(kMaxPipelineLayers))
      count = count * 10 + uint64_t(s[j] - '0');
    ++j;
  }
  return j == i ? std::string::npos : j;
}
} // namespace

Result<std::vector<std::string>>
loom::rankgen::parsePipelineLayoutString(const std::string &layout) {
  std::string tooLong = "pipeline layout '" + layout +
                        "' expands to more than " + str(kMaxPipelineLayers) +
                        " characters";
  std::string s;
  for (char c : layout)
    if (c != ',')
      s += c;

  // Megatron's re.sub(r'\(([^)]+)\)\*(\d+)', ...): a '(' with at least one
  // character up to the next ')', then '*' and digits. No nesting: what
  // remains of a nested group is an invalid character below.
  std::string unrolled;
  for (size_t i = 0; i < s.size();) {
    size_t close = s[i] == '(' ? s.find(')', i + 1) : std::string::npos;
    uint64_t count = 0;
    size_t end = std::string::npos;
    if (close != std::string::npos && close > i + 1 && close + 1 < s.size() &&
        s[close + 1] == '*')
      end = readCount(s, close + 2, count);
    if (end == std::string::npos) {
      unrolled += s[i++];
      continue;
    }
    if (!appendRepeated(unrolled, s.substr(i + 1, close - i - 1), count))
      return fail(tooLong);
    i = end;
  }

  // Then re.sub(r'(.)\*(\d+)', ...): any single character followed by '*'
  // and digits.
  std::string expanded;
  for (size_t i = 0; i < unrolled.size();) {
    uint64_t count = 0;
    size_t end = std::string::npos;
    if (i + 1 < unrolled.size() && unrolled[i] != '\n' &&
        unrolled[i + 1] == '*')
      end = readCount(unrolled, i + 2, count);
    if (end == std::string::npos) {
      expanded += unrolled[i++];
      continue;
    }
    if (!appendRepeated(expanded, std::string(1, unrolled[i]), count))
      return fail(tooLong);
    i = end;
  }

  std::vector<std::string> stages(1);
  for (char c : expanded) {
    if (c == '|') {
      stages.emplace_back();
      continue;
    }
    if (c != 'E' && c != 't' && c != 'L' && c != 'm')
      return fail("invalid character '" + std::string(1, c) +
                  "' in pipeline layout '" + layout +
                  "'; expected E, t, L, m, |, (...)*n or x*n");
    stages.back() += c;
  }
  return stages;
}

//===----------------------------------------------------------------------===//
// Layer counts per stage
//===----------------------------------------------------------------------===//

namespace {
/// Layer counts indexed [ppRank][vpStage], plus where the embedding and the
/// loss live.
struct Counts {
  int64_t vpp = 1;
  std::vector<std::vector<int64_t>> layers;
  int64_t embeddingStage = 0; ///< virtual stage index vp*pp + r
  int64_t lossStage = 0;
};

Counts uniformCounts(int64_t pp, int64_t vpp) {
  Counts c;
  c.vpp = vpp;
  c.layers.assign(size_t(pp), std::vector<int64_t>(size_t(vpp), 0));
  c.embeddingStage = 0;
  c.lossStage = pp * vpp - 1;
  return c;
}

/// "14 layers (+1 for the embedding, +1 for the loss)".
std::string layersWithSlots(const PipelineLayoutOptions &o) {
  std::string text = str(o.numLayers) + " layers";
  if (o.accountForEmbedding && o.accountForLoss)
    text += " (+1 for the embedding, +1 for the loss)";
  else if (o.accountForEmbedding)
    text += " (+1 for the embedding)";
  else if (o.accountForLoss)
    text += " (+1 for the loss)";
  return text;
}

Result<Counts> layoutCounts(const PipelineLayoutOptions &o) {
  Result<std::vector<std::string>> parsed = parsePipelineLayoutString(o.layout);
  if (!parsed)
    return fail(parsed.error());
  const std::vector<std::string> &stages = *parsed;
  int64_t n = int64_t(stages.size());
  if (n % o.pp != 0)
    return fail("pipeline layout '" + o.layout + "' has " + str(n) +
                " stages, which is not divisible by pp " + str(o.pp));
  int64_t vpp = n / o.pp;
  if (o.vpp > 0 && o.vpp != vpp)
    return fail("vpp " + str(o.vpp) + " conflicts with pipeline layout '" +
                o.layout + "', which has " + str(vpp) +
                " virtual stages per pp rank");
  if (vpp > 1 && o.pp == 1)
    return fail("vpp " + str(vpp) + " needs pipeline parallelism (pp > 1)");

  Counts c = uniformCounts(o.pp, vpp);
  int64_t decoders = 0, embeddings = 0, losses = 0;
  for (int64_t s = 0; s < n; ++s) {
    for (char ch : stages[size_t(s)]) {
      if (ch == 'm')
        return fail("pipeline layout '" + o.layout +
                    "' has multi-token prediction layers ('m'), which Loom "
                    "does not build");
      decoders += ch == 't';
      embeddings += ch == 'E';
      losses += ch == 'L';
      if (ch == 'E')
        c.embeddingStage = s;
      if (ch == 'L')
        c.lossStage = s;
      if (ch == 't')
        ++c.layers[size_t(s % o.pp)][size_t(s / o.pp)];
    }
  }
  if (embeddings != 1 || losses != 1)
    return fail("pipeline layout '" + o.layout + "' must name the embedding " +
                "'E' and the loss 'L' once each, not " + str(embeddings) +
                " and " + str(losses) + " times");
  // Megatron only asks for E first and L last in the flattened layout, but
  // builds the embedding on the first stage and the loss on the last one
  // whatever the layout says; an empty first or last stage would lose them.
  if (c.embeddingStage != 0 || stages[0].front() != 'E')
    return fail("pipeline layout '" + o.layout +
                "' must start with the embedding 'E' in its first stage");
  if (c.lossStage != n - 1 || stages.back().back() != 'L')
    return fail("pipeline layout '" + o.layout +
                "' must end with the loss 'L' in its last stage");
  if (decoders != o.numLayers)
    return fail("pipeline layout '" + o.layout + "' has " + str(decoders) +
                " transformer layers 't' but the model has " +
                str(o.numLayers));
  return c;
}

Result<Counts> unevenCounts(const PipelineLayoutOptions &o, int64_t vpp) {
  if (o.pp == 1)
    return fail("--decoder-first/last-pipeline-num-layers need pipeline "
                "parallelism (pp > 1)");
  if (o.accountForEmbedding || o.accountForLoss)
    return fail("--decoder-first/last-pipeline-num-layers cannot be combined "
                "with --account-for-embedding/loss-in-pipeline-split");
  for (auto [flag, value] : {std::pair{"first", o.firstStageLayers},
                             std::pair{"last", o.lastStageLayers}}) {
    if (!value)
      continue;
    if (*value < 1)
      return fail(std::string("--decoder-") + flag +
                  "-pipeline-num-layers must be at least 1, got " +
                  str(*value));
    if (*value % vpp != 0)
      return fail(std::string("the ") + str(*value) + " layers of the " + flag +
                  " stage are not divisible by vpp " + str(vpp));
  }
  int64_t first = o.firstStageLayers.value_or(0);
  int64_t last = o.lastStageLayers.value_or(0);
  if (first + last > o.numLayers)
    return fail("the first and last stages take " + str(first + last) +
                " layers, more than the model's " + str(o.numLayers));
  int64_t middle = o.numLayers - first - last;
  int64_t middleStages =
      o.pp - (o.firstStageLayers ? 1 : 0) - (o.lastStageLayers ? 1 : 0);
  if (middleStages == 0 && middle != 0)
    return fail(str(middle) + " layers are left for the middle stages, but " +
                "pp " + str(o.pp) + " has none");
  if (middleStages > 0 && middle == 0)
    return fail("no layers are left for the " + str(middleStages) +
                " middle stages");
  if (middleStages > 0 && middle % middleStages != 0)
    return fail("the " + str(middle) +
                " middle layers are not divisible by the " + str(middleStages) +
                " middle stages");
  int64_t perMiddle = middleStages > 0 ? middle / middleStages : 0;
  if (perMiddle % vpp != 0)
    return fail("the " + str(perMiddle) +
                " layers of each middle stage are not divisible by vpp " +
                str(vpp));

  Counts c = uniformCounts(o.pp, vpp);
  for (int64_t r = 0; r < o.pp; ++r) {
    int64_t perRank = perMiddle;
    if (r == 0 && o.firstStageLayers)
      perRank = first;
    else if (r == o.pp - 1 && o.lastStageLayers)
      perRank = last;
    for (int64_t v = 0; v < vpp; ++v)
      c.layers[size_t(r)][size_t(v)] = perRank / vpp;
  }
  return c;
}

Result<Counts> evenCounts(const PipelineLayoutOptions &o, int64_t vpp) {
  int64_t slots = o.numLayers + (o.accountForEmbedding ? 1 : 0) +
                  (o.accountForLoss ? 1 : 0);
  if (slots < o.pp * vpp)
    return fail("pp " + str(o.pp) + " x vpp " + str(vpp) + " = " +
                str(o.pp * vpp) + " stages but only " + layersWithSlots(o));
  if (slots % o.pp != 0)
    return fail(layersWithSlots(o) + " are not divisible by pp " + str(o.pp));
  int64_t perRank = slots / o.pp;
  if (perRank % vpp != 0)
    return fail("the " + str(perRank) +
                " layers of each pp rank are not divisible by vpp " + str(vpp));
  Counts c = uniformCounts(o.pp, vpp);
  for (int64_t r = 0; r < o.pp; ++r)
    for (int64_t v = 0; v < vpp; ++v)
      c.layers[size_t(r)][size_t(v)] =
          perRank / vpp - (o.accountForEmbedding && r == 0 && v == 0 ? 1 : 0) -
          (o.accountForLoss && r == o.pp - 1 && v == vpp - 1 ? 1 : 0);
  return c;
}

/// vpp from --vpp or --num-layers-per-virtual-pipeline-stage (1 if neither).
Result<int64_t> virtualStages(const PipelineLayoutOptions &o) {
  if (!o.layersPerVirtualStage)
    return o.vpp > 0 ? o.vpp : 1;
  int64_t perStage = *o.layersPerVirtualStage;
  if (o.vpp > 0)
    return fail("--vpp and --num-layers-per-virtual-pipeline-stage cannot "
                "both be given");
  if (o.firstStageLayers || o.lastStageLayers)
    return fail("--num-layers-per-virtual-pipeline-stage cannot be combined "
                "with --decoder-first/last-pipeline-num-layers; give --vpp");
  if (perStage < 1)
    return fail("--num-layers-per-virtual-pipeline-stage must be at least 1, "
                "got " +
                str(perStage));
  int64_t slots = o.numLayers + (o.accountForEmbedding ? 1 : 0) +
                  (o.accountForLoss ? 1 : 0);
  if (slots % o.pp != 0)
    return fail(layersWithSlots(o) + " are not divisible by pp " + str(o.pp));
  int64_t perRank = slots / o.pp;
  if (perRank % perStage != 0)
    return fail("the " + str(perRank) +
                " layers of each pp rank are not divisible by " +
                str(perStage) + " layers per virtual stage");
  return perRank / perStage;
}
} // namespace

//===----------------------------------------------------------------------===//
// PipelineLayout
//===----------------------------------------------------------------------===//

Result<PipelineLayout> PipelineLayout::create(const PipelineLayoutOptions &o) {
  if (o.pp < 1)
    return fail("pp must be at least 1, got " + str(o.pp));
  if (o.vpp < 0)
    return fail("vpp must be at least 1, got " + str(o.vpp));
  if (o.numLayers < 1)
    return fail("the number of layers must be at least 1, got " +
                str(o.numLayers));
  if (o.numLayers > kMaxPipelineLayers)
    return fail("the number of layers " + str(o.numLayers) +
                " exceeds the supported maximum " + str(kMaxPipelineLayers));

  Result<Counts> counts = fail("");
  if (!o.layout.empty()) {
    if (o.firstStageLayers || o.lastStageLayers || o.accountForEmbedding ||
        o.accountForLoss || o.layersPerVirtualStage)
      return fail("--pipeline-model-parallel-layout cannot be combined with "
                  "--decoder-first/last-pipeline-num-layers, "
                  "--account-for-embedding/loss-in-pipeline-split or "
                  "--num-layers-per-virtual-pipeline-stage");
    counts = layoutCounts(o);
  } else {
    Result<int64_t> vpp = virtualStages(o);
    if (!vpp)
      return fail(vpp.error());
    if (*vpp > 1 && o.pp == 1)
      return fail("vpp " + str(*vpp) + " needs pipeline parallelism (pp > 1)");
    counts = o.firstStageLayers || o.lastStageLayers ? unevenCounts(o, *vpp)
                                                     : evenCounts(o, *vpp);
  }
  if (!counts)
    return fail(counts.error());

  PipelineLayout layout;
  layout.pp_ = o.pp;
  layout.vpp_ = counts->vpp;
  layout.numLayers_ = o.numLayers;
  layout.stages_.resize(size_t(o.pp * layout.vpp_));
  // Offsets: layers of all earlier virtual stages, in virtual-stage order.
  int64_t offset = 0;
  for (int64_t v = 0; v < layout.vpp_; ++v) {
    for (int64_t r = 0; r < o.pp; ++r) {
      PipelineStage &stage = layout.stages_[size_t(r * layout.vpp_ + v)];
      stage.ppRank = r;
      stage.vpStage = v;
      int64_t n = counts->layers[size_t(r)][size_t(v)];
      for (int64_t i = 0; i < n; ++i)
        stage.layerIds.push_back(offset + i);
      offset += n;
      int64_t virtualStage = v * o.pp + r;
      stage.embedding = virtualStage == counts->embeddingStage;
      stage.loss = virtualStage == counts->lossStage;
    }
  }
  return layout;
}
