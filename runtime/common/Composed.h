//===- Composed.h - Helpers of entry points built from others ---*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/: the entry points written only in other loomrt_*
// calls (AttentionSections.cpp, AttentionChunks.cpp) slice tensors they may
// not dereference (device memory on the cuda backend), so they only offset
// pointers, and they take their temporaries from loomrt_alloc.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_COMPOSED_H
#define LOOM_RUNTIME_COMMON_COMPOSED_H

#include "loomrt/loomrt.h"

#include <cstdint>

namespace loomrt {

/// The tensor `bytes` bytes past p.
inline const char *at(const void *p, int64_t bytes) {
  return static_cast<const char *>(p) + bytes;
}
inline char *at(void *p, int64_t bytes) {
  return static_cast<char *>(p) + bytes;
}

/// Document ids from element `offset` on (none stays none).
inline const int32_t *docAt(const int32_t *doc, int64_t offset) {
  return doc ? doc + offset : nullptr;
}

/// One loomrt_alloc for all temporaries of a call (loomrt_free waits for the
/// queued work on the cuda backend, so one free per call, not one per
/// buffer), carved into 256-byte aligned pieces.
class Scratch {
public:
  explicit Scratch(int64_t bytes)
      : base(static_cast<char *>(loomrt_alloc(bytes))) {}
  ~Scratch() { loomrt_free(base); }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  static int64_t round(int64_t bytes) { return (bytes + 255) / 256 * 256; }
  void *take(int64_t bytes) {
    void *p = base + used;
    used += round(bytes);
    return p;
  }

private:
  char *base;
  int64_t used = 0;
};

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_COMPOSED_H
