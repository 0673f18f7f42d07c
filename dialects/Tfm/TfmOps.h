//===- TfmOps.h - Transformer ops -------------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMOPS_H
#define LOOM_DIALECTS_TFM_TFMOPS_H

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Tfm/TfmEnums.h.inc"

namespace loom::tfm {
/// DistributedOpInterface's check: the results' distributions are the ones
/// inferResultDistributions gives.
llvm::LogicalResult verifyInferredDistributions(mlir::Operation *op);
} // namespace loom::tfm

#include "dialects/Tfm/TfmInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Tfm/TfmOps.h.inc"

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace loom::tfm {
/// Attaches the distribution rules of upstream mesh collectives
/// (DistributedOpInterface external models, TfmDistributionRules.cpp).
void registerDistributionExternalModels(mlir::DialectRegistry &registry);

/// Whether embedding ids `ids` are position ids (a tfm.position_ids,
/// through block arguments and results): the table they index has a row
/// per position, not per token.
bool isPositionIds(mlir::Value ids);

/// Whether `op` may write its result over the buffer of `v` (a
/// linear_grad's `accumulate`): `v` is an op's value in `op`'s block (an
/// argument's buffer may be the caller's) and every reader of it other
/// than `op` (and `except`) runs before `op`.
bool overwritableAt(mlir::Value v, mlir::Operation *op,
                    mlir::Operation *except = nullptr);
} // namespace loom::tfm

#endif // LOOM_DIALECTS_TFM_TFMOPS_H
