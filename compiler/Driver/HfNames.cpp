//===- HfNames.cpp - Where a parameter lives in an HF checkpoint -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/HfNames.h"

#include "llvm/ADT/Twine.h"

using namespace loom::driver;
using llvm::StringRef;

HfPlacement loom::driver::hfPlacement(StringRef family, StringRef name,
                                      llvm::ArrayRef<int64_t> shape,
                                      int64_t hiddenSize,
                                      int64_t unpaddedVocab) {
  HfPlacement p;
  p.name = name.str();
  p.shape.assign(shape.begin(), shape.end());
  p.offset.assign(shape.size(), 0);
  // The [vocab, hidden] tables: rows past the tokenizer's vocabulary are
  // Megatron's padding, which Hugging Face files do not have.
  bool vocabTable = name == "transformer.wte.weight" ||
                    name == "model.embed_tokens.weight" ||
                    name == "lm_head.weight";
  if (vocabTable && unpaddedVocab > 0 && !shape.empty() &&
      unpaddedVocab < shape[0])
    p.fileRows = unpaddedVocab;
  // Mixtral's and Qwen2-MoE's experts: Loom stacks [E, out, in]; the file
  // holds "...experts.<e>.<proj>.weight" per expert.
  if ((family == "mixtral" || family == "qwen2_moe") && shape.size() == 3 &&
      name.contains(".experts."))
    p.experts = shape[0];
  if (family != "gpt2")
    return p;

  // transformer.h.<i>.attn.{q,k,v}.{weight,bias} are slices of c_attn:
  //   c_attn.weight [H, 3H] (Conv1D, [in, out]); q is columns [0, H), k
  //   [H, 2H), v [2H, 3H), each the transpose of Loom's [H_out, H_in].
  static const StringRef kParts[] = {".attn.q.", ".attn.k.", ".attn.v."};
  for (auto [slot, part] : llvm::enumerate(kParts)) {
    size_t at = name.find(part);
    if (at == StringRef::npos)
      continue;
    StringRef prefix = name.take_front(at);
    StringRef leaf = name.drop_front(at + part.size());
    int64_t h = hiddenSize;
    p.name = (llvm::Twine(prefix) + ".attn.c_attn." + leaf).str();
    if (leaf == "weight") {
      p.shape = {h, 3 * h};
      p.transpose = true;
      p.offset = {0, int64_t(slot) * h};
    } else {
      p.shape = {3 * h};
      p.offset = {int64_t(slot) * h};
    }
    return p;
  }
  // The other linears are Conv1D too: stored [in, out].
  bool conv1d = name.ends_with(".weight") &&
                (name.contains(".attn.c_proj.") || name.contains(".mlp.c_fc.") ||
                 name.contains(".mlp.c_proj."));
  if (conv1d && shape.size() == 2) {
    p.shape = {shape[1], shape[0]};
    p.transpose = true;
  }
  return p;
}
