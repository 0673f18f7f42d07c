//===- Data.h - Token streams and micro-batches -----------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A token stream is the training corpus as one sequence of token ids: the
// documents of a Megatron indexed dataset (.bin/.idx, "MMIDIDX") in order, a
// raw file of int32 or uint16 ids, or a synthetic stream. Samples are
// windows of seq_length + 1 tokens that overlap by one (Megatron's
// GPTDataset without shuffling):
//
//   sample k = stream[k*S .. k*S + S],  tokens = sample[:-1],
//   labels = sample[1:],  loss_mask = 0 where tokens == eod else 1
//
// Data-parallel rank d reads, for micro-batch m of step t, the B samples
// starting at ((t * num_microbatches + m) * dp + d) * B.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_DATA_H
#define LOOM_RUNTIME_RANK_DATA_H

#include "runtime/rank/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loom::rank {

class TokenStream {
public:
  virtual ~TokenStream() = default;
  /// Number of tokens (INT64_MAX for an endless stream).
  virtual int64_t size() const = 0;
  /// Copies tokens [start, start + n) (start + n <= size()) to out.
  virtual void read(int64_t start, int64_t n, int64_t *out) const = 0;
  /// Where the tokens come from, for messages.
  virtual std::string describe() const = 0;
};

enum class RawFormat { Int32, UInt16 };

/// Opens `path`: with a raw format, a flat file of such ids; otherwise a
/// Megatron indexed dataset given as its prefix or as either of its .bin and
/// .idx files. Throws Error for missing, truncated or malformed files.
std::unique_ptr<TokenStream> openTokenStream(const std::string &path,
                                             std::optional<RawFormat> raw);

/// The deterministic synthetic corpus used without --data: four interleaved
/// arithmetic sequences mod vocab (start and stride from the seed), so the
/// next token is predictable from the context and a model can learn it.
std::unique_ptr<TokenStream> syntheticTokenStream(uint64_t seed,
                                                  int64_t vocabSize);

/// The buffers one micro-batch fills.
struct MicroBatch {
  std::vector<int32_t> tokens, labels; // [B, local S]
  std::vector<float> lossMask;         // [B, local S]
};

class BatchReader {
public:
  BatchReader(const TokenStream &stream, int64_t microBatchSize,
              int64_t seqLength, int64_t numMicrobatches, int64_t vocabSize,
              std::optional<int64_t> eodTokenId,
              std::vector<std::pair<int64_t, int64_t>> sequenceRanges);

  /// Samples in one pass over the stream; later samples wrap around.
  int64_t numSamples() const { return samples; }

  /// Fills `out` for step `step` (0-based), micro-batch `micro` and
  /// data-parallel rank `dpRank` of `dpSize`: the sample positions of the
  /// sequence ranges, where positions from seq_length on are padding (token
  /// and label 0, loss mask 0). Throws Error for token ids outside the
  /// vocabulary.
  void read(int64_t step, int64_t micro, int64_t dpRank, int64_t dpSize,
            MicroBatch &out) const;

  /// Global index of the first sample of that micro-batch.
  int64_t firstSample(int64_t step, int64_t micro, int64_t dpRank,
                      int64_t dpSize) const;

private:
  const TokenStream &stream;
  int64_t B, S, numMicro, vocab;
  std::optional<int64_t> eod;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t localS;
  int64_t samples;
};

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_DATA_H
