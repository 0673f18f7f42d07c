//===- RankGenerator.h - Megatron-style orthogonal rank groups --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The world of N ranks is a mixed-radix grid whose axes are the parallel
// dimensions, listed fastest-varying first by an order string such as
// "tp-cp-ep-dp-pp". With that order a rank is
//
//   rank = tp_rank + cp_rank*tp + ep_rank*tp*cp + dp_rank*tp*cp*ep
//        + pp_rank*tp*cp*ep*dp
//
// A group kind names a subset of the axes ("tp-dp"). Its groups are the sets
// of ranks that differ only along those axes: the named axes are "masked"
// and enumerate the members of a group, the others enumerate the groups.
// Both enumerations run fastest-varying axis first, which is exactly how
// Megatron-Core's generate_masked_orthogonal_rank_groups orders groups and
// ranks inside them, so the lists here equal Megatron-Core's element for
// element.
//
// This header has no LLVM dependency: the runtime may reuse it.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_RANKGENERATOR_H
#define LOOM_RANKGEN_RANKGENERATOR_H

#include "rankgen/Result.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {
namespace rankgen {

//===----------------------------------------------------------------------===//
// Parallel dimensions
//===----------------------------------------------------------------------===//

/// The five order tokens of Megatron-Core. In the expert world `tp` is the
/// expert tensor-parallel size (etp) and `dp` the expert data-parallel size
/// (edp); the tokens keep Megatron's spelling so order strings are shared.
enum class Dim : uint8_t { TP = 0, CP = 1, EP = 2, DP = 3, PP = 4 };
constexpr int kNumDims = 5;

/// A value per dimension, indexed by Dim.
using DimArray = std::array<int64_t, kNumDims>;

/// "tp", "cp", "ep", "dp" or "pp".
const char *dimName(Dim dim);

/// A set of dimensions as a bit mask (bit i = Dim i), e.g. the kind "tp-dp".
using DimMask = unsigned;
constexpr DimMask dimBit(Dim dim) { return 1u << static_cast<unsigned>(dim); }

/// Parses a hyphen-separated token list ("tp-dp-cp") into a mask. Tokens are
/// case-insensitive; unknown, empty and repeated tokens are errors.
Result<DimMask> parseDimMask(std::string_view tokens);

//===----------------------------------------------------------------------===//
// RankSpan / GroupList
//===----------------------------------------------------------------------===//

/// A read-only view of the ranks of one group (C++17 has no std::span).
class RankSpan {
public:
  RankSpan() = default;
  RankSpan(const int64_t *data, size_t size) : ptr(data), count(size) {}

  const int64_t *begin() const { return ptr; }
  const int64_t *end() const { return ptr + count; }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  int64_t operator[](size_t i) const { return ptr[i]; }
  int64_t front() const { return ptr[0]; }
  int64_t back() const { return ptr[count - 1]; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

private:
  const int64_t *ptr = nullptr;
  size_t count = 0;
};

/// Equal-sized groups of ranks stored in one flat array, group after group.
/// Every group kind Megatron-Core builds has groups of one size, and the flat
/// layout keeps building a 65,536-rank world to a few allocations.
class GroupList {
public:
  GroupList() = default;
  GroupList(int64_t groupSize, std::vector<int64_t> flatRanks);

  size_t numGroups() const { return groupSz ? ranks.size() / groupSz : 0; }
  int64_t groupSize() const { return groupSz; }
  RankSpan operator[](size_t group) const {
    return RankSpan(ranks.data() + group * groupSz, groupSz);
  }
  /// All ranks, group after group.
  const std::vector<int64_t> &flat() const { return ranks; }
  /// A copy as nested vectors, e.g. for tests: {{0, 1}, {2, 3}}.
  std::vector<std::vector<int64_t>> toVectors() const;

  bool operator==(const GroupList &other) const {
    return groupSz == other.groupSz && ranks == other.ranks;
  }
  bool operator!=(const GroupList &other) const { return !(*this == other); }

private:
  int64_t groupSz = 0;
  std::vector<int64_t> ranks;
};

//===----------------------------------------------------------------------===//
// RankGenerator
//===----------------------------------------------------------------------===//

/// One mixed-radix world: sizes per dimension and the order of the axes.
/// Mirrors Megatron-Core's RankGenerator (without rank_offset).
class RankGenerator {
public:
  /// An empty world of zero ranks; use create() to get a real one.
  RankGenerator() = default;

  /// Builds a generator for `sizes` (indexed by Dim) laid out by `order`.
  /// As in Megatron-Core, dimensions missing from `order` are appended at the
  /// end when their size is 1, and are an error otherwise.
  static Result<RankGenerator> create(const DimArray &sizes,
                                      std::string_view order);

  int64_t worldSize() const { return world; }
  int64_t size(Dim dim) const { return sizes[idx(dim)]; }
  /// Distance between ranks whose coordinate along `dim` differs by one.
  int64_t stride(Dim dim) const { return strides[idx(dim)]; }
  /// All five dimensions, fastest-varying first (after appending).
  const std::array<Dim, kNumDims> &order() const { return axes; }
  /// The axes slowest-varying first, as a row-major device mesh (MLIR's
  /// mesh.mesh) lists them: with shape [size(a) for a in rowMajorAxes()],
  /// a device's linear mesh index equals its rank here.
  std::array<Dim, kNumDims> rowMajorAxes() const {
    return {axes[4], axes[3], axes[2], axes[1], axes[0]};
  }
  /// The order as written by the user, lowercased, e.g. "tp-cp-ep-dp-pp".
  const std::string &orderString() const { return userOrder; }

  /// The coordinate of `rank` along `dim`, in [0, size(dim)).
  int64_t coordinate(int64_t rank, Dim dim) const {
    return (rank / strides[idx(dim)]) % sizes[idx(dim)];
  }
  DimArray coordinates(int64_t rank) const;
  /// The rank at the given coordinates (inverse of coordinates()).
  int64_t rankAt(const DimArray &coords) const;

  /// The groups of the kind named by `tokens`, e.g. "tp-dp", in Megatron's
  /// order. Fails on unknown or repeated tokens.
  Result<GroupList> groupsFor(std::string_view tokens) const;
  /// The same for a parsed mask; an empty mask gives one group per rank.
  GroupList groupsFor(DimMask mask) const;

  /// Where `rank` sits among groupsFor(mask): the group's index in the list
  /// and the rank's position inside that group.
  struct Location {
    int64_t group;
    int64_t position;
  };
  Location locate(int64_t rank, DimMask mask) const;

private:
  static size_t idx(Dim dim) { return static_cast<size_t>(dim); }

  DimArray sizes{};
  DimArray strides{};
  std::array<Dim, kNumDims> axes{};
  int64_t world = 0;
  std::string userOrder;
};

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_RANKGENERATOR_H
