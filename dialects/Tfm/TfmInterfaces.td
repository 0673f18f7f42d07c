//===- TfmInterfaces.td - Transformer op interfaces --------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMINTERFACES_TD
#define LOOM_DIALECTS_TFM_TFMINTERFACES_TD

include "mlir/IR/OpBase.td"

def Tfm_DistributedOpInterface : OpInterface<"DistributedOpInterface"> {
  let cppNamespace = "::loom::tfm";
  let description = [{
    What an op computes when its values are distributed over a mesh: the
    rule its operands' and results' distributions (the `#tfm.dist`
    encodings of their types) must follow for the local computation on
    every rank to be the unsharded op's. A linear whose input features and
    weight in-features are split alike computes a partial sum over those
    axes; an add of a partial sum and a replicated value computes nothing
    meaningful. tfm-verify-distribution checks every op against its rule,
    so a pass that leaves an inconsistent distribution fails there instead
    of producing wrong numbers. The rules are one per op
    (TfmDistributionRules.cpp); upstream mesh collectives get theirs as
    external models.
  }];
  let methods = [
    InterfaceMethod<[{
        The distributions of the op's results, given those of its operands
        (the encodings of their types). Where a result's distribution is a
        free choice (which slice of the vocabulary an embedding gradient
        keeps), the one its type has now is taken. Emits an error naming
        the rule, and fails, when the operands' distributions cannot meet.
        Every tensor operand has a distribution when this is called.
      }],
      "::mlir::FailureOr<::llvm::SmallVector<::loom::tfm::DistAttr>>",
      "inferResultDistributions", (ins)>,
    InterfaceMethod<[{
        Checks the distributions of the results against the rule; emits an
        error naming the result, its distribution and the rule's.
      }],
      "::llvm::LogicalResult", "verifyDistribution", (ins), [{}], [{
        return ::loom::tfm::verifyInferredDistributions($_op);
      }]>,
    InterfaceMethod<[{
        Rewrites attributes that count global sizes (attention's head
        counts) for the per-rank shapes tfm-localize gave the op's values.
      }],
      "void", "adaptToLocalShapes", (ins), [{}], [{ return; }]>
  ];
}

#endif // LOOM_DIALECTS_TFM_TFMINTERFACES_TD
