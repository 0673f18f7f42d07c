//===- Memory.cpp - The buffers a rank program holds at once ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Memory.h"
#include "compiler/Driver/Program.h"

#include "dialects/Tfm/TfmAttrs.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using loom::driver::bytesOf;

namespace {

class Peaks {
public:
  explicit Peaks(ModuleOp module) : symbols(module) {}

  /// The function's workspace (which holds its callees' workspaces too)
  /// plus, at the worst moment, the buffers it and its callees allocate
  /// outside one.
  int64_t of(func::FuncOp f) { return workspace(f) + outside(f); }

private:
  static int64_t workspace(func::FuncOp f) {
    auto w = f->getAttrOfType<IntegerAttr>(loom::tfm::kWorkspaceAttrName);
    return w ? w.getInt() : 0;
  }

  int64_t outside(func::FuncOp f) {
    if (auto it = peaks.find(f); it != peaks.end())
      return it->second;
    int64_t live = 0, peak = 0;
    f.walk([&](Operation *op) {
      if (auto alloc = dyn_cast<memref::AllocOp>(op)) {
        peak = std::max(peak, live += bytesOf(alloc.getType()));
      } else if (auto dealloc = dyn_cast<memref::DeallocOp>(op)) {
        live -= bytesOf(cast<MemRefType>(dealloc.getMemref().getType()));
      } else if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
        if (callee && !callee.isExternal())
          peak = std::max(peak, live + outside(callee));
      }
    });
    peaks[f] = peak;
    return peak;
  }

  SymbolTable symbols;
  llvm::DenseMap<func::FuncOp, int64_t> peaks;
};

} // namespace

int64_t loom::driver::peakBufferBytes(func::FuncOp entry) {
  return Peaks(entry->getParentOfType<ModuleOp>()).of(entry);
}
