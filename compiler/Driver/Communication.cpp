//===- Communication.cpp - What a rank program communicates ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Communication.h"
#include "compiler/Driver/Program.h"

#include "dialects/Tfm/TfmOps.h"
#include "passes/Lowering/Passes.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace loom;
using namespace loom::driver;

CollectiveVolume &CollectiveVolume::operator+=(const CollectiveVolume &o) {
  allReduce += o.allReduce;
  allGather += o.allGather;
  reduceScatter += o.reduceScatter;
  allToAll += o.allToAll;
  send += o.send;
  return *this;
}

CollectiveVolume CollectiveVolume::times(int64_t k) const {
  return {allReduce.times(k), allGather.times(k), reduceScatter.times(k),
          allToAll.times(k), send.times(k)};
}

std::string CollectiveVolume::str() const {
  std::string s = llvm::formatv("{0} all-reduce(s) of {1} bytes in all",
                                allReduce.count, allReduce.bytes);
  if (allGather.count || reduceScatter.count)
    s += llvm::formatv(", {0} all-gather(s) of {1} bytes, {2} "
                       "reduce-scatter(s) of {3} bytes",
                       allGather.count, allGather.bytes, reduceScatter.count,
                       reduceScatter.bytes);
  if (allToAll.count)
    s += llvm::formatv(", {0} all-to-all(s) of {1} bytes", allToAll.count,
                       allToAll.bytes);
  if (send.count)
    s += llvm::formatv(", {0} p2p send(s) of {1} bytes", send.count,
                       send.bytes);
  return s;
}

llvm::json::Object CollectiveVolume::json() const {
  return llvm::json::Object{{"all_reduce", allReduce.json()},
                            {"all_gather", allGather.json()},
                            {"reduce_scatter", reduceScatter.json()},
                            {"all_to_all", allToAll.json()},
                            {"p2p_send", send.json()}};
}

EntryVolume EntryVolume::times(int64_t k) const {
  EntryVolume v = *this;
  v.forward = forward.times(k);
  v.backward = backward.times(k);
  v.pipelineSends = pipelineSends.times(k);
  return v;
}

namespace {

int64_t bytesOf(Value v) { return driver::bytesOf(v.getType()); }

int64_t bytesOf(ValueRange values) {
  int64_t total = 0;
  for (Value v : values)
    total += bytesOf(v);
  return total;
}

/// The communication of one op that is not a call, into `v`; pipeline
/// sends into `pipeline`.
void count(Operation *op, CollectiveVolume &v, Traffic &pipeline) {
  if (auto c = dyn_cast<mesh::AllReduceOp>(op))
    v.allReduce += {1, bytesOf(c.getResult())};
  else if (auto c = dyn_cast<mesh::AllGatherOp>(op))
    v.allGather += {1, bytesOf(c.getResult())};
  else if (auto c = dyn_cast<mesh::ReduceScatterOp>(op))
    v.reduceScatter += {1, bytesOf(c.getInput())};
  else if (auto c = dyn_cast<mesh::AllToAllOp>(op))
    v.allToAll += {1, bytesOf(c.getInput())};
  else if (auto c = dyn_cast<tfm::LevelAllToAllOp>(op))
    v.allToAll += {1, bytesOf(c.getInput())};
  else if (auto c = dyn_cast<tfm::MoeGatherCountsOp>(op))
    v.allGather += {1, bytesOf(c.getResult())};
  else if (auto c = dyn_cast<tfm::MoeDispatchOp>(op))
    // Expert parallelism's all-to-alls: this rank's rows out (and back in
    // the combine), whoever holds their experts. The allgather dispatcher
    // gathers every rank's rows ([ep * rows], the dispatched bound) and
    // reduce-scatters them back.
    (c.getAllgather() ? v.allGather : v.allToAll) +=
        {1, bytesOf(c.getAllgather() ? c.getDispatched() : c.getRows())};
  else if (auto c = dyn_cast<tfm::MoeCombineOp>(op))
    (c.getAllgather() ? v.reduceScatter : v.allToAll) +=
        {1, bytesOf(c.getAllgather() ? c.getDispatched() : c.getRows())};
  else if (auto c = dyn_cast<tfm::RingShiftOp>(op))
    // Every input goes to the next rank of the ring.
    v.send += {int64_t(c.getInputs().size()), bytesOf(c.getInputs())};
  else if (auto c = dyn_cast<tfm::PipelineP2POp>(op))
    pipeline += {int64_t(c.getSends().size()), bytesOf(c.getSends())};
}

/// How many times `op` runs per call of its function: the trips of the
/// loops around it (a pipelined step's steady phase).
int64_t runsPerCall(Operation *op) {
  int64_t runs = 1;
  for (auto loop = op->getParentOfType<scf::ForOp>(); loop;
       loop = loop->getParentOfType<scf::ForOp>()) {
    std::optional<int64_t> lb = getConstantIntValue(loop.getLowerBound()),
                           ub = getConstantIntValue(loop.getUpperBound()),
                           step = getConstantIntValue(loop.getStep());
    if (lb && ub && step && *step > 0)
      runs *= std::max<int64_t>(0, llvm::divideCeil(*ub - *lb, *step));
  }
  return runs;
}

class Counter {
public:
  explicit Counter(ModuleOp module) : symbols(module) {}

  EntryVolume of(func::FuncOp f) {
    auto it = counted.find(f);
    if (it != counted.end())
      return it->second;
    EntryVolume v;
    // Forward until a step marker or a backward block's op says otherwise;
    // what follows the first backward op stays backward.
    bool backward = false;
    f.walk([&](Operation *op) {
      if (auto step = dyn_cast<tfm::PipelineStepOp>(op)) {
        backward = step.getBackward();
        v.hasBackward |= backward;
        return;
      }
      if (!backward && lowering::isFromBackwardBlock(op->getLoc()))
        v.hasBackward = backward = true;
      if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
        if (!callee || callee.isExternal())
          return;
        EntryVolume c = of(callee).times(runsPerCall(op));
        v.hasBackward |= c.hasBackward;
        if (backward) {
          v.backward += c.total();
        } else {
          v.forward += c.forward;
          v.backward += c.backward;
        }
        v.pipelineSends += c.pipelineSends;
        return;
      }
      CollectiveVolume once;
      Traffic sends;
      count(op, once, sends);
      int64_t runs = runsPerCall(op);
      (backward ? v.backward : v.forward) += once.times(runs);
      v.pipelineSends += sends.times(runs);
    });
    counted[f] = v;
    return v;
  }

private:
  SymbolTable symbols;
  llvm::DenseMap<func::FuncOp, EntryVolume> counted;
};

} // namespace

EntryVolume loom::driver::countCommunication(func::FuncOp entry) {
  return Counter(entry->getParentOfType<ModuleOp>()).of(entry);
}
