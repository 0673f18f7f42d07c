//===- SequencePositions.h - A rank's global token positions ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The host computation behind loomrt_sequence_positions, shared by the
// backends (the cpu one writes the result in place, the cuda one copies it
// to the device). Its arguments are checked by the front (Rules.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_COMMON_SEQUENCEPOSITIONS_H
#define LOOM_RUNTIME_COMMON_SEQUENCEPOSITIONS_H

#include <algorithm>
#include <cstdint>

namespace loomrt {

/// Writes the positions into host memory `out` [B, L] (see loomrt.h).
inline void fillSequencePositions(int64_t B, int64_t L, int64_t start,
                                  int64_t chunk, const int64_t *order,
                                  int32_t *out) {
  for (int64_t i = 0; i < L; ++i) {
    int64_t s = start + i, j = s / chunk;
    out[i] = int32_t((order ? order[j] : j) * chunk + s % chunk);
  }
  for (int64_t b = 1; b < B; ++b)
    std::copy(out, out + L, out + b * L);
}

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_SEQUENCEPOSITIONS_H
