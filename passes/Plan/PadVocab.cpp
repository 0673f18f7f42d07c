//===- PadVocab.cpp - Vocabulary padded to a multiple of tp ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by
// x tp so that vocab-parallel tables split evenly. Loom does it here, when
// the plan's tp is known, on the two tables that hold a row per token (the
// embedding and the output projection) and the values their rows flow into
// (the logits), and keeps the padding out of the softmax by marking every
// cross-entropy with the real vocabulary.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/Passes.h"

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SetVector.h"

namespace loom::plan {
#define GEN_PASS_DEF_TFMPADVOCAB
#include "passes/Plan/Passes.h.inc"
} // namespace loom::plan

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// The parameter `v` reads, looking through casts (mixed precision); null
/// when `v` is not a parameter.
GetParamOp paramOf(Value v) {
  while (auto cast = v.getDefiningOp<CastOp>())
    v = cast.getInput();
  return v.getDefiningOp<GetParamOp>();
}

RankedTensorType withDim(Type type, int64_t dim, int64_t size) {
  auto t = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(t.getShape());
  shape[dim < 0 ? shape.size() + dim : dim] = size;
  return t.clone(shape);
}

struct PadVocabPass : plan::impl::TfmPadVocabBase<PadVocabPass> {
  using TfmPadVocabBase::TfmPadVocabBase;

  /// Gives `v` (a table read, [V, H], or logits, [.., V]) the padded
  /// vocabulary `size` along `dim`, and every value its rows flow into.
  LogicalResult pad(Value v, int64_t dim, int64_t size) {
    v.setType(withDim(v.getType(), dim, size));
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (auto c = dyn_cast<CastOp>(user)) {
        if (failed(pad(c.getResult(), dim, size)))
          return failure();
      } else if (auto e = dyn_cast<EmbeddingOp>(user);
                 e && use.get() == e.getTable()) {
        // Token ids never reach the padding: the result keeps its shape.
      } else if (auto l = dyn_cast<LinearOp>(user);
                 l && use.get() == l.getWeight() && !l.getBias()) {
        if (failed(pad(l.getResult(), -1, size)))
          return failure();
      } else if (auto ce = dyn_cast<CrossEntropyOp>(user);
                 ce && use.get() == ce.getLogits()) {
        // Marked with the real vocabulary by the caller.
      } else {
        return user->emitOpError()
               << "uses a value with a row or column per vocabulary entry "
                  "in a way tfm-pad-vocab cannot pad (run it before "
                  "tfm-differentiate; plan make-vocab-size-divisible-by=1 with a tp that "
                  "divides the vocabulary to skip it)";
      }
    }
    return success();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>(kPlanAttrName);
    if (!plan) {
      module.emitError("tfm-pad-vocab needs the module's tfm.plan (run "
                       "tfm-set-plan first)");
      return signalPassFailure();
    }
    // The plan's verifier holds the multiple to at least 1.
    const int64_t multiple = plan.getMakeVocabSizeDivisibleBy() * plan.getTp();

    // The tables: what embeddings read and what projects onto the logits
    // of a cross-entropy.
    llvm::SetVector<StringAttr> tables;
    SmallVector<CrossEntropyOp> losses;
    bool unknown = false;
    module.walk([&](Operation *op) {
      if (auto e = dyn_cast<EmbeddingOp>(op)) {
        if (isPositionIds(e.getIds()))
          return; // learned positions: a row per position
        if (GetParamOp p = paramOf(e.getTable()))
          tables.insert(p.getNameAttr().getAttr());
        else
          unknown = true;
      } else if (auto ce = dyn_cast<CrossEntropyOp>(op)) {
        losses.push_back(ce);
        Value logits = ce.getLogits();
        while (auto c = logits.getDefiningOp<CastOp>())
          logits = c.getInput();
        auto l = logits.getDefiningOp<LinearOp>();
        GetParamOp p = l ? paramOf(l.getWeight()) : GetParamOp();
        if (p)
          tables.insert(p.getNameAttr().getAttr());
        else
          unknown = true;
      }
    });
    if (tables.empty())
      return; // no vocabulary in this module
    if (unknown) {
      module.emitError("tfm-pad-vocab: an embedding table or the logits of "
                       "a cross-entropy do not come from a parameter; "
                       "cannot tell the vocabulary's tensors");
      return signalPassFailure();
    }

    int64_t vocab = -1;
    SmallVector<ParamOp> params;
    for (StringAttr name : tables) {
      auto param = SymbolTable::lookupNearestSymbolFrom<ParamOp>(
          module, SymbolRefAttr::get(name));
      if (!param) {
        module.emitError() << "tfm-pad-vocab: no tfm.param @" << name.getValue();
        return signalPassFailure();
      }
      int64_t rows = param.getTensorType().getDimSize(0);
      if (vocab >= 0 && rows != vocab) {
        param.emitOpError() << "has " << rows << " rows where the other "
                            << "vocabulary table has " << vocab;
        return signalPassFailure();
      }
      vocab = rows;
      params.push_back(param);
    }

    auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName);
    int64_t unpadded = vocab;
    if (model)
      if (auto u = model.getAs<IntegerAttr>("unpadded_vocab_size"))
        unpadded = u.getInt();
    const int64_t padded = llvm::divideCeil(vocab, multiple) * multiple;

    OpBuilder b(module.getContext());
    if (padded != vocab) {
      for (ParamOp param : params)
        param.setType(withDim(param.getTensorType(), 0, padded));
      WalkResult walk = module.walk([&](GetParamOp get) {
        if (!tables.contains(get.getNameAttr().getAttr()))
          return WalkResult::advance();
        return failed(pad(get.getResult(), 0, padded))
                   ? WalkResult::interrupt()
                   : WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return signalPassFailure();
      // Block results carry the new types of what they yield.
      module.walk([&](BlockOp block) {
        auto yield = cast<YieldOp>(block->getRegion(0).front().getTerminator());
        for (auto [result, yielded] :
             llvm::zip(block.getResults(), yield.getOperands()))
          result.setType(yielded.getType());
      });
    }
    if (padded > unpadded)
      for (CrossEntropyOp ce : losses)
        ce.setUnpaddedVocabSizeAttr(b.getI64IntegerAttr(unpadded));

    if (model) {
      NamedAttrList entries(model);
      entries.set("vocab_size", b.getI64IntegerAttr(padded));
      if (padded > unpadded)
        entries.set("unpadded_vocab_size", b.getI64IntegerAttr(unpadded));
      module->setAttr(kModelAttrName, entries.getDictionary(b.getContext()));
    }
  }
};

} // namespace
