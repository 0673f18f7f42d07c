//===- HfNames.h - Where a parameter lives in an HF checkpoint --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_HFNAMES_H
#define LOOM_COMPILER_DRIVER_HFNAMES_H

#include "runtime/manifest/Manifest.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace loom::driver {

/// The parameter is hf[offset : offset + shape] of the Hugging Face tensor
/// `name` (of full shape `shape`), or its transpose is (the manifest's
/// "hf", docs/MANIFEST.md).
using manifest::HfPlacement;

/// Maps a Loom parameter of the GPT-2 ("gpt2") or Llama family ("llama",
/// "qwen2", "mistral") to its place in the family's Hugging Face checkpoint.
/// GPT-2 stores linear weights as Conv1D [in, out] and fuses q, k and v into
/// c_attn; the Llama family's names and layouts (biases included) are Loom's. `unpaddedVocab` is the tokenizer's
/// vocabulary when the model's (padded) one is larger, else 0.
HfPlacement hfPlacement(llvm::StringRef family, llvm::StringRef name,
                        llvm::ArrayRef<int64_t> shape, int64_t hiddenSize,
                        int64_t unpaddedVocab = 0);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_HFNAMES_H
