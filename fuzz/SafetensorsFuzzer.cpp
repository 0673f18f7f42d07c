//===- SafetensorsFuzzer.cpp - Fuzz the safetensors reader ----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// parseSafetensors on arbitrary bytes. A bad file must be a
// loom::rank::Error. Every tensor of an accepted header is read in full:
// libFuzzer's input buffer has exactly `size` bytes, so ASan catches a
// tensor that the validation let reach past the end of the file.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Safetensors.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace loom::rank;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SafetensorsHeader header;
  try {
    header = parseSafetensors(data, int64_t(size), "fuzz.safetensors");
  } catch (const Error &) {
    return 0;
  }
  unsigned sum = 0;
  for (const auto &[name, t] : header.tensors) {
    if (t.begin < header.dataStart || t.begin > t.end ||
        t.end > int64_t(size)) {
      std::fprintf(stderr, "tensor \"%s\" at [%lld, %lld) escapes the file\n",
                   name.c_str(), (long long)t.begin, (long long)t.end);
      std::abort();
    }
    for (int64_t i = t.begin; i < t.end; ++i)
      sum += data[i];
  }
  // Keeps the reads from being optimized away.
  volatile unsigned sink = sum;
  (void)sink;
  return 0;
}
