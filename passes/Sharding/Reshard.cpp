//===- Reshard.cpp - Collectives from one distribution to another -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// reshard(v, to) changes a value's distribution in four steps, each emitting
// collectives only for what differs (axes in mesh order, so a collective's
// group is the runtime communicator of those axes):
//
// 1. Partial axes the target does not have are reduced: into a dim the
//    target splits over them (reduce_scatter), or whole (all_reduce).
//      partial = sum[tp]          -> [[], [tp]]       reduce_scatter dim 1
//      partial = sum[tp]          -> replicated       all_reduce
//    A whole dim the target keeps in another chunk order is reordered
//    first (a sum's terms reorder alike):
//      partial = sum[cp]          -> [[], [cp] zigzag(2)]
//                                    permute_chunks [0,3,1,2], reduce_scatter
// 2. Split axes the target does not keep are gathered, from the minor end
//    of a dim's axes; a single axis that moves to another dim is an
//    all_to_all instead.
//      [[], [tp]]                 -> replicated       all_gather dim 1
//      [[], [cp], []]             -> [[], [], [cp]]   all_to_all 1 -> 2
//    (a whole dim the axis moves into, in another chunk order, reordered
//    first: Ulysses' way back to the load-balanced sequence)
// 3. A whole dim whose chunk order differs is reordered locally.
//      [[], [cp] zigzag(2)]       -> all_gather, then
//      [[], [] zigzag(2)]         -> replicated       permute_chunks [0,2,3,1]
// 4. Split axes the target adds are sliced (all_slice: no communication).
//      replicated                 -> [[], [tp]]       all_slice dim 1
//
// A dim whose chunk order changes is gathered whole first and sliced again
// after the reorder. A value cannot be made partial.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Reshard.h"

#include "dialects/Tfm/ChunkOrder.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"

using namespace mlir;
using namespace loom;
using tfm::DimDist;
using tfm::DistAttr;

namespace {

/// Emits one step at a time and keeps the value and its distribution.
class Resharder {
public:
  Resharder(OpBuilder &b, Operation *where, Value v,
            const tfm::MeshAxesInfo &mesh)
      : b(b), where(where), loc(where->getLoc()), v(v), mesh(mesh),
        meshName(tfm::getDist(v).getMesh().getValue()) {}

  FailureOr<Value> run(DistAttr to);

private:
  DistAttr cur() const { return tfm::getDist(v); }
  int64_t rank() const { return cast<RankedTensorType>(v.getType()).getRank(); }
  SmallVector<int16_t> indices(ArrayRef<StringRef> axes) const {
    return mesh.indices(axes);
  }
  /// `v`'s type with dim `d` scaled by `num / den` and distribution `dist`.
  Type typeWith(int64_t d, int64_t num, int64_t den, DistAttr dist) const {
    auto t = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(t.getShape());
    shape[d] = shape[d] * num / den;
    return RankedTensorType::get(shape, t.getElementType(), dist);
  }

  LogicalResult reducePartials(DistAttr to);
  LogicalResult gather(DistAttr to);
  void reorder(DistAttr to);
  void slice(DistAttr to);

  OpBuilder &b;
  Operation *where;
  Location loc;
  Value v;
  const tfm::MeshAxesInfo &mesh;
  StringRef meshName;
};

/// The prefix of `dim`'s axes that `to`'s dim keeps as they are (with the
/// same chunk order); the rest must be gathered.
size_t keptPrefix(const DimDist &from, const DimDist &to) {
  if (from.chunks != to.chunks)
    return 0;
  size_t n = 0;
  while (n < from.axes.size() && n < to.axes.size() &&
         from.axes[n] == to.axes[n])
    ++n;
  return n;
}

LogicalResult Resharder::reducePartials(DistAttr to) {
  SmallVector<StringRef> keep = to.getPartialAxes(), drop;
  for (StringRef a : cur().getPartialAxes())
    if (!llvm::is_contained(keep, a))
      drop.push_back(a);
  if (drop.empty())
    return success();
  if (!keep.empty() && to.getReduction() != cur().getReduction())
    return where->emitError() << "cannot reshard " << tfm::describe(cur())
                              << " to " << tfm::describe(to);
  mesh::ReductionKind kind = cur().getReduction();
  // A sum the target splits a dim over: reduce-scatter that dim.
  for (int64_t d = 0; d < rank() && kind == mesh::ReductionKind::Sum; ++d) {
    DimDist from = cur().getDim(d), want = to.getDim(d);
    // A whole dim is reordered first (a partial sum reorders like its
    // terms), so that the scatter leaves each rank its chunks.
    bool reorder = from.isWhole() && from.chunks != want.chunks;
    if ((from.chunks != want.chunks && !reorder) ||
        keptPrefix(reorder ? DimDist{{}, want.chunks} : from, want) !=
            from.axes.size())
      continue;
    SmallVector<StringRef> scatter;
    for (size_t i = from.axes.size(); i < want.axes.size(); ++i) {
      if (!llvm::is_contained(drop, want.axes[i]))
        break;
      scatter.push_back(want.axes[i]);
    }
    if (scatter.empty())
      continue;
    if (reorder) {
      DistAttr next = cur().withDim(d, DimDist{{}, want.chunks});
      v = b.create<tfm::PermuteChunksOp>(
          loc, tfm::withDist(v.getType(), next), v, d,
          tfm::chunkOrderBetween(from.chunks, want.chunks));
      from = cur().getDim(d);
    }
    SmallVector<StringRef> partial = cur().getPartialAxes(), axes = from.axes;
    llvm::erase_if(partial, [&](StringRef a) {
      return llvm::is_contained(scatter, a);
    });
    llvm::append_range(axes, scatter);
    DistAttr next = cur().withPartial(partial, kind).withAxes(d, axes);
    v = b.create<mesh::ReduceScatterOp>(
        loc, typeWith(d, 1, mesh.product(scatter), next), meshName,
        indices(scatter), v, kind, APInt(64, d));
    llvm::erase_if(drop, [&](StringRef a) {
      return llvm::is_contained(scatter, a);
    });
  }
  if (drop.empty())
    return success();
  llvm::sort(drop, [&](StringRef a, StringRef b) {
    return *mesh.index(a) < *mesh.index(b);
  });
  SmallVector<StringRef> partial = cur().getPartialAxes();
  llvm::erase_if(partial,
                 [&](StringRef a) { return llvm::is_contained(drop, a); });
  DistAttr next = cur().withPartial(partial, kind);
  v = b.create<mesh::AllReduceOp>(loc, tfm::withDist(v.getType(), next),
                                  meshName, indices(drop), v, kind);
  return success();
}

LogicalResult Resharder::gather(DistAttr to) {
  for (int64_t d = 0; d < rank(); ++d) {
    DimDist from = cur().getDim(d);
    size_t kept = keptPrefix(from, to.getDim(d));
    if (kept == from.axes.size())
      continue;
    ArrayRef<StringRef> extra = ArrayRef<StringRef>(from.axes).drop_front(kept);
    SmallVector<StringRef> rest(from.axes.begin(), from.axes.begin() + kept);
    // One axis moving to another dim, appended to what that dim keeps:
    // an all-to-all.
    if (extra.size() == 1) {
      for (int64_t e = 0; e < rank(); ++e) {
        DimDist there = cur().getDim(e), want = to.getDim(e);
        // A whole dim the target splits in another chunk order is
        // reordered first, so that the exchange leaves each rank its chunks.
        bool reorder = there.isWhole() && there.chunks != want.chunks;
        DimDist ordered = reorder ? DimDist{{}, want.chunks} : there;
        if (e == d || ordered.chunks != want.chunks ||
            want.axes.size() != there.axes.size() + 1 ||
            keptPrefix(ordered, want) != there.axes.size() ||
            want.axes.back() != extra[0])
          continue;
        int64_t n = mesh.product(extra);
        auto t = cast<RankedTensorType>(v.getType());
        if (t.getDimSize(e) % n != 0)
          continue;
        if (reorder)
          v = b.create<tfm::PermuteChunksOp>(
              loc, tfm::withDist(v.getType(), cur().withDim(e, ordered)), v, e,
              tfm::chunkOrderBetween(there.chunks, want.chunks));
        DistAttr next = cur().withAxes(d, rest).withAxes(e, want.axes);
        SmallVector<int64_t> shape(t.getShape());
        shape[d] *= n;
        shape[e] /= n;
        v = b.create<mesh::AllToAllOp>(
            loc, RankedTensorType::get(shape, t.getElementType(), next),
            meshName, indices(extra), v, APInt(64, e), APInt(64, d));
        break;
      }
      if (cur().getDim(d).axes.size() == kept)
        continue;
    }
    DistAttr next = cur().withAxes(d, rest);
    v = b.create<mesh::AllGatherOp>(loc,
                                    typeWith(d, mesh.product(extra), 1, next),
                                    meshName, indices(extra), v, APInt(64, d));
  }
  return success();
}

void Resharder::reorder(DistAttr to) {
  for (int64_t d = 0; d < rank(); ++d) {
    DimDist from = cur().getDim(d), want = to.getDim(d);
    if (from.chunks == want.chunks)
      continue;
    assert(from.axes.empty() && "gathered before reordering");
    SmallVector<int64_t> order = tfm::chunkOrderBetween(from.chunks,
                                                        want.chunks);
    DistAttr next = cur().withDim(d, DimDist{{}, want.chunks});
    v = b.create<tfm::PermuteChunksOp>(loc, tfm::withDist(v.getType(), next),
                                       v, d, order);
  }
}

void Resharder::slice(DistAttr to) {
  for (int64_t d = 0; d < rank(); ++d) {
    SmallVector<StringRef> have = cur().getAxes(d), want = to.getAxes(d);
    if (have.size() == want.size())
      continue;
    ArrayRef<StringRef> add = ArrayRef<StringRef>(want).drop_front(have.size());
    DistAttr next = cur().withAxes(d, want);
    v = b.create<mesh::AllSliceOp>(loc, typeWith(d, 1, mesh.product(add), next),
                                   v, meshName, indices(add), d);
  }
}

FailureOr<Value> Resharder::run(DistAttr to) {
  for (StringRef a : to.getPartialAxes())
    if (!llvm::is_contained(cur().getPartialAxes(), a))
      return where->emitError()
             << "cannot reshard " << tfm::describe(cur()) << " to "
             << tfm::describe(to) << ": a value cannot be made partial";
  if (failed(mesh.verify(cur(), where)) || failed(mesh.verify(to, where)) ||
      failed(reducePartials(to)) || failed(gather(to)))
    return failure();
  reorder(to);
  slice(to);
  if (cur() != to)
    return where->emitError() << "cannot reshard " << tfm::describe(cur())
                              << " to " << tfm::describe(to);
  return v;
}

} // namespace

FailureOr<Value> sharding::reshard(OpBuilder &b, Operation *where, Value v,
                                   DistAttr to, const tfm::MeshAxesInfo &mesh) {
  return Resharder(b, where, v, mesh).run(to);
}
