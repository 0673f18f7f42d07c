//===- Layout.h - Boxes of row-major tensors --------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A parameter shard is a box of the global parameter, and a parameter is a
// box (possibly transposed) of its Hugging Face tensor, so a shard is a
// strided view of the HF tensor. Saving and loading are then one strided
// copy per shard:
//
//   q.weight [64 out, 64 in], shard rows 32:64, hf c_attn [64 in, 192 out]
//   transposed at offset [0, 0]: shard element (i, j) (global (32+i, j)) is
//   c_attn[j, 32+i], i.e. base 32, strides {1, 192} in c_attn.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_LAYOUT_H
#define LOOM_RUNTIME_RANK_LAYOUT_H

#include "runtime/rank/Manifest.h"

namespace loom::rank {

/// A view of `shape` elements at `base` (an element offset) with per-dim
/// element strides.
struct StridedView {
  int64_t base = 0;
  Shape strides;
};

/// Row-major strides of a contiguous tensor of `shape`.
Shape contiguousStrides(const Shape &shape);

/// The view of the HF tensor that holds `box` of parameter `param`.
StridedView hfViewOfBox(const ParamSpec &param, const Box &box);

/// Copies `shape` elements of `elemBytes` bytes from view `src` of `srcData`
/// to view `dst` of `dstData` (no conversion).
void copyStrided(const Shape &shape, int64_t elemBytes, const void *srcData,
                 const StridedView &src, void *dstData, const StridedView &dst);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_LAYOUT_H
