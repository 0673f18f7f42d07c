//===- MegatronIdxFuzzer.cpp - Fuzz the Megatron .idx reader --------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// openTokenStream on a Megatron indexed dataset whose .idx is the input and
// whose .bin is a fixed 4 KiB file, then reads every token (up to a cap).
// The reader maps files by path, so the input is written to a temporary
// directory first. A bad index must be a loom::rank::Error. ASan does not
// watch mappings: the .bin is exactly one page, so that a sequence the
// index lets reach past it faults instead of reading the page's zeros
// (when the next page is unmapped, as it usually is).
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Data.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

using namespace loom::rank;

namespace {

constexpr int64_t kBinBytes = 4096;

/// dir/data.{idx,bin}; the directory is removed at exit.
const std::string &prefix() {
  static const std::string p = [] {
    char dir[] = "/tmp/loom-fuzz-idx-XXXXXX";
    if (!::mkdtemp(dir)) {
      std::perror("mkdtemp");
      std::abort();
    }
    std::string prefix = std::string(dir) + "/data";
    std::vector<unsigned char> bin(kBinBytes);
    for (int64_t i = 0; i < kBinBytes; ++i)
      bin[i] = static_cast<unsigned char>(i * 7 + 3);
    FILE *f = std::fopen((prefix + ".bin").c_str(), "wb");
    if (!f || std::fwrite(bin.data(), 1, bin.size(), f) != bin.size() ||
        std::fclose(f) != 0) {
      std::perror("writing the .bin");
      std::abort();
    }
    static std::string cleanupDir = dir;
    std::atexit([] {
      ::unlink((cleanupDir + "/data.idx").c_str());
      ::unlink((cleanupDir + "/data.bin").c_str());
      ::rmdir(cleanupDir.c_str());
    });
    return prefix;
  }();
  return p;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string idx = prefix() + ".idx";
  FILE *f = std::fopen(idx.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) {
    std::perror("writing the .idx");
    std::abort();
  }
  try {
    std::unique_ptr<TokenStream> stream = openTokenStream(prefix(), {});
    // At most one token per .bin byte unless sequences repeat bytes.
    int64_t n = std::min<int64_t>(stream->size(), 4 * kBinBytes);
    if (n < 0) {
      std::fprintf(stderr, "negative stream size %lld\n",
                   (long long)stream->size());
      std::abort();
    }
    std::vector<int64_t> tokens(size_t(n) + 1);
    stream->read(0, n, tokens.data());
  } catch (const Error &) {
  }
  return 0;
}
