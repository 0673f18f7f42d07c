//===- ConfigParser.cpp - Hugging Face config.json reader -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Maps the GPT-2 and Llama config.json fields onto ModelConfig. Every error
// names the field and the value it found.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/ModelImporter.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>

using namespace loom;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

namespace {

Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Short rendering of a JSON value for messages: 12, "relu", null, {...}.
std::string show(const llvm::json::Value &v) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << v;
  if (s.size() > 40)
    s = s.substr(0, 37) + "...";
  return s;
}

/// Typed access to the fields of one config object; `prefix` names a nested
/// object in messages ("rope_scaling.factor").
class Fields {
public:
  explicit Fields(const llvm::json::Object &object, StringRef prefix = "")
      : object(object), prefix(prefix.str()) {}

  bool has(StringRef name) const {
    const llvm::json::Value *v = object.get(name);
    return v && v->kind() != llvm::json::Value::Null;
  }

  Expected<int64_t> positiveInt(StringRef name) const {
    const llvm::json::Value *v = object.get(name);
    if (!v)
      return fail(llvm::formatv("missing field '{0}'", full(name)));
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i <= 0)
      return fail(llvm::formatv("field '{0}' must be a positive integer, got {1}",
                                full(name), show(*v)));
    return *i;
  }

  Expected<int64_t> positiveInt(StringRef name, int64_t fallback) const {
    if (!has(name))
      return fallback;
    return positiveInt(name);
  }

  Expected<double> positiveNumber(StringRef name, double fallback) const {
    if (!has(name))
      return fallback;
    return positiveNumber(name);
  }

  Expected<double> positiveNumber(StringRef name) const {
    const llvm::json::Value *v = object.get(name);
    if (!v)
      return fail(llvm::formatv("missing field '{0}'", full(name)));
    std::optional<double> d = v->getAsNumber();
    // JSON has no infinity, but a literal too large for a double parses
    // as one (found by fuzz/ConfigFuzzer.cpp).
    if (!d || !(*d > 0.0) || !std::isfinite(*d))
      return fail(llvm::formatv("field '{0}' must be a positive number, got {1}",
                                full(name), show(*v)));
    return *d;
  }

  Expected<bool> boolean(StringRef name, bool fallback) const {
    if (!has(name))
      return fallback;
    const llvm::json::Value *v = object.get(name);
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return fail(llvm::formatv("field '{0}' must be true or false, got {1}",
                                full(name), show(*v)));
    return *b;
  }

  Expected<std::string> string(StringRef name, StringRef fallback) const {
    if (!has(name))
      return fallback.str();
    const llvm::json::Value *v = object.get(name);
    std::optional<StringRef> s = v->getAsString();
    if (!s)
      return fail(llvm::formatv("field '{0}' must be a string, got {1}",
                                full(name), show(*v)));
    return s->str();
  }

  const llvm::json::Value *raw(StringRef name) const { return object.get(name); }

private:
  std::string full(StringRef name) const { return prefix + name.str(); }

  const llvm::json::Object &object;
  std::string prefix;
};

// Assigns a field or returns its error from the enclosing function.
#define LOOM_ASSIGN(lhs, expr)                                                 \
  do {                                                                         \
    auto value = (expr);                                                       \
    if (!value)                                                                \
      return value.takeError();                                                \
    lhs = *value;                                                              \
  } while (false)

Expected<ModelConfig> parseGpt2(const Fields &f) {
  ModelConfig c;
  c.family = ModelFamily::GPT2;
  LOOM_ASSIGN(c.numLayers, f.positiveInt("n_layer"));
  LOOM_ASSIGN(c.numHeads, f.positiveInt("n_head"));
  LOOM_ASSIGN(c.hiddenSize, f.positiveInt("n_embd"));
  // n_inner is null in most GPT-2 configs, meaning 4 * n_embd.
  LOOM_ASSIGN(c.ffnHiddenSize, f.positiveInt("n_inner", 4 * c.hiddenSize));
  LOOM_ASSIGN(c.vocabSize, f.positiveInt("vocab_size"));
  LOOM_ASSIGN(c.maxPositions, f.positiveInt("n_positions"));
  LOOM_ASSIGN(c.normEpsilon, f.positiveNumber("layer_norm_epsilon", 1e-5));
  LOOM_ASSIGN(c.tieWordEmbeddings, f.boolean("tie_word_embeddings", true));
  LOOM_ASSIGN(c.initStd, f.positiveNumber("initializer_range", 0.02));
  std::string act;
  LOOM_ASSIGN(act, f.string("activation_function", "gelu_new"));
  std::optional<MlpActivation> a =
      llvm::StringSwitch<std::optional<MlpActivation>>(act)
          .Case("gelu", MlpActivation::GeluExact)
          .Cases("gelu_new", "gelu_pytorch_tanh", "gelu_fast",
                 MlpActivation::GeluTanh)
          .Default(std::nullopt);
  if (!a)
    return fail(llvm::formatv(
        "field 'activation_function' value \"{0}\" is not supported (expected "
        "gelu, gelu_new, gelu_pytorch_tanh or gelu_fast)",
        act));
  c.activation = *a;
  if (c.hiddenSize % c.numHeads != 0)
    return fail(llvm::formatv(
        "num_heads {0} (n_head) does not divide hidden size {1} (n_embd)",
        c.numHeads, c.hiddenSize));
  c.numKvHeads = c.numHeads;
  c.headDim = c.hiddenSize / c.numHeads;
  return c;
}

/// `rope_scaling`: null, or Llama 3.x's {"rope_type": "llama3", factor,
/// low_freq_factor, high_freq_factor, original_max_position_embeddings}
/// ("type" is the key's older name); "default" means unscaled.
Expected<std::optional<Llama3RopeScaling>> parseRopeScaling(const Fields &f) {
  if (!f.has("rope_scaling"))
    return std::nullopt;
  const llvm::json::Object *object = f.raw("rope_scaling")->getAsObject();
  if (!object)
    return fail(llvm::formatv("field 'rope_scaling' must be an object, got {0}",
                              show(*f.raw("rope_scaling"))));
  Fields r(*object, "rope_scaling.");
  StringRef key = r.has("rope_type") ? "rope_type" : "type";
  if (!r.has(key))
    return fail("field 'rope_scaling' has no 'rope_type'");
  std::string type;
  LOOM_ASSIGN(type, r.string(key, ""));
  if (type == "default")
    return std::nullopt;
  if (type != "llama3")
    return fail(llvm::formatv("field 'rope_scaling.{0}' value \"{1}\" is not "
                              "supported (expected \"llama3\" or "
                              "\"default\")",
                              key, type));
  Llama3RopeScaling s;
  LOOM_ASSIGN(s.factor, r.positiveNumber("factor"));
  LOOM_ASSIGN(s.lowFreqFactor, r.positiveNumber("low_freq_factor"));
  LOOM_ASSIGN(s.highFreqFactor, r.positiveNumber("high_freq_factor"));
  LOOM_ASSIGN(s.originalMaxPositions,
              r.positiveInt("original_max_position_embeddings"));
  // The runtime rescales the frequencies in f32.
  for (auto [name, value] :
       {std::pair<StringRef, double>{"factor", s.factor},
        {"low_freq_factor", s.lowFreqFactor},
        {"high_freq_factor", s.highFreqFactor}})
    if (!(float(value) > 0.0f) || !std::isfinite(float(value)))
      return fail(llvm::formatv("field 'rope_scaling.{0}' {1} is not a "
                                "positive f32",
                                name, llvm::format("%g", value)));
  // The smooth band between the two wavelengths divides by their difference.
  if (!(float(s.highFreqFactor) > float(s.lowFreqFactor)))
    return fail(llvm::formatv("field 'rope_scaling.high_freq_factor' {0} must "
                              "exceed low_freq_factor {1}",
                              llvm::format("%g", s.highFreqFactor),
                              llvm::format("%g", s.lowFreqFactor)));
  return s;
}

/// The sliding window of a Qwen2 or Mistral config, if some layer has one.
/// Mistral: `sliding_window` (null: none) on every layer. Qwen2: only with
/// `use_sliding_window`, on the layers from `max_window_layers` on.
Expected<std::optional<int64_t>>
parseSlidingWindow(const Fields &f, StringRef modelType, int64_t numLayers) {
  if (modelType == "qwen2" || modelType == "qwen2_moe") {
    bool on = false;
    LOOM_ASSIGN(on, f.boolean("use_sliding_window", false));
    if (!on)
      return std::nullopt;
    // Qwen2Config's default; 0 (every layer slides) is valid too.
    int64_t first = 28;
    if (f.has("max_window_layers")) {
      std::optional<int64_t> i = f.raw("max_window_layers")->getAsInteger();
      if (!i || *i < 0)
        return fail(llvm::formatv("field 'max_window_layers' must be a "
                                  "non-negative integer, got {0}",
                                  show(*f.raw("max_window_layers"))));
      first = *i;
    }
    if (first >= numLayers)
      return std::nullopt;
  } else if (modelType != "mistral" && modelType != "mixtral") {
    return std::nullopt;
  }
  if (!f.has("sliding_window"))
    return std::nullopt;
  int64_t window = 0;
  LOOM_ASSIGN(window, f.positiveInt("sliding_window"));
  return window;
}

Expected<MoeConfig> parseMoe(const Fields &f, StringRef modelType,
                             const ModelConfig &c);

/// The Llama architecture and its relatives: Qwen2 (biases on q, k and v)
/// and Mistral (a sliding window, usually off) differ from Llama only in the
/// fields read here.
Expected<ModelConfig> parseLlama(const Fields &f, StringRef modelType) {
  ModelConfig c;
  c.family = ModelFamily::Llama;
  c.modelType = modelType.str();
  LOOM_ASSIGN(c.numLayers, f.positiveInt("num_hidden_layers"));
  LOOM_ASSIGN(c.hiddenSize, f.positiveInt("hidden_size"));
  LOOM_ASSIGN(c.ffnHiddenSize, f.positiveInt("intermediate_size"));
  LOOM_ASSIGN(c.numHeads, f.positiveInt("num_attention_heads"));
  LOOM_ASSIGN(c.numKvHeads, f.positiveInt("num_key_value_heads", c.numHeads));
  LOOM_ASSIGN(c.vocabSize, f.positiveInt("vocab_size"));
  LOOM_ASSIGN(c.maxPositions, f.positiveInt("max_position_embeddings"));
  LOOM_ASSIGN(c.normEpsilon, f.positiveNumber("rms_norm_eps", 1e-6));
  LOOM_ASSIGN(c.ropeTheta, f.positiveNumber("rope_theta", 10000.0));
  LOOM_ASSIGN(c.tieWordEmbeddings, f.boolean("tie_word_embeddings", false));
  LOOM_ASSIGN(c.initStd, f.positiveNumber("initializer_range", 0.02));
  std::string act;
  LOOM_ASSIGN(act, f.string("hidden_act", "silu"));
  if (act != "silu")
    return fail(llvm::formatv("field 'hidden_act' value \"{0}\" is not "
                              "supported (Llama MLPs use \"silu\")",
                              act));
  c.activation = MlpActivation::SwiGLU;
  LOOM_ASSIGN(c.ropeScaling, parseRopeScaling(f));
  if (modelType == "qwen2" || modelType == "qwen2_moe") {
    // Qwen2Attention: q, k and v have biases, o_proj none; no MLP biases.
    c.qkvBias = true;
  } else if (modelType == "llama") {
    bool attentionBias = false;
    LOOM_ASSIGN(attentionBias, f.boolean("attention_bias", false));
    c.qkvBias = c.outputBias = attentionBias;
    LOOM_ASSIGN(c.mlpBias, f.boolean("mlp_bias", false));
  }
  LOOM_ASSIGN(c.slidingWindow, parseSlidingWindow(f, modelType, c.numLayers));
  if (modelType == "mixtral" || modelType == "qwen2_moe") {
    auto moe = parseMoe(f, modelType, c);
    if (!moe)
      return moe.takeError();
    c.moe = *moe;
  }
  if (c.numHeads % c.numKvHeads != 0)
    return fail(llvm::formatv("num_key_value_heads {0} does not divide "
                              "num_attention_heads {1}",
                              c.numKvHeads, c.numHeads));
  if (f.has("head_dim")) {
    LOOM_ASSIGN(c.headDim, f.positiveInt("head_dim"));
  } else {
    if (c.hiddenSize % c.numHeads != 0)
      return fail(llvm::formatv("num_heads {0} (num_attention_heads) does not "
                                "divide hidden size {1} (hidden_size)",
                                c.numHeads, c.hiddenSize));
    c.headDim = c.hiddenSize / c.numHeads;
  }
  if (c.headDim % 2 != 0)
    return fail(llvm::formatv("head_dim {0} is odd; rotary embedding needs an "
                              "even head_dim",
                              c.headDim));
  return c;
}

/// A coefficient: a finite number >= 0 (`fallback` when absent).
Expected<double> coefficient(const Fields &f, StringRef name, double fallback) {
  if (!f.has(name))
    return fallback;
  std::optional<double> d = f.raw(name)->getAsNumber();
  if (!d || !(*d >= 0.0) || !std::isfinite(*d))
    return fail(llvm::formatv("field '{0}' must be a number >= 0, got {1}",
                              name, show(*f.raw(name))));
  return *d;
}

/// Mixtral's and Qwen2-MoE's experts (the fields their Hugging Face configs
/// name them by).
Expected<MoeConfig> parseMoe(const Fields &f, StringRef modelType,
                             const ModelConfig &c) {
  MoeConfig m;
  if (modelType == "mixtral") {
    LOOM_ASSIGN(m.numExperts, f.positiveInt("num_local_experts"));
    m.expertFfnSize = c.ffnHiddenSize;
  } else {
    LOOM_ASSIGN(m.numExperts, f.positiveInt("num_experts"));
    LOOM_ASSIGN(m.expertFfnSize, f.positiveInt("moe_intermediate_size"));
    bool normTopk = false;
    LOOM_ASSIGN(normTopk, f.boolean("norm_topk_prob", false));
    m.preSoftmax = !normTopk;
    if (f.has("shared_expert_intermediate_size")) {
      std::optional<int64_t> s =
          f.raw("shared_expert_intermediate_size")->getAsInteger();
      if (!s || *s < 0)
        return fail(llvm::formatv("field 'shared_expert_intermediate_size' "
                                  "must be an integer >= 0, got {0}",
                                  show(*f.raw("shared_expert_intermediate_size"))));
      m.sharedExpertFfnSize = *s;
    }
    LOOM_ASSIGN(m.sparseStep, f.positiveInt("decoder_sparse_step", 1));
    if (f.has("mlp_only_layers")) {
      const llvm::json::Array *layers = f.raw("mlp_only_layers")->getAsArray();
      if (!layers)
        return fail(llvm::formatv("field 'mlp_only_layers' must be a list of "
                                  "layer indices, got {0}",
                                  show(*f.raw("mlp_only_layers"))));
      for (const llvm::json::Value &v : *layers) {
        std::optional<int64_t> i = v.getAsInteger();
        if (!i || *i < 0 || *i >= c.numLayers)
          return fail(llvm::formatv("field 'mlp_only_layers' holds {0}, not a "
                                    "layer index in [0, {1})",
                                    show(v), c.numLayers));
        m.mlpOnlyLayers.push_back(*i);
      }
    }
  }
  LOOM_ASSIGN(m.topK, f.positiveInt("num_experts_per_tok", 2));
  if (m.topK > m.numExperts)
    return fail(llvm::formatv("num_experts_per_tok {0} exceeds the {1} "
                              "experts",
                              m.topK, m.numExperts));
  LOOM_ASSIGN(m.auxLossCoeff, coefficient(f, "router_aux_loss_coef", 0.0));
  return m;
}

#undef LOOM_ASSIGN

} // namespace

int64_t ModelConfig::numParameters() const {
  int64_t h = hiddenSize, f = ffnHiddenSize;
  int64_t qOut = numHeads * headDim, kvOut = numKvHeads * headDim;
  bool bias = family == ModelFamily::GPT2;
  int64_t attn = h * qOut + 2 * h * kvOut + qOut * h;
  if (bias || qkvBias)
    attn += qOut + 2 * kvOut;
  if (bias || outputBias)
    attn += h;
  bool swiglu = activation == MlpActivation::SwiGLU;
  int64_t mlp = swiglu ? 3 * h * f : 2 * h * f;
  if (bias || mlpBias)
    mlp += (swiglu ? 2 * f : f) + h;
  int64_t norms = bias ? 4 * h : 2 * h;
  int64_t layers = 0;
  for (int64_t i = 0; i < numLayers; ++i) {
    layers += attn + norms;
    if (!moe || !moe->isMoeLayer(i)) {
      layers += mlp;
      continue;
    }
    // Router, experts, and the shared expert with its gate.
    layers += moe->numExperts * h + moe->numExperts * 3 * h * moe->expertFfnSize;
    if (moe->sharedExpertFfnSize)
      layers += 3 * h * moe->sharedExpertFfnSize + h;
  }
  int64_t embed = vocabSize * h + (family == ModelFamily::GPT2 ? maxPositions * h : 0);
  int64_t head = (bias ? 2 * h : h) + (tieWordEmbeddings ? 0 : vocabSize * h);
  return embed + layers + head;
}

Expected<ModelConfig> loom::parseModelConfig(StringRef json) {
  Expected<llvm::json::Value> parsed = llvm::json::parse(json);
  if (!parsed)
    return fail("invalid JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *object = parsed->getAsObject();
  if (!object)
    return fail("a model config must be a JSON object");
  Fields fields(*object);

  std::string modelType;
  if (auto type = fields.string("model_type", ""); !type)
    return type.takeError();
  else
    modelType = *type;
  if (modelType.empty())
    modelType = fields.has("n_embd")        ? "gpt2"
                : fields.has("hidden_size") ? "llama"
                                            : "";
  if (modelType == "gpt2")
    return parseGpt2(fields);
  if (modelType == "llama" || modelType == "qwen2" || modelType == "mistral" ||
      modelType == "mixtral" || modelType == "qwen2_moe")
    return parseLlama(fields, modelType);
  if (modelType.empty())
    return fail("cannot tell the model family: no 'model_type', 'n_embd' or "
                "'hidden_size' field");
  return fail(llvm::formatv("field 'model_type' value \"{0}\" is not supported "
                            "(expected \"gpt2\", \"llama\", \"qwen2\", "
                            "\"mistral\", \"mixtral\" or \"qwen2_moe\")",
                            modelType));
}

Expected<ModelConfig> loom::readModelConfig(StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFileOrSTDIN(path, /*IsText=*/true);
  if (!buffer)
    return fail(llvm::formatv("cannot read '{0}': {1}", path,
                              buffer.getError().message()));
  Expected<ModelConfig> config = parseModelConfig((*buffer)->getBuffer());
  if (!config)
    return fail(llvm::formatv("{0}: {1}", path,
                              llvm::toString(config.takeError())));
  return config;
}
