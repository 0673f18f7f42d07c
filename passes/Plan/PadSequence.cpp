//===- PadSequence.cpp - Sequence padded for cp and SP ----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Context parallelism cuts each sequence into 2 x cp chunks and sequence
// parallelism each piece over tp; Megatron pads a sequence they do not
// divide (get_padding). Here the padded length becomes the program's: every
// value computed from the batch inputs is retyped along its sequence dim.
// Which dim that is follows from the data flow: the batch inputs are
// [B, S], every value computed from them holds the sequence at dim 1, except
// an attention's log-sum-exp ([B, heads, S]), which blocks may pass on.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/Passes.h"

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace loom::plan {
#define GEN_PASS_DEF_TFMPADSEQUENCE
#include "passes/Plan/Passes.h.inc"
} // namespace loom::plan

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

class SequencePadder {
public:
  SequencePadder(int64_t batch, int64_t from, int64_t to)
      : batch(batch), from(from), to(to) {}

  /// Retypes the values of `func` computed from its batch inputs.
  LogicalResult run(func::FuncOp func) {
    for (BlockArgument a : func.getArguments())
      if (func.getArgAttr(a.getArgNumber(), kInputArgAttrName) &&
          cast<ShapedType>(a.getType()).getRank() == 2)
        if (failed(pad(a, 1, func)))
          return failure();
    WalkResult walk = func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      return failed(visit(op)) ? WalkResult::interrupt()
                               : WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    Block &body = func.getBody().front();
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   body.getTerminator()->getOperandTypes()));
    return success();
  }

private:
  LogicalResult visit(Operation *op) {
    if (isa<func::ReturnOp, YieldOp>(op))
      return success();
    // A block's region arguments are its inputs; its results what it
    // yields, whatever they are.
    if (auto block = dyn_cast<BlockOp>(op)) {
      for (auto [in, arg] :
           llvm::zip(block.getInputs(), block.getBody().getArguments()))
        if (auto d = seqDim.lookup(in))
          if (failed(pad(arg, d, op)))
            return failure();
      return success();
    }
    if (!llvm::any_of(op->getOperands(),
                      [&](Value v) { return seqDim.count(v); }))
      return success();
    // Learned positions read a table row per position: it must hold S'.
    if (auto e = dyn_cast<EmbeddingOp>(op);
        e && e.getIds().getDefiningOp<PositionIdsOp>()) {
      int64_t rows = cast<ShapedType>(e.getTable().getType()).getDimSize(0);
      if (rows < to)
        return op->emitError()
               << "padding the sequence from " << from << " to " << to
               << " tokens needs " << to
               << " learned positions, but the position table has " << rows
               << " (max_position_embeddings); import a sequence of at most "
               << rows - (to - from);
    }
    for (OpResult r : op->getResults()) {
      auto type = dyn_cast<RankedTensorType>(r.getType());
      if (!type || type.getRank() < 2)
        continue; // a loss, a token count
      int64_t dim = isa<AttentionOp>(op) && r.getResultNumber() == 1 ? 2 : 1;
      if (failed(pad(r, dim, op)))
        return failure();
    }
    return success();
  }

  /// Gives `v` the padded length along `dim` (after checking it holds the
  /// sequence there).
  LogicalResult pad(Value v, int64_t dim, Operation *where) {
    if (seqDim.count(v))
      return success();
    auto type = cast<RankedTensorType>(v.getType());
    if (type.getRank() <= dim || type.getDimSize(0) != batch ||
        type.getDimSize(dim) != from)
      return where->emitError()
             << "cannot pad the sequence of " << type << ": dim " << dim
             << " should be the sequence (" << from
             << " tokens) and dim 0 the micro-batch (" << batch << ")";
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] = to;
    v.setType(type.clone(shape));
    seqDim[v] = dim;
    // Block results carry what the block yields.
    for (OpOperand &use : v.getUses())
      if (auto yield = dyn_cast<YieldOp>(use.getOwner()))
        if (failed(pad(yield->getParentOp()->getResult(use.getOperandNumber()),
                       dim, where)))
          return failure();
    return success();
  }

  int64_t batch, from, to;
  /// The values retyped and their sequence dim.
  DenseMap<Value, int64_t> seqDim;
};

struct PadSequencePass : plan::impl::TfmPadSequenceBase<PadSequencePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<PlanAttr>(kPlanAttrName);
    if (!plan) {
      module.emitError() << "tfm-pad-sequence needs a #tfm.plan (run "
                            "tfm-set-plan first)";
      return signalPassFailure();
    }
    int64_t factor = plan.getSequenceMultiple();
    int64_t padded = 0, length = 0;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal() || !func->hasAttr(kEntryAttrName))
        continue;
      std::optional<unsigned> tokens;
      for (unsigned i = 0; i < func.getNumArguments(); ++i)
        if (auto kind = func.getArgAttrOfType<StringAttr>(i, kInputArgAttrName);
            kind && kind.getValue() == "tokens")
          tokens = i;
      if (!tokens)
        continue;
      auto type = cast<RankedTensorType>(func.getArgumentTypes()[*tokens]);
      if (type.getRank() != 2)
        continue; // the entry verifier names it
      length = type.getDimSize(1);
      padded = (length + factor - 1) / factor * factor;
      if (padded == length)
        continue;
      SequencePadder padder(type.getDimSize(0), length, padded);
      if (failed(padder.run(func)))
        return signalPassFailure();
    }
    if (padded == length)
      return;
    // The data is sampled at the user's length; the program runs at the
    // padded one.
    auto model = module->getAttrOfType<DictionaryAttr>(kModelAttrName);
    NamedAttrList attrs(model ? model : DictionaryAttr::get(&getContext()));
    attrs.set("padded_seq_length",
              IntegerAttr::get(IntegerType::get(&getContext(), 64), padded));
    module->setAttr(kModelAttrName, attrs.getDictionary(&getContext()));
  }
};

} // namespace
