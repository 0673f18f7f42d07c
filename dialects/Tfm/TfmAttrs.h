//===- TfmAttrs.h - Transformer dialect attributes --------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMATTRS_H
#define LOOM_DIALECTS_TFM_TFMATTRS_H

#include "loom/RankGen/ParallelLayout.h"

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"

#define GET_ATTRDEF_CLASSES
#include "dialects/Tfm/TfmAttrs.h.inc"

namespace loom::tfm {
/// The module attribute that holds the plan.
inline constexpr llvm::StringLiteral kPlanAttrName = "tfm.plan";
} // namespace loom::tfm

#endif // LOOM_DIALECTS_TFM_TFMATTRS_H
