//===- Embedding.cpp - Vocab-parallel embedding -----------------*- C++ -*-===//
//
// A rank owns table rows for vocabulary ids [vocab_start, vocab_end); ids
// elsewhere produce zero rows, and the TP all-reduce of the compiled program
// completes the lookup (Megatron VocabParallelEmbedding).
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <algorithm>

using namespace loomrt;

void loomrt::backend::loomrt_embedding_forward(loomrt_dtype dtype, int64_t n,
                                               int64_t H, const int32_t *ids,
                                               int64_t vocab_start,
                                               int64_t vocab_end,
                                               const void *table, void *out) {
  LOOMRT_DEVICE_CALL(ids, table, out);
  if (n == 0)
    return;
  // A lookup is a copy: no conversion, whatever the dtype.
  const int64_t rowBytes = H * dtypeSize(dtype);
#pragma omp parallel for schedule(static) if (n * H > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    char *dst = static_cast<char *>(out) + i * rowBytes;
    const int64_t id = ids[i];
    if (id >= vocab_start && id < vocab_end)
      std::memcpy(
          dst, static_cast<const char *>(table) + (id - vocab_start) * rowBytes,
          size_t(rowBytes));
    else
      std::memset(dst, 0, size_t(rowBytes));
  }
}

void loomrt::backend::loomrt_embedding_backward(
    loomrt_dtype dtype, int64_t n, int64_t H, const int32_t *ids,
    int64_t vocab_start, int64_t vocab_end, const void *dout,
    loomrt_dtype gdtype, void *dtable, int32_t accumulate) {
  LOOMRT_DEVICE_CALL(ids, dout, dtable);
  const int64_t rows = vocab_end - vocab_start;
  if (rows == 0)
    return;
  In d(dtype, n ? dout : nullptr, n * H);
  Out g(gdtype, dtable, rows * H, accumulate != 0);
  if (!accumulate)
    std::fill(g.get(), g.get() + rows * H, 0.0f);
  // Threads own disjoint column ranges and visit tokens in order: the
  // scatter-add has no races and a fixed summation order.
  const int64_t colBlock = 256;
  const int64_t numBlocks = (H + colBlock - 1) / colBlock;
#pragma omp parallel for schedule(static) if (n * H > kMinParallelWork)
  for (int64_t cb = 0; cb < numBlocks; ++cb) {
    const int64_t c0 = cb * colBlock, c1 = std::min(H, c0 + colBlock);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[i];
      if (id < vocab_start || id >= vocab_end)
        continue;
      float *dst = g.get() + (id - vocab_start) * H;
      const float *src = d.get() + i * H;
      for (int64_t c = c0; c < c1; ++c)
        dst[c] += src[c];
    }
  }
  g.commit();
}
