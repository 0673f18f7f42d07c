//===- TfmAttrs.cpp - Transformer dialect attributes ------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/ChunkOrder.h"
#include "dialects/Tfm/TfmDialect.h"
#include "rankgen/ParallelLayout.h"
#include "rankgen/Plan.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace mlir;
using namespace loom::tfm;

#define GET_ATTRDEF_CLASSES
#include "dialects/Tfm/TfmAttrs.cpp.inc"

void TfmDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Tfm/TfmAttrs.cpp.inc"
      >();
}

static loom::rankgen::ParallelConfig
makeConfig(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep,
           int64_t etp, DenseI64ArrayAttr hierarchicalCpSizes,
           StringRef order) {
  loom::rankgen::ParallelConfig config;
  config.tp = tp;
  config.cp = cp;
  config.dp = dp;
  config.pp = pp;
  config.ep = ep;
  config.etp = etp;
  config.order = order.str();
  if (hierarchicalCpSizes)
    config.hierarchicalCpSizes.assign(hierarchicalCpSizes.asArrayRef().begin(),
                                      hierarchicalCpSizes.asArrayRef().end());
  return config;
}

loom::rankgen::ParallelConfig PlanAttr::toParallelConfig() const {
  return makeConfig(getTp(), getCp(), getDp(), getPp(), getEp(), getEtp(),
                    getHierarchicalCpSizes(), getOrder());
}

static BoolAttr boolOrNull(Builder &b, bool value) {
  return value ? b.getBoolAttr(true) : BoolAttr();
}
static bool isTrue(BoolAttr a) { return a && a.getValue(); }

/// Calls `make` with the context and the attribute's parameters for `plan`.
template <typename Make>
static auto withParams(MLIRContext *ctx, const loom::rankgen::Plan &plan,
                       Make make) {
  Builder b(ctx);
  const loom::rankgen::ParallelConfig &s = plan.sizes;
  ArrayAttr commTypes;
  if (!plan.cpCommTypes.empty()) {
    SmallVector<Attribute> types;
    for (loom::rankgen::CpCommType t : plan.cpCommTypes)
      types.push_back(b.getStringAttr(loom::rankgen::cpCommTypeName(t)));
    commTypes = b.getArrayAttr(types);
  }
  DenseI64ArrayAttr hierarchical;
  if (!s.hierarchicalCpSizes.empty())
    hierarchical = b.getDenseI64ArrayAttr(s.hierarchicalCpSizes);
  return make(ctx, s.tp, s.cp, s.dp, s.pp, plan.vpp, s.ep, s.etp,
              boolOrNull(b, plan.sequenceParallel), commTypes, hierarchical,
              StringRef(s.order), plan.numMicrobatches,
              plan.microbatchGroupSize,
              StringRef(loom::rankgen::p2pModeName(plan.p2pMode)),
              plan.firstStageLayers.value_or(-1),
              plan.lastStageLayers.value_or(-1),
              boolOrNull(b, plan.accountForEmbedding),
              boolOrNull(b, plan.accountForLoss),
              StringRef(plan.pipelineLayout), plan.makeVocabSizeDivisibleBy);
}

PlanAttr PlanAttr::get(MLIRContext *ctx, const loom::rankgen::Plan &plan) {
  return withParams(ctx, plan, [](auto... params) {
    return Base::get(params...);
  });
}

PlanAttr PlanAttr::getChecked(function_ref<InFlightDiagnostic()> emitError,
                              MLIRContext *ctx,
                              const loom::rankgen::Plan &plan) {
  return withParams(ctx, plan, [&](auto... params) {
    return Base::getChecked(emitError, params...);
  });
}

loom::rankgen::Plan PlanAttr::toPlan() const {
  loom::rankgen::Plan plan;
  plan.sizes = toParallelConfig();
  plan.vpp = getVpp();
  plan.sequenceParallel = isSequenceParallel();
  if (ArrayAttr types = getCpCommType())
    for (Attribute t : types)
      // The verifier admits known names only.
      plan.cpCommTypes.push_back(*loom::rankgen::parseCpCommType(
          llvm::cast<StringAttr>(t).getValue().str()));
  if (getFirstStageLayers() >= 0)
    plan.firstStageLayers = getFirstStageLayers();
  if (getLastStageLayers() >= 0)
    plan.lastStageLayers = getLastStageLayers();
  plan.accountForEmbedding = isTrue(getAccountForEmbedding());
  plan.accountForLoss = isTrue(getAccountForLoss());
  plan.pipelineLayout = getPipelineLayout().str();
  plan.numMicrobatches = getNumMicrobatches();
  plan.microbatchGroupSize = getMicrobatchGroupSize();
  plan.p2pMode = *loom::rankgen::parseP2PMode(getP2pMode().str());
  plan.makeVocabSizeDivisibleBy = getMakeVocabSizeDivisibleBy();
  return plan;
}

LogicalResult PlanAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t tp, int64_t cp,
    int64_t dp, int64_t pp, int64_t vpp, int64_t ep, int64_t etp,
    BoolAttr sequenceParallel, ArrayAttr cpCommType,
    DenseI64ArrayAttr hierarchicalCpSizes, StringRef order,
    int64_t numMicrobatches, int64_t microbatchGroupSize, StringRef p2pMode,
    int64_t firstStageLayers, int64_t lastStageLayers,
    BoolAttr accountForEmbedding, BoolAttr accountForLoss,
    StringRef pipelineLayout, int64_t makeVocabSizeDivisibleBy) {
  for (auto [name, size] : {std::pair<StringRef, int64_t>{"tp", tp},
                            {"cp", cp},
                            {"dp", dp},
                            {"pp", pp},
                            {"vpp", vpp},
                            {"ep", ep},
                            {"num_microbatches", numMicrobatches},
                            {"make_vocab_size_divisible_by",
                             makeVocabSizeDivisibleBy}})
    if (size < 1)
      return emitError() << "plan " << name << " " << size
                         << " must be at least 1";
  if (etp < 0)
    return emitError() << "plan etp " << etp
                       << " must be at least 1 (or 0 for tp)";
  if (microbatchGroupSize < 0)
    return emitError() << "plan microbatch_group_size " << microbatchGroupSize
                       << " must be at least 1 (or 0 for pp)";
  for (auto [name, layers] :
       {std::pair<StringRef, int64_t>{"first_stage_layers", firstStageLayers},
        {"last_stage_layers", lastStageLayers}})
    if (layers < -1)
      return emitError() << "plan " << name << " " << layers
                         << " must be at least 0 (or -1 for none)";
  if (vpp > 1 && pp == 1)
    return emitError() << "plan vpp " << vpp
                       << " needs pipeline parallelism (pp > 1)";
  if (auto mode = loom::rankgen::parseP2PMode(p2pMode.str()); !mode)
    return emitError() << "plan p2p_mode: " << mode.error();

  bool hierarchical = false;
  if (cpCommType) {
    if (cpCommType.empty())
      return emitError() << "plan cp_comm_type is empty";
    for (Attribute a : cpCommType) {
      auto s = llvm::dyn_cast<StringAttr>(a);
      // Only the canonical names are kept in the IR (all_gather is read as
      // allgather before).
      auto type = s ? loom::rankgen::parseCpCommType(s.getValue().str())
                    : loom::rankgen::Result<loom::rankgen::CpCommType>(
                          loom::rankgen::fail("not a string"));
      if (!type || s.getValue() != loom::rankgen::cpCommTypeName(*type))
        return emitError() << "plan cp_comm_type " << a
                           << " is not one of \"p2p\", \"a2a\", "
                              "\"allgather\", \"a2a+p2p\"";
      hierarchical |= *type == loom::rankgen::CpCommType::A2AP2P;
    }
  }
  if (hierarchical && !hierarchicalCpSizes)
    return emitError() << "plan cp_comm_type \"a2a+p2p\" needs "
                          "hierarchical_cp_sizes";

  // The rank generator checks the order, the hierarchical sizes and the
  // expert world, with the same messages loom-ranks prints.
  auto layout = loom::rankgen::ParallelLayout::create(
      makeConfig(tp, cp, dp, pp, ep, etp, hierarchicalCpSizes, order));
  if (!layout)
    return emitError() << "plan: " << layout.error();
  return success();
}

int64_t PlanAttr::getSequenceMultiple() const {
  return toPlan().sequenceMultiple();
}

loom::rankgen::CpCommType PlanAttr::getCpCommTypeOfLayer(int64_t layer) const {
  return toPlan().cpCommTypeOfLayer(layer);
}

//===----------------------------------------------------------------------===//
// DistAttr
//===----------------------------------------------------------------------===//

namespace {
/// The storage parameters of a distribution, in canonical form: chunk
/// orders coarsest, trailing whole dims in natural order left out, partial
/// axes sorted, sum when nothing is partial.
struct DistParams {
  ArrayAttr split, chunks, partial;
  mesh::ReductionKind reduction;
};
} // namespace

static DistParams canonicalParams(MLIRContext *ctx, ArrayRef<DimDist> dims,
                                  ArrayRef<StringRef> partialAxes,
                                  mesh::ReductionKind reduction) {
  SmallVector<DimDist> canonical(dims);
  for (DimDist &d : canonical)
    d.chunks = isPermutation(d.chunks) ? canonicalChunkOrder(d.chunks)
                                       : d.chunks; // the verifier says why
  while (!canonical.empty() && canonical.back().isWhole() &&
         canonical.back().isNatural())
    canonical.pop_back();
  Builder b(ctx);
  SmallVector<Attribute> split, chunks;
  for (const DimDist &d : canonical) {
    split.push_back(b.getStrArrayAttr(d.axes));
    chunks.push_back(b.getDenseI64ArrayAttr(d.chunks));
  }
  SmallVector<StringRef> partial(partialAxes);
  llvm::sort(partial);
  if (partial.empty())
    reduction = mesh::ReductionKind::Sum;
  return {b.getArrayAttr(split), b.getArrayAttr(chunks),
          b.getStrArrayAttr(partial), reduction};
}

DistAttr DistAttr::get(MLIRContext *ctx, FlatSymbolRefAttr mesh,
                       ArrayRef<DimDist> dims, ArrayRef<StringRef> partialAxes,
                       mesh::ReductionKind reduction) {
  DistParams p = canonicalParams(ctx, dims, partialAxes, reduction);
  return Base::get(ctx, mesh, p.split, p.chunks, p.partial, p.reduction);
}

DistAttr DistAttr::replicated(FlatSymbolRefAttr mesh) {
  return get(mesh.getContext(), mesh, {}, {}, mesh::ReductionKind::Sum);
}

SmallVector<StringRef> DistAttr::getAxes(int64_t d) const {
  SmallVector<StringRef> axes;
  if (d < getNumDims())
    for (Attribute a : llvm::cast<ArrayAttr>(getSplit()[d]))
      axes.push_back(llvm::cast<StringAttr>(a).getValue());
  return axes;
}

ArrayRef<int64_t> DistAttr::getChunkOrder(int64_t d) const {
  if (d >= getNumDims())
    return {};
  return llvm::cast<DenseI64ArrayAttr>(getChunks()[d]).asArrayRef();
}

DimDist DistAttr::getDim(int64_t d) const {
  return DimDist{getAxes(d), SmallVector<int64_t>(getChunkOrder(d))};
}

SmallVector<DimDist> DistAttr::getDims(int64_t rank) const {
  SmallVector<DimDist> dims;
  for (int64_t d = 0; d < std::max(rank, getNumDims()); ++d)
    dims.push_back(getDim(d));
  return dims;
}

SmallVector<StringRef> DistAttr::getPartialAxes() const {
  SmallVector<StringRef> axes;
  for (Attribute a : getPartial())
    axes.push_back(llvm::cast<StringAttr>(a).getValue());
  return axes;
}

SmallVector<StringRef> DistAttr::getUsedAxes() const {
  SmallVector<StringRef> axes;
  for (int64_t d = 0; d < getNumDims(); ++d)
    llvm::append_range(axes, getAxes(d));
  llvm::append_range(axes, getPartialAxes());
  return axes;
}

std::optional<int64_t> DistAttr::getDimOfAxis(StringRef axis) const {
  for (int64_t d = 0; d < getNumDims(); ++d)
    if (llvm::is_contained(getAxes(d), axis))
      return d;
  return std::nullopt;
}

DistAttr DistAttr::withDim(int64_t d, const DimDist &dim) const {
  SmallVector<DimDist> dims = getDims(d + 1);
  dims[d] = dim;
  return get(getContext(), getMesh(), dims, getPartialAxes(), getReduction());
}

DistAttr DistAttr::withAxes(int64_t d, ArrayRef<StringRef> axes) const {
  DimDist dim = getDim(d);
  dim.axes.assign(axes.begin(), axes.end());
  return withDim(d, dim);
}

DistAttr DistAttr::withPartial(ArrayRef<StringRef> axes,
                               mesh::ReductionKind reduction) const {
  return get(getContext(), getMesh(), getDims(getNumDims()), axes, reduction);
}

// The conditions under which the llama3 formula is defined: positive
// scales, and a non-empty band between the two wavelength thresholds (the
// smooth factor divides by high_freq_factor - low_freq_factor). The runtime
// computes in f32, so the conditions hold for the values rounded to f32.
LogicalResult
Llama3RopeScalingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                              APFloat factorAttr, APFloat lowFreqFactorAttr,
                              APFloat highFreqFactorAttr,
                              int64_t originalMaxPositionEmbeddings) {
  double factor = factorAttr.convertToDouble(),
         low = lowFreqFactorAttr.convertToDouble(),
         high = highFreqFactorAttr.convertToDouble();
  // Numbers as a person writes them: 0.5, 1e-05.
  auto fmt = [](double v) {
    return llvm::formatv("{0}", llvm::format("%g", v)).str();
  };
  for (auto [name, value] : {std::pair<StringRef, double>{"factor", factor},
                             {"low_freq_factor", low},
                             {"high_freq_factor", high}})
    if (!(float(value) > 0.0f) || !std::isfinite(float(value)))
      return emitError() << "llama3 rope scaling " << name << " " << fmt(value)
                         << " must be a positive f32";
  if (!(float(high) > float(low)))
    return emitError() << "llama3 rope scaling high_freq_factor " << fmt(high)
                       << " must exceed low_freq_factor " << fmt(low);
  if (originalMaxPositionEmbeddings <= 0)
    return emitError() << "llama3 rope scaling "
                          "original_max_position_embeddings "
                       << originalMaxPositionEmbeddings << " must be positive";
  return success();
}

LogicalResult DistAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               FlatSymbolRefAttr mesh, ArrayAttr split,
                               ArrayAttr chunks, ArrayAttr partial,
                               mesh::ReductionKind reduction) {
  if (!mesh)
    return emitError() << "a distribution needs a mesh";
  if (split.size() != chunks.size())
    return emitError() << "a distribution needs one chunk order per dim";
  llvm::StringSet<> used;
  auto use = [&](Attribute a) -> LogicalResult {
    auto name = llvm::dyn_cast<StringAttr>(a);
    if (!name || name.getValue().empty())
      return emitError() << "mesh axis " << a << " is not a name";
    if (!used.insert(name.getValue()).second)
      return emitError() << "mesh axis " << name.getValue()
                         << " is used twice";
    return success();
  };
  for (auto [d, pair] : llvm::enumerate(llvm::zip(split, chunks))) {
    auto axes = llvm::dyn_cast<ArrayAttr>(std::get<0>(pair));
    auto order = llvm::dyn_cast<DenseI64ArrayAttr>(std::get<1>(pair));
    if (!axes || !order)
      return emitError() << "dim " << d << " of a distribution is malformed";
    for (Attribute a : axes)
      if (failed(use(a)))
        return failure();
    if (!isPermutation(order.asArrayRef()))
      return emitError() << "chunk order of dim " << d
                         << " is not a permutation";
    if (ArrayRef<int64_t>(canonicalChunkOrder(order.asArrayRef())) !=
        order.asArrayRef())
      return emitError() << "chunk order of dim " << d
                         << " is not in its coarsest form";
    if (d + 1 == split.size() && axes.empty() && order.empty())
      return emitError() << "a distribution lists trailing whole dims";
  }
  for (Attribute a : partial)
    if (failed(use(a)))
      return failure();
  if (!partial.empty() && reduction != mesh::ReductionKind::Sum &&
      reduction != mesh::ReductionKind::Max)
    return emitError() << "partial values are sums or maxima, not "
                       << mesh::stringifyReductionKind(reduction);
  return success();
}

LogicalResult
DistAttr::verifyEncoding(ArrayRef<int64_t> shape, Type,
                         function_ref<InFlightDiagnostic()> emitError) const {
  if (getNumDims() > int64_t(shape.size()))
    return emitError() << "distribution of " << getNumDims()
                       << " dims on a tensor of rank " << shape.size();
  return success();
}

/// `[a, b]` or `[]`, then ` zigzag(n)` or ` chunks(i, j, ...)`.
static ParseResult parseDimDist(AsmParser &p, DimDist &dim) {
  if (p.parseLSquare())
    return failure();
  if (failed(p.parseOptionalRSquare())) {
    do {
      StringRef axis;
      if (p.parseKeyword(&axis))
        return failure();
      dim.axes.push_back(axis);
    } while (succeeded(p.parseOptionalComma()));
    if (p.parseRSquare())
      return failure();
  }
  if (succeeded(p.parseOptionalKeyword("zigzag"))) {
    int64_t n = 0;
    SMLoc loc = p.getCurrentLocation();
    if (p.parseLParen() || p.parseInteger(n) || p.parseRParen())
      return failure();
    if (n < 1)
      return p.emitError(loc) << "zigzag needs at least one pair of chunks";
    dim.chunks = zigzagOrder(n);
  } else if (succeeded(p.parseOptionalKeyword("chunks"))) {
    if (p.parseLParen())
      return failure();
    do {
      int64_t i = 0;
      if (p.parseInteger(i))
        return failure();
      dim.chunks.push_back(i);
    } while (succeeded(p.parseOptionalComma()));
    if (p.parseRParen())
      return failure();
  }
  return success();
}

Attribute DistAttr::parse(AsmParser &p, Type) {
  FlatSymbolRefAttr mesh;
  SmallVector<DimDist> dims;
  SmallVector<StringRef> partial;
  mesh::ReductionKind reduction = mesh::ReductionKind::Sum;
  SMLoc loc = p.getCurrentLocation();
  if (p.parseLess() || p.parseAttribute(mesh))
    return {};
  bool sawDims = false;
  while (succeeded(p.parseOptionalComma())) {
    if (succeeded(p.parseOptionalKeyword("partial"))) {
      StringRef kind;
      SMLoc loc = p.getCurrentLocation();
      if (p.parseEqual() || p.parseKeyword(&kind))
        return {};
      std::optional<mesh::ReductionKind> k = mesh::symbolizeReductionKind(kind);
      if (!k) {
        p.emitError(loc) << "unknown reduction '" << kind << "'";
        return {};
      }
      reduction = *k;
      if (p.parseLSquare())
        return {};
      do {
        StringRef axis;
        if (p.parseKeyword(&axis))
          return {};
        partial.push_back(axis);
      } while (succeeded(p.parseOptionalComma()));
      if (p.parseRSquare())
        return {};
      break;
    }
    if (sawDims) {
      p.emitError(p.getCurrentLocation(), "expected 'partial'");
      return {};
    }
    sawDims = true;
    if (p.parseLSquare())
      return {};
    if (failed(p.parseOptionalRSquare())) {
      do {
        DimDist dim;
        if (parseDimDist(p, dim))
          return {};
        dims.push_back(std::move(dim));
      } while (succeeded(p.parseOptionalComma()));
      if (p.parseRSquare())
        return {};
    }
  }
  if (p.parseGreater())
    return {};
  DistParams params = canonicalParams(p.getContext(), dims, partial, reduction);
  return Base::getChecked([&] { return p.emitError(loc); }, p.getContext(),
                          mesh, params.split, params.chunks, params.partial,
                          params.reduction);
}

void DistAttr::print(AsmPrinter &p) const {
  p << "<" << getMesh();
  if (getNumDims()) {
    p << ", [";
    for (int64_t d = 0; d < getNumDims(); ++d) {
      if (d)
        p << ", ";
      p << "[";
      llvm::interleaveComma(getAxes(d), p);
      p << "]";
      ArrayRef<int64_t> order = getChunkOrder(d);
      if (std::optional<int64_t> n = zigzagPairs(order))
        p << " zigzag(" << *n << ")";
      else if (!order.empty()) {
        p << " chunks(";
        llvm::interleaveComma(order, p);
        p << ")";
      }
    }
    p << "]";
  }
  if (isPartial()) {
    p << ", partial = " << mesh::stringifyReductionKind(getReduction()) << "[";
    llvm::interleaveComma(getPartialAxes(), p);
    p << "]";
  }
  p << ">";
}
