//===- TfmDialect.h - Transformer dialect -----------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMDIALECT_H
#define LOOM_DIALECTS_TFM_TFMDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/Tfm/TfmOpsDialect.h.inc"

#endif // LOOM_DIALECTS_TFM_TFMDIALECT_H
