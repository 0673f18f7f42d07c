//===- Distribution.h - Distributed tensor values ---------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What the sharding passes, the distribution rules and the lowering share
// about distributed values: a value's #tfm.dist (its type's encoding), the
// axes of the mesh it names, and the per-rank shape of a global one.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_DISTRIBUTION_H
#define LOOM_DIALECTS_TFM_DISTRIBUTION_H

#include "dialects/Tfm/TfmAttrs.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace loom::tfm {

/// The tfm dialect's activation layout, [batch, seq, features...] (and
/// [batch, seq] for token ids, labels and masks): sharding and lowering
/// name these dims rather than write their numbers.
inline constexpr int64_t kBatchDim = 0;
inline constexpr int64_t kSeqDim = 1;

/// The distribution of a tensor type or value (null when it has none).
DistAttr getDist(mlir::Type type);
inline DistAttr getDist(mlir::Value v) { return getDist(v.getType()); }

/// `type` (a ranked tensor) with distribution `dist` (null: none).
mlir::RankedTensorType withDist(mlir::Type type, DistAttr dist);

/// Whether the module's distributed tensors have per-rank shapes.
bool hasLocalShapes(mlir::ModuleOp module);

/// "replicated", "split on dim 2 over tp", "a partial sum over tp", ...: a
/// distribution as diagnostics say it.
std::string describe(DistAttr dist);

/// The named axes of a mesh.mesh (its tfm.mesh_axes) with their sizes.
class MeshAxesInfo {
public:
  /// The axes of the mesh `mesh` names, looked up from `from`; emits an
  /// error at `from` when the mesh or its axis names are missing.
  static mlir::FailureOr<MeshAxesInfo> lookup(mlir::Operation *from,
                                              mlir::FlatSymbolRefAttr mesh);
  /// The axes of `meshOp`; failure when it has no tfm.mesh_axes.
  static mlir::FailureOr<MeshAxesInfo> of(mlir::Operation *meshOp);

  llvm::ArrayRef<std::string> names() const { return axisNames; }
  /// Position of axis `name` in the mesh, if it has one.
  std::optional<int16_t> index(llvm::StringRef name) const;
  llvm::StringRef name(int64_t index) const { return axisNames[index]; }
  int64_t size(llvm::StringRef name) const;
  /// The product of the sizes of `axes`.
  int64_t product(llvm::ArrayRef<llvm::StringRef> axes) const;
  /// The positions of `axes` (all of which the mesh has).
  llvm::SmallVector<int16_t> indices(llvm::ArrayRef<llvm::StringRef> axes) const;
  /// The process-group kind of `axes` as the rank generator names it: the
  /// axes' names in the plan's order, fastest first ("tp", "tp-cp"). Mesh
  /// axes are the order reversed, so that is descending mesh position. On
  /// the expert world's mesh the kind is an expert one ("expert:ep").
  std::string groupKind(llvm::ArrayRef<llvm::StringRef> axes) const;
  /// Checks that the mesh has every axis `dist` names (in any order within
  /// a dim); emits an error at `where` otherwise.
  mlir::LogicalResult verify(DistAttr dist, mlir::Operation *where) const;

private:
  std::vector<std::string> axisNames;
  llvm::SmallVector<int64_t> sizes;
};

/// The axes of every mesh a pass meets, looked up once each.
class MeshAxesCache {
public:
  /// The axes of mesh `mesh`, or null (with an error at `where`) when it is
  /// missing or has no axis names.
  const MeshAxesInfo *get(mlir::Operation *where, mlir::FlatSymbolRefAttr mesh);

private:
  llvm::StringMap<MeshAxesInfo> meshes;
};

/// The shape each rank holds of a `global` tensor distributed as `dist`;
/// emits an error at `where` (naming `what`) when a split does not divide.
mlir::FailureOr<llvm::SmallVector<int64_t>>
localShape(llvm::ArrayRef<int64_t> global, DistAttr dist,
           const MeshAxesInfo &mesh, mlir::Operation *where,
           llvm::StringRef what);

/// The global shape of which `local` is each rank's piece.
llvm::SmallVector<int64_t> globalShape(llvm::ArrayRef<int64_t> local,
                                       DistAttr dist, const MeshAxesInfo &mesh);

} // namespace loom::tfm

#endif // LOOM_DIALECTS_TFM_DISTRIBUTION_H
