//===- Collectives.cpp - What an entry point communicates -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Collectives.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace loom;
using namespace loom::driver;

CollectiveVolume &CollectiveVolume::operator+=(const CollectiveVolume &o) {
  allReduces += o.allReduces;
  allReduceBytes += o.allReduceBytes;
  allGathers += o.allGathers;
  allGatherBytes += o.allGatherBytes;
  reduceScatters += o.reduceScatters;
  reduceScatterBytes += o.reduceScatterBytes;
  allToAlls += o.allToAlls;
  allToAllBytes += o.allToAllBytes;
  sends += o.sends;
  sendBytes += o.sendBytes;
  return *this;
}

std::string CollectiveVolume::str() const {
  std::string s = llvm::formatv("{0} all-reduce(s) of {1} bytes in all",
                                allReduces, allReduceBytes);
  if (allGathers || reduceScatters)
    s += llvm::formatv(", {0} all-gather(s) of {1} bytes, {2} "
                       "reduce-scatter(s) of {3} bytes",
                       allGathers, allGatherBytes, reduceScatters,
                       reduceScatterBytes);
  if (allToAlls)
    s += llvm::formatv(", {0} all-to-all(s) of {1} bytes", allToAlls,
                       allToAllBytes);
  if (sends)
    s += llvm::formatv(", {0} p2p send(s) of {1} bytes", sends, sendBytes);
  return s;
}

static int64_t bytesOf(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getNumElements() * int64_t(t.getElementTypeBitWidth() / 8);
}

/// The size of mesh axis `axis` of the mesh of `op`'s query (1 if unknown:
/// the verifier has checked it).
static int64_t ringSize(Operation *op, StringRef axis) {
  auto dist = tfm::getDist(op->getOperand(0));
  auto mesh = dist ? tfm::MeshAxesInfo::lookup(op, dist.getMesh())
                   : FailureOr<tfm::MeshAxesInfo>(failure());
  return succeeded(mesh) && mesh->index(axis) ? mesh->size(axis) : 1;
}

static void count(Operation *op, CollectiveVolume &v) {
  if (auto c = dyn_cast<mesh::AllReduceOp>(op)) {
    ++v.allReduces;
    v.allReduceBytes += bytesOf(c.getResult());
  } else if (auto c = dyn_cast<mesh::AllGatherOp>(op)) {
    ++v.allGathers;
    v.allGatherBytes += bytesOf(c.getResult());
  } else if (auto c = dyn_cast<mesh::ReduceScatterOp>(op)) {
    ++v.reduceScatters;
    v.reduceScatterBytes += bytesOf(c.getInput());
  } else if (auto c = dyn_cast<mesh::AllToAllOp>(op)) {
    ++v.allToAlls;
    v.allToAllBytes += bytesOf(c.getInput());
  } else if (auto a = dyn_cast<tfm::AttentionOp>(op); a && a.getRing()) {
    // A hierarchical ring (a2a A) runs over cp / A ranks, its blocks of
    // the same bytes (A times the tokens, 1/A of the heads), after
    // all-to-alls of q, k, v and before those of the output and lse.
    int64_t a2a = int64_t(a.getRingA2a().value_or(1));
    int64_t hops = ringSize(op, *a.getRing()) / a2a - 1;
    v.sends += 2 * hops;
    v.sendBytes += hops * (bytesOf(a.getKey()) + bytesOf(a.getValue()));
    if (a2a > 1) {
      v.allToAlls += 5;
      for (Value x : {a.getQuery(), a.getKey(), a.getValue(), a.getResult(),
                      a.getLse()})
        v.allToAllBytes += bytesOf(x);
    }
  } else if (auto g = dyn_cast<tfm::AttentionGradOp>(op); g && g.getRing()) {
    int64_t a2a = int64_t(g.getRingA2a().value_or(1));
    int64_t hops = ringSize(op, *g.getRing()) / a2a - 1;
    v.sends += 4 * hops;
    v.sendBytes += 2 * hops * (bytesOf(g.getKey()) + bytesOf(g.getValue()));
    if (a2a > 1) {
      // In: q, the output, its gradient and the lse (k and v start from
      // the forward's last block); out: the three gradients.
      v.allToAlls += 7;
      for (Value x : {g.getQuery(), g.getOut(), g.getOutGrad(), g.getLse(),
                      g.getQueryGrad(), g.getKeyGrad(), g.getValueGrad()})
        v.allToAllBytes += bytesOf(x);
    }
  }
}

EntryVolume loom::driver::collectiveVolume(func::FuncOp entry) {
  EntryVolume v;
  bool backward = false;
  for (Operation &op : entry.getBody().front()) {
    auto block = dyn_cast<tfm::BlockOp>(op);
    backward |= block && block.getBackward();
    v.hasBackward |= backward;
    CollectiveVolume &into = backward ? v.backward : v.forward;
    op.walk([&](Operation *inner) { count(inner, into); });
  }
  return v;
}
