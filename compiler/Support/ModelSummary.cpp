//===- ModelSummary.cpp - Human-readable summary of a tfm module -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/ModelSummary.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace loom::tfm;

/// 124439808 -> "124,439,808".
static std::string withCommas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

void loom::printModelSummary(ModuleOp module, llvm::raw_ostream &os) {
  if (auto model = module->getAttrOfType<DictionaryAttr>("tfm.model")) {
    auto i = [&](StringRef key) -> int64_t {
      auto a = model.getAs<IntegerAttr>(key);
      return a ? a.getInt() : 0;
    };
    auto family = model.getAs<StringAttr>("family");
    os << "model: " << (family ? family.getValue() : "?") << ", "
       << i("num_layers") << " layers, hidden " << i("hidden_size")
       << ", ffn " << i("ffn_hidden_size") << ", heads " << i("num_heads")
       << " (kv " << i("num_kv_heads") << ", head_dim " << i("head_dim")
       << "), vocab " << i("vocab_size") << "\n";
    os << "shape: micro-batch " << i("micro_batch_size") << ", sequence "
       << i("seq_length") << "\n";
  }

  int64_t numParams = 0, numElements = 0, numBytes = 0;
  Type elementType;
  module.walk([&](ParamOp p) {
    ++numParams;
    numElements += p.getNumElements();
    Type e = p.getTensorType().getElementType();
    numBytes += p.getNumElements() * e.getIntOrFloatBitWidth() / 8;
    elementType = e;
  });
  os << "parameters: " << numParams << " tensors, " << withCommas(numElements)
     << " elements, "
     << llvm::format("%.2f", double(numBytes) / (1024.0 * 1024.0)) << " MiB";
  if (elementType)
    os << " (" << elementType << ")";
  os << "\n";

  llvm::MapVector<StringRef, int64_t> blocks, ops;
  module.walk([&](Operation *op) {
    if (auto block = dyn_cast<BlockOp>(op))
      ++blocks[stringifyBlockKind(block.getKind())];
    if (isa<TfmDialect>(op->getDialect()) &&
        !isa<ParamOp, GetParamOp, BlockOp, YieldOp>(op))
      ++ops[op->getName().getStringRef()];
  });
  os << "blocks:";
  for (auto [kind, count] : blocks)
    os << " " << kind << " " << count;
  os << "\nops:";
  for (auto [name, count] : ops)
    os << " " << name << " " << count;
  os << "\n";
  for (auto func : module.getOps<func::FuncOp>())
    os << "function: @" << func.getName() << " : " << func.getFunctionType()
       << "\n";
}
