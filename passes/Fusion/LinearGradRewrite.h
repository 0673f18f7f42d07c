//===- LinearGradRewrite.h - Replacing a fused tfm.linear_grad --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What the activation fusions (tfm-fuse-linear-gelu, -swiglu) do alike when
// a fused op takes a tfm.linear_grad's place.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_FUSION_LINEARGRADREWRITE_H
#define LOOM_PASSES_FUSION_LINEARGRADREWRITE_H

#include "dialects/Tfm/TfmOps.h"

namespace loom::fusion {

/// The readers of `old`'s weight and bias gradients read the fused op's
/// `weightGrad` and `biasGrad` instead; `old`, whose input gradient nothing
/// reads any more, goes.
inline void replaceLinearGrad(tfm::LinearGradOp old, mlir::Value weightGrad,
                              mlir::Value biasGrad) {
  old.getWeightGrad().replaceAllUsesWith(weightGrad);
  if (mlir::Value db = old.getBiasGrad())
    db.replaceAllUsesWith(biasGrad);
  old.erase();
}

} // namespace loom::fusion

#endif // LOOM_PASSES_FUSION_LINEARGRADREWRITE_H
