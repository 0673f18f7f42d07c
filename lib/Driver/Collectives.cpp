//===- Collectives.cpp - What an entry point communicates -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "Collectives.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
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
  return s;
}

static int64_t bytesOf(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getNumElements() * int64_t(t.getElementTypeBitWidth() / 8);
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
