//===- Digest.h - 64-bit FNV-1a digest of a byte stream ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Ties the two files of a checkpoint together (CheckpointPair.h): the model
// file records the digest of the optimizer file's tensor data. The digest
// only has to tell one save from another, not resist an adversary, and the
// rank program links no hashing library (no LLVM here), so FNV-1a, a few
// lines, fed incrementally as the writer streams tensors.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_DIGEST_H
#define LOOM_RUNTIME_RANK_DIGEST_H

#include <cstdint>
#include <cstdio>
#include <string>

namespace loom::rank {

class Fnv1a64 {
public:
  void update(const void *data, int64_t n) {
    const unsigned char *p = static_cast<const unsigned char *>(data);
    uint64_t h = state;
    for (int64_t i = 0; i < n; ++i)
      h = (h ^ p[i]) * 0x100000001b3ull;
    state = h;
  }
  uint64_t value() const { return state; }

private:
  uint64_t state = 0xcbf29ce484222325ull;
};

/// "fnv1a64:" and 16 hex digits: how digests appear in file metadata.
inline std::string digestText(uint64_t digest) {
  char text[32];
  std::snprintf(text, sizeof text, "fnv1a64:%016llx",
                static_cast<unsigned long long>(digest));
  return text;
}

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_DIGEST_H
