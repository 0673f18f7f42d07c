//===- TfmDialect.td - Transformer dialect definition ------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMDIALECT_TD
#define LOOM_DIALECTS_TFM_TFMDIALECT_TD

include "mlir/IR/OpBase.td"

def Tfm_Dialect : Dialect {
  let name = "tfm";
  let cppNamespace = "::loom::tfm";
  let summary = "Transformer ops at global (unsharded) shapes";
  let description = [{
    The `tfm` dialect is Loom's input program: one transformer model written
    with value-semantic ops on static-shaped tensors at their global shapes
    (as if run on one device). `loom-import` produces it from a model config.

    Parameters are module-level symbols (`tfm.param`) read with
    `tfm.get_param`, so the sharding passes can give them per-rank shapes while
    the names (and so checkpoints) stay stable. The model is split into
    explicit parts with `tfm.block`: one `embedding` block, one `layer` block
    per transformer layer (with its index) and one `head` block ending in the
    loss, because pipeline splitting and activation recomputation work on
    whole layers.

    Every forward op has a gradient op (`tfm.linear_grad`, `tfm.attention_grad`,
    ...) so that the differentiation pass can write the backward program in the
    same dialect, before any sharding.
  }];
  let useDefaultAttributePrinterParser = 1;
  // The discardable attributes Loom writes (tfm.plan, tfm.mesh_axes,
  // tfm.entry, tfm.input, ...) are declared and verified here.
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

#endif // LOOM_DIALECTS_TFM_TFMDIALECT_TD
