//===- ModelImporter.h - Model config -> tfm IR -----------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Reads Hugging Face config.json files of the GPT-2 family and of the Llama
// family (Llama 2 and 3.x, Qwen2/2.5, Mistral: one architecture with
// optional biases and RoPE scaling) and builds a tfm module at global shapes
// with a @forward(tokens, labels, loss_mask) -> loss function.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_IMPORT_MODELIMPORTER_H
#define LOOM_COMPILER_IMPORT_MODELIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {

enum class ModelFamily { GPT2, Llama };
enum class MlpActivation { GeluExact, GeluTanh, SwiGLU };

/// Hugging Face's `rope_scaling` of type "llama3" (Llama 3.1, 3.2).
struct Llama3RopeScaling {
  double factor = 8.0;
  double lowFreqFactor = 1.0;
  double highFreqFactor = 4.0;
  int64_t originalMaxPositions = 8192;
};

/// A model architecture, normalized across families.
/// The mixture-of-experts MLPs of Mixtral ("mixtral") and Qwen2-MoE
/// ("qwen2_moe").
struct MoeConfig {
  int64_t numExperts = 0;
  /// Experts per token (num_experts_per_tok).
  int64_t topK = 2;
  /// Each expert's intermediate size (Mixtral: intermediate_size;
  /// Qwen2-MoE: moe_intermediate_size).
  int64_t expertFfnSize = 0;
  /// Softmax over all experts before the top-k, not renormalized after it
  /// (Qwen2-MoE without norm_topk_prob). Off: softmax over the k chosen
  /// logits (Mixtral; Qwen2-MoE with norm_topk_prob), Megatron's default.
  bool preSoftmax = false;
  /// The load-balancing loss coefficient (router_aux_loss_coef; 0 if absent).
  double auxLossCoeff = 0.0;
  /// The shared expert's intermediate size (Qwen2-MoE's
  /// shared_expert_intermediate_size); 0: none.
  int64_t sharedExpertFfnSize = 0;
  /// Qwen2-MoE: layer i has experts when (i + 1) % sparseStep == 0 and i is
  /// not in mlpOnlyLayers; the others have a dense MLP of the config's
  /// intermediate_size.
  int64_t sparseStep = 1;
  std::vector<int64_t> mlpOnlyLayers;

  bool isMoeLayer(int64_t layer) const {
    return (layer + 1) % sparseStep == 0 &&
           llvm::find(mlpOnlyLayers, layer) == mlpOnlyLayers.end();
  }
};

struct ModelConfig {
  ModelFamily family = ModelFamily::GPT2;
  /// The config's model_type within the family ("qwen2", "mistral"; empty
  /// means the family's own, "gpt2" or "llama"): the module's tfm.model
  /// family.
  std::string modelType;
  int64_t numLayers = 0;
  int64_t hiddenSize = 0;
  int64_t ffnHiddenSize = 0;
  int64_t numHeads = 0;
  int64_t numKvHeads = 0;
  int64_t headDim = 0;
  int64_t vocabSize = 0;
  int64_t maxPositions = 0;
  double normEpsilon = 1e-5;
  /// Rotary embedding base; only used by the Llama family.
  double ropeTheta = 10000.0;
  /// Llama 3.x frequency scaling of the rotary embedding, if any.
  std::optional<Llama3RopeScaling> ropeScaling;
  /// Biases of the Llama family's linears (GPT-2 has all of them): q, k
  /// and v (attention_bias, Qwen2), the output projection (attention_bias)
  /// and the MLP's gate, up and down projections (mlp_bias).
  bool qkvBias = false;
  bool outputBias = false;
  bool mlpBias = false;
  /// The attention window of some layer (Mistral's sliding_window, Qwen2's
  /// when use_sliding_window is on); a window shorter than the sequence is
  /// refused when the module is built.
  std::optional<int64_t> slidingWindow;
  MlpActivation activation = MlpActivation::GeluTanh;
  bool tieWordEmbeddings = true;
  /// Standard deviation of the normal initialization (initializer_range).
  double initStd = 0.02;
  /// Mixture-of-experts MLPs, if the model has them.
  std::optional<MoeConfig> moe;

  /// Number of scalar parameters (tied embeddings counted once).
  int64_t numParameters() const;
};

/// Run-time shape and data options that a config.json does not hold.
struct ImportOptions {
  int64_t microBatchSize = 1;
  /// 0 means the model's maximum number of positions.
  int64_t seqLength = 0;
  /// "f32", "bf16" or "f16".
  std::string dtype = "f32";
  /// End-of-document token; needed by the two reset options.
  std::optional<int64_t> eodTokenId;
  /// Megatron's --reset-position-ids: positions restart after each EOD.
  bool resetPositionIds = false;
  /// Megatron's --reset-attention-mask: attention stays within a document.
  bool resetAttentionMask = false;
  /// Hidden dropout probability (0 disables dropout).
  double hiddenDropout = 0.0;
  /// Seed of the dropout masks.
  int64_t seed = 1234;
  /// Pads the vocabulary to a multiple of this (Megatron's
  /// --make-vocab-size-divisible-by), so it splits over tensor-parallel
  /// ranks; the padded rows are ordinary, never-seen tokens.
  int64_t makeVocabSizeDivisibleBy = 1;
};

/// Parses a Hugging Face config.json (model_type gpt2, llama, qwen2 or
/// mistral). Errors name the field and the value ("field 'n_head' must be a
/// positive integer, got -3").
llvm::Expected<ModelConfig> parseModelConfig(llvm::StringRef json);

/// Reads and parses a config file; errors name the file.
llvm::Expected<ModelConfig> readModelConfig(llvm::StringRef path);

/// Builds the tfm module. Errors name the problem ("sequence length 2048
/// exceeds n_positions 1024", "sliding window attention is not supported").
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
buildModelModule(mlir::MLIRContext &context, const ModelConfig &config,
                 const ImportOptions &options);

/// Reads the config file at `configPath` and builds its verified module
/// (what loom-import writes, and what loom-train compiles).
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importModel(mlir::MLIRContext &context, llvm::StringRef configPath,
            const ImportOptions &options);

} // namespace loom

#endif // LOOM_COMPILER_IMPORT_MODELIMPORTER_H
