//===- SchedulePipeline.cpp - Stages and each pp rank's schedule ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm-schedule-pipeline: cuts the sharded entries into pipeline stages by
// their tfm.blocks and writes, for every pp rank, one function that runs a
// whole step's micro-batches in Megatron-Core's order for that rank. The
// layer assignment and the order (with the p2p calls between steps) come
// from RankGen (PipelineLayout, PipelineSchedule, pipelineP2PPrograms), the
// same code loom-ranks prints and checks, so the compiled program is the
// printed schedule.
//
// A step's micro-batches live in one function rather than in a loop of the
// rank program so that the activations a forward keeps for its backward
// are ordinary SSA values: bufferization allocates and frees them, and the
// in-flight activations of 1F1B (pp - r micro-batches on rank r) are what
// the buffers hold, with no bookkeeping in the runtime.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/Passes.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"
#include "rankgen/PipelineLayout.h"
#include "rankgen/PipelineP2P.h"
#include "rankgen/PipelineSchedule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace loom::pipeline {
#define GEN_PASS_DEF_TFMSCHEDULEPIPELINE
#include "passes/Pipeline/Passes.h.inc"
} // namespace loom::pipeline

using namespace mlir;
using namespace loom;
using rankgen::PayloadKind;

namespace {

/// Where a top-level op of an entry runs.
struct Placement {
  int64_t stage = 0;
  bool backward = false;
};

/// An entry cut into stages: each top-level op's stage, what each stage
/// receives from the one before (forward) and after (backward).
struct StagedEntry {
  func::FuncOp func;
  int64_t numStages = 1;
  DenseMap<Operation *, Placement> place;
  /// tfm.add ops of gradient parts computed on two stages (the tied
  /// embedding): each stage returns its part.
  DenseSet<Operation *> splitSums;
  /// All-reduces of a parameter gradient (tp-partial norm weights): linear,
  /// so they run once on the step's sum instead of once per micro-batch.
  DenseSet<Operation *> deferred;
  /// activations[s]: forward values of stages before s read at s or later,
  /// which stage s receives from s - 1 (the hidden state).
  std::vector<llvm::SetVector<Value>> activations;
  /// gradients[s]: backward values of stages after s read at s or earlier,
  /// which stage s receives from s + 1.
  std::vector<llvm::SetVector<Value>> gradients;

  /// A gradient part of a returned value: the value summed over the
  /// micro-batches (`leaf`) and the all-reduce to apply to the sum, if any.
  struct Part {
    Value leaf;
    Operation *reduce = nullptr;
  };
  SmallVector<Part> partsOf(Value returned) const {
    SmallVector<Value> values{returned};
    if (Operation *def = returned.getDefiningOp(); def && splitSums.count(def))
      values.assign(def->operand_begin(), def->operand_end());
    SmallVector<Part> parts;
    for (Value v : values) {
      Operation *def = v.getDefiningOp();
      if (def && deferred.count(def))
        parts.push_back({def->getOperand(0), def});
      else
        parts.push_back({v, nullptr});
    }
    return parts;
  }

  std::optional<Placement> placeOf(Value v) const {
    Operation *def = v.getDefiningOp();
    if (!def)
      return std::nullopt;
    auto it = place.find(def);
    if (it == place.end())
      return std::nullopt;
    return it->second;
  }
};

/// The virtual stage of each layer, and of the embedding and head.
struct StageMap {
  std::vector<int64_t> layerStage;
  int64_t embeddingStage = 0, headStage = 0, numStages = 1;
};

FailureOr<StageMap> stageMap(Operation *anchor,
                             const rankgen::PipelineLayout &layout) {
  StageMap map;
  int64_t pp = layout.pp(), vpp = layout.vpp();
  map.numStages = pp * vpp;
  map.layerStage.assign(size_t(layout.numLayers()), -1);
  for (const rankgen::PipelineStage &st : layout.stages()) {
    int64_t s = st.vpStage * pp + st.ppRank;
    for (int64_t l : st.layerIds)
      map.layerStage[size_t(l)] = s;
    if (st.embedding)
      map.embeddingStage = s;
    if (st.loss)
      map.headStage = s;
  }
  if (map.embeddingStage != 0 || map.headStage != map.numStages - 1)
    return anchor->emitError()
           << "the pipeline layout puts the embedding on stage "
           << map.embeddingStage << " and the loss on stage " << map.headStage
           << "; they must be the first and last of " << map.numStages;
  return map;
}

FailureOr<StagedEntry> stageEntry(func::FuncOp func, const StageMap &map) {
  StagedEntry e;
  e.func = func;
  e.numStages = map.numStages;
  Block &body = func.getBody().front();
  for (Operation &op : body.without_terminator()) {
    if (auto block = dyn_cast<tfm::BlockOp>(op)) {
      Placement p;
      p.backward = block.getBackward();
      switch (block.getKind()) {
      case tfm::BlockKind::embedding:
        p.stage = map.embeddingStage;
        break;
      case tfm::BlockKind::head:
        p.stage = map.headStage;
        break;
      case tfm::BlockKind::layer: {
        int64_t i = block.getIndex() ? int64_t(*block.getIndex()) : -1;
        if (i < 0 || i >= int64_t(map.layerStage.size()))
          return block.emitError()
                 << "layer " << i << " is outside the pipeline layout's "
                 << map.layerStage.size() << " layers";
        p.stage = map.layerStage[size_t(i)];
        break;
      }
      }
      e.place[&op] = p;
      continue;
    }
    // Glue between blocks (gradient all-reduces, the tied embedding's sum)
    // runs on the stage of what it reads.
    std::optional<Placement> p;
    SmallVector<int64_t> stages;
    for (Value v : op.getOperands())
      if (std::optional<Placement> q = e.placeOf(v)) {
        if (!llvm::is_contained(stages, q->stage))
          stages.push_back(q->stage);
        if (!p || q->backward)
          p = q;
      }
    if (stages.size() == 2 && isa<tfm::AddOp>(op) &&
        llvm::all_of(op.getUsers(),
                     [](Operation *u) { return isa<func::ReturnOp>(u); })) {
      e.splitSums.insert(&op);
      continue;
    }
    if (stages.size() != 1)
      return op.emitError()
             << "cannot place this op on a pipeline stage: it reads values of "
             << stages.size()
             << " stages (a pipelined entry must be built "
                "of tfm.blocks and the ops between them)";
    e.place[&op] = *p;
    auto onlyReturned = [](Value v) {
      return llvm::all_of(v.getUsers(), [](Operation *u) {
        return isa<func::ReturnOp>(u) ||
               (isa<tfm::AddOp>(u) &&
                llvm::all_of(u->getUsers(), [](Operation *w) {
                  return isa<func::ReturnOp>(w);
                }));
      });
    };
    if (auto reduce = dyn_cast<mesh::AllReduceOp>(op);
        reduce && p->backward &&
        isa<tfm::BlockOp>(reduce.getInput().getDefiningOp()) &&
        onlyReturned(reduce.getResult()))
      e.deferred.insert(&op);
  }

  // What crosses each stage boundary, relayed through the stages between
  // producer and reader.
  e.activations.resize(size_t(e.numStages));
  e.gradients.resize(size_t(e.numStages));
  for (Operation &op : body.without_terminator()) {
    auto self = e.place.find(&op);
    if (self == e.place.end())
      continue;
    for (Value v : op.getOperands()) {
      std::optional<Placement> def = e.placeOf(v);
      if (!def || def->stage == self->second.stage)
        continue;
      int64_t from = def->stage, to = self->second.stage;
      if (!def->backward && to > from) {
        for (int64_t s = from + 1; s <= to; ++s)
          e.activations[size_t(s)].insert(v);
      } else if (def->backward && self->second.backward && to < from) {
        for (int64_t s = to; s < from; ++s)
          e.gradients[size_t(s)].insert(v);
      } else {
        return op.emitError()
               << "reads a value of pipeline stage " << from << " from stage "
               << to << ", against the direction values flow";
      }
    }
  }
  return e;
}

/// Where a rank's actions repeat: actions [start, start + trips x length)
/// are `trips` copies of the first `length`, each `shift` micro-batches
/// further than the one before.
struct SteadyLoop {
  size_t start = 0, length = 0;
  int64_t trips = 0, shift = 0;
};

/// The micro-batch an action names first (none: it moves nothing).
std::optional<int64_t> microbatchOf(const rankgen::RankAction &a) {
  if (!a.isComm)
    return a.step.microbatch;
  for (const std::optional<rankgen::Payload> *p :
       {&a.comm.sendPrev, &a.comm.recvPrev, &a.comm.sendNext,
        &a.comm.recvNext})
    if (*p)
      return (*p)->microbatch;
  return std::nullopt;
}

bool isShifted(const std::optional<rankgen::Payload> &a,
               const std::optional<rankgen::Payload> &b, int64_t d) {
  if (a.has_value() != b.has_value())
    return false;
  if (!a)
    return true;
  rankgen::Payload moved = *a;
  moved.microbatch += d;
  return moved == *b;
}

/// `b` is `a` with every micro-batch `d` further.
bool isShifted(const rankgen::RankAction &a, const rankgen::RankAction &b,
               int64_t d) {
  if (a.isComm != b.isComm)
    return false;
  if (!a.isComm) {
    rankgen::ScheduleStep moved = a.step;
    moved.microbatch += d;
    return moved == b.step;
  }
  return a.comm.name == b.comm.name &&
         isShifted(a.comm.sendPrev, b.comm.sendPrev, d) &&
         isShifted(a.comm.recvPrev, b.comm.recvPrev, d) &&
         isShifted(a.comm.sendNext, b.comm.sendNext, d) &&
         isShifted(a.comm.recvNext, b.comm.recvNext, d);
}

/// The longest repeating run of a rank's schedule (its steady phase), cut
/// into trips long enough that no value lives a whole trip: an activation
/// kept for its backward, a received tensor or a gradient sum is read on
/// the next trip before that trip computes it again, so one place per value
/// holds it (tfm-plan-buffers places a loop's buffers on that condition).
/// The loop starts after every chunk's first backward (the gradient sums
/// exist, so every trip adds to them alike) and ends before any chunk's
/// last (which completes its gradients). No trips: nothing repeats enough.
SteadyLoop findSteadyLoop(const std::vector<rankgen::RankAction> &actions,
                          int64_t numMicrobatches, size_t maxPeriod) {
  size_t n = actions.size(), first = 0, end = n;
  std::map<int64_t, int64_t> backwards;
  std::map<std::pair<int64_t, int64_t>, size_t> forwardAt;
  size_t life = 0;
  for (size_t i = 0; i < n; ++i) {
    if (actions[i].isComm)
      continue;
    const rankgen::ScheduleStep &st = actions[i].step;
    if (st.forward) {
      forwardAt[{st.microbatch, st.chunk}] = i;
      continue;
    }
    if (backwards[st.chunk]++ == 0)
      first = std::max(first, i + 1);
    if (backwards[st.chunk] == numMicrobatches)
      end = std::min(end, i);
    if (auto it = forwardAt.find({st.microbatch, st.chunk});
        it != forwardAt.end())
      life = std::max(life, i - it->second);
  }
  SteadyLoop best;
  size_t bestSaved = 0;
  for (size_t period = 1; period <= maxPeriod && first + 2 * period <= end;
       ++period) {
    size_t i = first;
    while (i + period < end) {
      size_t runStart = i;
      std::optional<int64_t> shift;
      for (; i + period < end; ++i) {
        std::optional<int64_t> m0 = microbatchOf(actions[i]),
                               m1 = microbatchOf(actions[i + period]);
        int64_t d = m0 && m1 ? *m1 - *m0 : shift.value_or(0);
        if (d <= 0 || (shift && d != *shift) ||
            !isShifted(actions[i], actions[i + period], d))
          break;
        shift = d;
      }
      if (shift) {
        // Actions [runStart, i + period) repeat every `period`.
        size_t unroll = std::max<size_t>(2, (life + period) / period + 1);
        size_t length = unroll * period;
        size_t trips = (i + period - runStart) / length;
        if (trips >= 2 && (trips - 1) * length > bestSaved) {
          bestSaved = (trips - 1) * length;
          best = {runStart, length, int64_t(trips),
                  *shift * int64_t(unroll)};
        }
      }
      if (i == runStart)
        ++i;
    }
  }
  return best;
}

/// Builds one pp rank's function from a staged entry and its schedule.
class RankBuilder {
public:
  RankBuilder(const StagedEntry &entry, const rankgen::RankSchedule &schedule,
              int64_t pp, int64_t numMicrobatches, bool batched,
              StringRef meshName, StringRef axis)
      : e(entry), src(entry.func), sched(schedule), pp(pp),
        numMicrobatches(numMicrobatches), batched(batched), meshName(meshName),
        axis(axis) {}

  FailureOr<func::FuncOp> build(OpBuilder &moduleBuilder);

private:
  /// The values of the step being built: outside the loop, or inside its
  /// body, where micro-batch `micro` stands for `micro + base` (the loop's
  /// index) and values of earlier trips arrive as iteration arguments.
  struct Scope {
    std::map<std::pair<int64_t, int64_t>, IRMapping> envs;
    std::map<std::pair<int64_t, unsigned>, Value> inputs;
    Value base;
  };
  /// A value the loop carries from one trip to the next: a value of
  /// micro-batch `micro` at `stage` (entry value `value`), a gradient sum
  /// (of leaf `value`) or the stacked losses.
  struct Carried {
    enum Kind { Env, Sum, Losses } kind;
    int64_t micro = 0, stage = 0;
    Value value;
  };
  IRMapping &env(int64_t micro, int64_t stage) {
    auto [it, fresh] = scope->envs.try_emplace({micro, stage});
    if (fresh)
      for (BlockArgument a : src.getArguments())
        it->second.map(a, input(micro, a.getArgNumber()));
    return it->second;
  }
  /// `v` of micro-batch `micro` at `stage`, when the loop body reads it
  /// before computing it: an earlier trip's (or, on the first, the one
  /// before the loop), as a new iteration argument. False outside the loop
  /// or when there is no such value.
  bool pull(int64_t micro, int64_t stage, Value v);
  void emit(const rankgen::RankAction &action, LogicalResult &status) {
    if (succeeded(status))
      status = action.isComm ? comm(action.comm) : compute(action.step);
  }
  /// Actions [start, start + length) as the body of a loop that runs them
  /// `trips` times, `shift` micro-batches further each time.
  LogicalResult emitLoop(size_t start, size_t length, int64_t trips,
                         int64_t shift);
  /// Micro-batch `micro` of the entry's input `i`, sliced from the step's
  /// stacked argument on first use.
  Value input(int64_t micro, unsigned i);
  LogicalResult compute(const rankgen::ScheduleStep &step);
  /// The function holding `block`'s code (made on first use); with
  /// `summed`, the variant that adds those results to sums it takes.
  /// Results that merely pass an input through are returned all the same:
  /// tfm-unique-results drops them once buffers exist.
  func::FuncOp outlined(tfm::BlockOp block, ArrayRef<unsigned> summed);
  static Type f32Like(Type t);
  Value toF32(Value v);
  LogicalResult comm(const rankgen::CommCall &call);
  void accumulate(Value part, Value value);
  /// The step's result for returned gradient `r`: its parts' sums added,
  /// each reduced first where that runs once per step. Null when no part
  /// is this rank's.
  Value total(Value r);
  /// After chunk `chunk`'s last backward: the gradients complete now,
  /// marked by one tfm.grads_ready.
  void gradsReady(int64_t chunk);

  const StagedEntry &e;
  func::FuncOp src; // e.func, for its non-const accessors
  const rankgen::RankSchedule &sched;
  int64_t pp, numMicrobatches;
  bool batched;
  StringRef meshName, axis;
  func::FuncOp newFunc;
  std::unique_ptr<OpBuilder> b;
  Scope outer, loopScope;
  Scope *scope = &outer;
  /// While the loop body is built: its block and what it carries.
  Block *loopBody = nullptr;
  SmallVector<Carried> carried;
  SmallVector<Value> carriedInits;
  /// The last stage's losses so far, stacked (on the rank that has it).
  Value losses;
  /// The function of each block of the entry.
  std::map<std::pair<Operation *, bool>, func::FuncOp> callees;
  /// The values whose micro-batch sums this rank returns (its parts of
  /// the returned gradients).
  llvm::SetVector<Value> leaves;
  /// Gradient parts returned by this rank, summed over micro-batches.
  llvm::MapVector<Value, Value> sums;
  /// Backward steps run per chunk, and the results completed so far.
  std::map<int64_t, int64_t> backwardSteps;
  DenseMap<Value, Value> totals;
};

/// `type` with a leading dim of `n` micro-batches (whole on every rank).
static RankedTensorType stacked(Type type, int64_t n) {
  auto t = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape{n};
  llvm::append_range(shape, t.getShape());
  auto out = RankedTensorType::get(shape, t.getElementType());
  tfm::DistAttr dist = tfm::getDist(t);
  if (!dist)
    return out;
  SmallVector<tfm::DimDist> dims{tfm::DimDist{}};
  llvm::append_range(dims, dist.getDims(t.getRank()));
  return tfm::withDist(
      out, tfm::DistAttr::get(t.getContext(), dist.getMesh(), dims,
                              dist.getPartialAxes(), dist.getReduction()));
}

Value RankBuilder::input(int64_t micro, unsigned i) {
  Value &v = scope->inputs[{micro, i}];
  if (!v)
    v = b->create<tfm::MicrobatchSliceOp>(src.getLoc(),
                                          src.getArgumentTypes()[i],
                                          newFunc.getArgument(i), micro,
                                          scope->base);
  return v;
}

bool RankBuilder::pull(int64_t micro, int64_t stage, Value v) {
  if (!loopBody)
    return false;
  auto it = outer.envs.find({micro, stage});
  if (it == outer.envs.end() || !it->second.contains(v))
    return false;
  Value init = it->second.lookup(v);
  Value arg = loopBody->addArgument(init.getType(), init.getLoc());
  carried.push_back({Carried::Env, micro, stage, v});
  carriedInits.push_back(init);
  env(micro, stage).map(v, arg);
  return true;
}

LogicalResult RankBuilder::compute(const rankgen::ScheduleStep &step) {
  int64_t stage = step.chunk * pp + sched.ppRank;
  IRMapping &map = env(step.microbatch, stage);
  b->create<tfm::PipelineStepOp>(src.getLoc(), !step.forward, step.microbatch,
                                 scope->base, step.chunk);
  // What the step computes, for the trace: the first stage's forward reads
  // the micro-batch's tokens, the last stage's forward computes its loss.
  if (step.forward && stage == 0)
    for (BlockArgument a : src.getArguments())
      if (auto kind = src.getArgAttrOfType<StringAttr>(a.getArgNumber(),
                                                        tfm::kInputArgAttrName);
          kind && kind.getValue() == "tokens")
        b->create<tfm::PipelineDataOp>(src.getLoc(), "tokens", step.microbatch,
                                       scope->base, step.chunk, map.lookup(a));
  Block &body = src.getBody().front();
  for (Operation &op : body.without_terminator()) {
    auto it = e.place.find(&op);
    if (it == e.place.end() || it->second.stage != stage ||
        it->second.backward == step.forward || e.deferred.count(&op))
      continue;
    for (Value v : op.getOperands())
      if (!map.contains(v) && !pull(step.microbatch, stage, v))
        return op.emitError() << "pipeline step " << step.str()
                              << " on pp rank " << sched.ppRank
                              << " reads a value it neither computed nor "
                                 "received";
    auto block = dyn_cast<tfm::BlockOp>(op);
    if (!block) {
      b->clone(op, map);
      continue;
    }
    // A block runs once per micro-batch: its code is one function, called
    // each time (compile time grows with the model, not the schedule).
    SmallVector<Value> args;
    for (Value v : block.getInputs())
      args.push_back(map.lookup(v));
    // The parameter gradients this block yields, summed over micro-batches:
    // after the first micro-batch, the block's function adds them to the
    // sums it is given (one call per block, no per-gradient ops here).
    SmallVector<unsigned> summed;
    for (auto [i, r] : llvm::enumerate(block.getResults()))
      if (leaves.count(r))
        summed.push_back(unsigned(i));
    bool adds = !summed.empty() && sums.count(block.getResult(summed[0]));
    if (adds)
      for (unsigned i : summed)
        args.push_back(sums.lookup(block.getResult(i)));
    auto call = b->create<func::CallOp>(
        block.getLoc(), outlined(block, adds ? summed : ArrayRef<unsigned>()),
        args);
    map.map(block.getResults(), call.getResults());
    for (unsigned i : summed) {
      Value g = map.lookup(block.getResult(i));
      sums[block.getResult(i)] = adds ? g : toF32(g);
    }
  }
  // Gradients of glue ops (not from a block): summed here.
  if (!step.forward)
    for (Value leaf : leaves)
      if (!isa<tfm::BlockOp>(leaf.getDefiningOp()) && map.contains(leaf) &&
          e.placeOf(leaf)->stage == stage)
        accumulate(leaf, map.lookup(leaf));
  if (step.forward && stage == e.numStages - 1) {
    Value loss = src.getBody().front().getTerminator()->getOperand(0);
    if (map.contains(loss)) {
      b->create<tfm::PipelineDataOp>(src.getLoc(), "loss", step.microbatch,
                                     scope->base, step.chunk, map.lookup(loss));
      losses = b->create<tfm::MicrobatchInsertOp>(
          src.getLoc(), losses.getType(), map.lookup(loss), losses,
          step.microbatch, scope->base);
    }
  }
  if (!step.forward && ++backwardSteps[step.chunk] == numMicrobatches)
    gradsReady(step.chunk);
  return success();
}

Value RankBuilder::total(Value r) {
  if (Value done = totals.lookup(r))
    return done;
  Value result;
  for (const StagedEntry::Part &part : e.partsOf(r)) {
    auto it = sums.find(part.leaf);
    if (it == sums.end())
      continue;
    Value sum = it->second;
    if (part.reduce) {
      // The all-reduce once on the step's sum, in f32.
      IRMapping once;
      once.map(part.leaf, sum);
      Operation *reduce = b->clone(*part.reduce, once);
      reduce->getResult(0).setType(f32Like(reduce->getResult(0).getType()));
      sum = reduce->getResult(0);
    }
    result = result ? b->create<tfm::AddOp>(r.getLoc(), result.getType(),
                                            result, sum)
                          .getResult()
                    : sum;
  }
  if (result)
    totals[r] = result;
  return result;
}

void RankBuilder::gradsReady(int64_t chunk) {
  // A gradient is complete when every chunk of this rank holding a part of
  // it has run its last backward (chunks finish in descending order).
  auto ret = cast<func::ReturnOp>(src.getBody().front().getTerminator());
  SmallVector<Value> ready;
  for (Value r : ret.getOperands().drop_front()) {
    if (totals.count(r))
      continue;
    bool mine = false, complete = true;
    for (const StagedEntry::Part &part : e.partsOf(r)) {
      if (!leaves.count(part.leaf))
        continue;
      mine = true;
      int64_t partChunk = e.placeOf(part.leaf)->stage / pp;
      complete &= backwardSteps[partChunk] == numMicrobatches;
    }
    if (mine && complete)
      if (Value t = total(r))
        ready.push_back(t);
  }
  if (!ready.empty())
    b->create<tfm::GradsReadyOp>(src.getLoc(), chunk, ready);
}

LogicalResult RankBuilder::emitLoop(size_t start, size_t length,
                                   int64_t trips, int64_t shift) {
  Location loc = src.getLoc();
  auto index = [&](int64_t v) {
    return b->create<arith::ConstantIndexOp>(loc, v).getResult();
  };
  // The body is built in a loop without iteration arguments, which it
  // gains as the body reads earlier trips' values; the loop is then made
  // again with them.
  auto host = b->create<scf::ForOp>(loc, index(0), index(trips * shift),
                                    index(shift));
  loopBody = host.getBody();
  loopBody->getTerminator()->erase();
  loopScope = Scope{};
  loopScope.base = host.getInductionVar();
  scope = &loopScope;
  b->setInsertionPointToEnd(loopBody);
  // The gradient sums and the losses go through every trip.
  for (auto &[leaf, sum] : sums) {
    carried.push_back({Carried::Sum, 0, 0, leaf});
    carriedInits.push_back(sum);
    sum = loopBody->addArgument(sum.getType(), loc);
  }
  if (losses) {
    carried.push_back({Carried::Losses});
    carriedInits.push_back(losses);
    losses = loopBody->addArgument(losses.getType(), loc);
  }
  std::map<int64_t, int64_t> backwardsBefore = backwardSteps;
  LogicalResult status = success();
  for (size_t i = start; i < start + length; ++i)
    emit(sched.actions[i], status);
  if (failed(status))
    return failure();
  // What the next trip reads: this trip's values of the micro-batches
  // `shift` further.
  SmallVector<Value> yields;
  for (const Carried &c : carried) {
    if (c.kind == Carried::Sum) {
      yields.push_back(sums.lookup(c.value));
      continue;
    }
    if (c.kind == Carried::Losses) {
      yields.push_back(losses);
      continue;
    }
    auto it = loopScope.envs.find({c.micro + shift, c.stage});
    if (it == loopScope.envs.end() || !it->second.contains(c.value))
      return src.emitError()
             << "pp rank " << sched.ppRank << ": a trip of the steady phase's "
             << "loop reads a value of micro-batch " << c.micro << " at stage "
             << c.stage << " that the trip before does not compute for "
             << "micro-batch " << c.micro + shift;
    yields.push_back(it->second.lookup(c.value));
  }
  OpBuilder::atBlockEnd(loopBody).create<scf::YieldOp>(loc, yields);

  b->setInsertionPoint(host);
  scope = &outer;
  auto loop = b->create<scf::ForOp>(loc, host.getLowerBound(),
                                    host.getUpperBound(), host.getStep(),
                                    carriedInits);
  Block *target = loop.getBody();
  if (!target->empty())
    target->getTerminator()->erase();
  for (auto [from, to] :
       llvm::zip_equal(loopBody->getArguments(), target->getArguments()))
    from.replaceAllUsesWith(to);
  target->getOperations().splice(target->end(), loopBody->getOperations());
  host.erase();
  loopBody = nullptr;
  b->setInsertionPointAfter(loop);

  // After the last trip: its values, as those of the micro-batches the
  // steps after the loop read.
  for (auto [c, r] : llvm::zip_equal(carried, loop.getResults())) {
    if (c.kind == Carried::Sum)
      sums[c.value] = r;
    else if (c.kind == Carried::Losses)
      losses = r;
    else
      env(c.micro + shift * trips, c.stage).map(c.value, r);
  }
  for (auto &[chunk, count] : backwardSteps)
    count = backwardsBefore[chunk] + trips * (count - backwardsBefore[chunk]);
  carried.clear();
  carriedInits.clear();
  return success();
}

func::FuncOp RankBuilder::outlined(tfm::BlockOp block,
                                  ArrayRef<unsigned> summed) {
  func::FuncOp &f = callees[{block.getOperation(), !summed.empty()}];
  if (f)
    return f;
  std::string name =
      (src.getName() + "_" + tfm::stringifyBlockKind(block.getKind())).str();
  if (block.getIndex())
    name += std::to_string(*block.getIndex());
  if (block.getBackward())
    name += "_backward";
  if (!summed.empty())
    name += "_accumulate";
  auto module = src->getParentOfType<ModuleOp>();
  SmallVector<Type> resultTypes(block.getResultTypes());
  // The accumulating variant takes the f32 sums of the `summed` results
  // after the block's inputs and returns sum + result in their place.
  SmallVector<Type> argTypes(block.getInputs().getTypes());
  for (unsigned i : summed) {
    Type f32 = f32Like(block.getResult(i).getType());
    argTypes.push_back(f32);
    resultTypes[i] = f32;
  }
  OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
  f = mb.create<func::FuncOp>(
      block.getLoc(), name, mb.getFunctionType(argTypes, resultTypes));
  f.setPrivate();
  IRMapping map;
  block.getBody().cloneInto(&f.getBody(), map);
  Block &body = f.getBody().front();
  auto yield = cast<tfm::YieldOp>(body.getTerminator());
  OpBuilder bb(yield);
  SmallVector<Value> values(yield.getValues());
  for (auto [k, i] : llvm::enumerate(summed)) {
    Value sum =
        body.addArgument(argTypes[block.getNumOperands() + k], yield.getLoc());
    Value g = values[i];
    if (g.getType() != sum.getType())
      g = bb.create<tfm::CastOp>(yield.getLoc(), sum.getType(), g);
    values[i] = bb.create<tfm::AddOp>(yield.getLoc(), sum.getType(), sum, g);
  }
  OpBuilder::atBlockEnd(&body).create<func::ReturnOp>(yield.getLoc(), values);
  yield.erase();
  return f;
}

Type RankBuilder::f32Like(Type t) {
  auto type = cast<RankedTensorType>(t);
  return RankedTensorType::get(
      type.getShape(), Float32Type::get(t.getContext()), type.getEncoding());
}

Value RankBuilder::toF32(Value v) {
  if (cast<ShapedType>(v.getType()).getElementType().isF32())
    return v;
  return b->create<tfm::CastOp>(v.getLoc(), f32Like(v.getType()), v);
}

void RankBuilder::accumulate(Value part, Value value) {
  // In f32 whatever the parameter dtype, as Megatron's main_grad (and the
  // rank program for unpipelined steps) accumulates.
  value = toF32(value);
  auto [it, fresh] = sums.try_emplace(part, value);
  if (!fresh)
    it->second = b->create<tfm::AddOp>(value.getLoc(), value.getType(),
                                       it->second, value);
}

LogicalResult RankBuilder::comm(const rankgen::CommCall &call) {
  struct Slot {
    const std::optional<rankgen::Payload> *payload;
    bool send;
    int64_t offset;
  };
  Slot sendPrev{&call.sendPrev, true, -1}, recvPrev{&call.recvPrev, false, -1},
      sendNext{&call.sendNext, true, 1}, recvNext{&call.recvNext, false, 1};
  // Megatron's orders (p2p_communication.py): batched, one grouped call;
  // unbatched, one call per tensor, even ranks sending first.
  SmallVector<SmallVector<Slot>> units;
  if (batched)
    units.push_back({sendPrev, recvPrev, sendNext, recvNext});
  else if (sched.ppRank % 2 == 0)
    units = {{sendNext}, {recvPrev}, {sendPrev}, {recvNext}};
  else
    units = {{recvPrev}, {sendNext}, {recvNext}, {sendPrev}};

  Location loc = src.getLoc();
  for (const SmallVector<Slot> &unit : units) {
    SmallVector<Value> sends;
    SmallVector<int64_t> sendOffsets, recvOffsets, sendPayloads, recvPayloads;
    SmallVector<Type> recvTypes;
    // Each received tensor: the stage it is for, the value it stands for.
    SmallVector<std::tuple<int64_t, int64_t, Value>> received;
    for (const Slot &slot : unit) {
      if (!*slot.payload)
        continue;
      const rankgen::Payload &p = **slot.payload;
      bool act = p.kind == PayloadKind::Activation;
      // The values: what the stage after the producer receives (act), or
      // the stage before it (grad).
      int64_t consumer = act ? p.stage + 1 : p.stage - 1;
      if (consumer < 0 || consumer >= e.numStages)
        return src.emitError() << "the schedule moves a payload of stage "
                               << p.stage << " past the pipeline's end";
      const llvm::SetVector<Value> &values =
          act ? e.activations[size_t(consumer)] : e.gradients[size_t(consumer)];
      for (Value v : values) {
        int64_t payload[3] = {act ? 0 : 1, p.microbatch, p.stage};
        if (slot.send) {
          IRMapping &map = env(p.microbatch, p.stage);
          if (!map.contains(v) && !pull(p.microbatch, p.stage, v))
            return src.emitError()
                   << "pp rank " << sched.ppRank << " would send " << p.str()
                   << " before computing it";
          sends.push_back(map.lookup(v));
          sendOffsets.push_back(slot.offset);
          sendPayloads.append(std::begin(payload), std::end(payload));
        } else {
          recvTypes.push_back(v.getType());
          recvOffsets.push_back(slot.offset);
          recvPayloads.append(std::begin(payload), std::end(payload));
          received.push_back({p.microbatch, consumer, v});
        }
      }
    }
    if (sends.empty() && recvTypes.empty())
      continue;
    auto op = b->create<tfm::PipelineP2POp>(
        loc, TypeRange(recvTypes), ValueRange(sends), scope->base,
        b->getDenseI64ArrayAttr(sendOffsets),
        b->getDenseI64ArrayAttr(recvOffsets),
        b->getDenseI64ArrayAttr(sendPayloads),
        b->getDenseI64ArrayAttr(recvPayloads),
        FlatSymbolRefAttr::get(b->getContext(), meshName),
        b->getStringAttr(axis));
    for (auto [result, r] : llvm::zip(op.getResults(), received))
      env(std::get<0>(r), std::get<1>(r)).map(std::get<2>(r), result);
  }
  return success();
}

FailureOr<func::FuncOp> RankBuilder::build(OpBuilder &moduleBuilder) {
  MLIRContext *ctx = moduleBuilder.getContext();
  func::FuncOp f = src;
  std::string name = (f.getName() + "_pp" + Twine(sched.ppRank)).str();
  // Arguments: the entry's, each holding every micro-batch.
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  auto count = IntegerAttr::get(IntegerType::get(ctx, 64), numMicrobatches);
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    argTypes.push_back(stacked(f.getArgumentTypes()[i], numMicrobatches));
    NamedAttrList attrs(f.getArgAttrDict(i));
    attrs.set(tfm::kMicrobatchesAttrName, count);
    argAttrs.push_back(attrs.getDictionary(ctx));
  }
  newFunc = moduleBuilder.create<func::FuncOp>(
      f.getLoc(), name, FunctionType::get(ctx, argTypes, {}));
  newFunc.setAllArgAttrs(argAttrs);
  if (auto entry = f->getAttrOfType<StringAttr>(tfm::kEntryAttrName))
    newFunc->setAttr(
        tfm::kEntryAttrName,
        StringAttr::get(ctx, entry.getValue() + "_pp" + Twine(sched.ppRank)));
  newFunc->setAttr(tfm::kPipelineRankAttrName,
                   IntegerAttr::get(IntegerType::get(ctx, 64), sched.ppRank));
  Block *body = newFunc.addEntryBlock();
  b = std::make_unique<OpBuilder>(OpBuilder::atBlockBegin(body));
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  for (Value r : ret.getOperands().drop_front())
    for (const StagedEntry::Part &part : e.partsOf(r))
      if (std::optional<Placement> p = e.placeOf(part.leaf);
          p && p->stage % pp == sched.ppRank)
        leaves.insert(part.leaf);

  int64_t last = e.numStages - 1;
  if (last % pp == sched.ppRank)
    losses = b->create<tfm::EmptyOp>(
        f.getLoc(), stacked(ret.getOperand(0).getType(), numMicrobatches));

  // The schedule's steady phase as a loop, the rest as it runs.
  SteadyLoop loop = findSteadyLoop(
      sched.actions, numMicrobatches,
      /*maxPeriod=*/size_t(8 * e.numStages + 8));
  LogicalResult status = success();
  for (size_t i = 0; i < loop.start; ++i)
    emit(sched.actions[i], status);
  size_t resume = loop.start;
  if (loop.trips > 0 && succeeded(status)) {
    status = emitLoop(loop.start, loop.length, loop.trips, loop.shift);
    resume = loop.start + size_t(loop.trips) * loop.length;
  }
  for (size_t i = resume; i < sched.actions.size(); ++i)
    emit(sched.actions[i], status);
  if (failed(status))
    return failure();

  // Results: the last stage's micro-batch losses (stacked), then the
  // gradients.
  SmallVector<Value> results;
  SmallVector<DictionaryAttr> resultAttrs;
  if (losses) {
    results.push_back(losses);
    NamedAttrList attrs;
    attrs.set(tfm::kMicrobatchesAttrName, count);
    resultAttrs.push_back(attrs.getDictionary(ctx));
  }
  for (unsigned i = 1; i < ret.getNumOperands(); ++i) {
    Value t = total(ret.getOperand(i));
    if (!t)
      continue; // another stage's parameter
    results.push_back(t);
    resultAttrs.push_back(f.getResultAttrDict(i));
  }
  b->create<func::ReturnOp>(f.getLoc(), results);
  // Inputs sliced for a stage that does not read them.
  for (Scope *sc : {&outer, &loopScope})
    for (auto [key, v] : sc->inputs)
      if (v.use_empty())
        v.getDefiningOp()->erase();
  newFunc.setFunctionType(
      FunctionType::get(ctx, argTypes, ValueRange(results).getTypes()));
  newFunc.setAllResultAttrs(resultAttrs);
  return newFunc;
}

struct SchedulePipelinePass
    : pipeline::impl::TfmSchedulePipelineBase<SchedulePipelinePass> {
  using TfmSchedulePipelineBase::TfmSchedulePipelineBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<tfm::PlanAttr>(tfm::kPlanAttrName);
    if (!plan) {
      module.emitError() << "tfm-schedule-pipeline needs a #tfm.plan "
                            "(run tfm-set-plan first)";
      return signalPassFailure();
    }
    rankgen::Plan p = plan.toPlan();
    int64_t pp = p.sizes.pp, vpp = p.vpp;
    if (pp == 1 && vpp == 1)
      return;
    auto model = module->getAttrOfType<DictionaryAttr>(tfm::kModelAttrName);
    auto layers = model ? model.getAs<IntegerAttr>("num_layers") : nullptr;
    if (!layers) {
      module.emitError() << "pipelining needs the model's num_layers "
                            "(tfm.model, written by loom-import)";
      return signalPassFailure();
    }
    rankgen::PipelineLayoutOptions lo;
    lo.pp = pp;
    lo.vpp = vpp;
    lo.numLayers = layers.getInt();
    lo.firstStageLayers = p.firstStageLayers;
    lo.lastStageLayers = p.lastStageLayers;
    lo.accountForEmbedding = p.accountForEmbedding;
    lo.accountForLoss = p.accountForLoss;
    lo.layout = p.pipelineLayout;
    // The layers are assigned first, so a plan whose stages outnumber them
    // is told so before anything about its schedule.
    auto pipelineLayout = rankgen::PipelineLayout::create(lo);
    if (!pipelineLayout) {
      module.emitError() << "pipeline layout: " << pipelineLayout.error();
      return signalPassFailure();
    }
    const int64_t numMicrobatches = p.numMicrobatches;
    const bool batched = p.p2pMode == rankgen::P2PMode::Batched;
    FailureOr<StageMap> map = stageMap(module, *pipelineLayout);
    if (failed(map))
      return signalPassFailure();

    // The entries to pipeline: the train step and the forward.
    SmallVector<func::FuncOp> entries;
    for (auto f : module.getOps<func::FuncOp>())
      if (f->hasAttr(tfm::kEntryAttrName))
        entries.push_back(f);
    mesh::MeshOp dense;
    for (auto m : module.getOps<mesh::MeshOp>())
      if (m.getSymName() == "dense")
        dense = m;
    if (!dense) {
      module.emitError() << "pipelining needs the @dense mesh "
                            "(tfm-materialize-mesh)";
      return signalPassFailure();
    }
    OpBuilder mb = OpBuilder::atBlockEnd(module.getBody());
    for (func::FuncOp f : entries) {
      FailureOr<StagedEntry> staged = stageEntry(f, *map);
      if (failed(staged))
        return signalPassFailure();
      bool training = llvm::any_of(staged->place,
                                   [](auto &kv) { return kv.second.backward; });
      rankgen::ScheduleOptions so;
      so.pp = pp;
      so.vpp = pipelineLayout->vpp();
      so.numMicrobatches = numMicrobatches;
      so.microbatchGroupSize = p.microbatchGroupSize;
      so.forwardOnly = !training;
      auto schedule = rankgen::PipelineSchedule::create(so);
      if (!schedule) {
        f.emitError() << "pipeline schedule: " << schedule.error();
        return signalPassFailure();
      }
      // The schedule's p2p in the plan's mode, on RankGen's model of it,
      // for an error that says what to change (tfm-verify-pipeline-p2p
      // proves the compiled IR itself).
      if (auto checked = rankgen::checkPipelineP2P(*schedule, p.p2pMode);
          !checked) {
        InFlightDiagnostic diag = f.emitError() << checked.error();
        if (batched && rankgen::checkPipelineP2P(*schedule,
                                                 rankgen::P2PMode::Unbatched)
                           .ok())
          diag << "; it passes with --p2p-mode unbatched";
        return signalPassFailure();
      }
      for (const rankgen::RankSchedule &rs : schedule->ranks()) {
        RankBuilder builder(*staged, rs, pp, numMicrobatches, batched, "dense",
                            "pp");
        if (failed(builder.build(mb)))
          return signalPassFailure();
      }
    }
    for (func::FuncOp f : entries)
      f.erase();
  }
};

} // namespace
