//===- TfmDialect.cpp - Transformer dialect ---------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/TfmDialect.h"
#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace loom::tfm;

#include "dialects/Tfm/TfmOpsDialect.cpp.inc"

void TfmDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/Tfm/TfmOps.cpp.inc"
      >();
  registerAttributes();
}

/// A non-empty string attribute, or an error naming `attr`.
static LogicalResult expectName(Operation *op, NamedAttribute attr) {
  auto s = dyn_cast<StringAttr>(attr.getValue());
  if (!s || s.getValue().empty())
    return op->emitError() << attr.getName().getValue()
                           << " must be a non-empty string";
  return success();
}

static LogicalResult expectIndex(Operation *op, NamedAttribute attr) {
  auto i = dyn_cast<IntegerAttr>(attr.getValue());
  if (!i || i.getValue().isNegative())
    return op->emitError() << attr.getName().getValue()
                           << " must be a non-negative integer";
  return success();
}

LogicalResult TfmDialect::verifyOperationAttribute(Operation *op,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  auto onModule = [&](auto check) -> LogicalResult {
    if (!isa<ModuleOp>(op))
      return op->emitError() << name << " belongs on the module";
    return check();
  };
  if (name == kPlanAttrName)
    return onModule([&]() -> LogicalResult {
      if (!isa<PlanAttr>(attr.getValue()))
        return op->emitError() << name << " must be a #tfm.plan";
      return success();
    });
  if (name == kModelAttrName)
    return onModule([&]() -> LogicalResult {
      if (!isa<DictionaryAttr>(attr.getValue()))
        return op->emitError() << name << " must be a dictionary";
      return success();
    });
  if (name == kLocalShapesAttrName)
    return onModule([&]() -> LogicalResult {
      if (!isa<UnitAttr>(attr.getValue()))
        return op->emitError() << name << " is a unit attribute";
      return success();
    });
  if (name == kEntryAttrName) {
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << name << " belongs on a function";
    return expectName(op, attr);
  }
  if (name == kWorkspaceAttrName) {
    auto f = dyn_cast<FunctionOpInterface>(op);
    if (!f)
      return op->emitError() << name << " belongs on a function";
    if (f.getNumArguments() == 0)
      return op->emitError() << name
                             << " names the last argument, but the function "
                                "has none";
    return expectIndex(op, attr);
  }
  if (name == kPipelineRankAttrName) {
    if (!isa<FunctionOpInterface>(op))
      return op->emitError() << name << " belongs on a function";
    return expectIndex(op, attr);
  }
  if (name == kMeshAxesAttrName) {
    auto mesh = dyn_cast<mesh::MeshOp>(op);
    if (!mesh)
      return op->emitError() << name << " belongs on a mesh.mesh";
    auto names = dyn_cast<ArrayAttr>(attr.getValue());
    if (!names || int64_t(names.size()) != mesh.getRank())
      return op->emitError() << name << " must name each of the "
                             << mesh.getRank() << " axes of the mesh";
    llvm::StringSet<> seen;
    for (Attribute a : names) {
      auto s = dyn_cast<StringAttr>(a);
      if (!s || s.getValue().empty())
        return op->emitError() << name << " holds " << a
                               << ", which is not an axis name";
      if (!seen.insert(s.getValue()).second)
        return op->emitError() << name << " names axis " << s.getValue()
                               << " twice";
    }
    return success();
  }
  return op->emitError() << "unknown attribute " << name
                         << " of the tfm dialect";
}

LogicalResult TfmDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                   unsigned argIndex,
                                                   NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  // tfm.grad, tfm.grad_group: a gradient's out-param (bufferization moves
  // results there).
  if (name == kParamArgAttrName || name == kCommArgAttrName ||
      name == kGradResultAttrName || name == kGradGroupAttrName)
    return expectName(op, attr);
  if (name == kMicrobatchesAttrName)
    return expectIndex(op, attr);
  if (name == kInputArgAttrName) {
    auto kind = dyn_cast<StringAttr>(attr.getValue());
    if (!kind || !llvm::is_contained(kInputKinds, kind.getValue()))
      return op->emitError() << "argument " << argIndex << ": " << name
                             << " must be one of tokens, labels, loss_mask, "
                                "grad_scale";
    return success();
  }
  return op->emitError() << "unknown argument attribute " << name
                         << " of the tfm dialect";
}

LogicalResult TfmDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                      unsigned,
                                                      NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kGradResultAttrName || name == kGradGroupAttrName)
    return expectName(op, attr);
  if (name == kMicrobatchesAttrName)
    return expectIndex(op, attr);
  return op->emitError() << "unknown result attribute "
                         << attr.getName().getValue() << " of the tfm dialect";
}
