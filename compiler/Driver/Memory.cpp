//===- Memory.cpp - The buffers a rank program holds at once ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Memory.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace {

int64_t bytesOf(MemRefType t) {
  return t.getNumElements() * int64_t(t.getElementTypeBitWidth() / 8);
}

class Peaks {
public:
  explicit Peaks(ModuleOp module) : symbols(module) {}

  int64_t of(func::FuncOp f) {
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
          peak = std::max(peak, live + of(callee));
      }
    });
    peaks[f] = peak;
    return peak;
  }

private:
  SymbolTable symbols;
  llvm::DenseMap<func::FuncOp, int64_t> peaks;
};

} // namespace

int64_t loom::driver::peakBufferBytes(func::FuncOp entry) {
  return Peaks(entry->getParentOfType<ModuleOp>()).of(entry);
}
