//===- ModelBuilder.cpp - ModelConfig -> tfm module -------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Writes the whole model as tfm ops at global shapes:
//
//   tfm.param @... (one per weight, Hugging Face-style names)
//   func.func @forward(%tokens, %labels, %loss_mask) -> tensor<f32> {
//     %h, %pos = tfm.block embedding ...
//     %h1 = tfm.block layer 0 ins(%h, ...) ...      (one per layer)
//     %loss = tfm.block head ins(%hN, %labels, %loss_mask) ...
//   }
//
// GPT-2 (pre-LN, learned positions, biases, GELU MLP) and Llama (RMSNorm, RoPE,
// GQA, SwiGLU MLP) share the skeleton and differ per part. Qwen2 and Mistral
// are Llamas with other config fields: the Llama family's biases (q/k/v,
// output, MLP) and Llama 3.x RoPE scaling are per config.
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/ModelImporter.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace loom;
using namespace loom::tfm;
using llvm::Expected;

namespace {

llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

class ModelBuilder {
public:
  ModelBuilder(MLIRContext &context, const ModelConfig &config,
               const ImportOptions &options, Type elementType)
      : ctx(context), c(config), o(options), b(&context),
        loc(UnknownLoc::get(&context)), elt(elementType),
        batch(options.microBatchSize), seq(options.seqLength),
        vocab(llvm::divideCeil(config.vocabSize,
                               options.makeVocabSizeDivisibleBy) *
              options.makeVocabSizeDivisibleBy) {}

  OwningOpRef<ModuleOp> build();

private:
  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elt);
  }
  RankedTensorType act(int64_t features) {
    return tensor({batch, seq, features});
  }
  RankedTensorType ids() {
    return RankedTensorType::get({batch, seq}, b.getI32Type());
  }

  /// Declares parameter `name` (once) and reads it at the insertion point.
  Value param(StringRef name, ArrayRef<int64_t> shape, InitKind init,
              double std = 0.0);
  Value normalParam(StringRef name, ArrayRef<int64_t> shape, double std) {
    return param(name, shape, InitKind::normal, std);
  }

  /// Builds a tfm.block whose body is written by `body(args)`, which returns
  /// the values to yield.
  template <typename BodyFn>
  SmallVector<Value> block(BlockKind kind, std::optional<int64_t> index,
                           ValueRange inputs, TypeRange results, BodyFn body);

  Value dropout(Value x) {
    if (o.hiddenDropout == 0.0)
      return x;
    return b.create<DropoutOp>(loc, x.getType(), x,
                               b.getF64FloatAttr(o.hiddenDropout),
                               b.getI64IntegerAttr(o.seed + dropoutSites++));
  }
  Value norm(StringRef prefix, Value x);
  Value linear(StringRef prefix, Value x, int64_t out, bool bias, double std);
  Value attention(StringRef prefix, Value x, Value positions, Value tokens);
  Value mlp(StringRef prefix, Value x);
  Value swigluMlp(StringRef prefix, Value x, int64_t ffn);
  Value moeMlp(StringRef prefix, Value x);

  std::string layerPrefix(int64_t i) const {
    return c.family == ModelFamily::GPT2
               ? llvm::formatv("transformer.h.{0}.", i).str()
               : llvm::formatv("model.layers.{0}.", i).str();
  }
  bool isGpt2() const { return c.family == ModelFamily::GPT2; }
  bool documentMask() const { return o.resetAttentionMask; }

  MLIRContext &ctx;
  const ModelConfig &c;
  const ImportOptions &o;
  OpBuilder b;
  Location loc;
  Type elt;
  int64_t batch, seq;
  /// The vocabulary padded to a multiple of --make-vocab-size-divisible-by.
  int64_t vocab;
  OpBuilder paramBuilder{&ctx};
  llvm::StringMap<RankedTensorType> params;
  int64_t dropoutSites = 0;
};

Value ModelBuilder::param(StringRef name, ArrayRef<int64_t> shape,
                          InitKind init, double std) {
  RankedTensorType type = tensor(shape);
  auto [it, inserted] = params.try_emplace(name, type);
  if (inserted) {
    FloatAttr stdAttr =
        init == InitKind::normal ? paramBuilder.getF64FloatAttr(std) : nullptr;
    paramBuilder.create<ParamOp>(loc, name, type, init, stdAttr);
  }
  assert(it->second == type && "one parameter name, two shapes");
  return b.create<GetParamOp>(loc, type, name);
}

template <typename BodyFn>
SmallVector<Value> ModelBuilder::block(BlockKind kind,
                                       std::optional<int64_t> index,
                                       ValueRange inputs, TypeRange results,
                                       BodyFn body) {
  IntegerAttr indexAttr = index ? b.getI64IntegerAttr(*index) : nullptr;
  auto op = b.create<BlockOp>(loc, results, BlockKindAttr::get(&ctx, kind),
                              indexAttr, /*backward=*/UnitAttr(), inputs);
  Block *entry = b.createBlock(&op.getBody());
  for (Value v : inputs)
    entry->addArgument(v.getType(), loc);
  SmallVector<Value> yielded = body(entry->getArguments());
  b.create<YieldOp>(loc, yielded);
  b.setInsertionPointAfter(op);
  return SmallVector<Value>(op.getResults());
}

Value ModelBuilder::norm(StringRef prefix, Value x) {
  int64_t h = c.hiddenSize;
  Value w = param((prefix + "weight").str(), {h}, InitKind::ones);
  FloatAttr eps = b.getF64FloatAttr(c.normEpsilon);
  if (!isGpt2())
    return b.create<RmsNormOp>(loc, x.getType(), x, w, eps);
  Value bias = param((prefix + "bias").str(), {h}, InitKind::zeros);
  return b.create<LayerNormOp>(loc, x.getType(), x, w, bias, eps);
}

Value ModelBuilder::linear(StringRef prefix, Value x, int64_t out, bool bias,
                           double std) {
  int64_t in = cast<RankedTensorType>(x.getType()).getShape().back();
  Value w = normalParam((prefix + "weight").str(), {out, in}, std);
  Value bv = bias ? param((prefix + "bias").str(), {out}, InitKind::zeros)
                  : Value();
  return b.create<LinearOp>(loc, act(out), x, w, bv);
}

Value ModelBuilder::attention(StringRef prefix, Value x, Value positions,
                              Value tokens) {
  int64_t qOut = c.numHeads * c.headDim, kvOut = c.numKvHeads * c.headDim;
  bool qkvBias = isGpt2() || c.qkvBias, outBias = isGpt2() || c.outputBias;
  // GPT-2 and Megatron scale the init of the residual output projections by
  // 1/sqrt(2 * num_layers); Llama uses one std everywhere.
  double outStd =
      isGpt2() ? c.initStd / std::sqrt(2.0 * c.numLayers) : c.initStd;
  std::string p = prefix.str();
  std::string qName = isGpt2() ? p + "attn.q." : p + "self_attn.q_proj.";
  std::string kName = isGpt2() ? p + "attn.k." : p + "self_attn.k_proj.";
  std::string vName = isGpt2() ? p + "attn.v." : p + "self_attn.v_proj.";
  std::string oName = isGpt2() ? p + "attn.c_proj." : p + "self_attn.o_proj.";

  Value q = linear(qName, x, qOut, qkvBias, c.initStd);
  Value k = linear(kName, x, kvOut, qkvBias, c.initStd);
  Value v = linear(vName, x, kvOut, qkvBias, c.initStd);
  if (!isGpt2()) {
    IntegerAttr headDim = b.getI64IntegerAttr(c.headDim);
    FloatAttr theta = b.getF64FloatAttr(c.ropeTheta);
    Llama3RopeScalingAttr scaling;
    if (const std::optional<Llama3RopeScaling> &r = c.ropeScaling)
      scaling = Llama3RopeScalingAttr::get(
          &ctx, APFloat(r->factor), APFloat(r->lowFreqFactor),
          APFloat(r->highFreqFactor), r->originalMaxPositions);
    q = b.create<RopeOp>(loc, q.getType(), q, positions, headDim, theta,
                         scaling);
    k = b.create<RopeOp>(loc, k.getType(), k, positions, headDim, theta,
                         scaling);
  }
  auto lseType = RankedTensorType::get({batch, c.numHeads, seq}, b.getF32Type());
  MaskKind mask = documentMask() ? MaskKind::causal_document : MaskKind::causal;
  IntegerAttr eod =
      documentMask() ? b.getI64IntegerAttr(*o.eodTokenId) : IntegerAttr();
  auto attn = b.create<AttentionOp>(
      loc, q.getType(), lseType, q, k, v, documentMask() ? tokens : Value(),
      b.getI64IntegerAttr(c.numHeads), b.getI64IntegerAttr(c.numKvHeads),
      b.getI64IntegerAttr(c.headDim),
      b.getF64FloatAttr(1.0 / std::sqrt(double(c.headDim))),
      MaskKindAttr::get(&ctx, mask), eod, /*ring=*/StringAttr(),
      /*ring_a2a=*/IntegerAttr());
  return linear(oName, attn.getResult(), c.hiddenSize, outBias, outStd);
}

Value ModelBuilder::mlp(StringRef prefix, Value x) {
  std::string p = prefix.str();
  double outStd =
      isGpt2() ? c.initStd / std::sqrt(2.0 * c.numLayers) : c.initStd;
  if (isGpt2()) {
    Value h = linear(p + "mlp.c_fc.", x, c.ffnHiddenSize, true, c.initStd);
    GeluApprox approx = c.activation == MlpActivation::GeluExact
                            ? GeluApprox::none
                            : GeluApprox::tanh;
    h = b.create<GeluOp>(loc, h.getType(), h, approx);
    return linear(p + "mlp.c_proj.", h, c.hiddenSize, true, outStd);
  }
  return swigluMlp(p + "mlp.", x, c.ffnHiddenSize);
}

Value ModelBuilder::swigluMlp(StringRef prefix, Value x, int64_t ffn) {
  std::string p = prefix.str();
  Value gate = linear(p + "gate_proj.", x, ffn, c.mlpBias, c.initStd);
  Value up = linear(p + "up_proj.", x, ffn, c.mlpBias, c.initStd);
  Value h = b.create<SwigluOp>(loc, gate.getType(), gate, up);
  return linear(p + "down_proj.", h, c.hiddenSize, c.mlpBias, c.initStd);
}

/// A mixture-of-experts MLP: the router in f32, top-k routing, its losses
/// (terms of the objective, see tfm.moe_router_loss), the tokens in
/// dispatch order, each expert's SwiGLU MLP as grouped linears, and the
/// combine weighted by the router's probabilities; Qwen2-MoE adds a shared
/// expert scaled by its sigmoid gate. The experts' weights are stacked
/// [E, out, in] ("experts.w1.weight" holds Hugging Face's
/// "experts.{e}.w1.weight" for every e).
Value ModelBuilder::moeMlp(StringRef prefix, Value x) {
  const MoeConfig &m = *c.moe;
  bool mixtral = c.modelType == "mixtral";
  std::string p = (prefix + (mixtral ? "block_sparse_moe." : "mlp.")).str();
  int64_t h = c.hiddenSize, e = m.numExperts, f = m.expertFfnSize, k = m.topK;
  Type f32 = b.getF32Type();
  auto f32Tensor = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, f32);
  };
  auto toF32 = [&](Value v) -> Value {
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getElementType() == f32)
      return v;
    return b.create<CastOp>(loc, type.clone(f32), v);
  };

  Value router = normalParam(p + "gate.weight", {e, h}, c.initStd);
  Value logits = b.create<LinearOp>(loc, f32Tensor({batch, seq, e}), toF32(x),
                                    toF32(router), Value());
  auto route = b.create<MoeRouteOp>(
      loc, f32Tensor({batch, seq, k}),
      RankedTensorType::get({batch, seq, k}, b.getI32Type()), logits,
      b.getI64IntegerAttr(k), m.preSoftmax ? b.getUnitAttr() : UnitAttr());
  // Always written, so that loom-compile's --moe-aux-loss-coeff can turn
  // it on; tfm-set-router-losses erases it when both coefficients are 0.
  Value routed = b.create<MoeRouteCountsOp>(loc, f32Tensor({e}),
                                            route.getExperts(),
                                            b.getI64IntegerAttr(e));
  b.create<MoeRouterLossOp>(loc, f32Tensor({}), f32Tensor({}), logits, routed,
                            b.getI64IntegerAttr(k),
                            b.getF64FloatAttr(m.auxLossCoeff),
                            b.getF64FloatAttr(0.0));

  int64_t n = batch * seq * k;
  auto permuted = b.create<MoePermuteOp>(
      loc, tensor({n, h}), RankedTensorType::get({e}, b.getI32Type()),
      route.getExperts().getType(), x, route.getExperts(),
      b.getI64IntegerAttr(e), /*capacity=*/IntegerAttr(),
      /*pad_to_capacity=*/UnitAttr());
  Value rows = permuted.getRows(), counts = permuted.getCounts();
  StringRef gateName = mixtral ? "w1" : "gate_proj",
            upName = mixtral ? "w3" : "up_proj",
            downName = mixtral ? "w2" : "down_proj";
  auto expertLinear = [&](StringRef name, Value in, int64_t out) -> Value {
    int64_t inFeatures = cast<RankedTensorType>(in.getType()).getDimSize(1);
    Value w = normalParam((p + "experts." + name + ".weight").str(),
                          {e, out, inFeatures}, c.initStd);
    return b.create<GroupedLinearOp>(loc, tensor({n, out}), in, w, counts);
  };
  Value gate = expertLinear(gateName, rows, f);
  Value up = expertLinear(upName, rows, f);
  Value act = b.create<SwigluOp>(loc, gate.getType(), gate, up);
  Value down = expertLinear(downName, act, h);
  Value y = b.create<MoeUnpermuteOp>(loc, x.getType(), down, route.getProbs(),
                                     permuted.getRowMap());
  if (!m.sharedExpertFfnSize)
    return y;
  Value shared = swigluMlp(p + "shared_expert.", x, m.sharedExpertFfnSize);
  Value sharedGate = linear(p + "shared_expert_gate.", x, 1, false, c.initStd);
  shared = b.create<SigmoidGateOp>(loc, shared.getType(), shared, sharedGate);
  return b.create<AddOp>(loc, y.getType(), y, shared);
}

OwningOpRef<ModuleOp> ModelBuilder::build() {
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  NamedAttrList model;
  StringRef family = isGpt2() ? "gpt2" : "llama";
  model.append("family",
               b.getStringAttr(c.modelType.empty() ? family : c.modelType));
  model.append("num_layers", b.getI64IntegerAttr(c.numLayers));
  model.append("hidden_size", b.getI64IntegerAttr(c.hiddenSize));
  model.append("ffn_hidden_size", b.getI64IntegerAttr(c.ffnHiddenSize));
  model.append("num_heads", b.getI64IntegerAttr(c.numHeads));
  model.append("num_kv_heads", b.getI64IntegerAttr(c.numKvHeads));
  model.append("head_dim", b.getI64IntegerAttr(c.headDim));
  model.append("vocab_size", b.getI64IntegerAttr(vocab));
  if (vocab != c.vocabSize)
    model.append("unpadded_vocab_size", b.getI64IntegerAttr(c.vocabSize));
  model.append("micro_batch_size", b.getI64IntegerAttr(batch));
  model.append("seq_length", b.getI64IntegerAttr(seq));
  model.append("tie_word_embeddings", b.getBoolAttr(c.tieWordEmbeddings));
  // The end-of-document token, for loom-compile --eod-mask-loss.
  if (o.eodTokenId)
    model.append("eod_token_id", b.getI64IntegerAttr(*o.eodTokenId));
  (*module)->setAttr(kModelAttrName, model.getDictionary(&ctx));

  b.setInsertionPointToEnd(module->getBody());
  auto lossType = RankedTensorType::get({}, b.getF32Type());
  auto maskType = RankedTensorType::get({batch, seq}, b.getF32Type());
  auto func = b.create<func::FuncOp>(
      loc, "forward", b.getFunctionType({ids(), ids(), maskType}, {lossType}));
  // The compiled program exports @forward as this C symbol; its arguments
  // say which batch input they carry.
  func->setAttr(kEntryAttrName, b.getStringAttr("loom_forward"));
  static constexpr StringLiteral kinds[] = {"tokens", "labels", "loss_mask"};
  for (auto [i, kind] : llvm::enumerate(kinds))
    func.setArgAttr(i, kInputArgAttrName, b.getStringAttr(kind));
  paramBuilder.setInsertionPoint(func);
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value tokens = entry->getArgument(0), labels = entry->getArgument(1),
        lossMask = entry->getArgument(2);

  // Embedding: token (+ learned position) embedding; yields the hidden state
  // and the position ids the layers need for RoPE.
  int64_t h = c.hiddenSize;
  std::optional<int64_t> resetAt =
      o.resetPositionIds ? o.eodTokenId : std::nullopt;
  SmallVector<Value> embedded = block(
      BlockKind::embedding, std::nullopt, {tokens}, {act(h), ids()},
      [&](ValueRange args) -> SmallVector<Value> {
        Value t = args[0];
        Value pos = b.create<PositionIdsOp>(
            loc, ids(), t, resetAt ? b.getI64IntegerAttr(*resetAt) : nullptr);
        StringRef wteName =
            isGpt2() ? "transformer.wte.weight" : "model.embed_tokens.weight";
        Value x = b.create<EmbeddingOp>(
            loc, act(h), t, normalParam(wteName, {vocab, h}, c.initStd));
        if (isGpt2()) {
          Value wpe = normalParam("transformer.wpe.weight",
                                  {c.maxPositions, h}, c.initStd);
          x = b.create<AddOp>(loc, x.getType(), x,
                              b.create<EmbeddingOp>(loc, act(h), pos, wpe));
        }
        return {dropout(x), pos};
      });
  Value hidden = embedded[0], positions = embedded[1];

  // Layers: pre-norm attention and MLP with residuals. Position ids enter a
  // layer when RoPE needs them, tokens when the document mask needs them.
  for (int64_t i = 0; i < c.numLayers; ++i) {
    SmallVector<Value> inputs = {hidden};
    if (!isGpt2())
      inputs.push_back(positions);
    if (documentMask())
      inputs.push_back(tokens);
    std::string prefix = layerPrefix(i);
    hidden = block(BlockKind::layer, i, inputs, {act(h)},
                   [&](ValueRange args) -> SmallVector<Value> {
                     Value x = args[0];
                     Value pos = isGpt2() ? Value() : args[1];
                     Value toks = documentMask() ? args.back() : Value();
                     Value a = norm(prefix + (isGpt2() ? "ln_1."
                                                       : "input_layernorm."),
                                    x);
                     a = dropout(attention(prefix, a, pos, toks));
                     x = b.create<AddOp>(loc, x.getType(), x, a);
                     Value m = norm(prefix + (isGpt2()
                                                  ? "ln_2."
                                                  : "post_attention_layernorm."),
                                    x);
                     m = dropout(c.moe && c.moe->isMoeLayer(i)
                                     ? moeMlp(prefix, m)
                                     : mlp(prefix, m));
                     return {b.create<AddOp>(loc, x.getType(), x, m)};
                   })[0];
  }

  // Head: final norm, output projection (tied to the token embedding unless
  // the config unties it) and the masked mean cross-entropy.
  Value loss = block(
      BlockKind::head, std::nullopt, {hidden, labels, lossMask}, {lossType},
      [&](ValueRange args) -> SmallVector<Value> {
        Value x = norm(isGpt2() ? "transformer.ln_f." : "model.norm.", args[0]);
        StringRef outName =
            c.tieWordEmbeddings
                ? (isGpt2() ? "transformer.wte.weight"
                            : "model.embed_tokens.weight")
                : "lm_head.weight";
        Value w = normalParam(outName, {vocab, h}, c.initStd);
        Value logits = b.create<LinearOp>(loc, act(vocab), x, w, Value());
        // The softmax statistics are for the gradient (tfm-differentiate).
        auto stats = RankedTensorType::get({batch, seq}, b.getF32Type());
        // Padding rows of a padded vocabulary stay out of the softmax.
        IntegerAttr unpadded =
            vocab != c.vocabSize ? b.getI64IntegerAttr(c.vocabSize)
                                 : IntegerAttr();
        return {b.create<CrossEntropyOp>(loc, lossType, stats, stats, logits,
                                         args[1], args[2], unpadded)
                    .getLoss()};
      })[0];
  b.create<func::ReturnOp>(loc, loss);
  return module;
}

} // namespace

Expected<OwningOpRef<ModuleOp>>
loom::buildModelModule(MLIRContext &context, const ModelConfig &config,
                       const ImportOptions &options) {
  context.loadDialect<TfmDialect, func::FuncDialect>();
  ImportOptions o = options;
  StringRef posField = config.family == ModelFamily::GPT2
                           ? "n_positions"
                           : "max_position_embeddings";
  if (o.microBatchSize <= 0)
    return fail(llvm::formatv("micro-batch size {0} must be positive",
                              o.microBatchSize));
  if (o.seqLength == 0)
    o.seqLength = config.maxPositions;
  if (o.seqLength < 0)
    return fail(llvm::formatv("sequence length {0} must be positive",
                              o.seqLength));
  if (o.seqLength > config.maxPositions)
    return fail(llvm::formatv("sequence length {0} exceeds {1} {2}",
                              o.seqLength, posField, config.maxPositions));
  // A window of w keys reaches back w - 1 positions (Hugging Face's mask:
  // key > query - w), so only a window shorter than the sequence changes
  // attention.
  if (config.slidingWindow && *config.slidingWindow < o.seqLength)
    return fail(llvm::formatv("sliding window attention is not supported: "
                              "sliding_window {0} is shorter than the "
                              "sequence length {1}",
                              *config.slidingWindow, o.seqLength));
  if ((o.resetPositionIds || o.resetAttentionMask) && !o.eodTokenId)
    return fail(o.resetPositionIds
                    ? "--reset-position-ids needs --eod-token-id"
                    : "--reset-attention-mask needs --eod-token-id");
  if (o.eodTokenId &&
      (*o.eodTokenId < 0 || *o.eodTokenId >= config.vocabSize))
    return fail(llvm::formatv("eod token id {0} is outside the vocabulary "
                              "[0, {1})",
                              *o.eodTokenId, config.vocabSize));
  if (o.makeVocabSizeDivisibleBy <= 0)
    return fail(llvm::formatv("--make-vocab-size-divisible-by {0} must be "
                              "positive",
                              o.makeVocabSizeDivisibleBy));
  if (!(o.hiddenDropout >= 0.0 && o.hiddenDropout < 1.0))
    return fail(llvm::formatv("hidden dropout {0} is not in [0, 1)",
                              llvm::format("%g", o.hiddenDropout)));

  Builder builder(&context);
  Type elt = llvm::StringSwitch<Type>(o.dtype)
                 .Case("f32", builder.getF32Type())
                 .Case("bf16", builder.getBF16Type())
                 .Case("f16", builder.getF16Type())
                 .Default(Type());
  if (!elt)
    return fail(llvm::formatv("dtype \"{0}\" is not supported (expected f32, "
                              "bf16 or f16)",
                              o.dtype));
  return ModelBuilder(context, config, o, elt).build();
}

Expected<OwningOpRef<ModuleOp>> loom::importModel(MLIRContext &context,
                                                  llvm::StringRef configPath,
                                                  const ImportOptions &o) {
  Expected<ModelConfig> config = readModelConfig(configPath);
  if (!config)
    return config.takeError();
  Expected<OwningOpRef<ModuleOp>> module = buildModelModule(context, *config, o);
  if (!module)
    return module.takeError();
  if (failed(verify(**module)))
    return fail("the imported module does not verify (importer bug)");
  return module;
}
