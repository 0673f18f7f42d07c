//===- PropagationInterface.td - How ops take distributions -*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_PROPAGATIONINTERFACE_TD
#define LOOM_PASSES_SHARDING_PROPAGATIONINTERFACE_TD

include "mlir/IR/OpBase.td"

def Tfm_PropagationOpInterface : OpInterface<"PropagationOpInterface"> {
  let cppNamespace = "::loom::sharding";
  let description = [{
    How tfm-propagate-distribution distributes an op: which distributions it
    needs its operands in, given those they arrive with (Megatron's tensor
    and sequence parallelism: a linear of a whole input is column-parallel,
    norms take the residual stream, ...). What the op then computes is its
    distribution rule's (DistributedOpInterface); this interface only
    chooses. Attached to tfm ops as external models (PropagationRules.cpp)
    so the dialect holds semantics and the sharding passes hold strategy;
    an op without one takes its operands as they arrive.
  }];
  let methods = [
    InterfaceMethod<[{
        Requires the operands' distributions through `p.require` (which
        decides a parameter's distribution or inserts a tfm.reshard), may
        rewrite the op (a row-parallel bias moves after the reduction), and
        types the results (`p.inferResults`). Emits an error and fails when
        the op cannot be distributed.
      }],
      "::llvm::LogicalResult", "propagate",
      (ins "::loom::sharding::Propagation &":$p)>
  ];
}

#endif // LOOM_PASSES_SHARDING_PROPAGATIONINTERFACE_TD
