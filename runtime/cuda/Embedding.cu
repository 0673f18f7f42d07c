//===- Embedding.cu - Vocab-parallel embedding -----------------*- CUDA -*-===//
//
// A rank owns table rows for vocabulary ids [vocab_start, vocab_end); ids
// elsewhere produce zero rows (Megatron VocabParallelEmbedding).
//
// The backward is deterministic and uses no floating-point atomics: the
// in-range tokens are sorted by (row, token index) with CUB's radix sort,
// so the tokens of one table row become a contiguous run in token order;
// one thread block per run then adds its tokens' gradients in that order
// (the cpu backend's order) and writes the row once.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cuda/Common.h"
#include "runtime/cuda/RadixSort.h"


using namespace loomrt;

namespace {
/// A lookup is a copy: 16-bit data moves as 16-bit words, no conversion.
__global__ void embeddingForward(int esz, int64_t n, int64_t H,
                                 const int32_t *ids, int64_t start, int64_t end,
                                 const void *table, void *out) {
  GRID_STRIDE(e, n * H) {
    const int64_t i = e / H, c = e % H, id = ids[i];
    const bool hit = id >= start && id < end;
    if (esz == 4)
      static_cast<float *>(out)[e] =
          hit ? static_cast<const float *>(table)[(id - start) * H + c] : 0.0f;
    else
      static_cast<uint16_t *>(out)[e] =
          hit ? static_cast<const uint16_t *>(table)[(id - start) * H + c]
              : uint16_t(0);
  }
}

/// key = (table row << 32) | token index for in-range tokens; out-of-range
/// tokens get the largest key and sort to the end.
__global__ void makeKeys(int64_t n, const int32_t *ids, int64_t start,
                         int64_t end, uint64_t *keys) {
  GRID_STRIDE(i, n) {
    const int64_t id = ids[i];
    keys[i] = id >= start && id < end
                  ? (uint64_t(id - start) << 32) | uint64_t(i)
                  : ~uint64_t(0);
  }
}

/// Block p handles the run of sorted keys that starts at p (if one does):
/// its threads cover the H columns and add the run's tokens in order.
__global__ void addRuns(loomrt_dtype dt, int64_t n, int64_t H,
                        const uint64_t *keys, const void *dout,
                        loomrt_dtype gdt, void *dtable, bool accumulate) {
  const int64_t p = blockIdx.x;
  const uint64_t key = keys[p];
  if (key == ~uint64_t(0) || (p > 0 && keys[p - 1] >> 32 == key >> 32))
    return;
  const int64_t row = int64_t(key >> 32);
  int64_t runEnd = p + 1;
  while (runEnd < n && keys[runEnd] >> 32 == key >> 32)
    ++runEnd;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    float acc = accumulate ? ld(dtable, gdt, row * H + c) : 0.0f;
    for (int64_t q = p; q < runEnd; ++q)
      acc += ld(dout, dt, int64_t(keys[q] & 0xffffffffu) * H + c);
    st(dtable, gdt, row * H + c, acc);
  }
}

} // namespace

void loomrt::backend::loomrt_embedding_forward(loomrt_dtype dtype, int64_t n,
                                               int64_t H, const int32_t *ids,
                                               int64_t vocab_start,
                                               int64_t vocab_end,
                                               const void *table, void *out) {
  if (n == 0)
    return;
  embeddingForward<<<gridFor(n * H), kThreads, 0, stream()>>>(
      int(dtypeSize(dtype)), n, H, ids, vocab_start, vocab_end, table, out);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_embedding_backward(
    loomrt_dtype dtype, int64_t n, int64_t H, const int32_t *ids,
    int64_t vocab_start, int64_t vocab_end, const void *dout,
    loomrt_dtype gdtype, void *dtable, int32_t accumulate) {
  const int64_t gsz = dtypeSize(gdtype);
  const int64_t rows = vocab_end - vocab_start;
  if (rows == 0)
    return;
  LOOMRT_CHECK(n <= INT32_MAX && rows < (int64_t(1) << 31),
               "n=%lld tokens or %lld rows are too many", (long long)n,
               (long long)rows);
  // Rows that no token touches are zero (overwrite) or unchanged.
  if (!accumulate)
    CUDA_CHECK(cudaMemsetAsync(dtable, 0, size_t(rows * H * gsz), stream()));
  if (n == 0)
    return;
  Scratch keys(2 * n * int64_t(sizeof(uint64_t)));
  uint64_t *in = keys.as<uint64_t>(), *sorted = in + n;
  makeKeys<<<gridFor(n), kThreads, 0, stream()>>>(n, ids, vocab_start,
                                                  vocab_end, in);
  CUDA_CHECK_LAUNCH();
  // Sort every bit that can differ; the all-ones key of out-of-range tokens
  // stays the largest within those bits.
  radixSort(in, sorted, n, 0, 32 + significantBits(uint64_t(rows)));
  addRuns<<<unsigned(n), kThreads, 0, stream()>>>(
      dtype, n, H, sorted, dout, gdtype, dtable, accumulate != 0);
  CUDA_CHECK_LAUNCH();
}
