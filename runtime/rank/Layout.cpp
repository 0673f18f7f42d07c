//===- Layout.cpp - Boxes of row-major tensors ----------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Layout.h"

#include <cstring>

namespace loom::rank {

Shape contiguousStrides(const Shape &shape) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

StridedView hfViewOfBox(const ParamSpec &param, const Box &box) {
  Shape hfStrides = contiguousStrides(param.hf.shape);
  size_t rank = param.shape.size();
  StridedView view;
  view.strides.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    // Parameter dim d runs along HF dim hd (swapped when transposed).
    size_t hd = param.hf.transpose ? 1 - d : d;
    view.strides[d] = hfStrides[hd];
    view.base += hfStrides[hd] * (param.hf.offset[hd] + box.offset[d]);
  }
  return view;
}

void copyStrided(const Shape &shape, int64_t elemBytes, const void *srcData,
                 const StridedView &src, void *dstData,
                 const StridedView &dst) {
  if (numElements(shape) == 0)
    return;
  const char *s = static_cast<const char *>(srcData);
  char *t = static_cast<char *>(dstData);
  size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(t + dst.base * elemBytes, s + src.base * elemBytes, elemBytes);
    return;
  }
  // Walk every index of the leading dims; the innermost dim is one memcpy
  // when both sides are contiguous along it, else an element loop.
  int64_t inner = shape[rank - 1];
  bool contiguous = src.strides[rank - 1] == 1 && dst.strides[rank - 1] == 1;
  Shape index(rank, 0);
  while (true) {
    int64_t so = src.base, to = dst.base;
    for (size_t d = 0; d + 1 < rank; ++d) {
      so += index[d] * src.strides[d];
      to += index[d] * dst.strides[d];
    }
    if (contiguous) {
      std::memcpy(t + to * elemBytes, s + so * elemBytes, inner * elemBytes);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(t + (to + i * dst.strides[rank - 1]) * elemBytes,
                    s + (so + i * src.strides[rank - 1]) * elemBytes,
                    elemBytes);
    }
    // Next index of the leading dims (odometer order).
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
      if (d == 0)
        return;
    }
    if (rank == 1)
      return;
  }
}

} // namespace loom::rank
