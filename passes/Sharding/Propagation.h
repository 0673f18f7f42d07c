//===- Propagation.h - State of distribution propagation --------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What tfm-propagate-distribution's per-op rules (PropagationRules.cpp) read
// and change: the plan's axes, the distributions decided for parameters, and
// the reshards inserted so far. Shapes are global throughout.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_PROPAGATION_H
#define LOOM_PASSES_SHARDING_PROPAGATION_H

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace loom::sharding {

class Propagation {
public:
  /// Distributes over `mesh` (the plan's dense world) by `plan`: tensor
  /// parallelism over axis `tpAxis`, context parallelism over `cpAxis`.
  Propagation(mlir::MLIRContext *ctx, mlir::FlatSymbolRefAttr mesh,
              const tfm::MeshAxesInfo &axes, tfm::PlanAttr plan,
              llvm::StringRef tpAxis, llvm::StringRef cpAxis);

  //===--------------------------------------------------------------------===//
  // The plan
  //===--------------------------------------------------------------------===//

  /// The tensor-parallel axis, or empty when tp is 1 (nothing is split).
  llvm::StringRef tp() const { return tpSize > 1 ? tpAxis : llvm::StringRef(); }
  int64_t tpRanks() const { return tpSize; }
  /// The context-parallel axis, or empty when cp is 1.
  llvm::StringRef cp() const { return cpSize > 1 ? cpAxis : llvm::StringRef(); }
  int64_t cpRanks() const { return cpSize; }
  tfm::PlanAttr plan() const { return planAttr; }
  tfm::DistAttr replicated() const { return tfm::DistAttr::replicated(mesh); }

  //===--------------------------------------------------------------------===//
  // Megatron's layouts, from a value's current distribution
  //===--------------------------------------------------------------------===//

  /// `d` whole over tp: neither split nor partial over it.
  tfm::DistAttr wholeOverTp(tfm::DistAttr d) const;
  /// `d` whole over tp but its last dim (of `rank`), split over tp: the
  /// features of a column-parallel output.
  tfm::DistAttr featuresOverTp(tfm::DistAttr d, int64_t rank) const;
  /// The residual stream's layout for the activation `v` [batch, seq, ...]
  /// as it is distributed now: whole over tp, and with sequence parallelism
  /// its sequence split over tp. Fails with an error at `where` when the
  /// sequence does not divide.
  mlir::FailureOr<tfm::DistAttr> residual(mlir::Value v,
                                          mlir::Operation *where) const;
  /// Whether MoE layers route each rank's own sequence-parallel tokens to
  /// experts not split over tp (PlanAttr::routesLocalTokens).
  bool routesLocalTokens() const { return localRouting; }
  /// The layout routing ops take the tokens [batch, seq, ..] `v` in: whole
  /// over tp, or, where ranks route their own tokens, the residual
  /// stream's (the sequence split over tp).
  mlir::FailureOr<tfm::DistAttr> routingTokens(mlir::Value v,
                                               mlir::Operation *where) const;
  /// Whether the last dim of `v` is split over tp (Megatron's "parallel"
  /// activations between a column- and a row-parallel linear).
  bool featuresSplit(mlir::Value v) const;
  /// Whether the sequence of `v` is split over cp (context parallelism).
  bool sequenceOverCp(mlir::Value v) const;
  /// How a batch input [batch, seq] (tokens, labels, loss mask) enters:
  /// with context parallelism its sequence split over cp in Megatron's
  /// load-balanced order of 2·cp chunks. Fails with an error at `where`
  /// when the sequence does not divide.
  mlir::FailureOr<tfm::DistAttr> batchInput(mlir::Value v,
                                            mlir::Location where) const;

  //===--------------------------------------------------------------------===//
  // Changing the IR
  //===--------------------------------------------------------------------===//

  /// Makes operand `index` of `op` distributed as `want`: the value as it
  /// is, a read of a parameter whose distribution is not decided yet (it is
  /// now), or a tfm.reshard before `op` (one per value and distribution).
  /// A parameter decided otherwise is an error.
  mlir::LogicalResult require(mlir::Operation *op, unsigned index,
                              tfm::DistAttr want);
  /// Takes every operand of `op` as it arrives.
  mlir::LogicalResult requireAsIs(mlir::Operation *op);
  /// Decides the parameters `op` reads that are still undecided, as they
  /// are (the pass calls it after every op's rule).
  void settle(mlir::Operation *op);
  /// Types the results of `op` by its distribution rule.
  mlir::LogicalResult inferResults(mlir::Operation *op);
  /// Gives `v` distribution `d` (its type's encoding).
  static void setDist(mlir::Value v, tfm::DistAttr d) {
    v.setType(tfm::withDist(v.getType(), d));
  }
  mlir::OpBuilder &builder() { return b; }

  //===--------------------------------------------------------------------===//
  // Parameters and ids
  //===--------------------------------------------------------------------===//

  /// Types a parameter read: its parameter's distribution when decided;
  /// replicated for now otherwise, until the first op that reads it needs
  /// one (require) or takes it as it is.
  void visitParamRead(tfm::GetParamOp get);
  /// The distribution decided for parameter `name`, or null.
  tfm::DistAttr paramDist(llvm::StringRef name) const {
    return params.lookup(name);
  }
  /// Whether `ids` are position ids (tfm.position_ids, possibly through
  /// block boundaries): their embedding tables are not vocabularies.
  static bool isPositionIds(mlir::Value ids);

  /// Statistics.
  int64_t numReshards = 0, numSplitParams = 0;

private:
  void decide(tfm::GetParamOp get, tfm::DistAttr d);

  mlir::FlatSymbolRefAttr mesh;
  const tfm::MeshAxesInfo &axes;
  tfm::PlanAttr planAttr;
  std::string tpAxis, cpAxis;
  int64_t tpSize, cpSize;
  bool sp, localRouting;
  mlir::OpBuilder b;
  llvm::StringMap<tfm::DistAttr> params;
  /// Reads typed replicated for now (their parameter not decided yet).
  llvm::DenseSet<mlir::Operation *> undecided;
  /// Reshards made so far, by value and target distribution.
  llvm::DenseMap<std::pair<mlir::Value, mlir::Attribute>, mlir::Value>
      reshards;
};

} // namespace loom::sharding

namespace mlir {
class DialectRegistry;
} // namespace mlir

#include "passes/Sharding/PropagationInterface.h.inc"

namespace loom::sharding {
/// Attaches the propagation rules of Megatron's tensor and sequence
/// parallelism to the tfm ops (PropagationRules.cpp).
void registerPropagationRules(mlir::DialectRegistry &registry);
} // namespace loom::sharding

#endif // LOOM_PASSES_SHARDING_PROPAGATION_H
