//===- TfmAttrs.cpp - Transformer dialect attributes ------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmDialect.h"
#include "loom/RankGen/ParallelLayout.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace loom::tfm;

#define GET_ATTRDEF_CLASSES
#include "dialects/Tfm/TfmAttrs.cpp.inc"

void TfmDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Tfm/TfmAttrs.cpp.inc"
      >();
}

static loom::rankgen::ParallelConfig
makeConfig(int64_t tp, int64_t cp, int64_t dp, int64_t pp, int64_t ep,
           int64_t etp, DenseI64ArrayAttr hierarchicalCpSizes,
           StringRef order) {
  loom::rankgen::ParallelConfig config;
  config.tp = tp;
  config.cp = cp;
  config.dp = dp;
  config.pp = pp;
  config.ep = ep;
  config.etp = etp;
  config.order = order.str();
  if (hierarchicalCpSizes)
    config.hierarchicalCpSizes.assign(hierarchicalCpSizes.asArrayRef().begin(),
                                      hierarchicalCpSizes.asArrayRef().end());
  return config;
}

loom::rankgen::ParallelConfig PlanAttr::toParallelConfig() const {
  return makeConfig(getTp(), getCp(), getDp(), getPp(), getEp(), getEtp(),
                    getHierarchicalCpSizes(), getOrder());
}

static bool isCpCommType(StringRef s) {
  return llvm::StringSwitch<bool>(s)
      .Cases("p2p", "a2a", "allgather", "a2a+p2p", true)
      .Default(false);
}

LogicalResult
PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t tp,
                 int64_t cp, int64_t dp, int64_t pp, int64_t vpp, int64_t ep,
                 int64_t etp, BoolAttr sequenceParallel, ArrayAttr cpCommType,
                 DenseI64ArrayAttr hierarchicalCpSizes, StringRef order) {
  for (auto [name, size] :
       {std::pair<StringRef, int64_t>{"tp", tp}, {"cp", cp}, {"dp", dp},
        {"pp", pp}, {"vpp", vpp}, {"ep", ep}})
    if (size < 1)
      return emitError() << "plan " << name << " " << size
                         << " must be at least 1";
  if (etp < 0)
    return emitError() << "plan etp " << etp
                       << " must be at least 1 (or 0 for tp)";
  if (vpp > 1 && pp == 1)
    return emitError() << "plan vpp " << vpp
                       << " needs pipeline parallelism (pp > 1)";

  bool hierarchical = false;
  if (cpCommType) {
    if (cpCommType.empty())
      return emitError() << "plan cp_comm_type is empty";
    for (Attribute a : cpCommType) {
      auto s = llvm::dyn_cast<StringAttr>(a);
      if (!s || !isCpCommType(s.getValue()))
        return emitError() << "plan cp_comm_type " << a
                           << " is not one of \"p2p\", \"a2a\", "
                              "\"allgather\", \"a2a+p2p\"";
      hierarchical |= s.getValue() == "a2a+p2p";
    }
  }
  if (hierarchical && !hierarchicalCpSizes)
    return emitError() << "plan cp_comm_type \"a2a+p2p\" needs "
                          "hierarchical_cp_sizes";

  // The rank generator checks the order, the hierarchical sizes and the
  // expert world, with the same messages loom-ranks prints.
  auto layout = loom::rankgen::ParallelLayout::create(
      makeConfig(tp, cp, dp, pp, ep, etp, hierarchicalCpSizes, order));
  if (!layout)
    return emitError() << "plan: " << layout.error();
  return success();
}

StringRef PlanAttr::getCpCommTypeOfLayer(int64_t layer) const {
  ArrayAttr types = getCpCommType();
  if (!types || types.empty())
    return "p2p";
  if (types.size() == 1)
    return llvm::cast<StringAttr>(types[0]).getValue();
  return llvm::cast<StringAttr>(types[layer]).getValue();
}
