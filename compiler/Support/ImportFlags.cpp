//===- ImportFlags.cpp - The importer's flags, declared once ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/ImportFlags.h"

using namespace llvm;
using namespace loom;

static Error fail(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

ImportFlags::ImportFlags(cl::OptionCategory &category, bool vocabPadding)
    : microBatchSize("micro-batch-size", cl::init(1),
                     cl::desc("Micro-batch size (default 1)"),
                     cl::cat(category)),
      seqLength(
          "seq-length", cl::init(0),
          cl::desc("Sequence length (default: the model's maximum positions)"),
          cl::cat(category)),
      dtype("dtype", cl::init("f32"),
            cl::desc("Element type: f32, bf16 or f16"), cl::cat(category)),
      eodTokenId("eod-token-id", cl::init(-1),
                 cl::desc("End-of-document token id (for the reset options)"),
                 cl::cat(category)),
      resetPositionIds(
          "reset-position-ids",
          cl::desc("Restart position ids after each end-of-document token"),
          cl::cat(category)),
      resetAttentionMask(
          "reset-attention-mask",
          cl::desc("Keep attention within each document (causal_document "
                   "mask)"),
          cl::cat(category)),
      hiddenDropout("hidden-dropout", cl::init(0.0),
                    cl::desc("Hidden dropout probability"), cl::cat(category)),
      seed("seed", cl::init(1234), cl::desc("Seed of the dropout masks"),
           cl::cat(category)) {
  if (vocabPadding)
    makeVocabSizeDivisibleBy = std::make_unique<cl::opt<int64_t>>(
        "make-vocab-size-divisible-by", cl::init(1),
        cl::desc("Pad the vocabulary to a multiple of this (Megatron's "
                 "option; e.g. 128, so it splits over tensor-parallel ranks)"),
        cl::cat(category));
}

Expected<ImportOptions> ImportFlags::options() const {
  // 0 stands for the model's maximum positions only when the flag is absent.
  if (seqLength.getNumOccurrences() && seqLength < 1)
    return fail("--seq-length " + Twine(seqLength) + " must be at least 1");
  ImportOptions options;
  options.microBatchSize = microBatchSize;
  options.seqLength = seqLength;
  options.dtype = dtype;
  if (eodTokenId >= 0)
    options.eodTokenId = eodTokenId;
  else if (eodTokenId.getNumOccurrences())
    return fail("eod token id " + Twine(eodTokenId) + " is negative");
  options.resetPositionIds = resetPositionIds;
  options.resetAttentionMask = resetAttentionMask;
  options.hiddenDropout = hiddenDropout;
  options.seed = seed;
  if (makeVocabSizeDivisibleBy)
    options.makeVocabSizeDivisibleBy = *makeVocabSizeDivisibleBy;
  return options;
}
