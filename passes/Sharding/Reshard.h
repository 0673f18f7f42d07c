//===- Reshard.h - Collectives from one distribution to another -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_RESHARD_H
#define LOOM_PASSES_SHARDING_RESHARD_H

#include "dialects/Tfm/Distribution.h"

#include "mlir/IR/Builders.h"

namespace loom::sharding {

/// Emits at `b`'s insertion point the mesh collectives (and local chunk
/// reorders) that turn `v` (a per-rank value, distributed as its type says)
/// into the value distributed as `to` on the same mesh, and returns it.
/// Fails with an error at `where` when no collectives can (a value made
/// partial, a mesh with no such axis).
mlir::FailureOr<mlir::Value> reshard(mlir::OpBuilder &b, mlir::Operation *where,
                                     mlir::Value v, tfm::DistAttr to,
                                     const tfm::MeshAxesInfo &mesh);

} // namespace loom::sharding

#endif // LOOM_PASSES_SHARDING_RESHARD_H
