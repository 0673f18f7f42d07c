//===- SlicePositions.h - Where a rank's slice lies --------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Some kernels need to know where this rank's piece of a distributed value
// lies in the global tensor: a vocab-parallel embedding's first row, the
// label offset of vocab-parallel cross-entropy pieces, dropout's global
// element indices, the sequence positions of a context-parallel rank's
// tokens (position ids, attention's causal mask). The piece of a dim split
// over axes A starts at the rank's index in A's process group times the
// local size (in the dim's chunk order), so these ops take a communicator of
// that group (tfm-comms-to-args) and the lowering asks it for the rank.
// Both read the ops' needs here.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_SLICEPOSITIONS_H
#define LOOM_PASSES_LOWERING_SLICEPOSITIONS_H

#include "dialects/Tfm/Distribution.h"

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <string>

namespace loom::lowering {

/// A dim of an operand or result whose kernel reads global positions.
struct PositionedDim {
  mlir::Value value;
  int64_t dim;
  /// The process group whose rank orders the slices ("tp", "cp-tp"); empty
  /// when the dim is whole (the slice starts at 0).
  std::string group;
  /// The dim's chunk order (ChunkOrder.h); empty when natural.
  llvm::SmallVector<int64_t> chunks;
  /// How many slices the dim is split into (the product of its mesh axes'
  /// sizes); 1 when whole.
  int64_t parts = 1;

  /// Whether the kernel can read positions 0, 1, ... (whole, in order).
  bool isIdentity() const { return group.empty() && chunks.empty(); }
};

/// The dims of `op`'s values whose global positions its kernel reads
/// (none for most ops). Fails with an error at `op` for layouts the kernels
/// do not take (a reordered vocabulary, several split dims of one dropout
/// input, position ids reset at documents of a split sequence).
mlir::FailureOr<llvm::SmallVector<PositionedDim>>
positionedDims(mlir::Operation *op);

} // namespace loom::lowering

#endif // LOOM_PASSES_LOWERING_SLICEPOSITIONS_H
