//===- TfmEnums.td - Transformer dialect enums -------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMENUMS_TD
#define LOOM_DIALECTS_TFM_TFMENUMS_TD

include "mlir/IR/EnumAttr.td"

// Enums are integer-backed (I32EnumAttr) so op assembly prints them as bare
// keywords: `tfm.gelu %x tanh`, `tfm.block layer 3`.

def Tfm_InitKind : I32EnumAttr<"InitKind", "parameter initialization", [
    I32EnumAttrCase<"normal", 0>,
    I32EnumAttrCase<"zeros", 1>,
    I32EnumAttrCase<"ones", 2>]> {
  let cppNamespace = "::loom::tfm";
}

def Tfm_MaskKind : I32EnumAttr<"MaskKind", "attention mask", [
    I32EnumAttrCase<"causal", 0>,
    I32EnumAttrCase<"causal_document", 1>]> {
  let cppNamespace = "::loom::tfm";
}

def Tfm_GeluApprox : I32EnumAttr<"GeluApprox", "gelu approximation", [
    I32EnumAttrCase<"none", 0>,
    I32EnumAttrCase<"tanh", 1>]> {
  let cppNamespace = "::loom::tfm";
}

def Tfm_BlockKind : I32EnumAttr<"BlockKind", "part of the model", [
    I32EnumAttrCase<"embedding", 0>,
    I32EnumAttrCase<"layer", 1>,
    I32EnumAttrCase<"head", 2>]> {
  let cppNamespace = "::loom::tfm";
}

def Tfm_DropPolicy : I32EnumAttr<"DropPolicy", "which pairs an expert over capacity keeps", [
    I32EnumAttrCase<"probs", 0>,
    I32EnumAttrCase<"position", 1>]> {
  let cppNamespace = "::loom::tfm";
}

#endif // LOOM_DIALECTS_TFM_TFMENUMS_TD
