//===- Lowering.cpp - Runtime lowerings of ops -------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/TfmDialect.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"

#include "passes/Lowering/RuntimeLoweringInterface.cpp.inc"

using namespace mlir;

void loom::lowering::registerRuntimeLowerings(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, tfm::TfmDialect *) {
    attachLayerLowerings(ctx);
    attachAttentionLowerings(ctx);
    attachCrossEntropyLowerings(ctx);
    attachCommunicationLowerings(ctx);
    attachMoeLowerings(ctx);
    attachMicrobatchLowerings(ctx);
  });
  registry.addExtension(+[](MLIRContext *ctx, mesh::MeshDialect *) {
    attachCollectiveLowerings(ctx);
  });
}
