//===- RankGenerator.cpp - Megatron-style orthogonal rank groups ----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "rankgen/RankGenerator.h"

#include <cctype>

using namespace loom::rankgen;

//===----------------------------------------------------------------------===//
// Tokens
//===----------------------------------------------------------------------===//

static constexpr const char *kDimNames[kNumDims] = {"tp", "cp", "ep", "dp",
                                                    "pp"};

const char *loom::rankgen::dimName(Dim dim) {
  return kDimNames[static_cast<int>(dim)];
}

static std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char &c : out)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Splits "tp-cp-dp" into its tokens and maps each to a Dim. `what` names
/// the string in messages ("order" or "group kind").
static Result<std::vector<Dim>> parseTokens(std::string_view text,
                                            const char *what) {
  std::string lower = lowercase(text);
  if (lower.empty())
    return fail(std::string(what) + " is empty; expected tokens such as "
                                    "'tp-cp-ep-dp-pp'");
  std::vector<Dim> dims;
  DimMask seen = 0;
  size_t start = 0;
  while (true) {
    size_t dash = lower.find('-', start);
    std::string token = lower.substr(
        start, dash == std::string::npos ? std::string::npos : dash - start);
    if (token.empty())
      return fail(std::string(what) + " '" + lower + "' has an empty token");
    int found = -1;
    for (int i = 0; i < kNumDims; ++i)
      if (token == kDimNames[i])
        found = i;
    if (found < 0)
      return fail("unknown token '" + token + "' in " + what + " '" + lower +
                  "'; expected tp, cp, ep, dp or pp");
    Dim dim = static_cast<Dim>(found);
    if (seen & dimBit(dim))
      return fail(std::string(what) + " '" + lower + "' repeats token '" +
                  token + "'");
    seen |= dimBit(dim);
    dims.push_back(dim);
    if (dash == std::string::npos)
      break;
    start = dash + 1;
  }
  return dims;
}

Result<DimMask> loom::rankgen::parseDimMask(std::string_view tokens) {
  Result<std::vector<Dim>> dims = parseTokens(tokens, "group kind");
  if (!dims)
    return fail(dims.error());
  DimMask mask = 0;
  for (Dim dim : *dims)
    mask |= dimBit(dim);
  return mask;
}

//===----------------------------------------------------------------------===//
// GroupList
//===----------------------------------------------------------------------===//

GroupList::GroupList(int64_t groupSize, std::vector<int64_t> flatRanks)
    : groupSz(groupSize), ranks(std::move(flatRanks)) {}

std::vector<std::vector<int64_t>> GroupList::toVectors() const {
  std::vector<std::vector<int64_t>> out;
  out.reserve(numGroups());
  for (size_t g = 0; g < numGroups(); ++g)
    out.push_back((*this)[g].vec());
  return out;
}

//===----------------------------------------------------------------------===//
// RankGenerator
//===----------------------------------------------------------------------===//

Result<RankGenerator> RankGenerator::create(const DimArray &sizes,
                                            std::string_view order) {
  for (int i = 0; i < kNumDims; ++i)
    if (sizes[i] < 1)
      return fail(std::string(kDimNames[i]) + " size must be at least 1, got " +
                  std::to_string(sizes[i]));

  Result<std::vector<Dim>> listed = parseTokens(order, "order");
  if (!listed)
    return fail(listed.error());

  RankGenerator gen;
  gen.sizes = sizes;
  gen.userOrder = lowercase(order);

  // Megatron-Core appends the dimensions the order leaves out, provided they
  // are trivial, in its fixed tp, pp, dp, ep, cp sequence. Where they land
  // does not change any group because their size is 1.
  std::vector<Dim> axes = *listed;
  DimMask present = 0;
  for (Dim dim : axes)
    present |= dimBit(dim);
  for (Dim dim : {Dim::TP, Dim::PP, Dim::DP, Dim::EP, Dim::CP}) {
    if (present & dimBit(dim))
      continue;
    if (gen.size(dim) != 1)
      return fail("order '" + gen.userOrder + "' has no token '" +
                  dimName(dim) + "' but " + dimName(dim) + " is " +
                  std::to_string(gen.size(dim)));
    axes.push_back(dim);
  }

  // Prefix products give each axis its stride; the world is the last one.
  int64_t stride = 1;
  for (int i = 0; i < kNumDims; ++i) {
    gen.axes[i] = axes[i];
    gen.strides[idx(axes[i])] = stride;
    int64_t size = gen.size(axes[i]);
    if (stride > INT64_MAX / size)
      return fail("world size overflows: tp*cp*ep*dp*pp is too large");
    stride *= size;
  }
  gen.world = stride;
  return gen;
}

DimArray RankGenerator::coordinates(int64_t rank) const {
  DimArray coords{};
  for (int i = 0; i < kNumDims; ++i)
    coords[i] = coordinate(rank, static_cast<Dim>(i));
  return coords;
}

int64_t RankGenerator::rankAt(const DimArray &coords) const {
  int64_t rank = 0;
  for (int i = 0; i < kNumDims; ++i)
    rank += coords[i] * strides[i];
  return rank;
}

Result<GroupList> RankGenerator::groupsFor(std::string_view tokens) const {
  Result<DimMask> mask = parseDimMask(tokens);
  if (!mask)
    return fail(mask.error());
  return groupsFor(*mask);
}

GroupList RankGenerator::groupsFor(DimMask mask) const {
  // Split the axes (fastest first) into masked ones, which enumerate the
  // members of a group, and unmasked ones, which enumerate the groups.
  //   e.g. order tp-cp-ep-dp-pp, sizes 4-1-1-2-2, kind "dp":
  //   masked {dp}, unmasked {tp, cp, ep, pp}:
  //   [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]]
  std::vector<int64_t> maskedSize, maskedStride, unmaskedSize, unmaskedStride;
  for (Dim dim : axes) {
    bool in = mask & dimBit(dim);
    (in ? maskedSize : unmaskedSize).push_back(size(dim));
    (in ? maskedStride : unmaskedStride).push_back(stride(dim));
  }

  // Offsets of the members relative to the group's first rank, in member
  // order (mixed-radix counting over the masked axes).
  int64_t groupSize = 1;
  for (int64_t s : maskedSize)
    groupSize *= s;
  std::vector<int64_t> offsets(groupSize);
  {
    std::vector<int64_t> digit(maskedSize.size(), 0);
    int64_t offset = 0;
    for (int64_t m = 0; m < groupSize; ++m) {
      offsets[m] = offset;
      // Odometer increment: bump the fastest axis, carry into the next.
      for (size_t a = 0; a < digit.size(); ++a) {
        offset += maskedStride[a];
        if (++digit[a] < maskedSize[a])
          break;
        offset -= maskedStride[a] * maskedSize[a];
        digit[a] = 0;
      }
    }
  }

  int64_t numGroups = world / groupSize;
  std::vector<int64_t> flat(static_cast<size_t>(world));
  std::vector<int64_t> digit(unmaskedSize.size(), 0);
  int64_t base = 0;
  int64_t *out = flat.data();
  for (int64_t g = 0; g < numGroups; ++g) {
    for (int64_t m = 0; m < groupSize; ++m)
      *out++ = base + offsets[m];
    for (size_t a = 0; a < digit.size(); ++a) {
      base += unmaskedStride[a];
      if (++digit[a] < unmaskedSize[a])
        break;
      base -= unmaskedStride[a] * unmaskedSize[a];
      digit[a] = 0;
    }
  }
  return GroupList(groupSize, std::move(flat));
}

RankGenerator::Location RankGenerator::locate(int64_t rank,
                                              DimMask mask) const {
  // The same mixed-radix numbers groupsFor() counts through, read backwards
  // from the rank's coordinates.
  Location loc{0, 0};
  int64_t groupRadix = 1, memberRadix = 1;
  for (Dim dim : axes) {
    int64_t c = coordinate(rank, dim);
    if (mask & dimBit(dim)) {
      loc.position += c * memberRadix;
      memberRadix *= size(dim);
    } else {
      loc.group += c * groupRadix;
      groupRadix *= size(dim);
    }
  }
  return loc;
}
