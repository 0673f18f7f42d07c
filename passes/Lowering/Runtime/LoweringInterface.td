//===- LoweringInterface.td - How an op becomes runtime calls -*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_RUNTIME_LOWERINGINTERFACE_TD
#define LOOM_PASSES_LOWERING_RUNTIME_LOWERINGINTERFACE_TD

include "mlir/IR/OpBase.td"

def Tfm_RuntimeLoweringInterface : OpInterface<"RuntimeLoweringInterface"> {
  let cppNamespace = "::loom::lowering";
  let description = [{
    How tfm-lower-to-runtime replaces an op: runtime calls (loomrt.h) on
    buffers. Attached to tfm ops and to the mesh collectives as external
    models, one file per concern (Layers.cpp, Attention.cpp,
    CrossEntropy.cpp, Communication.cpp), so a new op brings its lowering
    without touching the pass; an op without one is an error there.
  }];
  let methods = [
    InterfaceMethod<[{
        Emits the op's calls through `e`, whose operands are the op's
        operands as buffers; every result's buffer comes from `e.result(i)`
        (or `e.setResult`). Emits an error at the op and fails when the op
        cannot be lowered (a layout the kernels do not take, a missing
        communicator).
      }],
      "::llvm::LogicalResult", "lowerToRuntime",
      (ins "::loom::lowering::Emitter &":$e)>
  ];
}

#endif // LOOM_PASSES_LOWERING_RUNTIME_LOWERINGINTERFACE_TD
