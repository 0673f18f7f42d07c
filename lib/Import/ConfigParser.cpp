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

#include "loom/Import/ModelImporter.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

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

/// Typed access to the fields of one config object.
class Fields {
public:
  explicit Fields(const llvm::json::Object &object) : object(object) {}

  bool has(StringRef name) const {
    const llvm::json::Value *v = object.get(name);
    return v && v->kind() != llvm::json::Value::Null;
  }

  Expected<int64_t> positiveInt(StringRef name) const {
    const llvm::json::Value *v = object.get(name);
    if (!v)
      return fail(llvm::formatv("missing field '{0}'", name));
    std::optional<int64_t> i = v->getAsInteger();
    if (!i || *i <= 0)
      return fail(llvm::formatv("field '{0}' must be a positive integer, got {1}",
                                name, show(*v)));
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
    const llvm::json::Value *v = object.get(name);
    std::optional<double> d = v->getAsNumber();
    if (!d || !(*d > 0.0))
      return fail(llvm::formatv("field '{0}' must be a positive number, got {1}",
                                name, show(*v)));
    return *d;
  }

  Expected<bool> boolean(StringRef name, bool fallback) const {
    if (!has(name))
      return fallback;
    const llvm::json::Value *v = object.get(name);
    std::optional<bool> b = v->getAsBoolean();
    if (!b)
      return fail(llvm::formatv("field '{0}' must be true or false, got {1}",
                                name, show(*v)));
    return *b;
  }

  Expected<std::string> string(StringRef name, StringRef fallback) const {
    if (!has(name))
      return fallback.str();
    const llvm::json::Value *v = object.get(name);
    std::optional<StringRef> s = v->getAsString();
    if (!s)
      return fail(llvm::formatv("field '{0}' must be a string, got {1}", name,
                                show(*v)));
    return s->str();
  }

  const llvm::json::Value *raw(StringRef name) const { return object.get(name); }

private:
  const llvm::json::Object &object;
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

Expected<ModelConfig> parseLlama(const Fields &f) {
  ModelConfig c;
  c.family = ModelFamily::Llama;
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
  if (f.has("rope_scaling"))
    return fail(llvm::formatv("field 'rope_scaling' value {0} is not "
                              "supported (only unscaled RoPE)",
                              show(*f.raw("rope_scaling"))));
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

#undef LOOM_ASSIGN

} // namespace

int64_t ModelConfig::numParameters() const {
  int64_t h = hiddenSize, f = ffnHiddenSize;
  int64_t qOut = numHeads * headDim, kvOut = numKvHeads * headDim;
  bool bias = family == ModelFamily::GPT2;
  int64_t attn = h * qOut + 2 * h * kvOut + qOut * h;
  if (bias)
    attn += qOut + 2 * kvOut + h;
  int64_t mlp = activation == MlpActivation::SwiGLU ? 3 * h * f : 2 * h * f;
  if (bias)
    mlp += f + h;
  int64_t norms = bias ? 4 * h : 2 * h;
  int64_t layer = attn + mlp + norms;
  int64_t embed = vocabSize * h + (family == ModelFamily::GPT2 ? maxPositions * h : 0);
  int64_t head = (bias ? 2 * h : h) + (tieWordEmbeddings ? 0 : vocabSize * h);
  return embed + numLayers * layer + head;
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
  if (modelType == "llama")
    return parseLlama(fields);
  if (modelType.empty())
    return fail("cannot tell the model family: no 'model_type', 'n_embd' or "
                "'hidden_size' field");
  return fail(llvm::formatv("field 'model_type' value \"{0}\" is not supported "
                            "(expected \"gpt2\" or \"llama\")",
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
