//===- TfmDialect.cpp - Transformer dialect ---------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/TfmDialect.h"
#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmOps.h"

using namespace mlir;
using namespace loom::tfm;

#include "dialects/Tfm/TfmOpsDialect.cpp.inc"

void TfmDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Tfm/TfmOps.cpp.inc"
      >();
  registerAttributes();
}
