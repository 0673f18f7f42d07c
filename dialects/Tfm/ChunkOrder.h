//===- ChunkOrder.h - Orders of a tensor dim's chunks -----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A chunk order says how a dim of a distributed tensor is stored: the dim is
// cut into K = order.size() equal chunks and stored chunk j is global chunk
// order[j]. Megatron's context parallelism stores the sequence in the
// "zigzag" (load-balanced) order of 2n chunks, so that rank r of n holds
// chunks r and 2n-1-r:
//
//   zigzag(2) = [0, 3, 1, 2]        zigzag(4) = [0, 7, 1, 6, 2, 5, 3, 4]
//
// Orders of different chunk counts describe the same layout when one refines
// the other ([0, 1] over 2 chunks is [0, 1, 2, 3] over 4); the canonical form
// is the coarsest order, and the natural order is the empty one.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_CHUNKORDER_H
#define LOOM_DIALECTS_TFM_CHUNKORDER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <optional>

namespace loom::tfm {

/// Megatron's load-balanced order of 2n chunks: 0, 2n-1, 1, 2n-2, ...
llvm::SmallVector<int64_t> zigzagOrder(int64_t n);

/// n when `order` is zigzagOrder(n) for some n >= 2.
std::optional<int64_t> zigzagPairs(llvm::ArrayRef<int64_t> order);

/// Whether `order` holds every index in [0, size) once.
bool isPermutation(llvm::ArrayRef<int64_t> order);

/// The coarsest order that stores chunks like `order` (empty when that is
/// the natural order). `order` must be a permutation.
llvm::SmallVector<int64_t> canonicalChunkOrder(llvm::ArrayRef<int64_t> order);

/// `order` over `factor` times as many chunks (each chunk cut in `factor`).
llvm::SmallVector<int64_t> refineChunkOrder(llvm::ArrayRef<int64_t> order,
                                            int64_t factor);

/// The order of a value stored in `stored` order after its chunks are
/// permuted by `permutation` (result chunk j = stored chunk permutation[j]),
/// canonical. Either may be empty (natural).
llvm::SmallVector<int64_t>
composeChunkOrders(llvm::ArrayRef<int64_t> stored,
                   llvm::ArrayRef<int64_t> permutation);

/// The permutation that turns a value stored in order `from` into one stored
/// in order `to`, over as few chunks as it can (empty: nothing to do).
llvm::SmallVector<int64_t> chunkOrderBetween(llvm::ArrayRef<int64_t> from,
                                             llvm::ArrayRef<int64_t> to);

} // namespace loom::tfm

#endif // LOOM_DIALECTS_TFM_CHUNKORDER_H
