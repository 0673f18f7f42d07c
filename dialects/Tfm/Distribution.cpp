//===- Distribution.cpp - Distributed tensor values -------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/Distribution.h"

#include "dialects/Tfm/ChunkOrder.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace loom::tfm;

DistAttr loom::tfm::getDist(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t ? dyn_cast_or_null<DistAttr>(t.getEncoding()) : DistAttr();
}

RankedTensorType loom::tfm::withDist(Type type, DistAttr dist) {
  auto t = cast<RankedTensorType>(type);
  return RankedTensorType::get(t.getShape(), t.getElementType(), dist);
}

bool loom::tfm::hasLocalShapes(ModuleOp module) {
  return module && module->hasAttr(kLocalShapesAttrName);
}

std::string loom::tfm::describe(DistAttr dist) {
  if (!dist)
    return "not distributed";
  std::string s;
  llvm::raw_string_ostream os(s);
  auto join = [&] {
    if (!s.empty())
      os << " and ";
  };
  for (int64_t d = 0; d < dist.getNumDims(); ++d) {
    DimDist dim = dist.getDim(d);
    if (dim.isWhole() && dim.isNatural())
      continue;
    join();
    if (dim.isWhole())
      os << "whole on dim " << d;
    else {
      os << "split on dim " << d << " over ";
      llvm::interleave(dim.axes, os, ", ");
    }
    if (std::optional<int64_t> n = zigzagPairs(dim.chunks))
      os << " in zigzag(" << *n << ") order";
    else if (!dim.isNatural()) {
      os << " in chunk order (";
      llvm::interleaveComma(dim.chunks, os);
      os << ")";
    }
  }
  if (dist.isPartial()) {
    join();
    os << "a partial "
       << (dist.getReduction() == mesh::ReductionKind::Max ? "maximum"
                                                           : "sum")
       << " over ";
    llvm::interleave(dist.getPartialAxes(), os, ", ");
  }
  if (s.empty())
    return "replicated";
  return s;
}

FailureOr<MeshAxesInfo> MeshAxesInfo::of(Operation *meshOp) {
  auto m = dyn_cast_or_null<mesh::MeshOp>(meshOp);
  auto names =
      m ? m->getAttrOfType<ArrayAttr>(kMeshAxesAttrName) : ArrayAttr();
  if (!names || int64_t(names.size()) != m.getRank())
    return failure();
  MeshAxesInfo info;
  for (auto [name, size] : llvm::zip(names, m.getShape())) {
    info.axisNames.push_back(cast<StringAttr>(name).getValue().str());
    info.sizes.push_back(size);
  }
  return info;
}

FailureOr<MeshAxesInfo> MeshAxesInfo::lookup(Operation *from,
                                             FlatSymbolRefAttr mesh) {
  Operation *meshOp = SymbolTable::lookupNearestSymbolFrom(from, mesh);
  if (!isa_and_nonnull<mesh::MeshOp>(meshOp))
    return from->emitError() << "distribution names mesh " << mesh
                             << ", which is not a mesh.mesh";
  FailureOr<MeshAxesInfo> info = of(meshOp);
  if (failed(info))
    return from->emitError() << "mesh " << mesh << " has no "
                             << kMeshAxesAttrName
                             << " (create it with tfm-materialize-mesh)";
  return info;
}

std::optional<int16_t> MeshAxesInfo::index(StringRef name) const {
  for (auto [i, n] : llvm::enumerate(axisNames))
    if (n == name)
      return int16_t(i);
  return std::nullopt;
}

int64_t MeshAxesInfo::size(StringRef name) const {
  std::optional<int16_t> i = index(name);
  assert(i && "axis not in the mesh");
  return sizes[*i];
}

int64_t MeshAxesInfo::product(ArrayRef<StringRef> axes) const {
  int64_t p = 1;
  for (StringRef a : axes)
    p *= size(a);
  return p;
}

SmallVector<int16_t> MeshAxesInfo::indices(ArrayRef<StringRef> axes) const {
  SmallVector<int16_t> out;
  for (StringRef a : axes)
    out.push_back(*index(a));
  return out;
}

std::string MeshAxesInfo::groupKind(ArrayRef<StringRef> axes) const {
  SmallVector<StringRef> sorted(axes);
  llvm::sort(sorted, [&](StringRef a, StringRef b) {
    return *index(a) > *index(b);
  });
  std::string kind;
  for (StringRef a : sorted)
    kind += (kind.empty() ? "" : "-") + a.str();
  // The expert world's mesh (the only one with an ep axis) names the rank
  // generator's expert groups: its "dp" is the expert-data-parallel group.
  if (index("ep"))
    kind = "expert:" + kind;
  return kind;
}

LogicalResult MeshAxesInfo::verify(DistAttr dist, Operation *where) const {
  for (StringRef axis : dist.getUsedAxes())
    if (!index(axis))
      return where->emitError()
             << "distribution " << dist << " names axis " << axis
             << ", which mesh " << dist.getMesh() << " does not have";
  // A dim may be split over axes in any order (Ulysses splits heads over tp,
  // then cp); a collective or a position read over several axes needs them
  // in mesh order, and tfm-comms-to-args says so where one does not.
  return success();
}

const MeshAxesInfo *MeshAxesCache::get(Operation *where,
                                       FlatSymbolRefAttr mesh) {
  auto it = meshes.find(mesh.getValue());
  if (it != meshes.end())
    return &it->second;
  FailureOr<MeshAxesInfo> info = MeshAxesInfo::lookup(where, mesh);
  if (failed(info))
    return nullptr;
  return &meshes.try_emplace(mesh.getValue(), std::move(*info)).first->second;
}

FailureOr<SmallVector<int64_t>>
loom::tfm::localShape(ArrayRef<int64_t> global, DistAttr dist,
                      const MeshAxesInfo &mesh, Operation *where,
                      StringRef what) {
  SmallVector<int64_t> local(global);
  std::string prefix = what.empty() ? "" : (what + " ").str();
  for (int64_t d = 0; d < dist.getNumDims() && d < int64_t(global.size());
       ++d) {
    DimDist dim = dist.getDim(d);
    int64_t parts = mesh.product(dim.axes);
    if (!dim.isNatural() && global[d] % int64_t(dim.chunks.size()) != 0)
      return where->emitError()
             << prefix << "dim " << d << " of size " << global[d]
             << " does not cut into " << dim.chunks.size() << " chunks";
    if (global[d] % parts != 0) {
      auto diag = where->emitError()
                  << prefix << "dim " << d << " of size " << global[d]
                  << " is not divisible by ";
      for (auto [i, axis] : llvm::enumerate(dim.axes))
        diag << (i ? " x " : "") << axis << " " << mesh.size(axis);
      return diag;
    }
    local[d] /= parts;
  }
  return local;
}

SmallVector<int64_t> loom::tfm::globalShape(ArrayRef<int64_t> local,
                                            DistAttr dist,
                                            const MeshAxesInfo &mesh) {
  SmallVector<int64_t> global(local);
  for (int64_t d = 0; d < dist.getNumDims() && d < int64_t(local.size()); ++d)
    global[d] *= mesh.product(dist.getAxes(d));
  return global;
}
