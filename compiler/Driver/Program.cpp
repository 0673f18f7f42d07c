//===- Program.cpp - What the compiled program is, read off its IR -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Program.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"
#include "rankgen/RankGenerator.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace loom;
using namespace loom::driver;
using llvm::Error;
using llvm::Expected;
using llvm::Twine;

Error loom::driver::fail(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

Error loom::driver::writeFileAtomically(StringRef path, StringRef contents,
                                        bool executable) {
  std::string tmp = (path + ".tmp").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + tmp + "': " + ec.message());
    os << contents;
  }
  if (executable)
    llvm::sys::fs::setPermissions(tmp, llvm::sys::fs::perms(0755));
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path))
    return fail("cannot write '" + path + "': " + ec.message());
  return Error::success();
}

int64_t loom::driver::bytesOf(Type shaped) {
  auto t = cast<ShapedType>(shaped);
  return t.getNumElements() * int64_t(t.getElementTypeBitWidth() / 8);
}

loomrt_dtype loom::driver::dtypeOf(Type t) {
  if (t.isF32())
    return LOOMRT_F32;
  if (t.isBF16())
    return LOOMRT_BF16;
  return LOOMRT_F16;
}

ModelInfo loom::driver::readModel(ModuleOp module, RankedTensorType tokens) {
  ModelInfo m;
  m.microBatchSize = tokens.getDimSize(0);
  m.seqLength = m.paddedSeqLength = tokens.getDimSize(1);
  m.attrs = module->getAttrOfType<DictionaryAttr>(tfm::kModelAttrName);
  if (!m.attrs)
    return m;
  if (auto p = m.attrs.getAs<IntegerAttr>("padded_seq_length"))
    m.paddedSeqLength = p.getInt();
  if (auto u = m.attrs.getAs<IntegerAttr>("unpadded_vocab_size"))
    m.unpaddedVocab = u.getInt();
  if (auto f = m.attrs.getAs<StringAttr>("family"))
    m.family = f.getValue().str();
  if (auto h = m.attrs.getAs<IntegerAttr>("hidden_size"))
    m.hidden = h.getInt();
  if (auto v = m.attrs.getAs<IntegerAttr>("vocab_size"))
    m.vocab = v.getInt();
  return m;
}

int64_t ParamInfo::localBytes() const {
  int64_t elements = 1;
  for (auto [d, size] : llvm::enumerate(shape)) {
    int64_t part = size;
    if (placement.splitDim && int64_t(d) == *placement.splitDim)
      part /= placement.parts;
    if (placement.then && int64_t(d) == placement.then->splitDim)
      part /= placement.then->parts;
    elements *= part;
  }
  return elements * int64_t(elementType.getIntOrFloatBitWidth() / 8);
}

namespace {

Expected<Placement> placementOf(StringRef name, tfm::DistAttr dist,
                                ModuleOp module) {
  // A whole parameter names the tensor-parallel group (any group would do).
  Placement p{rankgen::dimName(rankgen::Dim::TP)};
  if (!dist || dist.isReplicated())
    return p;
  auto unplaceable = [&](StringRef why) {
    return fail("@" + name + " is " + tfm::describe(dist) +
                ", which the manifest cannot place: " + why);
  };
  if (dist.isPartial())
    return unplaceable("parameters are whole values");
  FailureOr<tfm::MeshAxesInfo> mesh =
      tfm::MeshAxesInfo::lookup(module, dist.getMesh());
  if (failed(mesh))
    return fail("@" + name + ": no mesh " + dist.getMesh().getValue());
  for (int64_t d = 0; d < dist.getNumDims(); ++d) {
    tfm::DimDist dim = dist.getDim(d);
    if (!dim.isNatural())
      return unplaceable("its chunks are reordered");
    if (dim.isWhole())
      continue;
    if (p.splitDim) {
      if (p.then)
        return unplaceable("it is split on three dims");
      p.then = Placement::Then{mesh->groupKind(dim.axes), d,
                               mesh->product(dim.axes)};
      continue;
    }
    p.splitDim = d;
    p.parts = mesh->product(dim.axes);
    p.group = mesh->groupKind(dim.axes);
  }
  return p;
}

/// The pp ranks whose step functions read each parameter, in the functions
/// of their blocks (each walked once per rank, not once per micro-batch's
/// call).
llvm::StringMap<std::set<int64_t>> paramStages(ModuleOp module) {
  llvm::StringMap<std::set<int64_t>> stages;
  SymbolTable symbols(module);
  std::set<std::pair<Operation *, int64_t>> walked;
  std::function<void(func::FuncOp, int64_t)> reads = [&](func::FuncOp f,
                                                         int64_t r) {
    if (!walked.insert({f.getOperation(), r}).second)
      return;
    f.walk([&](Operation *op) {
      if (auto get = dyn_cast<tfm::GetParamOp>(op))
        stages[get.getName()].insert(r);
      else if (auto call = dyn_cast<func::CallOp>(op))
        if (auto callee = symbols.lookup<func::FuncOp>(call.getCallee()))
          reads(callee, r);
    });
  };
  for (auto f : module.getOps<func::FuncOp>())
    if (auto r = f->getAttrOfType<IntegerAttr>(tfm::kPipelineRankAttrName))
      reads(f, r.getInt());
  return stages;
}

} // namespace

Expected<SmallVector<ParamInfo, 0>>
loom::driver::describeParams(ModuleOp module, int64_t pp) {
  llvm::StringMap<tfm::DistAttr> dists;
  module.walk([&](tfm::GetParamOp get) {
    dists[get.getName()] = tfm::getDist(get.getResult());
  });
  llvm::StringMap<std::set<int64_t>> stages;
  if (pp > 1)
    stages = paramStages(module);
  SmallVector<ParamInfo, 0> params;
  for (auto p : module.getOps<tfm::ParamOp>()) {
    ParamInfo &info = params.emplace_back();
    info.name = p.getSymName().str();
    info.shape.assign(p.getTensorType().getShape().begin(),
                      p.getTensorType().getShape().end());
    info.elementType = p.getTensorType().getElementType();
    info.init = p.getInit();
    info.std = p.getStd() ? p.getStd()->convertToDouble() : 0.0;
    Expected<Placement> placement =
        placementOf(info.name, dists.lookup(info.name), module);
    if (!placement)
      return placement.takeError();
    info.placement = *placement;
    info.ppRanks = stages.lookup(info.name);
  }
  return params;
}

std::optional<int64_t> loom::driver::savedActivationBytes(func::FuncOp func) {
  std::optional<int64_t> total;
  for (auto block : func.getBody().front().getOps<tfm::BlockOp>()) {
    if (block.getBackward()) {
      total = total.value_or(0);
      continue;
    }
    for (Value r : block.getResults()) {
      bool saved = llvm::any_of(r.getUsers(), [](Operation *user) {
        auto b = dyn_cast<tfm::BlockOp>(user);
        return b && b.getBackward();
      });
      auto type = dyn_cast<RankedTensorType>(r.getType());
      if (saved && type)
        total = total.value_or(0) + bytesOf(type);
    }
  }
  return total;
}

FailureOr<manifest::Entry> loom::driver::describeEntry(func::FuncOp f) {
  manifest::Entry entry;
  auto arg = [&](manifest::ArgKind kind, StringRef name = "") {
    manifest::EntryArg &a = entry.args.emplace_back();
    a.kind = kind;
    a.name = name.str();
    return &a;
  };
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    if (auto input = f.getArgAttrOfType<StringAttr>(i, tfm::kInputArgAttrName)) {
      manifest::ArgKind kind = manifest::parseArgKind(input.getValue().str());
      manifest::EntryArg *a =
          arg(kind, kind == manifest::ArgKind::Other ? input.getValue() : "");
      a->stacked = f.getArgAttr(i, tfm::kMicrobatchesAttrName) != nullptr;
      continue;
    }
    if (auto group = f.getArgAttrOfType<StringAttr>(i, tfm::kCommArgAttrName)) {
      arg(manifest::ArgKind::Comm, group.getValue());
      continue;
    }
    auto name = f.getArgAttrOfType<StringAttr>(i, tfm::kParamArgAttrName);
    if (!name)
      return f.emitError() << "argument " << i << " of @" << f.getName()
                           << " is neither a batch input (tfm.input), a "
                              "parameter nor a communicator";
    arg(manifest::ArgKind::Param, name.getValue());
  }
  // The loss (a pipelined step's last stage: every micro-batch's, stacked),
  // then the gradients.
  bool pipelined = f->hasAttr(tfm::kPipelineRankAttrName);
  // The chunk whose tfm.grads_ready completes each returned gradient.
  DenseMap<Value, int64_t> readyChunk;
  f.walk([&](tfm::GradsReadyOp ready) {
    for (Value g : ready.getGrads())
      readyChunk[g] = int64_t(ready.getChunk());
  });
  Operation *ret = f.getBody().front().getTerminator();
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    if (i == 0 && !pipelined) {
      arg(manifest::ArgKind::Loss);
      continue;
    }
    if (f.getResultAttr(i, tfm::kMicrobatchesAttrName)) {
      arg(manifest::ArgKind::Loss)->stacked = true;
      continue;
    }
    auto name = f.getResultAttrOfType<StringAttr>(i, tfm::kGradResultAttrName);
    if (!name)
      return f.emitError() << "result " << i << " of @" << f.getName()
                           << " is not a parameter gradient";
    manifest::EntryArg *grad = arg(manifest::ArgKind::Grad, name.getValue());
    // A pipelined step sums micro-batches in f32 whatever the parameter's
    // dtype: the buffer the rank program provides must say so.
    if (pipelined)
      grad->dtype = dtypeOf(
          cast<ShapedType>(f.getResultTypes()[i]).getElementType());
    if (auto it = readyChunk.find(ret->getOperand(i)); it != readyChunk.end())
      grad->chunk = it->second;
  }
  entry.symbol =
      f->getAttrOfType<StringAttr>(tfm::kEntryAttrName).getValue().str();
  return entry;
}

SmallVector<func::FuncOp> loom::driver::entryPoints(ModuleOp module) {
  SmallVector<func::FuncOp> entries;
  for (auto f : module.getOps<func::FuncOp>())
    if (f->hasAttr(tfm::kEntryAttrName))
      entries.push_back(f);
  return entries;
}

std::optional<unsigned> loom::driver::inputArgument(func::FuncOp f, StringRef kind) {
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (auto a = f.getArgAttrOfType<StringAttr>(i, tfm::kInputArgAttrName);
        a && a.getValue() == kind)
      return i;
  return std::nullopt;
}

Expected<func::FuncOp> loom::driver::forwardEntry(ModuleOp module) {
  for (func::FuncOp f : entryPoints(module)) {
    if (inputArgument(f, "grad_scale"))
      continue;
    for (StringRef kind : {"tokens", "labels", "loss_mask"})
      if (!inputArgument(f, kind))
        return fail("entry @" + f.getName() + " has no argument marked " +
                    tfm::kInputArgAttrName + " = \"" + kind +
                    "\" (import the model with loom-import)");
    if (f.getNumArguments() != 3 || f.getNumResults() != 1)
      return fail("entry @" + f.getName() +
                  " must take (tokens, labels, loss_mask) and return the "
                  "loss");
    auto tokens = dyn_cast<RankedTensorType>(
        f.getArgumentTypes()[*inputArgument(f, "tokens")]);
    if (!tokens || tokens.getRank() != 2)
      return fail("the tokens of @" + f.getName() +
                  " must be a [batch, seq] tensor");
    return f;
  }
  return fail("the module has no forward entry point (a function with " +
              Twine(tfm::kEntryAttrName) +
              "; import a model with loom-import)");
}

Expected<GradientGroups>
loom::driver::gradientGroups(ArrayRef<func::FuncOp> entries) {
  GradientGroups groups;
  std::string first;
  for (func::FuncOp f : entries)
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto name = f.getResultAttrOfType<StringAttr>(i, tfm::kGradResultAttrName);
      if (!name)
        continue;
      auto g = f.getResultAttrOfType<StringAttr>(i, tfm::kGradGroupAttrName);
      if (!g)
        return fail("the gradient of " + name.getValue() + " in @" +
                    f.getName() +
                    " names no group to sum over (tfm-mark-gradient-groups)");
      if (g.getValue().starts_with("expert:")) {
        groups.others[name.getValue()] = g.getValue().str();
      } else if (groups.dense.empty()) {
        groups.dense = g.getValue().str();
        first = name.getValue().str();
      } else if (g.getValue() != groups.dense) {
        return fail("the gradient of " + name.getValue() + " is summed over " +
                    g.getValue() + " but that of " + first + " over " +
                    groups.dense +
                    "; the rank program sums the dense gradients over one "
                    "group");
      }
    }
  if (groups.dense.empty())
    groups.dense = rankgen::dimName(rankgen::Dim::DP);
  return groups;
}
