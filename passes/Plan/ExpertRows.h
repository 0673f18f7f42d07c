//===- ExpertRows.h - The chain of ops on an MoE layer's rows ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Between tfm.moe_permute and tfm.moe_unpermute an MoE layer's experts work
// on rows [N, features] grouped by expert: grouped linears, activations and
// casts. Passes that change how many rows there are (capacity, expert
// dispatch) change the whole chain; this walks it.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PLAN_EXPERTROWS_H
#define LOOM_PASSES_PLAN_EXPERTROWS_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

namespace loom::plan {

/// Gives `rows` and every value computed from them row by row (through
/// tfm.grouped_linear inputs, activations and casts) `n` rows, up to the
/// tfm.moe_unpermute ops that read them, whose row operands it returns.
/// Fails with an error naming `pass` at an op that reads the rows otherwise.
mlir::FailureOr<llvm::SmallVector<mlir::OpOperand *>>
resizeExpertRows(mlir::Value rows, int64_t n, llvm::StringRef pass);

} // namespace loom::plan

#endif // LOOM_PASSES_PLAN_EXPERTROWS_H
