//===- TfmOps.cpp - Transformer op verifiers and folders --------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Verifier messages follow LLVM style (lowercase, no trailing period) and
// name the offending values, e.g. "weight in_features 32 does not match input
// feature size 64".
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/TfmOps.h"

#include "dialects/Tfm/ChunkOrder.h"
#include "dialects/Tfm/Distribution.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <string>

using namespace mlir;
using namespace loom::tfm;

#include "dialects/Tfm/TfmEnums.cpp.inc"
#include "dialects/Tfm/TfmInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Formats a shape for diagnostics: [2, 8, 64].
static std::string fmt(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os);
  os << "]";
  return s;
}

/// Formats a number for diagnostics the way a person writes it: 0.5, 1e-05.
static std::string fmt(double value) {
  return llvm::formatv("{0}", llvm::format("%g", value)).str();
}

static LogicalResult checkRank(Operation *op, StringRef what, Value v,
                               int64_t rank, StringRef layout) {
  int64_t got = tensorOf(v).getRank();
  if (got != rank)
    return op->emitOpError() << what << " must be " << layout << " (rank "
                             << rank << "), got rank " << got;
  return success();
}

static LogicalResult checkSameElementType(Operation *op, StringRef what,
                                          Value v, StringRef refWhat,
                                          Value ref) {
  Type got = tensorOf(v).getElementType();
  Type want = tensorOf(ref).getElementType();
  if (got != want)
    return op->emitOpError() << what << " element type " << got
                             << " does not match " << refWhat
                             << " element type " << want;
  return success();
}

static LogicalResult checkShape(Operation *op, StringRef what, Value v,
                                ArrayRef<int64_t> want, StringRef why) {
  ArrayRef<int64_t> got = tensorOf(v).getShape();
  if (got != want)
    return op->emitOpError() << what << " shape " << fmt(got)
                             << " does not match " << fmt(want) << " (" << why
                             << ")";
  return success();
}

static LogicalResult checkPositive(Operation *op, StringRef what,
                                   double value) {
  if (!(value > 0.0) || !std::isfinite(value))
    return op->emitOpError() << what << " must be positive, got "
                             << fmt(value);
  return success();
}

static LogicalResult checkPositive(Operation *op, StringRef what,
                                   int64_t value) {
  if (value <= 0)
    return op->emitOpError() << what << " must be positive, got " << value;
  return success();
}

/// [B, S] of a [B, S, ...] tensor.
static SmallVector<int64_t> batchSeq(Value v) {
  return llvm::to_vector(tensorOf(v).getShape().take_front(2));
}

//===----------------------------------------------------------------------===//
// ParamOp / GetParamOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  std::optional<double> std = getStd() ? std::optional<double>(
                                             getStd()->convertToDouble())
                                       : std::nullopt;
  if (getInit() == InitKind::normal) {
    if (!std)
      return emitOpError() << "init normal needs a std";
    return checkPositive(*this, "init normal std", *std);
  }
  if (std)
    return emitOpError() << "init " << stringifyInitKind(getInit())
                         << " takes no std";
  return success();
}

LogicalResult
GetParamOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param =
      symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getNameAttr());
  if (!param)
    return emitOpError() << "'" << getName()
                         << "' does not name a tfm.param";
  RankedTensorType global = param.getTensorType();
  auto result = cast<RankedTensorType>(getType());
  DistAttr dist = getDist(result);
  auto module = (*this)->getParentOfType<ModuleOp>();
  // The parameter's type, or with a distribution, its global shape (before
  // tfm-localize) or this rank's piece of it (after).
  SmallVector<int64_t> want(global.getShape());
  if (dist && hasLocalShapes(module)) {
    FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(*this, dist.getMesh());
    if (failed(mesh) || failed(mesh->verify(dist, *this)))
      return failure();
    FailureOr<SmallVector<int64_t>> local =
        localShape(global.getShape(), dist, *mesh, *this,
                   ("@" + getName()).str());
    if (failed(local))
      return failure();
    want = *local;
  }
  if (result.getShape() != ArrayRef<int64_t>(want) ||
      result.getElementType() != global.getElementType())
    return emitOpError() << "result type " << getType()
                         << " does not match the type " << param.getType()
                         << " of param @" << getName()
                         << (dist && hasLocalShapes(module)
                                 ? " (distributed, per-rank shape)"
                                 : "");
  return success();
}

//===----------------------------------------------------------------------===//
// BlockOp
//===----------------------------------------------------------------------===//

LogicalResult BlockOp::verify() {
  std::optional<int64_t> index = getIndex();
  if (getKind() == BlockKind::layer) {
    if (!index)
      return emitOpError() << "a layer block needs an index";
    if (*index < 0)
      return emitOpError() << "layer index " << *index << " is negative";
  } else if (index) {
    return emitOpError() << "a " << stringifyBlockKind(getKind())
                         << " block takes no index";
  }
  return success();
}

LogicalResult BlockOp::verifyRegions() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "region has " << body.getNumArguments()
                         << " arguments but the block has "
                         << getInputs().size() << " inputs";
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(body.getArgumentTypes(), getInputs())))
    if (std::get<0>(pair) != std::get<1>(pair).getType())
      return emitOpError() << "region argument " << i << " has type "
                           << std::get<0>(pair) << " but input " << i
                           << " has type " << std::get<1>(pair).getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "region must end with tfm.yield";
  if (yield.getValues().size() != getNumResults())
    return emitOpError() << "yields " << yield.getValues().size()
                         << " values but the block has " << getNumResults()
                         << " results";
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip(yield.getValues(), getResultTypes())))
    if (std::get<0>(pair).getType() != std::get<1>(pair))
      return emitOpError() << "yielded value " << i << " has type "
                           << std::get<0>(pair).getType() << " but result "
                           << i << " has type " << std::get<1>(pair);
  return success();
}

//===----------------------------------------------------------------------===//
// Embeddings and positions
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  if (failed(checkRank(*this, "ids", getIds(), 2, "[batch, seq]")) ||
      failed(checkRank(*this, "table", getTable(), 2, "[vocab, hidden]")) ||
      failed(checkSameElementType(*this, "result", getResult(), "table",
                                  getTable())))
    return failure();
  SmallVector<int64_t> want = batchSeq(getIds());
  want.push_back(tensorOf(getTable()).getDimSize(1));
  return checkShape(*this, "result", getResult(), want,
                    "ids shape + hidden size");
}

LogicalResult PositionIdsOp::verify() {
  if (failed(checkRank(*this, "tokens", getTokens(), 2, "[batch, seq]")))
    return failure();
  if (std::optional<int64_t> eod = getResetAtEod(); eod && *eod < 0)
    return emitOpError() << "eod token id " << *eod << " is negative";
  return success();
}

LogicalResult EmbeddingGradOp::verify() {
  if (failed(checkRank(*this, "ids", getIds(), 2, "[batch, seq]")) ||
      failed(checkRank(*this, "grad", getGrad(), 3, "[batch, seq, hidden]")) ||
      failed(checkRank(*this, "result", getResult(), 2, "[vocab, hidden]")) ||
      failed(checkSameElementType(*this, "result", getResult(), "grad",
                                  getGrad())))
    return failure();
  if (failed(checkShape(*this, "grad", getGrad(),
                        {tensorOf(getIds()).getDimSize(0),
                         tensorOf(getIds()).getDimSize(1),
                         tensorOf(getGrad()).getDimSize(2)},
                        "ids shape + hidden size")))
    return failure();
  int64_t hidden = tensorOf(getResult()).getDimSize(1);
  if (hidden != tensorOf(getGrad()).getDimSize(2))
    return emitOpError() << "table hidden size " << hidden
                         << " does not match grad hidden size "
                         << tensorOf(getGrad()).getDimSize(2);
  return success();
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

/// A norm normalizes the last dim of `input`; its weight (and bias) are
/// vectors of that size with the input's element type.
static LogicalResult verifyNorm(Operation *op, Value input, Value weight,
                                Value bias, APFloat epsilon) {
  if (tensorOf(input).getRank() < 1)
    return op->emitOpError() << "input must have rank >= 1";
  int64_t size = tensorOf(input).getShape().back();
  for (auto [what, v] : {std::pair<StringRef, Value>{"weight", weight},
                         std::pair<StringRef, Value>{"bias", bias}}) {
    if (!v)
      continue;
    if (failed(checkRank(op, what, v, 1, "[normalized size]")) ||
        failed(checkSameElementType(op, what, v, "input", input)))
      return failure();
    if (tensorOf(v).getDimSize(0) != size)
      return op->emitOpError() << what << " size " << tensorOf(v).getDimSize(0)
                               << " does not match the normalized size "
                               << size;
  }
  return checkPositive(op, "epsilon", epsilon.convertToDouble());
}

LogicalResult LayerNormOp::verify() {
  return verifyNorm(*this, getInput(), getWeight(), getBias(), getEpsilon());
}
LogicalResult AddLayerNormOp::verify() {
  return verifyNorm(*this, getInput(), getWeight(), getBias(), getEpsilon());
}
LogicalResult AddRmsNormOp::verify() {
  return verifyNorm(*this, getInput(), getWeight(), nullptr, getEpsilon());
}
/// An accumulated input gradient has the input gradient's type.
static LogicalResult verifyAccumulate(Operation *op, Value accumulate,
                                      Value inputGrad) {
  if (accumulate && accumulate.getType() != inputGrad.getType())
    return op->emitOpError()
           << "accumulates onto " << accumulate.getType()
           << " but its input gradient is " << inputGrad.getType();
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyAccumulate(*this, getAccumulate(), getInputGrad())))
    return failure();
  return verifyNorm(*this, getInput(), getWeight(), nullptr, getEpsilon());
}
LogicalResult RmsNormOp::verify() {
  return verifyNorm(*this, getInput(), getWeight(), nullptr, getEpsilon());
}
LogicalResult RmsNormGradOp::verify() {
  if (failed(verifyAccumulate(*this, getAccumulate(), getInputGrad())))
    return failure();
  return verifyNorm(*this, getInput(), getWeight(), nullptr, getEpsilon());
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

/// Checks x [..., in], W [out, in] and returns the output shape [..., out].
static FailureOr<SmallVector<int64_t>> verifyLinear(Operation *op, Value input,
                                                    Value weight) {
  if (tensorOf(input).getRank() < 2)
    return op->emitOpError() << "input must have rank >= 2, got rank "
                             << tensorOf(input).getRank();
  if (failed(checkRank(op, "weight", weight, 2,
                       "[out_features, in_features]")) ||
      failed(checkSameElementType(op, "weight", weight, "input", input)))
    return failure();
  int64_t in = tensorOf(input).getShape().back();
  int64_t wIn = tensorOf(weight).getDimSize(1);
  if (wIn != in)
    return op->emitOpError() << "weight in_features " << wIn
                             << " does not match input feature size " << in;
  SmallVector<int64_t> out(tensorOf(input).getShape().drop_back());
  out.push_back(tensorOf(weight).getDimSize(0));
  return out;
}

static LogicalResult verifyBias(Operation *op, StringRef what, Value bias,
                                Value weight) {
  if (!bias)
    return success();
  if (failed(checkRank(op, what, bias, 1, "[out_features]")) ||
      failed(checkSameElementType(op, what, bias, "weight", weight)))
    return failure();
  int64_t outFeatures = tensorOf(weight).getDimSize(0);
  if (tensorOf(bias).getDimSize(0) != outFeatures)
    return op->emitOpError() << what << " size " << tensorOf(bias).getDimSize(0)
                             << " does not match out_features " << outFeatures;
  return success();
}

/// `result = input weight^T + bias` of tfm.linear and the fused linears.
static LogicalResult verifyLinearResult(Operation *op, Value input,
                                        Value weight, Value bias,
                                        Value result) {
  FailureOr<SmallVector<int64_t>> out = verifyLinear(op, input, weight);
  if (failed(out) || failed(verifyBias(op, "bias", bias, weight)))
    return failure();
  if (failed(checkSameElementType(op, "result", result, "input", input)))
    return failure();
  return checkShape(op, "result", result, *out,
                    "input shape with out_features last");
}

LogicalResult LinearOp::verify() {
  return verifyLinearResult(*this, getInput(), getWeight(), getBias(),
                            getResult());
}

LogicalResult LinearGeluOp::verify() {
  if (getPreActivation().getType() != getResult().getType())
    return emitOpError() << "the pre-activation is "
                         << getPreActivation().getType() << " but the result "
                         << getResult().getType() << " (GELU keeps the type)";
  return verifyLinearResult(*this, getInput(), getWeight(), getBias(),
                            getResult());
}

LogicalResult LinearSwigluOp::verify() {
  for (Value v : {getGate(), getUp()})
    if (v.getType() != getResult().getType())
      return emitOpError() << "gate and up are " << getGate().getType()
                           << " and " << getUp().getType() << " but the result "
                           << getResult().getType()
                           << " (SwiGLU keeps the type)";
  size_t nb = getBiases().size();
  if (nb != 0 && nb != 2)
    return emitOpError() << "has " << nb << " biases (none, or gate's and up's)";
  if (failed(verifyLinearResult(*this, getInput(), getGateWeight(),
                                nb ? getBiases()[0] : Value(), getGate())))
    return failure();
  return verifyLinearResult(*this, getInput(), getUpWeight(),
                            nb ? getBiases()[1] : Value(), getUp());
}

LogicalResult MultiLinearOp::verify() {
  size_t n = getWeights().size();
  if (n == 0)
    return emitOpError() << "needs at least one weight";
  if (!getBiases().empty() && getBiases().size() != n)
    return emitOpError() << "has " << getBiases().size() << " biases for " << n
                         << " weights (none or one each)";
  if (getResults().size() != n)
    return emitOpError() << "has " << getResults().size() << " results for "
                         << n << " weights";
  for (size_t i = 0; i < n; ++i)
    if (failed(verifyLinearResult(
            *this, getInput(), getWeights()[i],
            getBiases().empty() ? Value() : getBiases()[i], getResults()[i])))
      return failure();
  return success();
}

/// tfm.linear_grad's and the fused linear gradients' operands: the
/// output gradient has the input's shape with out_features last.
static LogicalResult verifyLinearGrad(Operation *op, Value input, Value weight,
                                      Value grad, Value biasGrad) {
  FailureOr<SmallVector<int64_t>> out = verifyLinear(op, input, weight);
  if (failed(out) || failed(verifyBias(op, "bias_grad", biasGrad, weight)) ||
      failed(checkSameElementType(op, "grad", grad, "input", input)))
    return failure();
  return checkShape(op, "grad", grad, *out,
                    "input shape with out_features last");
}

LogicalResult LinearGradOp::verify() {
  if (failed(verifyAccumulate(*this, getAccumulate(), getInputGrad())))
    return failure();
  return verifyLinearGrad(*this, getInput(), getWeight(), getGrad(),
                          getBiasGrad());
}

LogicalResult LinearGradGeluOp::verify() {
  return verifyLinearGrad(*this, getInput(), getWeight(), getGrad(),
                          getBiasGrad());
}

LogicalResult LinearGradSwigluOp::verify() {
  return verifyLinearGrad(*this, getInput(), getWeight(), getGrad(),
                          getBiasGrad());
}

LogicalResult MultiLinearGradOp::verify() {
  size_t n = getWeights().size();
  if (n == 0)
    return emitOpError() << "needs at least one weight";
  if (getGrads().size() != n || getWeightGrads().size() != n)
    return emitOpError() << "has " << getGrads().size() << " output gradients "
                         << "and " << getWeightGrads().size()
                         << " weight gradients for " << n << " weights";
  if (!getBiasGrads().empty() && getBiasGrads().size() != n)
    return emitOpError() << "has " << getBiasGrads().size()
                         << " bias gradients for " << n
                         << " weights (none or one each)";
  if (failed(verifyAccumulate(*this, getAccumulate(), getInputGrad())) ||
      failed(checkSameElementType(*this, "input_grad", getInputGrad(), "input",
                                  getInput())) ||
      failed(checkShape(*this, "input_grad", getInputGrad(),
                        tensorOf(getInput()).getShape(), "the input's")))
    return failure();
  for (size_t i = 0; i < n; ++i) {
    Value w = getWeights()[i], dw = getWeightGrads()[i];
    FailureOr<SmallVector<int64_t>> out = verifyLinear(*this, getInput(), w);
    if (failed(out) ||
        failed(verifyBias(*this, "bias_grad",
                          getBiasGrads().empty() ? Value() : getBiasGrads()[i],
                          w)) ||
        failed(checkSameElementType(*this, "grad", getGrads()[i], "input",
                                    getInput())) ||
        failed(checkSameElementType(*this, "weight_grad", dw, "weight", w)) ||
        failed(checkShape(*this, "weight_grad", dw, tensorOf(w).getShape(),
                          "the weight's")) ||
        failed(checkShape(*this, "grad", getGrads()[i], *out,
                          "input shape with out_features last")))
      return failure();
  }
  return success();
}

LogicalResult BiasAddOp::verify() {
  if (tensorOf(getInput()).getRank() < 1)
    return emitOpError() << "input must have rank >= 1";
  if (failed(checkRank(*this, "bias", getBias(), 1, "[features]")) ||
      failed(checkSameElementType(*this, "bias", getBias(), "input",
                                  getInput())))
    return failure();
  int64_t features = tensorOf(getInput()).getShape().back();
  if (tensorOf(getBias()).getDimSize(0) != features)
    return emitOpError() << "bias size " << tensorOf(getBias()).getDimSize(0)
                         << " does not match the input's last dim " << features;
  return success();
}

/// `narrow [..., N*D]` and `wide [..., N*factor*D]` of tfm.repeat_kv(_grad).
static LogicalResult verifyRepeatKv(Operation *op, Value narrow, Value wide,
                                    int64_t factor, int64_t headDim) {
  if (failed(checkPositive(op, "factor", factor)) ||
      failed(checkPositive(op, "head_dim", headDim)) ||
      failed(checkSameElementType(op, "result", wide, "input", narrow)))
    return failure();
  int64_t features = tensorOf(narrow).getShape().back();
  if (features % headDim != 0)
    return op->emitOpError() << "feature size " << features
                             << " is not a multiple of head_dim " << headDim;
  SmallVector<int64_t> want(tensorOf(narrow).getShape());
  want.back() *= factor;
  return checkShape(op, "repeated", wide, want,
                    "every head repeated factor times");
}

LogicalResult RepeatKvOp::verify() {
  return verifyRepeatKv(*this, getInput(), getResult(), getFactor(),
                        getHeadDim());
}
LogicalResult RepeatKvGradOp::verify() {
  return verifyRepeatKv(*this, getResult(), getGrad(), getFactor(),
                        getHeadDim());
}

//===----------------------------------------------------------------------===//
// Rotary position embedding
//===----------------------------------------------------------------------===//

static LogicalResult verifyRope(Operation *op, Value input, Value positions,
                                int64_t headDim, APFloat theta) {
  if (failed(checkRank(op, "input", input, 3, "[batch, seq, heads*head_dim]")) ||
      failed(checkRank(op, "positions", positions, 2, "[batch, seq]")) ||
      failed(checkShape(op, "positions", positions, batchSeq(input),
                        "input batch and sequence")) ||
      failed(checkPositive(op, "head_dim", headDim)) ||
      failed(checkPositive(op, "theta", theta.convertToDouble())))
    return failure();
  if (headDim % 2 != 0)
    return op->emitOpError() << "head_dim " << headDim
                             << " is odd; rotary embedding rotates pairs";
  int64_t features = tensorOf(input).getDimSize(2);
  if (features % headDim != 0)
    return op->emitOpError() << "feature size " << features
                             << " is not a multiple of head_dim " << headDim;
  return success();
}

LogicalResult RopeOp::verify() {
  return verifyRope(*this, getInput(), getPositions(), getHeadDim(),
                    getTheta());
}
LogicalResult RopeGradOp::verify() {
  return verifyRope(*this, getInput(), getPositions(), getHeadDim(),
                    getTheta());
}
template <typename OpT> static LogicalResult verifyRopePair(OpT op) {
  if (failed(verifyRope(op, op.getFirst(), op.getPositions(), op.getHeadDim(),
                        op.getTheta())) ||
      failed(verifyRope(op, op.getSecond(), op.getPositions(), op.getHeadDim(),
                        op.getTheta())) ||
      failed(checkSameElementType(op, "second", op.getSecond(), "first",
                                  op.getFirst())))
    return failure();
  return success();
}
LogicalResult RopePairOp::verify() { return verifyRopePair(*this); }
LogicalResult RopePairGradOp::verify() { return verifyRopePair(*this); }

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// Shared by tfm.attention and tfm.attention_grad.
template <typename OpT>
static LogicalResult verifyAttention(OpT op, Value lse) {
  Operation *o = op.getOperation();
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  int64_t heads = op.getNumHeads(), kvHeads = op.getNumKvHeads(),
          headDim = op.getHeadDim();
  if (failed(checkPositive(o, "num_heads", heads)) ||
      failed(checkPositive(o, "num_kv_heads", kvHeads)) ||
      failed(checkPositive(o, "head_dim", headDim)) ||
      failed(checkPositive(o, "scale", op.getScale().convertToDouble())))
    return failure();
  if (heads % kvHeads != 0)
    return op.emitOpError() << "num_kv_heads " << kvHeads
                            << " does not divide num_heads " << heads;
  for (auto [what, val] : {std::pair<StringRef, Value>{"query", q},
                           std::pair<StringRef, Value>{"key", k},
                           std::pair<StringRef, Value>{"value", v}})
    if (failed(checkRank(o, what, val, 3, "[batch, seq, heads*head_dim]")))
      return failure();
  if (failed(checkSameElementType(o, "key", k, "query", q)) ||
      failed(checkSameElementType(o, "value", v, "query", q)))
    return failure();

  int64_t qFeatures = tensorOf(q).getDimSize(2);
  if (qFeatures != heads * headDim)
    return op.emitOpError() << "query feature size " << qFeatures
                            << " is not num_heads " << heads << " * head_dim "
                            << headDim << " = " << heads * headDim;
  int64_t kFeatures = tensorOf(k).getDimSize(2);
  if (kFeatures != kvHeads * headDim)
    return op.emitOpError() << "key feature size " << kFeatures
                            << " is not num_kv_heads " << kvHeads
                            << " * head_dim " << headDim << " = "
                            << kvHeads * headDim;
  // Per rank, the queries may be a piece of the sequence whose keys are all
  // there (context parallelism); globally the sequences are one.
  int64_t kSeq = getDist(q) ? tensorOf(k).getDimSize(1)
                            : tensorOf(q).getDimSize(1);
  if (failed(checkShape(o, "key", k,
                        {tensorOf(q).getDimSize(0), kSeq, kFeatures},
                        "query batch and sequence, num_kv_heads * head_dim")) ||
      failed(checkShape(o, "value", v, tensorOf(k).getShape(), "key shape")))
    return failure();

  int64_t batch = tensorOf(q).getDimSize(0), seq = tensorOf(q).getDimSize(1);
  if (failed(checkShape(o, "lse", lse, {batch, heads, seq},
                        "[batch, num_heads, seq]")))
    return failure();

  Value tokens = op.getTokens();
  std::optional<int64_t> eod = op.getEod();
  if (op.getMask() == MaskKind::causal_document) {
    if (!eod)
      return op.emitOpError() << "mask causal_document needs an eod token id";
    if (*eod < 0)
      return op.emitOpError() << "eod token id " << *eod << " is negative";
    if (!tokens)
      return op.emitOpError() << "mask causal_document needs the tokens operand";
    // The whole sequence's tokens: per rank (context parallelism) the
    // queries and even the keys may be pieces of it.
    if (getDist(q)) {
      if (tensorOf(tokens).getRank() != 2 ||
          tensorOf(tokens).getDimSize(0) != batch)
        return op.emitOpError() << "tokens must be [batch, seq] with the "
                                   "query's batch";
      return success();
    }
    return checkShape(o, "tokens", tokens, {batch, seq},
                      "query batch and sequence");
  }
  if (eod)
    return op.emitOpError() << "mask causal takes no eod token id";
  if (tokens)
    return op.emitOpError() << "mask causal takes no tokens operand";
  return success();
}

LogicalResult AttentionOp::verify() {
  if (getResult().getType() != getQuery().getType())
    return emitOpError() << "result type " << getResult().getType()
                         << " does not match query type "
                         << getQuery().getType();
  return verifyAttention(*this, getLse());
}

LogicalResult AttentionGradOp::verify() {
  if (failed(checkShape(*this, "key_grad", getKeyGrad(),
                        tensorOf(getKey()).getShape(), "key shape")) ||
      failed(checkShape(*this, "value_grad", getValueGrad(),
                        tensorOf(getValue()).getShape(), "value shape")) ||
      failed(checkSameElementType(*this, "key_grad", getKeyGrad(), "key",
                                  getKey())) ||
      failed(checkSameElementType(*this, "value_grad", getValueGrad(), "value",
                                  getValue())))
    return failure();
  return verifyAttention(*this, getLse());
}

//===----------------------------------------------------------------------===//
// Dropout and casts
//===----------------------------------------------------------------------===//

LogicalResult DropoutOp::verify() {
  double p = getP().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return emitOpError() << "dropout probability " << fmt(p)
                         << " is not in [0, 1)";
  return success();
}

OpFoldResult DropoutOp::fold(FoldAdaptor) {
  if (getP().isZero())
    return getInput();
  return {};
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

/// Logits [B, S, V] and their [B, S] per-row operands.
static LogicalResult verifyLogits(Operation *op, Value logits,
                                  ArrayRef<std::pair<StringRef, Value>> rows) {
  if (failed(checkRank(op, "logits", logits, 3, "[batch, seq, vocab]")))
    return failure();
  SmallVector<int64_t> bs = batchSeq(logits);
  for (auto [what, v] : rows)
    if (failed(checkShape(op, what, v, bs, "logits batch and sequence")))
      return failure();
  return success();
}

/// The real vocabulary of padded logits: at least 1. (Not compared with
/// the logits' last dim, which is a rank's slice once sharded.)
static LogicalResult verifyUnpadded(Operation *op,
                                    std::optional<uint64_t> unpadded) {
  if (unpadded && int64_t(*unpadded) < 1)
    return op->emitOpError() << "unpadded_vocab_size must be at least 1, got "
                             << int64_t(*unpadded);
  return success();
}

LogicalResult CrossEntropyOp::verify() {
  if (failed(verifyUnpadded(*this, getUnpaddedVocabSize())))
    return failure();
  return verifyLogits(*this, getLogits(),
                      {{"labels", getLabels()}, {"loss_mask", getLossMask()}});
}
LogicalResult CrossEntropyGradOp::verify() {
  if (failed(verifyUnpadded(*this, getUnpaddedVocabSize())))
    return failure();
  return verifyLogits(*this, getLogits(),
                      {{"labels", getLabels()}, {"loss_mask", getLossMask()}});
}
LogicalResult CeRowMaxOp::verify() {
  if (failed(verifyUnpadded(*this, getUnpaddedVocabSize())))
    return failure();
  return verifyLogits(*this, getLogits(), {{"result", getResult()}});
}
LogicalResult CeSumExpOp::verify() {
  if (failed(verifyUnpadded(*this, getUnpaddedVocabSize())))
    return failure();
  return verifyLogits(*this, getLogits(),
                      {{"row_max", getRowMax()}, {"result", getResult()}});
}
LogicalResult CeTargetLogitOp::verify() {
  return verifyLogits(*this, getLogits(),
                      {{"labels", getLabels()}, {"result", getResult()}});
}
/// A loss's (sum, count) pair.
static LogicalResult checkParts(Operation *op, Value parts) {
  auto type = cast<RankedTensorType>(parts.getType());
  if (type.getDimSize(0) == 2)
    return success();
  return op->emitOpError() << "the loss's parts must be tensor<2xf32> (sum, "
                              "count), got "
                           << type;
}

LogicalResult CeLossSumOp::verify() {
  if (failed(checkRank(*this, "row_max", getRowMax(), 2, "[batch, seq]")))
    return failure();
  return checkParts(*this, getResult());
}
LogicalResult LossMeanOp::verify() { return checkParts(*this, getParts()); }

//===----------------------------------------------------------------------===//
// Ring attention
//===----------------------------------------------------------------------===//

LogicalResult RingShiftOp::verify() {
  if (getInputs().empty())
    return emitOpError() << "shifts no tensors";
  if (getInputs().getTypes() != getResults().getTypes())
    return emitOpError() << "results must have the types of the inputs";
  return success();
}

LogicalResult LevelAllToAllOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  int64_t rank = in.getRank();
  int64_t split = int64_t(getSplitDim()), concat = int64_t(getConcatDim());
  if (out.getRank() != rank || split >= rank || concat >= rank)
    return emitOpError() << "split and concat dims must be dims of the "
                            "input, and the result of its rank";
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "result must have the input's element type";
  // Members: how many pieces the split dim is cut into.
  int64_t pieces = out.getDimSize(split) == 0
                       ? 0
                       : in.getDimSize(split) / out.getDimSize(split);
  bool ok = pieces > 0 && in.getDimSize(split) % out.getDimSize(split) == 0;
  for (int64_t d = 0; d < rank && ok; ++d) {
    int64_t want = in.getDimSize(d);
    if (d == split && d != concat)
      want /= pieces;
    else if (d == concat && d != split)
      want *= pieces;
    ok = out.getDimSize(d) == want;
  }
  if (!ok)
    return emitOpError() << "result " << out
                         << " is not the input cut into equal pieces along "
                            "dim "
                         << split << " and joined along dim " << concat;
  return success();
}

LogicalResult PipelineDataOp::verify() {
  auto type = cast<RankedTensorType>(getValue().getType());
  if (getWhat() == "tokens") {
    if (!type.getElementType().isInteger(32))
      return emitOpError() << "traces token ids, which are i32, not " << type;
    return success();
  }
  if (getWhat() == "loss") {
    if (!isa<FloatType>(type.getElementType()) || type.getNumElements() != 1)
      return emitOpError() << "traces a loss, one float element, not " << type;
    return success();
  }
  return emitOpError() << "traces \"tokens\" or \"loss\", not \""
                       << getWhat() << "\"";
}

/// `stacked` is `one` with a leading dim of micro-batches that holds
/// `index`.
static LogicalResult verifyStacked(Operation *op, Type stacked, Type one,
                                   int64_t index) {
  auto s = cast<RankedTensorType>(stacked);
  auto o = cast<RankedTensorType>(one);
  if (s.getRank() != o.getRank() + 1 ||
      s.getShape().drop_front() != o.getShape() ||
      s.getElementType() != o.getElementType())
    return op->emitOpError() << s << " is not " << o
                             << " stacked on a leading micro-batch dim";
  if (index < 0 || index >= s.getDimSize(0))
    return op->emitOpError() << "micro-batch " << index << " is outside the "
                             << s.getDimSize(0) << " of " << s;
  return success();
}

LogicalResult MicrobatchSliceOp::verify() {
  return verifyStacked(*this, getStacked().getType(), getResult().getType(),
                       getIndex());
}

LogicalResult MicrobatchInsertOp::verify() {
  return verifyStacked(*this, getDest().getType(), getValue().getType(),
                       getIndex());
}

LogicalResult PipelineP2POp::verify() {
  if (getSends().empty() && getResults().empty())
    return emitOpError() << "sends and receives nothing";
  if (getSendOffsets().size() != getSends().size())
    return emitOpError() << "has " << getSends().size() << " sends but "
                         << getSendOffsets().size() << " send offsets";
  if (getRecvOffsets().size() != getResults().size())
    return emitOpError() << "has " << getResults().size()
                         << " receives but " << getRecvOffsets().size()
                         << " receive offsets";
  if (getSendPayloads().size() != 3 * getSends().size() ||
      getRecvPayloads().size() != 3 * getResults().size())
    return emitOpError() << "needs three payload integers (kind, "
                            "micro-batch, stage) per tensor";
  SmallVector<Type> types(getSends().getTypes());
  llvm::append_range(types, getResults().getTypes());
  for (Type t : types) {
    Type element = cast<ShapedType>(t).getElementType();
    if (!isa<Float32Type, BFloat16Type, Float16Type>(element) &&
        !element.isInteger(32))
      return emitOpError() << "moves f32, bf16, f16 or i32 tensors, not "
                           << t;
  }
  for (ArrayRef<int64_t> payloads : {getSendPayloads(), getRecvPayloads()})
    for (size_t i = 0; i < payloads.size(); i += 3)
      if ((payloads[i] != 0 && payloads[i] != 1) || payloads[i + 1] < 0 ||
          payloads[i + 2] < 0)
        return emitOpError() << "payload " << i / 3
                             << " must be (0 activation or 1 gradient, "
                                "micro-batch >= 0, stage >= 0)";
  return success();
}

/// A section's operands: q [B, L, N*D], k and v [B, L, Nkv*D], the output
/// like q and log-sum-exp `lse` [B, N, L]; L even (two chunks).
template <typename OpT>
static LogicalResult verifySection(OpT op, Value out, Value lse) {
  Operation *o = op.getOperation();
  Value q = op.getQuery(), k = op.getKey(), v = op.getValue();
  if (failed(checkRank(o, "query", q, 3, "[batch, seq, heads*head_dim]")) ||
      failed(checkShape(o, "key", k,
                        {tensorOf(q).getDimSize(0), tensorOf(q).getDimSize(1),
                         int64_t(op.getNumKvHeads() * op.getHeadDim())},
                        "query batch and sequence, num_kv_heads * head_dim")) ||
      failed(checkShape(o, "value", v, tensorOf(k).getShape(), "key shape")) ||
      failed(checkShape(o, "out", out, tensorOf(q).getShape(),
                        "query shape")) ||
      failed(checkShape(o, "lse", lse,
                        {tensorOf(q).getDimSize(0), int64_t(op.getNumHeads()),
                         tensorOf(q).getDimSize(1)},
                        "[batch, num_heads, seq]")))
    return failure();
  if (tensorOf(q).getDimSize(2) != op.getNumHeads() * op.getHeadDim())
    return op.emitOpError() << "query feature size is not num_heads * head_dim";
  // The format prints one type for each of these pairs.
  if (v.getType() != k.getType() || out.getType() != q.getType())
    return op.emitOpError() << "value must have the key's type and out the "
                               "query's";
  if (tensorOf(q).getDimSize(1) % 2 != 0)
    return op.emitOpError() << "local sequence " << tensorOf(q).getDimSize(1)
                            << " is not two equal chunks";
  return success();
}

LogicalResult AttentionSectionOp::verify() {
  if (failed(verifySection(*this, getResult(), getResultLse())))
    return failure();
  if (getMerge().empty())
    return getKvFrom() == 0
               ? success()
               : emitOpError() << "the first step (nothing to merge into) "
                                  "must be the diagonal, kv_from 0";
  if (getMerge().size() != 2 || getMerge()[0].getType() != getType(0) ||
      getMerge()[1].getType() != getType(1))
    return emitOpError() << "merge must be the output and log-sum-exp so far, "
                            "typed like the results";
  return success();
}

LogicalResult AttentionSectionGradOp::verify() {
  if (failed(verifySection(*this, getOut(), getLse())))
    return failure();
  if (getOutGrad().getType() != getQuery().getType())
    return emitOpError() << "out_grad must have the query's type";
  if (!getGrads().empty() &&
      (getGrads().size() != 3 ||
       getGrads()[0].getType() != getQueryGrad().getType() ||
       getGrads()[1].getType() != getKeyGrad().getType() ||
       getGrads()[2].getType() != getValueGrad().getType()))
    return emitOpError() << "grads must be the query, key and value "
                            "gradients so far (or none)";
  return success();
}

//===----------------------------------------------------------------------===//
// Distribution ops
//===----------------------------------------------------------------------===//

LogicalResult ReshardOp::verifySymbolUses(SymbolTableCollection &) {
  DistAttr from = getDist(getInput()), to = getDist(getResult());
  if (!from || !to)
    return emitOpError() << "needs distributed input and result types";
  if (from.getMesh() != to.getMesh())
    return emitOpError() << "reshards from mesh " << from.getMesh()
                         << " to mesh " << to.getMesh();
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getElementType() != out.getElementType() ||
      in.getRank() != out.getRank())
    return emitOpError() << "changes the element type or rank: " << in
                         << " -> " << out;
  ArrayRef<int64_t> a = in.getShape(), b = out.getShape();
  SmallVector<int64_t> ga(a), gb(b);
  if (hasLocalShapes((*this)->getParentOfType<ModuleOp>())) {
    FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(*this, from.getMesh());
    if (failed(mesh) || failed(mesh->verify(from, *this)) ||
        failed(mesh->verify(to, *this)))
      return failure();
    ga = globalShape(a, from, *mesh);
    gb = globalShape(b, to, *mesh);
  }
  if (ga != gb)
    return emitOpError() << "input of global shape " << fmt(ga)
                         << " and result of global shape " << fmt(gb)
                         << " are not one tensor";
  return success();
}

LogicalResult PermuteChunksOp::verify() {
  int64_t rank = tensorOf(getInput()).getRank();
  int64_t d = getDim();
  if (d < 0 || d >= rank)
    return emitOpError() << "dim " << d << " is out of bounds for rank "
                         << rank;
  ArrayRef<int64_t> order = getOrder();
  if (order.size() < 2 || !isPermutation(order))
    return emitOpError() << "order must be a permutation of two or more "
                            "chunks";
  int64_t size = tensorOf(getInput()).getDimSize(d);
  if (size % int64_t(order.size()) != 0)
    return emitOpError() << "dim " << d << " of size " << size
                         << " does not cut into " << order.size()
                         << " chunks";
  return success();
}

//===----------------------------------------------------------------------===//
// Custom assembly
//===----------------------------------------------------------------------===//

// The gradient ops print their gradients' types only when some differ from
// the forward values' types (in sharded IR, a partial input gradient):
//   : tensor<A>, tensor<W>, tensor<G>
//   : tensor<A>, tensor<W>, tensor<G> grads(tensor<A'>, tensor<W'>)

static ParseResult parseGradTypes(OpAsmParser &p,
                                  ArrayRef<Type> defaults,
                                  ArrayRef<Type *> results) {
  if (failed(p.parseOptionalKeyword("grads"))) {
    for (auto [t, r] : llvm::zip(defaults, results))
      *r = t;
    return success();
  }
  if (p.parseLParen())
    return failure();
  for (auto [i, r] : llvm::enumerate(results))
    if ((i && p.parseComma()) || p.parseType(*r))
      return failure();
  return p.parseRParen();
}

static void printGradTypes(OpAsmPrinter &p, ArrayRef<Type> defaults,
                           ArrayRef<Type> results) {
  if (defaults == results)
    return;
  p << " grads(";
  llvm::interleaveComma(results, p);
  p << ")";
}

// layer_norm_grad: the weight and bias gradients default to the weight's type.
static ParseResult parseGradTypes(OpAsmParser &p, Type weight, Type &dw,
                                  Type &db) {
  return parseGradTypes(p, {weight, weight}, {&dw, &db});
}
static void printGradTypes(OpAsmPrinter &p, Operation *, Type weight, Type dw,
                           Type db) {
  printGradTypes(p, {weight, weight}, {dw, db});
}
// rms_norm_grad.
static ParseResult parseGradTypes(OpAsmParser &p, Type weight, Type &dw) {
  return parseGradTypes(p, {weight}, {&dw});
}
static void printGradTypes(OpAsmPrinter &p, Operation *, Type weight,
                           Type dw) {
  printGradTypes(p, {weight}, {dw});
}
// linear_grad: the input and weight gradients; attention_grad: the key and
// value gradients.
static ParseResult parseGradTypes(OpAsmParser &p, Type input, Type weight,
                                  Type &dx, Type &dw) {
  return parseGradTypes(p, {input, weight}, {&dx, &dw});
}
static void printGradTypes(OpAsmPrinter &p, Operation *, Type input,
                           Type weight, Type dx, Type dw) {
  printGradTypes(p, {input, weight}, {dx, dw});
}

// Results typed like operands: nothing to print, the types are copied.
static ParseResult parseSameTypes(OpAsmParser &, Type like, Type &result) {
  result = like;
  return success();
}
static void printSameTypes(OpAsmPrinter &, Operation *, Type, Type) {}
static ParseResult parseSameTypes(OpAsmParser &, TypeRange like,
                                  SmallVectorImpl<Type> &results) {
  llvm::append_range(results, like);
  return success();
}
static void printSameTypes(OpAsmPrinter &, Operation *, TypeRange,
                           TypeRange) {}

// Binary elementwise ops print one type when the operands and the result
// share it, else all three: `tensor<A>, tensor<B> -> tensor<R>`.
static ParseResult parseElementwiseTypes(OpAsmParser &p, Type &lhs, Type &rhs,
                                         Type &result) {
  if (p.parseType(lhs))
    return failure();
  if (failed(p.parseOptionalComma())) {
    rhs = result = lhs;
    return success();
  }
  return failure(p.parseType(rhs) || p.parseArrow() || p.parseType(result));
}

static void printElementwiseTypes(OpAsmPrinter &p, Operation *, Type lhs,
                                  Type rhs, Type result) {
  if (lhs == rhs && rhs == result) {
    p << lhs;
    return;
  }
  p << lhs << ", " << rhs << " -> " << result;
}

bool loom::tfm::isPositionIds(Value ids) {
  while (true) {
    if (auto arg = dyn_cast<BlockArgument>(ids)) {
      auto block = dyn_cast<BlockOp>(arg.getOwner()->getParentOp());
      if (!block)
        return false;
      ids = block.getInputs()[arg.getArgNumber()];
      continue;
    }
    Operation *def = ids.getDefiningOp();
    if (auto block = dyn_cast_or_null<BlockOp>(def)) {
      Operation *yield = block.getBody().front().getTerminator();
      ids = yield->getOperand(cast<OpResult>(ids).getResultNumber());
      continue;
    }
    return isa_and_nonnull<PositionIdsOp>(def);
  }
}

#define GET_OP_CLASSES
#include "dialects/Tfm/TfmOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

/// logits [B, S, E] and a [B, S, k] routing tensor `v` (probs or experts).
static LogicalResult checkRouting(Operation *op, Value logits, StringRef what,
                                  Value v, int64_t topK) {
  if (failed(checkRank(op, "logits", logits, 3, "[batch, seq, experts]")) ||
      failed(checkPositive(op, "top_k", int64_t(topK))))
    return failure();
  int64_t experts = tensorOf(logits).getDimSize(2);
  if (topK > experts)
    return op->emitOpError() << "top_k " << topK << " exceeds the " << experts
                             << " experts";
  SmallVector<int64_t> want = batchSeq(logits);
  want.push_back(topK);
  return checkShape(op, what, v, want, "[batch, seq, top_k] of the logits");
}

LogicalResult MoeRouteOp::verify() {
  return failure(
      failed(checkRouting(*this, getLogits(), "probs", getProbs(), getTopK())) ||
      failed(checkShape(*this, "experts", getExperts(),
                        tensorOf(getProbs()).getShape(), "probs' shape")));
}

LogicalResult MoeRouteGradOp::verify() {
  return failure(
      failed(checkRouting(*this, getLogits(), "experts", getExperts(),
                          getTopK())) ||
      failed(checkShape(*this, "probs_grad", getProbsGrad(),
                        tensorOf(getExperts()).getShape(), "experts' shape")));
}

LogicalResult MoeRouteCountsOp::verify() {
  if (failed(checkRank(*this, "experts", getExperts(), 3,
                       "[batch, seq, top_k]")) ||
      failed(checkPositive(*this, "num_experts", int64_t(getNumExperts()))))
    return failure();
  return checkShape(*this, "counts", getCounts(), {int64_t(getNumExperts())},
                    "[num_experts]");
}

/// The router losses' operands: logits [B, S, E], counts [E], top_k at
/// most E and coefficients that are finite and not negative.
static LogicalResult verifyRouterLoss(Operation *op, Value logits,
                                      Value counts, uint64_t topK, APFloat aux,
                                      APFloat z) {
  if (failed(checkRank(op, "logits", logits, 3, "[batch, seq, experts]")) ||
      failed(checkPositive(op, "top_k", int64_t(topK))))
    return failure();
  int64_t experts = tensorOf(logits).getDimSize(2);
  if (int64_t(topK) > experts)
    return op->emitOpError() << "top_k " << topK << " exceeds the " << experts
                             << " experts";
  if (failed(checkShape(op, "counts", counts, {experts},
                        "[experts] of the logits")))
    return failure();
  for (auto [name, c] : {std::pair<StringRef, APFloat>{"aux_coeff", aux},
                         {"z_coeff", z}}) {
    double v = c.convertToDouble();
    if (!(v >= 0.0) || !std::isfinite(v))
      return op->emitOpError()
             << name << " must be finite and not negative, got " << fmt(v);
  }
  return success();
}

LogicalResult MoeRouterLossOp::verify() {
  return verifyRouterLoss(*this, getLogits(), getCounts(), getTopK(),
                          getAuxCoeff(), getZCoeff());
}
LogicalResult MoeRouterLossGradOp::verify() {
  return verifyRouterLoss(*this, getLogits(), getCounts(), getTopK(),
                          getAuxCoeff(), getZCoeff());
}

/// rows [N, H] of a [B, S, H] tensor `tokens` and a row map [B, S, k].
static LogicalResult checkRows(Operation *op, Value rows, Value tokens,
                               Value rowMap) {
  if (failed(checkRank(op, "rows", rows, 2, "[rows, hidden]")) ||
      failed(checkRank(op, "row map", rowMap, 3, "[batch, seq, top_k]")) ||
      failed(checkRank(op, "tokens", tokens, 3, "[batch, seq, hidden]")) ||
      failed(checkShape(op, "row map", rowMap,
                        {tensorOf(tokens).getDimSize(0),
                         tensorOf(tokens).getDimSize(1),
                         tensorOf(rowMap).getDimSize(2)},
                        "the tokens' batch and seq")) ||
      failed(checkSameElementType(op, "rows", rows, "tokens", tokens)))
    return failure();
  int64_t hidden = tensorOf(tokens).getDimSize(2);
  if (tensorOf(rows).getDimSize(1) != hidden)
    return op->emitOpError() << "rows have " << tensorOf(rows).getDimSize(1)
                             << " features but the tokens " << hidden;
  return success();
}

LogicalResult MoeDropOp::verify() {
  if (failed(checkRank(*this, "experts", getExperts(), 3,
                       "[batch, seq, top_k]")) ||
      failed(checkShape(*this, "probs", getProbs(),
                        tensorOf(getExperts()).getShape(), "experts' shape")) ||
      failed(checkPositive(*this, "num_experts", int64_t(getNumExperts()))))
    return failure();
  if (getCapacity() < 1)
    return emitOpError() << "capacity must be at least 1, got "
                         << getCapacity();
  return success();
}

/// The rows moe_permute writes: one per pair, or with a capacity at most
/// `capacity` per expert (exactly that many with padding).
static int64_t permutedRows(int64_t pairs, int64_t experts,
                            std::optional<uint64_t> capacity, bool pad) {
  if (!capacity)
    return pairs;
  int64_t bound = experts * int64_t(*capacity);
  return pad ? bound : std::min(pairs, bound);
}

LogicalResult MoePermuteOp::verify() {
  if (failed(checkPositive(*this, "num_experts", int64_t(getNumExperts()))) ||
      failed(checkShape(*this, "counts", getCounts(), {int64_t(getNumExperts())},
                        "[num_experts]")) ||
      failed(checkShape(*this, "row map", getRowMap(),
                        tensorOf(getExperts()).getShape(), "experts' shape")) ||
      failed(checkRows(*this, getRows(), getInput(), getRowMap())))
    return failure();
  if (getPadToCapacity() && !getCapacity())
    return emitOpError() << "pad_to_capacity needs a capacity";
  if (getCapacity() && *getCapacity() < 1)
    return emitOpError() << "capacity must be at least 1, got "
                         << *getCapacity();
  int64_t want = permutedRows(tensorOf(getRowMap()).getNumElements(),
                              int64_t(getNumExperts()), getCapacity(),
                              getPadToCapacity());
  if (tensorOf(getRows()).getDimSize(0) != want)
    return emitOpError() << "has " << tensorOf(getRows()).getDimSize(0)
                         << " rows; its pairs and capacity need " << want;
  return success();
}

LogicalResult MoePermuteGradOp::verify() {
  return checkRows(*this, getRowsGrad(), getResult(), getRowMap());
}

LogicalResult MoeUnpermuteOp::verify() {
  if (failed(checkRows(*this, getRows(), getResult(), getRowMap())))
    return failure();
  return checkShape(*this, "probs", getProbs(),
                    tensorOf(getRowMap()).getShape(), "the row map's shape");
}

LogicalResult MoeUnpermuteGradOp::verify() {
  if (failed(checkRows(*this, getRows(), getGrad(), getRowMap())))
    return failure();
  return checkShape(*this, "probs", getProbs(),
                    tensorOf(getRowMap()).getShape(), "the row map's shape");
}

//===----------------------------------------------------------------------===//
// Expert parallelism: counts exchange, dispatch and combine
//===----------------------------------------------------------------------===//

/// The size P of the group of `axis` on `mesh`, or failure (with an error
/// at `op`) when the mesh is missing or has no such axis.
static FailureOr<int64_t> expertGroupSize(Operation *op,
                                          FlatSymbolRefAttr mesh,
                                          StringRef axis) {
  FailureOr<MeshAxesInfo> axes = MeshAxesInfo::lookup(op, mesh);
  if (failed(axes))
    return failure();
  if (!axes->index(axis))
    return op->emitOpError() << "runs over axis " << axis << ", which "
                             << mesh << " does not have";
  return axes->size(axis);
}

LogicalResult MoeGatherCountsOp::verify() {
  FailureOr<int64_t> P = expertGroupSize(*this, getMeshAttr(), getAxis());
  if (failed(P) || failed(checkRank(*this, "counts", getCounts(), 1,
                                    "[experts]")))
    return failure();
  int64_t E = tensorOf(getCounts()).getDimSize(0);
  return checkShape(*this, "result", getResult(), {*P * E},
                    "[ep * experts]: every rank's counts");
}

/// Rows [N, H] and the dispatched rows [M, H] of one dispatch or combine,
/// with every rank's counts [P * E] and (dispatch) this rank's [E / P]:
/// M is P * N per rank, P * P * N in global IR.
static LogicalResult verifyExpertExchange(Operation *op, Value rows,
                                          Value dispatched, Value allCounts,
                                          Value localCounts,
                                          FlatSymbolRefAttr mesh,
                                          StringRef axis) {
  FailureOr<int64_t> P = expertGroupSize(op, mesh, axis);
  if (failed(P) ||
      failed(checkRank(op, "rows", rows, 2, "[rows, features]")) ||
      failed(checkRank(op, "dispatched rows", dispatched, 2,
                       "[rows, features]")) ||
      failed(checkSameElementType(op, "dispatched rows", dispatched, "rows",
                                  rows)) ||
      failed(checkRank(op, "all counts", allCounts, 1, "[ep * experts]")))
    return failure();
  int64_t all = tensorOf(allCounts).getDimSize(0);
  if (all % *P != 0)
    return op->emitOpError() << "all counts has " << all
                             << " entries, not a multiple of the group's "
                             << *P << " ranks";
  bool local = hasLocalShapes(op->getParentOfType<ModuleOp>());
  int64_t E = all / *P, N = tensorOf(rows).getDimSize(0);
  int64_t H = tensorOf(rows).getDimSize(1);
  // Global IR: ep * ep * rows / s, s the ranks the rows are split over
  // (each rank's own tokens' rows under context parallelism), which
  // tfm-localize makes ep * (rows / s).
  int64_t M = tensorOf(dispatched).getDimSize(0);
  bool fits = local ? M == *P * N
                    : M > 0 && M % (*P * *P) == 0 && (*P * *P * N) % M == 0;
  if (!fits || tensorOf(dispatched).getDimSize(1) != H)
    return op->emitOpError()
           << "dispatched rows shape [" << M << ", "
           << tensorOf(dispatched).getDimSize(1) << "] does not match "
           << (local ? "[ep * rows, features]: every rank's rows for this "
                       "rank's experts at most"
                     : "[ep * ep * rows / s, features]: split over ep, s "
                       "the ranks the rows are split over")
           << " (ep " << *P << ", " << N << " rows, " << H << " features)";
  if (localCounts && E % *P != 0)
    return op->emitOpError() << E << " experts do not divide over " << *P
                             << " ranks";
  if (localCounts && failed(checkShape(op, "local counts", localCounts,
                                       {local ? E / *P : E},
                                       local ? "[experts / ep]"
                                             : "[experts]: split over ep")))
    return failure();
  return success();
}

LogicalResult MoeDispatchOp::verify() {
  return verifyExpertExchange(*this, getRows(), getDispatched(),
                              getAllCounts(), getLocalCounts(), getMeshAttr(),
                              getAxis());
}

LogicalResult MoeCombineOp::verify() {
  return verifyExpertExchange(*this, getRows(), getDispatched(),
                              getAllCounts(), Value(), getMeshAttr(),
                              getAxis());
}

/// input [M, K], weight [E, N, K], counts [E], out [M, N].
static LogicalResult verifyGrouped(Operation *op, Value input, Value weight,
                                   Value counts, Value out) {
  if (failed(checkRank(op, "input", input, 2, "[rows, in_features]")) ||
      failed(checkRank(op, "weight", weight, 3,
                       "[experts, out_features, in_features]")) ||
      failed(checkSameElementType(op, "weight", weight, "input", input)) ||
      failed(checkSameElementType(op, "output", out, "input", input)))
    return failure();
  ArrayRef<int64_t> w = tensorOf(weight).getShape();
  if (failed(checkShape(op, "counts", counts, {w[0]}, "[experts] of the weight")))
    return failure();
  if (tensorOf(input).getDimSize(1) != w[2])
    return op->emitOpError() << "input has " << tensorOf(input).getDimSize(1)
                             << " features but the weight takes " << w[2];
  return checkShape(op, "output", out, {tensorOf(input).getDimSize(0), w[1]},
                    "[rows, out_features]");
}

LogicalResult GroupedLinearOp::verify() {
  return verifyGrouped(*this, getInput(), getWeight(), getCounts(),
                       getResult());
}
LogicalResult GroupedLinearGradOp::verify() {
  return verifyGrouped(*this, getInput(), getWeight(), getCounts(), getGrad());
}

LogicalResult SigmoidGateOp::verify() {
  SmallVector<int64_t> want(tensorOf(getInput()).getShape());
  if (want.empty())
    return emitOpError() << "input must have a feature dim";
  want.back() = 1;
  if (failed(checkSameElementType(*this, "gate", getGate(), "input",
                                  getInput())))
    return failure();
  return checkShape(*this, "gate", getGate(), want,
                    "the input's shape with one feature");
}

bool loom::tfm::overwritableAt(Value v, Operation *op, Operation *except) {
  Operation *def = v.getDefiningOp();
  Block *block = op->getBlock();
  if (!def || def->getBlock() != block || !def->isBeforeInBlock(op))
    return false;
  return llvm::all_of(v.getUsers(), [&](Operation *user) {
    return user == op || user == except ||
           (user->getBlock() == block && user->isBeforeInBlock(op));
  });
}
