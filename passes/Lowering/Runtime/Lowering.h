//===- Lowering.h - Runtime lowerings of ops ---------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// RuntimeLoweringInterface and its models: each file attaches the lowerings
// of one concern, and registerRuntimeLowerings attaches them all (the pass
// does so itself, through its dependent dialects, and so does InitAll).
//
// A model is one function per op:
//
//   LogicalResult lower(SiluOp op, SiluOp::Adaptor a, Emitter &e) {
//     Value out = e.result(0);
//     e.call(rt::SiluForward{.dtype = e.dtype(out), ...});
//     return success();
//   }
//
// attached with attach<SiluOp, ...>(ctx).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_RUNTIME_LOWERING_H
#define LOOM_PASSES_LOWERING_RUNTIME_LOWERING_H

#include "passes/Lowering/Runtime/Emitter.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"

#include "passes/Lowering/RuntimeLoweringInterface.h.inc"

namespace loom::lowering {

/// Attaches every op's runtime lowering when the tfm and mesh dialects load.
void registerRuntimeLowerings(mlir::DialectRegistry &registry);

/// One lowering per op, defined in the file of its concern.
template <typename OpT>
mlir::LogicalResult lower(OpT op, typename OpT::Adaptor a, Emitter &e);

/// The model that calls `lower<OpT>` with the op's buffers as its adaptor.
template <typename OpT>
struct LowerModel
    : RuntimeLoweringInterface::ExternalModel<LowerModel<OpT>, OpT> {
  mlir::LogicalResult lowerToRuntime(mlir::Operation *op, Emitter &e) const {
    auto typed = mlir::cast<OpT>(op);
    return lower(typed, typename OpT::Adaptor(e.operands(), typed), e);
  }
};

template <typename... Ops> void attach(mlir::MLIRContext *ctx) {
  (Ops::template attachInterface<LowerModel<Ops>>(*ctx), ...);
}

/// A ring of ranks (ring attention's hops and sections, pipeline stages, a
/// level of the hierarchical cp groups): its communicator handle, this
/// rank's place in it (an int64) and its size.
struct Ring {
  rt::Ptr handle;
  mlir::Value rank;
  int64_t size;
};
/// The ring the emitter's op runs on (ringGroupOf).
mlir::FailureOr<Ring> ringOf(Emitter &e);
/// (rank + offset) mod size, for any offset.
mlir::Value ringPeer(const Ring &ring, int64_t offset, Emitter &e);

// The concerns (Layers.cpp, Attention.cpp, CrossEntropy.cpp,
// Communication.cpp, Moe.cpp, Microbatches.cpp).
void attachLayerLowerings(mlir::MLIRContext *ctx);
void attachAttentionLowerings(mlir::MLIRContext *ctx);
void attachCrossEntropyLowerings(mlir::MLIRContext *ctx);
void attachCommunicationLowerings(mlir::MLIRContext *ctx);
void attachMoeLowerings(mlir::MLIRContext *ctx);
void attachMicrobatchLowerings(mlir::MLIRContext *ctx);
void attachCollectiveLowerings(mlir::MLIRContext *ctx);

} // namespace loom::lowering

#endif // LOOM_PASSES_LOWERING_RUNTIME_LOWERING_H
