//===- TfmOps.td - Transformer ops -------------------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Shapes use B = micro-batch size, S = sequence length, H = hidden size,
// V = vocabulary size, N = number of heads, D = head dim. Activations are
// row-major [B, S, features]; heads live in the last dim as N contiguous
// groups of D, so a tensor-parallel split of the last dim splits whole heads.
//
// In sharded IR every tensor type carries a #tfm.dist encoding, and every op
// that computes has a distribution rule (DistributedOpInterface,
// TfmDistributionRules.cpp). Op verifiers check shapes and element types;
// tfm-verify-distribution checks the distributions.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMOPS_TD
#define LOOM_DIALECTS_TFM_TFMOPS_TD

include "dialects/Tfm/TfmAttrs.td"
include "dialects/Tfm/TfmDialect.td"
include "dialects/Tfm/TfmEnums.td"
include "dialects/Tfm/TfmInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Tfm_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
def Tfm_IdTensor : StaticShapeTensorOf<[I32]>;
def Tfm_MaskTensor : StaticShapeTensorOf<[F32]>;
def Tfm_StatTensor : StaticShapeTensorOf<[F32]>;
def Tfm_Loss : 0DTensorOf<[F32]>;
def Tfm_LossParts : 1DTensorOf<[F32]>;
def Tfm_AnyStaticTensor : StaticShapeTensorOf<[F32, BF16, F16, I32]>;

class Tfm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tfm_Dialect, mnemonic, traits>;

// An op with a distribution rule (DistributedOpInterface).
def Tfm_Distributed : DeclareOpInterfaceMethods<Tfm_DistributedOpInterface>;

// Elementwise ops of one operand whose result has the operand's type
// (distribution included: the rule of every such op keeps it).
class Tfm_ElementwiseOp<string mnemonic, list<Trait> traits = []>
    : Tfm_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType,
                                            Tfm_Distributed])>;

// Elementwise ops of two operands: shapes and element types match; the
// distributions are checked by the op's rule, which names a mismatch (a
// partial sum added to a replicated value). The types print once when they
// are all equal.
class Tfm_BinaryElementwiseOp<string mnemonic, list<Trait> traits = []>
    : Tfm_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultShape,
                                            SameOperandsAndResultElementType,
                                            Tfm_Distributed])>;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def Tfm_ParamOp : Tfm_Op<"param", [Symbol]> {
  let summary = "a named model parameter at its global shape";
  let description = [{
    Declares one trainable tensor of the model, at module level. The symbol
    name is the parameter's stable name (checkpoints use it); the type is its
    global (unsharded) shape. `init` says how training initializes it:
    `normal` with a standard deviation `std` (mean 0), `zeros` or `ones`.

    Linear weights are stored `[out_features, in_features]`, as in
    `torch.nn.Linear` and Megatron-LM, so a column-parallel split is a split of
    dim 0 and a row-parallel split a split of dim 1.

    ```mlir
    tfm.param @transformer.wte.weight init(normal, std = 2.000000e-02) : tensor<50257x768xf32>
    tfm.param @transformer.ln_f.bias init(zeros) : tensor<768xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Tfm_FloatTensor>:$type,
                       Tfm_InitKind:$init,
                       OptionalAttr<F64Attr>:$std);
  let assemblyFormat = [{
    $sym_name `init` `(` $init (`,` `std` `=` $std^)? `)` attr-dict `:` $type
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
    /// Number of scalar elements of the global tensor.
    int64_t getNumElements() { return getTensorType().getNumElements(); }
  }];
}

def Tfm_GetParamOp : Tfm_Op<"get_param",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>, Tfm_Distributed]> {
  let summary = "reads a parameter declared by tfm.param";
  let description = [{
    Yields the value of the parameter `name`: the parameter's type or, in
    sharded IR, that type with its distribution (every read of a parameter
    has the same one, never partial) and, after tfm-localize, this rank's
    piece of it.

    ```mlir
    %w = tfm.get_param @transformer.wte.weight : tensor<50257x768xf32>
    %q = tfm.get_param @model.layers.0.self_attn.q_proj.weight
        : tensor<2048x4096xbf16, #tfm.dist<@dense, [[tp]]>>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $name attr-dict `:` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Model structure
//===----------------------------------------------------------------------===//

def Tfm_BlockOp : Tfm_Op<"block", [IsolatedFromAbove, SingleBlock,
    RecursiveMemoryEffects]> {
  let summary = "one part of the model: the embedding, a layer or the head";
  let description = [{
    Groups the ops of one part of the model. `kind` is `embedding`, `layer`
    (a transformer layer, with its zero-based `index`) or `head` (final norm,
    output projection and loss). Values enter through the operands, which are
    the region's arguments, and leave through `tfm.yield`; parameters are read
    inside with `tfm.get_param`. The region is isolated from above, so a block
    can be moved to another pipeline stage or re-run for recomputation as one
    unit. A `backward` block holds the gradient computation of the forward
    block of the same kind and index (written by tfm-differentiate).

    ```mlir
    %h1 = tfm.block layer 0 ins(%h0, %pos : tensor<2x8x64xf32>, tensor<2x8xi32>)
        -> tensor<2x8x64xf32> {
    ^bb0(%x: tensor<2x8x64xf32>, %p: tensor<2x8xi32>):
      ...
      tfm.yield %y : tensor<2x8x64xf32>
    }
    ```
  }];
  let arguments = (ins Tfm_BlockKind:$kind,
                       OptionalAttr<I64Attr>:$index,
                       UnitAttr:$backward,
                       Variadic<Tfm_AnyStaticTensor>:$inputs);
  let results = (outs Variadic<Tfm_AnyStaticTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $kind ($index^)? (`backward` $backward^)?
    (`ins` `(` $inputs^ `:` type($inputs) `)`)?
    (`->` type($results)^)? attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Tfm_YieldOp : Tfm_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"BlockOp">]> {
  let summary = "returns the results of a tfm.block";
  let description = [{
    ```mlir
    tfm.yield %y, %pos : tensor<2x8x64xf32>, tensor<2x8xi32>
    ```
  }];
  let arguments = (ins Variadic<Tfm_AnyStaticTensor>:$values);
  let assemblyFormat = "attr-dict ($values^ `:` type($values))?";
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
}

//===----------------------------------------------------------------------===//
// Embeddings and positions
//===----------------------------------------------------------------------===//

def Tfm_EmbeddingOp : Tfm_Op<"embedding", [Pure, Tfm_Distributed]> {
  let summary = "table lookup: token or learned position embedding";
  let description = [{
    `result[b, s, :] = table[ids[b, s], :]` for ids `[B, S]` and a table
    `[V, H]`. Used for the token embedding (ids are tokens) and the learned
    position embedding of GPT-2 (ids are position ids).

    When the table's vocabulary dim is split (Megatron's
    VocabParallelEmbedding), each rank looks up the ids of its slice of the
    vocabulary, ids outside it give zero rows, and the result is a partial
    sum over the split's axes.

    ```mlir
    %e = tfm.embedding %tokens, %wte
        : tensor<2x8xi32>, tensor<512x64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_IdTensor:$ids, Tfm_FloatTensor:$table);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $table attr-dict `:` type($ids) `,` type($table) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_PositionIdsOp : Tfm_Op<"position_ids", [Pure, SameOperandsAndResultType,
    Tfm_Distributed]> {
  let summary = "position ids of a token batch";
  let description = [{
    Without `reset_at_eod`, `result[b, s] = s`. With `reset_at_eod <id>`
    (Megatron's `reset_position_ids`), positions restart at 0 after every
    end-of-document token, as in `get_ltor_masks_and_position_ids`:
    tokens `A B EOD C D` get positions `0 1 2 0 1`.

    ```mlir
    %pos = tfm.position_ids %tokens reset_at_eod 50256 : tensor<2x8xi32>
    ```
  }];
  let arguments = (ins Tfm_IdTensor:$tokens, OptionalAttr<I64Attr>:$reset_at_eod);
  let results = (outs Tfm_IdTensor:$result);
  let assemblyFormat = [{
    $tokens (`reset_at_eod` $reset_at_eod^)? attr-dict `:` type($tokens)
  }];
  let hasVerifier = 1;
}

def Tfm_EmbeddingGradOp : Tfm_Op<"embedding_grad", [Pure, Tfm_Distributed]> {
  let summary = "gradient of tfm.embedding with respect to the table";
  let description = [{
    Scatter-adds `grad[b, s, :]` into row `ids[b, s]` of a zero table of
    type `result`. When the result's vocabulary dim is split, each rank
    writes the rows of its slice only (see tfm.embedding).

    ```mlir
    %dt = tfm.embedding_grad %tokens, %dy
        : tensor<2x8xi32>, tensor<2x8x64xf32> -> tensor<512x64xf32>
    ```
  }];
  let arguments = (ins Tfm_IdTensor:$ids, Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $grad attr-dict `:` type($ids) `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

def Tfm_LayerNormOp : Tfm_Op<"layer_norm", [Pure, AllTypesMatch<["input", "result"]>,
    Tfm_Distributed]> {
  let summary = "layer normalization over the last dim";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * weight + bias` over the last dim, with
    the biased variance, statistics in f32. The bias is optional.

    ```mlir
    %y = tfm.layer_norm %x, %w, %b eps 1.000000e-05
        : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Optional<Tfm_FloatTensor>:$bias, F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? `eps` $epsilon attr-dict `:` type($input)
    `,` type($weight) (`,` type($bias)^)?
  }];
  let hasVerifier = 1;
}

def Tfm_AddLayerNormOp : Tfm_Op<"add_layer_norm", [Pure,
    AllTypesMatch<["input", "residual", "sum", "result"]>, Tfm_Distributed]> {
  let summary = "a residual add and the layer norm of its sum, in one pass";
  let description = [{
    `sum = input + residual` (rounded to the element type) and `result =
    layer_norm(sum)` as tfm.layer_norm computes it: what a `tfm.add` and a
    `tfm.layer_norm` of its result compute, in one runtime call. Written by
    tfm-fuse-residual-norms; it has no gradient rule (fusion runs after
    differentiation).

    ```mlir
    %h, %y = tfm.add_layer_norm %x, %r, %w, %b eps 1.000000e-05
        : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$residual,
                       Tfm_FloatTensor:$weight, Optional<Tfm_FloatTensor>:$bias,
                       F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$sum, Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $residual `,` $weight (`,` $bias^)? `eps` $epsilon attr-dict `:`
    type($input) `,` type($weight) (`,` type($bias)^)?
  }];
  let hasVerifier = 1;
}

def Tfm_LayerNormGradOp : Tfm_Op<"layer_norm_grad", [Pure,
    AllTypesMatch<["input", "grad", "input_grad"]>,
    AllShapesMatch<["weight", "weight_grad", "bias_grad"]>,
    AllElementTypesMatch<["weight", "weight_grad", "bias_grad"]>,
    Tfm_Distributed]> {
  let summary = "gradient of tfm.layer_norm";
  let description = [{
    Given the forward input, the weight and the gradient of the output,
    returns the gradients of the input, the weight and the bias (the bias
    gradient is the sum of `grad` over all rows whether or not the forward op
    had a bias; an unused result is dropped by later passes).

    The weight and bias gradients have the weight's type unless listed:
    with sequence parallelism they are partial sums over the ranks that
    split the tokens.

    With `accumulate` (tfm-fold-gradient-adds) the input gradient is that
    value plus the norm's: the sum of the residual stream's gradient a
    block's norm meets, in one pass.

    ```mlir
    %dx, %dw, %db = tfm.layer_norm_grad %x, %w, %dy eps 1.000000e-05
        : tensor<2x8x64xf32>, tensor<64xf32>
    %dx2, %dw2, %db2 = tfm.layer_norm_grad %x, %w, %dy
        accumulate(%r : tensor<2x8x64xf32>) eps 1.000000e-05
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad,
                       Optional<Tfm_FloatTensor>:$accumulate, F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$weight_grad,
                      Tfm_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad (`accumulate` `(` $accumulate^ `:` type($accumulate) `)`)? `eps` $epsilon
    attr-dict `:` type($input) `,` type($weight)
    `` custom<GradTypes>(ref(type($weight)), type($weight_grad), type($bias_grad))
  }];
  let hasVerifier = 1;
}

def Tfm_RmsNormOp : Tfm_Op<"rms_norm", [Pure, AllTypesMatch<["input", "result"]>,
    Tfm_Distributed]> {
  let summary = "RMS normalization over the last dim";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * weight` over the last dim (Llama), with
    statistics in f32.

    ```mlir
    %y = tfm.rms_norm %x, %w eps 9.9999999999999995E-7
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `eps` $epsilon attr-dict `:` type($input) `,` type($weight)
  }];
  let hasVerifier = 1;
}

def Tfm_AddRmsNormOp : Tfm_Op<"add_rms_norm", [Pure,
    AllTypesMatch<["input", "residual", "sum", "result"]>, Tfm_Distributed]> {
  let summary = "a residual add and the RMS norm of its sum, in one pass";
  let description = [{
    `sum = input + residual` and `result = rms_norm(sum)`, as
    tfm.add_layer_norm for tfm.rms_norm.

    ```mlir
    %h, %y = tfm.add_rms_norm %x, %r, %w eps 9.9999999999999995E-7
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$residual,
                       Tfm_FloatTensor:$weight, F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$sum, Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $residual `,` $weight `eps` $epsilon attr-dict `:` type($input)
    `,` type($weight)
  }];
  let hasVerifier = 1;
}

def Tfm_RmsNormGradOp : Tfm_Op<"rms_norm_grad", [Pure,
    AllTypesMatch<["input", "grad", "input_grad"]>,
    AllShapesMatch<["weight", "weight_grad"]>,
    AllElementTypesMatch<["weight", "weight_grad"]>, Tfm_Distributed]> {
  let summary = "gradient of tfm.rms_norm";
  let description = [{
    With `accumulate`, as tfm.layer_norm_grad's: the input gradient plus
    that value.

    ```mlir
    %dx, %dw = tfm.rms_norm_grad %x, %w, %dy eps 1.000000e-06
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad,
                       Optional<Tfm_FloatTensor>:$accumulate, F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad (`accumulate` `(` $accumulate^ `:` type($accumulate) `)`)? `eps` $epsilon
    attr-dict `:` type($input) `,` type($weight)
    `` custom<GradTypes>(ref(type($weight)), type($weight_grad))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

def Tfm_LinearOp : Tfm_Op<"linear", [Pure, Tfm_Distributed]> {
  let summary = "affine map of the last dim: x W^T + b";
  let description = [{
    `result[..., o] = sum_i input[..., i] * weight[o, i] + bias[o]`. The
    weight is `[out_features, in_features]` (the `torch.nn.Linear` and
    Megatron-LM layout); the bias is optional.

    ```mlir
    %y = tfm.linear %x, %w, %b
        : tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32> -> tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Optional<Tfm_FloatTensor>:$bias);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,` type($weight)
    (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_LinearGradOp : Tfm_Op<"linear_grad", [Pure,
    AllShapesMatch<["input", "input_grad"]>,
    AllElementTypesMatch<["input", "input_grad"]>,
    AllShapesMatch<["weight", "weight_grad"]>,
    AllElementTypesMatch<["weight", "weight_grad"]>, Tfm_Distributed]> {
  let summary = "gradient of tfm.linear";
  let description = [{
    Given the forward input `x`, the weight `W` and the output gradient `dy`:
    `input_grad = dy W`, `weight_grad = dy^T x` summed over all leading dims,
    and, when `bias` is present, `bias_grad = sum(dy)` over all leading dims.

    The input and weight gradients have the input's and the weight's types
    unless `grads(...)` lists them: in sharded IR the input gradient of a
    column-parallel linear is a partial sum (Megatron's f in backward).

    With `accumulate` (tfm-fold-gradient-adds) the input gradient is that
    value plus `dy W`: the GEMM adds onto it (beta = 1) instead of a
    separate add, e.g. the q, k and v projections' input gradients summed.

    ```mlir
    %dx, %dw, %db = tfm.linear_grad %x, %w, %dy
        : tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<2x8x256xf32> -> tensor<256xf32>
    %dx2, %dw2 = tfm.linear_grad %x, %w, %dy
        : tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<2x8x256xf32>
    %dx3, %dw3 = tfm.linear_grad %x, %w, %dy
        accumulate(%dx2 : tensor<2x8x64xf32>)
        : tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad,
                       Optional<Tfm_FloatTensor>:$accumulate);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$weight_grad,
                      Optional<Tfm_FloatTensor>:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad (`accumulate` `(` $accumulate^ `:` type($accumulate) `)`)? attr-dict `:`
    type($input) `,` type($weight) `,` type($grad)
    `` custom<GradTypes>(ref(type($input)), ref(type($weight)), type($input_grad),
                         type($weight_grad))
    (`->` type($bias_grad)^)?
  }];
  let hasVerifier = 1;
}

// Fused linears: written by the fuse stage (passes/Fusion) after
// differentiation, so none has a gradient rule. Each computes what the ops
// it replaces compute, in one runtime call.

def Tfm_LinearGeluOp : Tfm_Op<"linear_gelu", [Pure, Tfm_Distributed]> {
  let summary = "tfm.linear and the GELU of its result, in one op";
  let description = [{
    `pre_activation = input W^T + bias` as tfm.linear computes it and
    `result = gelu(pre_activation)` as tfm.gelu does (the GEMM with a GELU
    epilogue that keeps its input for the backward, cuBLASLt's
    GELU_AUX_BIAS). Written by tfm-fuse-linear-gelu.

    ```mlir
    %h, %a = tfm.linear_gelu %x, %w, %b tanh
        : tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>
        -> tensor<2x8x256xf32>, tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Optional<Tfm_FloatTensor>:$bias,
                       Tfm_GeluApprox:$approximate);
  let results = (outs Tfm_FloatTensor:$pre_activation,
                      Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? $approximate attr-dict `:` type($input)
    `,` type($weight) (`,` type($bias)^)? `->` type($pre_activation) `,`
    type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_LinearGradGeluOp : Tfm_Op<"linear_grad_gelu", [Pure,
    AllTypesMatch<["input", "gelu_input", "input_grad"]>,
    AllShapesMatch<["weight", "weight_grad"]>,
    AllElementTypesMatch<["weight", "weight_grad"]>, Tfm_Distributed]> {
  let summary = "tfm.linear_grad whose input gradient continues through the "
                "GELU that made its input";
  let description = [{
    The linear after a GELU (`input = gelu(gelu_input)`): `input_grad =
    gelu'(gelu_input) * (grad W)`, what tfm.linear_grad's input gradient
    and the tfm.gelu_grad of it compute (the backward GEMM with cuBLASLt's
    DGELU epilogue); `weight_grad` and `bias_grad` as tfm.linear_grad's.
    Written by tfm-fuse-linear-gelu.

    ```mlir
    %dh, %dw, %db = tfm.linear_grad_gelu %a, %w, %dy gelu(%h) tanh
        : tensor<2x8x256xf32>, tensor<64x256xf32>, tensor<2x8x64xf32> -> tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad, Tfm_FloatTensor:$gelu_input,
                       Tfm_GeluApprox:$approximate);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$weight_grad,
                      Optional<Tfm_FloatTensor>:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad `gelu` `(` $gelu_input `)` $approximate
    attr-dict `:` type($input) `,` type($weight) `,` type($grad)
    `` custom<GradTypes>(ref(type($weight)), type($weight_grad))
    (`->` type($bias_grad)^)?
  }];
  let hasVerifier = 1;
}

def Tfm_LinearSwigluOp : Tfm_Op<"linear_swiglu", [Pure,
    AllTypesMatch<["gate_weight", "up_weight"]>, Tfm_Distributed]> {
  let summary = "a gated MLP's gate and up linears and their SwiGLU, in one op";
  let description = [{
    `gate = input gate_weight^T + biases[0]`, `up = input up_weight^T +
    biases[1]` as tfm.linear computes them (`biases`: none or both) and
    `result = silu(gate) * up` as tfm.swiglu does; gate and up are kept for
    the backward. Written by tfm-fuse-linear-swiglu.

    ```mlir
    %g, %u, %a = tfm.linear_swiglu %x, %wg, %wu
        : tensor<2x8x64xf32>, tensor<128x64xf32>
        -> tensor<2x8x128xf32>, tensor<2x8x128xf32>, tensor<2x8x128xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$gate_weight,
                       Tfm_FloatTensor:$up_weight,
                       Variadic<Tfm_FloatTensor>:$biases);
  let results = (outs Tfm_FloatTensor:$gate, Tfm_FloatTensor:$up,
                      Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gate_weight `,` $up_weight (`bias` `(` $biases^ `)`)?
    attr-dict `:` type($input) `,` type($gate_weight)
    (`bias` `(` type($biases)^ `)`)? `->` type($gate) `,` type($up) `,`
    type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_LinearGradSwigluOp : Tfm_Op<"linear_grad_swiglu", [Pure,
    AllTypesMatch<["input", "gate", "up", "gate_grad", "up_grad"]>,
    AllShapesMatch<["weight", "weight_grad"]>,
    AllElementTypesMatch<["weight", "weight_grad"]>, Tfm_Distributed]> {
  let summary = "tfm.linear_grad whose input gradient continues through the "
                "SwiGLU that made its input";
  let description = [{
    The down projection after a SwiGLU (`input = silu(gate) * up`): its
    input gradient `grad W` taken through tfm.swiglu_grad to the gradients
    of `gate` and `up`, what tfm.linear_grad and tfm.swiglu_grad compute;
    `weight_grad` and `bias_grad` as tfm.linear_grad's. Written by
    tfm-fuse-linear-swiglu.

    ```mlir
    %dg, %du, %dw = tfm.linear_grad_swiglu %a, %w, %dy swiglu(%g, %u)
        : tensor<2x8x128xf32>, tensor<64x128xf32>, tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad, Tfm_FloatTensor:$gate,
                       Tfm_FloatTensor:$up);
  let results = (outs Tfm_FloatTensor:$gate_grad, Tfm_FloatTensor:$up_grad,
                      Tfm_FloatTensor:$weight_grad,
                      Optional<Tfm_FloatTensor>:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad `swiglu` `(` $gate `,` $up `)` attr-dict `:`
    type($input) `,` type($weight) `,` type($grad)
    `` custom<GradTypes>(ref(type($weight)), type($weight_grad))
    (`->` type($bias_grad)^)?
  }];
  let hasVerifier = 1;
}

def Tfm_MultiLinearOp : Tfm_Op<"multi_linear", [Pure,
    AttrSizedOperandSegments, Tfm_Distributed]> {
  let summary = "linears of one input, in one op (q, k and v; gate and up)";
  let description = [{
    `results[i] = input weights[i]^T + biases[i]`, each as tfm.linear
    computes it: the projections that read one input (attention's q, k and
    v, a gated MLP's gate and up) in one runtime call, one GEMM where the
    backend can batch them. `biases` is empty or one per weight. Written by
    tfm-fuse-multi-linears.

    ```mlir
    %q, %k, %v = tfm.multi_linear %x [%wq, %wk, %wv] bias [%bq, %bk, %bv]
        : tensor<2x8x64xf32> [tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32>]
          bias [tensor<64xf32>, tensor<32xf32>, tensor<32xf32>]
        -> tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input,
                       Variadic<Tfm_FloatTensor>:$weights,
                       Variadic<Tfm_FloatTensor>:$biases);
  let results = (outs Variadic<Tfm_FloatTensor>:$results);
  let assemblyFormat = [{
    $input `[` $weights `]` (`bias` `[` $biases^ `]`)? attr-dict `:`
    type($input) `[` type($weights) `]` (`bias` `[` type($biases)^ `]`)? `->`
    type($results)
  }];
  let hasVerifier = 1;
}

def Tfm_MultiLinearGradOp : Tfm_Op<"multi_linear_grad", [Pure,
    AttrSizedOperandSegments, AttrSizedResultSegments, Tfm_Distributed]> {
  let summary = "gradient of tfm.multi_linear";
  let description = [{
    `input_grad = sum_i grads[i] weights[i]` (plus `accumulate` when
    present: the GEMMs add onto it, beta = 1), and each weight's and bias's
    gradient as tfm.linear_grad computes it. What a chain of
    tfm.linear_grad of one input, each accumulating onto the last one's
    input gradient, computes, in one runtime call. `bias_grads` is empty or
    one per weight. Written by tfm-fuse-multi-linears.

    ```mlir
    %dx, %dwq, %dwk = tfm.multi_linear_grad %x [%wq, %wk] [%dq, %dk]
        : tensor<2x8x64xf32> [tensor<64x64xf32>, tensor<32x64xf32>]
          [tensor<2x8x64xf32>, tensor<2x8x32xf32>]
        -> tensor<2x8x64xf32> [tensor<64x64xf32>, tensor<32x64xf32>]
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input,
                       Variadic<Tfm_FloatTensor>:$weights,
                       Variadic<Tfm_FloatTensor>:$grads,
                       Optional<Tfm_FloatTensor>:$accumulate);
  let results = (outs Tfm_FloatTensor:$input_grad,
                      Variadic<Tfm_FloatTensor>:$weight_grads,
                      Variadic<Tfm_FloatTensor>:$bias_grads);
  let assemblyFormat = [{
    $input `[` $weights `]` `[` $grads `]`
    (`accumulate` `(` $accumulate^ `:` type($accumulate) `)`)? attr-dict `:`
    type($input) `[` type($weights) `]` `[` type($grads) `]` `->`
    type($input_grad) `[` type($weight_grads) `]`
    (`bias` `[` type($bias_grads)^ `]`)?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Rotary position embedding
//===----------------------------------------------------------------------===//

class Tfm_RopeBase<string mnemonic> : Tfm_Op<mnemonic, [Pure,
    AllTypesMatch<["input", "result"]>, Tfm_Distributed]> {
  // `scaling` changes the inverse frequencies (Llama 3.x); without it they
  // are theta^(-2i/D).
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_IdTensor:$positions,
                       I64Attr:$head_dim, F64Attr:$theta,
                       OptionalAttr<Tfm_Llama3RopeScalingAttr>:$scaling);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $positions `head_dim` $head_dim `theta` $theta
    (`scaling` `(` qualified($scaling)^ `)`)? attr-dict `:`
    type($input) `,` type($positions)
  }];
  let hasVerifier = 1;
}

def Tfm_RopeOp : Tfm_RopeBase<"rope"> {
  let summary = "rotary position embedding of every head";
  let description = [{
    Views `input [B, S, N*D]` as `[B, S, N, D]` and rotates each head by the
    angles `positions[b, s] * theta^(-2i/D)`, `i < D/2`, in the rotate-half
    convention of Hugging Face Llama: with `x1, x2` the first and second
    halves of a head, the result is `(x1 cos - x2 sin, x2 cos + x1 sin)`.
    With `scaling` (Llama 3.x), the inverse frequencies `theta^(-2i/D)` are
    rescaled first (`#tfm.llama3_rope_scaling`).

    ```mlir
    %q2 = tfm.rope %q, %pos head_dim 16 theta 1.000000e+04
        : tensor<2x8x64xf32>, tensor<2x8xi32>
    %k2 = tfm.rope %k, %pos head_dim 16 theta 5.000000e+05
        scaling(#tfm.llama3_rope_scaling<factor = 8.0, low_freq_factor = 1.0,
            high_freq_factor = 4.0, original_max_position_embeddings = 8192>)
        : tensor<2x8x32xf32>, tensor<2x8xi32>
    ```
  }];
}

def Tfm_RopeGradOp : Tfm_RopeBase<"rope_grad"> {
  let summary = "gradient of tfm.rope (rotation by the opposite angles)";
  let description = [{
    The rotation is orthogonal, so the input gradient is the output gradient
    rotated by the negated angles (the same frequencies and `scaling` as the
    forward's).

    ```mlir
    %dq = tfm.rope_grad %dq2, %pos head_dim 16 theta 1.000000e+04
        : tensor<2x8x64xf32>, tensor<2x8xi32>
    ```
  }];
}

/// Two rotations at the same positions with the same frequencies (q and k,
/// or their gradients) in one op: each as the single op computes it.
/// Written by tfm-pair-ropes; no gradient rule (fusion runs after
/// differentiation).
class Tfm_RopePairBase<string mnemonic> : Tfm_Op<mnemonic, [Pure,
    AllTypesMatch<["first", "first_result"]>,
    AllTypesMatch<["second", "second_result"]>, Tfm_Distributed]> {
  let arguments = (ins Tfm_FloatTensor:$first, Tfm_FloatTensor:$second,
                       Tfm_IdTensor:$positions, I64Attr:$head_dim,
                       F64Attr:$theta,
                       OptionalAttr<Tfm_Llama3RopeScalingAttr>:$scaling);
  let results = (outs Tfm_FloatTensor:$first_result,
                      Tfm_FloatTensor:$second_result);
  let assemblyFormat = [{
    $first `,` $second `,` $positions `head_dim` $head_dim `theta` $theta
    (`scaling` `(` qualified($scaling)^ `)`)? attr-dict `:`
    type($first) `,` type($second) `,` type($positions)
  }];
  let hasVerifier = 1;
}

def Tfm_RopePairOp : Tfm_RopePairBase<"rope_pair"> {
  let summary = "tfm.rope of two tensors (q and k) in one op";
  let description = [{
    ```mlir
    %q2, %k2 = tfm.rope_pair %q, %k, %pos head_dim 16 theta 1.000000e+04
        : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8xi32>
    ```
  }];
}

def Tfm_RopePairGradOp : Tfm_RopePairBase<"rope_pair_grad"> {
  let summary = "tfm.rope_grad of two tensors (dq and dk) in one op";
  let description = [{
    ```mlir
    %dq, %dk = tfm.rope_pair_grad %dq2, %dk2, %pos head_dim 16 theta 1.000000e+04
        : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8xi32>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Tfm_AttentionOp : Tfm_Op<"attention", [Pure,
    DeclareOpInterfaceMethods<Tfm_DistributedOpInterface, ["adaptToLocalShapes"]>]> {
  let summary = "scaled dot-product attention with causal or document masks";
  let description = [{
    Multi-head attention over `q [B, S, N*D]`, `k` and `v [B, S, Nkv*D]`.
    Query head `h` attends with key/value head `h / (N / Nkv)` (GQA; `Nkv = 1`
    is MQA, `Nkv = N` is plain multi-head). Scores are `q.k * scale`.

    `mask causal`: position `i` sees `j <= i`. `mask causal_document eod E`:
    additionally `j` must be in the same document as `i`, where a document
    ends with (and includes) the token `E` (Megatron's `reset_attention_mask`
    in `get_ltor_masks_and_position_ids`); the `tokens` operand is required.

    Results: the output `[B, S, N*D]` and the log-sum-exp of every query row's
    masked, scaled scores `[B, N, S]` in f32, which the backward pass and ring
    attention's merging of partial results use.

    With `ring "cp"` (context parallelism's p2p), q, k and v are each rank's
    pieces of the sequence, split over mesh axis `cp` in Megatron's
    load-balanced chunk order; the op is the attention over the whole
    sequence, which tfm-expand-ring-attention computes by passing k and v
    around the ring (`tfm.ring_shift`, `tfm.attention_section`). With
    `a2a A` as well (cp_comm_type a2a+p2p), the ring is hierarchical: an
    all-to-all within each group of A consecutive cp ranks (level 0 of the
    plan's hierarchical cp groups) trades heads for sequence first, and the
    ring runs over level 1 (`tfm.level_all_to_all`).

    ```mlir
    %o, %lse = tfm.attention %q, %k, %v heads 4 kv_heads 2 head_dim 16
        scale 2.500000e-01 mask causal
        : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
        -> tensor<2x8x64xf32>, tensor<2x4x8xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$query, Tfm_FloatTensor:$key,
                       Tfm_FloatTensor:$value, Optional<Tfm_IdTensor>:$tokens,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, F64Attr:$scale, Tfm_MaskKind:$mask,
                       OptionalAttr<I64Attr>:$eod, OptionalAttr<StrAttr>:$ring,
                       OptionalAttr<I64Attr>:$ring_a2a);
  let results = (outs Tfm_FloatTensor:$result, Tfm_StatTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`tokens` $tokens^)? `heads` $num_heads
    `kv_heads` $num_kv_heads `head_dim` $head_dim `scale` $scale `mask` $mask
    (`eod` $eod^)? (`ring` $ring^)? (`a2a` $ring_a2a^)? attr-dict `:` type($query) `,`
    type($key) `,` type($value) (`,` type($tokens)^)? `->` type($result) `,`
    type($lse)
  }];
  let hasVerifier = 1;
}

def Tfm_AttentionGradOp : Tfm_Op<"attention_grad", [Pure,
    AllTypesMatch<["query", "out", "out_grad", "query_grad"]>,
    DeclareOpInterfaceMethods<Tfm_DistributedOpInterface, ["adaptToLocalShapes"]>]> {
  let summary = "gradient of tfm.attention";
  let description = [{
    Given the forward operands, its output and log-sum-exp and the output
    gradient, returns the gradients of query, key and value (flash-attention
    style: probabilities are recomputed from the log-sum-exp). Attributes
    are those of the forward op. The key and value gradients have the types
    of the key and value unless `grads(...)` says otherwise (partial sums
    when the queries' sequence is split).

    ```mlir
    %dq, %dk, %dv = tfm.attention_grad %q, %k, %v, %o, %lse, %do heads 4
        kv_heads 2 head_dim 16 scale 2.500000e-01 mask causal
        : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>,
          tensor<2x4x8xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$query, Tfm_FloatTensor:$key,
                       Tfm_FloatTensor:$value, Tfm_FloatTensor:$out,
                       Tfm_StatTensor:$lse, Tfm_FloatTensor:$out_grad,
                       Optional<Tfm_IdTensor>:$tokens,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, F64Attr:$scale, Tfm_MaskKind:$mask,
                       OptionalAttr<I64Attr>:$eod, OptionalAttr<StrAttr>:$ring,
                       OptionalAttr<I64Attr>:$ring_a2a);
  let results = (outs Tfm_FloatTensor:$query_grad, Tfm_FloatTensor:$key_grad,
                      Tfm_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $out `,` $lse `,` $out_grad
    (`tokens` $tokens^)? `heads` $num_heads `kv_heads` $num_kv_heads
    `head_dim` $head_dim `scale` $scale `mask` $mask (`eod` $eod^)?
    (`ring` $ring^)? (`a2a` $ring_a2a^)? attr-dict
    `:` type($query) `,` type($key) `,` type($value) `,` type($lse)
    (`,` type($tokens)^)?
    `` custom<GradTypes>(ref(type($key)), ref(type($value)), type($key_grad),
                         type($value_grad))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Activations, residuals, dropout, casts
//===----------------------------------------------------------------------===//

def Tfm_GeluOp : Tfm_ElementwiseOp<"gelu"> {
  let summary = "GELU activation, exact or tanh-approximated";
  let description = [{
    `none`: `x * Phi(x)` with the normal CDF (erf). `tanh`: the GPT-2
    approximation `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.

    ```mlir
    %y = tfm.gelu %x tanh : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_GeluApprox:$approximate);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = "$input $approximate attr-dict `:` type($input)";
}

def Tfm_GeluGradOp : Tfm_BinaryElementwiseOp<"gelu_grad"> {
  let summary = "gradient of tfm.gelu";
  let description = [{
    `result = grad * gelu'(input)`.

    ```mlir
    %dx = tfm.gelu_grad %x, %dy tanh : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$grad,
                       Tfm_GeluApprox:$approximate);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad $approximate attr-dict `:`
    custom<ElementwiseTypes>(type($input), type($grad), type($result))
  }];
}

def Tfm_SiluOp : Tfm_ElementwiseOp<"silu"> {
  let summary = "SiLU activation x * sigmoid(x)";
  let description = [{
    ```mlir
    %y = tfm.silu %x : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Tfm_SiluGradOp : Tfm_BinaryElementwiseOp<"silu_grad"> {
  let summary = "gradient of tfm.silu";
  let description = [{
    `result = grad * (s + x s (1 - s))` with `s = sigmoid(x)`.

    ```mlir
    %dx = tfm.silu_grad %x, %dy : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $grad attr-dict `:`
    custom<ElementwiseTypes>(type($input), type($grad), type($result))
  }];
}

def Tfm_SwigluOp : Tfm_BinaryElementwiseOp<"swiglu"> {
  let summary = "gated SiLU of the Llama MLP: silu(gate) * up";
  let description = [{
    Gate and up projections are separate operands (separate column-parallel
    linears), so a tensor-parallel split of the ffn dim needs no shuffling.

    ```mlir
    %h = tfm.swiglu %gate, %up : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$gate, Tfm_FloatTensor:$up);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $gate `,` $up attr-dict `:`
    custom<ElementwiseTypes>(type($gate), type($up), type($result))
  }];
}

def Tfm_SwigluGradOp : Tfm_Op<"swiglu_grad", [Pure,
    AllTypesMatch<["gate", "up", "grad", "gate_grad", "up_grad"]>,
    Tfm_Distributed]> {
  let summary = "gradient of tfm.swiglu";
  let description = [{
    `gate_grad = grad * up * silu'(gate)`, `up_grad = grad * silu(gate)`.

    ```mlir
    %dg, %du = tfm.swiglu_grad %gate, %up, %dh : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$gate, Tfm_FloatTensor:$up,
                       Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$gate_grad, Tfm_FloatTensor:$up_grad);
  let assemblyFormat = "$gate `,` $up `,` $grad attr-dict `:` type($gate)";
}

def Tfm_BiasAddOp : Tfm_Op<"bias_add", [Pure, AllTypesMatch<["input", "result"]>,
    Tfm_Distributed]> {
  let summary = "adds a bias vector to every row: the bias of a row-parallel linear";
  let description = [{
    `result[..., j] = input[..., j] + bias[j]`. Sharding writes it after the
    all-reduce of a row-parallel linear, so the bias is added once and not
    once per rank. It appears after differentiation only
    (the gradient of a linear's bias is part of `tfm.linear_grad`), so it has
    no gradient rule of its own.

    ```mlir
    %y = tfm.bias_add %x, %b : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$bias);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $bias attr-dict `:` type($input) `,` type($bias)
  }];
  let hasVerifier = 1;
}

def Tfm_RepeatKvOp : Tfm_Op<"repeat_kv", [Pure, Tfm_Distributed]> {
  let summary = "repeats every key/value head `factor` times";
  let description = [{
    Views `input [..., N*D]` as N heads of `head_dim` D and writes each head
    `factor` times in a row: `[..., N*factor*D]`, head n becoming heads
    `[n*factor, (n+1)*factor)`. Sharding uses it when there are fewer kv
    heads than tp ranks: the heads are repeated until every rank has one,
    then each rank takes the one its query heads read.

    ```mlir
    %k4 = tfm.repeat_kv %k factor 2 head_dim 16
        : tensor<2x8x32xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, I64Attr:$factor,
                       I64Attr:$head_dim);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `factor` $factor `head_dim` $head_dim attr-dict `:` type($input)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_RepeatKvGradOp : Tfm_Op<"repeat_kv_grad", [Pure, Tfm_Distributed]> {
  let summary = "gradient of tfm.repeat_kv: sums every head's copies";
  let description = [{
    `result[..., n-th head] = sum over j < factor of grad[..., (n*factor+j)-th head]`.

    ```mlir
    %dk = tfm.repeat_kv_grad %dk4 factor 2 head_dim 16
        : tensor<2x8x64xf32> -> tensor<2x8x32xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$grad, I64Attr:$factor,
                       I64Attr:$head_dim);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `factor` $factor `head_dim` $head_dim attr-dict `:` type($grad)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_AddOp : Tfm_BinaryElementwiseOp<"add", [Commutative]> {
  let summary = "elementwise sum: residual connections, gradient accumulation";
  let description = [{
    ```mlir
    %h = tfm.add %x, %attn : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$lhs, Tfm_FloatTensor:$rhs);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:`
    custom<ElementwiseTypes>(type($lhs), type($rhs), type($result))
  }];
}

def Tfm_DropoutOp : Tfm_ElementwiseOp<"dropout"> {
  let summary = "inverted dropout with a deterministic, position-keyed mask";
  let description = [{
    Zeroes each element with probability `p` and scales the rest by
    `1 / (1 - p)`. The mask is a pure function of `seed` and the element's
    global index, so it does not depend on how the tensor is sharded, and the
    gradient is the same op applied to the output gradient (same seed, same
    mask). `p = 0` is the identity. Both attributes default to 0.

    In sharded IR the input may be this rank's piece of the global tensor
    (its distribution says which): the rank keys its elements by their
    global index and drops exactly the elements the unsharded program drops
    (sequence-parallel hidden dropout, for one).

    ```mlir
    %y = tfm.dropout %x p 1.000000e-01 seed 1234 : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "0.0">:$p,
                       DefaultValuedAttr<I64Attr, "0">:$seed);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = "$input `p` $p `seed` $seed attr-dict `:` type($input)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tfm_CastOp : Tfm_Op<"cast", [Pure, SameOperandsAndResultShape,
    Tfm_Distributed]> {
  let summary = "element type conversion between f32, bf16 and f16";
  let description = [{
    Rounds to nearest even when narrowing.

    ```mlir
    %y = tfm.cast %x : tensor<2x8x64xf32> to tensor<2x8x64xbf16>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

// The row statistics of a [B, S, V] logits tensor: f32 with the labels'
// shape and distribution.
class Tfm_RowStatsOf<string stats> : TypesMatchWith<
    "row statistics are f32 tensors of the labels' shape", "labels", stats,
    "::llvm::cast<::mlir::RankedTensorType>($_self).clone("
    "::mlir::Float32Type::get($_self.getContext()))">;

def Tfm_CrossEntropyOp : Tfm_Op<"cross_entropy", [Pure, Tfm_Distributed,
    Tfm_RowStatsOf<"row_max">, Tfm_RowStatsOf<"sum_exp">]> {
  let summary = "masked mean cross-entropy of next-token logits";
  let description = [{
    `loss = sum(mask * (logsumexp(logits) - logits[label])) / sum(mask)` over
    all `[B, S]` positions, computed in f32: the mean over the tokens whose
    loss mask is non-zero (Megatron's `loss_func`). The other results are
    the softmax statistics of every row, its maximum logit and
    `sum(exp(logits - max))`, which the gradient reads instead of computing
    them again.

    `unpadded_vocab_size = U`, when present, says that only the first U
    logits of a row are vocabulary and the rest padding (a vocabulary padded
    to a multiple of the tensor-parallel size, `tfm-pad-vocab`): the padding
    is left out of the softmax, so the loss is the unpadded model's.

    With the vocabulary or the tokens split over ranks, sharding rewrites it
    into `tfm.ce_row_max`, `tfm.ce_sum_exp`, `tfm.ce_target_logit`,
    `tfm.ce_loss_sum` and `tfm.loss_mean`: the statistics are reduced over
    the vocabulary's split (Megatron's vocab-parallel cross-entropy, the
    logits are never gathered), the loss's sum and count over the tokens'.

    ```mlir
    %loss, %max, %sum_exp = tfm.cross_entropy %logits, %labels, %mask
        : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<2x8xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$logits, Tfm_IdTensor:$labels,
                       Tfm_MaskTensor:$loss_mask,
                       OptionalAttr<I64Attr>:$unpadded_vocab_size);
  let results = (outs Tfm_Loss:$loss, Tfm_StatTensor:$row_max,
                      Tfm_StatTensor:$sum_exp);
  let assemblyFormat = [{
    $logits `,` $labels `,` $loss_mask attr-dict `:`
    type($logits) `,` type($labels) `,` type($loss_mask) `->` type($loss)
  }];
  let hasVerifier = 1;
}

def Tfm_CrossEntropyGradOp : Tfm_Op<"cross_entropy_grad", [Pure,
    AllTypesMatch<["logits", "result"]>, Tfm_RowStatsOf<"row_max">,
    Tfm_RowStatsOf<"sum_exp">, Tfm_Distributed]> {
  let summary = "gradient of tfm.cross_entropy with respect to the logits";
  let description = [{
    `result = (softmax(logits) - onehot(labels)) * mask / count * grad`,
    the softmax from the forward op's row statistics, `count` the number of
    tokens the loss averages: the `count` operand when given, else
    `sum(mask)`. With the vocabulary split, each rank computes its slice with
    no communication (the statistics are whole on every rank); with the
    tokens split (context parallelism), sharding passes the whole sequence's
    count (a `tfm.token_count` reduced over the split). With
    `unpadded_vocab_size`, the padding logits (columns from it on) get zero
    gradient.

    ```mlir
    %dlogits = tfm.cross_entropy_grad %logits, %labels, %mask, %max, %sum_exp, %dloss
        : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<2x8xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$logits, Tfm_IdTensor:$labels,
                       Tfm_MaskTensor:$loss_mask, Tfm_StatTensor:$row_max,
                       Tfm_StatTensor:$sum_exp, Tfm_Loss:$grad,
                       Optional<Tfm_Loss>:$count,
                       OptionalAttr<I64Attr>:$unpadded_vocab_size);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $loss_mask `,` $row_max `,` $sum_exp `,` $grad
    (`count` $count^)? attr-dict `:` type($logits) `,` type($labels) `,`
    type($loss_mask) `,` type($grad) (`,` type($count)^)?
  }];
  let hasVerifier = 1;
}

// The pieces of a vocab-parallel cross-entropy. Sharding writes them (each
// rank holds a slice of the vocabulary); they have no gradient rules.

def Tfm_CeRowMaxOp : Tfm_Op<"ce_row_max", [Pure, Tfm_Distributed]> {
  let summary = "largest logit of every row of a vocabulary slice";
  let description = [{
    `result[b, s] = max_v logits[b, s, v]` in f32. On a split vocabulary the
    result is a partial maximum over the split's axes. With
    `unpadded_vocab_size`, only the global vocabulary ids below it count.

    ```mlir
    %m = tfm.ce_row_max %logits : tensor<2x8x256xf32> -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$logits,
                       OptionalAttr<I64Attr>:$unpadded_vocab_size);
  let results = (outs Tfm_StatTensor:$result);
  let assemblyFormat = [{
    $logits attr-dict `:` type($logits) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_CeSumExpOp : Tfm_Op<"ce_sum_exp", [Pure, Tfm_Distributed]> {
  let summary = "sum of exponentials of every row of a vocabulary slice";
  let description = [{
    `result[b, s] = sum_v exp(logits[b, s, v] - row_max[b, s])` in f32, with
    the maximum over the whole vocabulary. On a split vocabulary the result
    is a partial sum over the split's axes. With `unpadded_vocab_size`, only
    the global vocabulary ids below it count.

    ```mlir
    %e = tfm.ce_sum_exp %logits, %m : tensor<2x8x256xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$logits, Tfm_StatTensor:$row_max,
                       OptionalAttr<I64Attr>:$unpadded_vocab_size);
  let results = (outs Tfm_StatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $row_max attr-dict `:` type($logits) `,` type($row_max) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_CeTargetLogitOp : Tfm_Op<"ce_target_logit", [Pure, Tfm_Distributed]> {
  let summary = "the logit of every row's label";
  let description = [{
    `result[b, s] = logits[b, s, labels[b, s]]` in f32. On a split
    vocabulary a rank gives the label's logit if the label is in its slice
    and 0 otherwise, so the result is a partial sum over the split's axes.

    ```mlir
    %t = tfm.ce_target_logit %logits, %labels : tensor<2x8x256xf32>, tensor<2x8xi32> -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$logits, Tfm_IdTensor:$labels);
  let results = (outs Tfm_StatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_CeLossSumOp : Tfm_Op<"ce_loss_sum", [Pure, Tfm_Distributed,
    AllTypesMatch<["row_max", "sum_exp", "target", "loss_mask"]>]> {
  let summary = "the masked sum of row losses and the number of tokens";
  let description = [{
    From whole row statistics: `result[0] = sum(mask * (row_max +
    log(sum_exp) - target))` and `result[1] = sum(mask)`, in f32. With the
    rows split over ranks (context parallelism) both are partial sums, so
    one all-reduce of the pair gives the whole sequence's (Megatron reduces
    the same `[loss_sum, num_tokens]` pair); `tfm.loss_mean` divides.

    ```mlir
    %parts = tfm.ce_loss_sum %m, %e, %t, %mask : tensor<2x8xf32> -> tensor<2xf32>
    ```
  }];
  let arguments = (ins Tfm_StatTensor:$row_max, Tfm_StatTensor:$sum_exp,
                       Tfm_StatTensor:$target, Tfm_MaskTensor:$loss_mask);
  let results = (outs Tfm_LossParts:$result);
  let assemblyFormat = [{
    $row_max `,` $sum_exp `,` $target `,` $loss_mask attr-dict `:`
    type($row_max) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_LossMeanOp : Tfm_Op<"loss_mean", [Pure, Tfm_Distributed]> {
  let summary = "a masked mean from its sum and count";
  let description = [{
    `loss = parts[0] / parts[1]`, or 0 when the count is 0 (an all-masked
    batch). The parts must be whole: a mean of partial sums is not the mean.

    ```mlir
    %loss = tfm.loss_mean %parts : tensor<2xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_LossParts:$parts);
  let results = (outs Tfm_Loss:$loss);
  let assemblyFormat = [{
    $parts attr-dict `:` type($parts) `->` type($loss)
  }];
  let hasVerifier = 1;
}

def Tfm_TokenCountOp : Tfm_Op<"token_count", [Pure, Tfm_Distributed]> {
  let summary = "the number of tokens a loss mask counts";
  let description = [{
    `result = sum(mask)` in f32: the denominator of the masked mean loss.
    With the tokens split over ranks the result is a partial sum.

    ```mlir
    %count = tfm.token_count %mask : tensor<2x8xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_MaskTensor:$loss_mask);
  let results = (outs Tfm_Loss:$result);
  let assemblyFormat = [{
    $loss_mask attr-dict `:` type($loss_mask) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Distribution
//===----------------------------------------------------------------------===//

def Tfm_ReshardOp : Tfm_Op<"reshard", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>, Tfm_Distributed]> {
  let summary = "the same tensor in another distribution";
  let description = [{
    The value of `input`, distributed as `result`'s type says: a partial sum
    made whole, a split dim gathered or sliced, chunks reordered. Propagation
    (tfm-propagate-distribution) writes it where an op needs an operand
    distributed otherwise than it arrives; tfm-reshard-to-collectives turns
    each into the mesh collectives (and local copies) that do it. Both types
    are distributed over one mesh and have one global shape.

    ```mlir
    %r = tfm.reshard %p : tensor<2x8x64xf32, #tfm.dist<@dense, partial = sum[tp]>>
        -> tensor<2x8x64xf32, #tfm.dist<@dense>>
    ```
  }];
  let arguments = (ins Tfm_AnyStaticTensor:$input);
  let results = (outs Tfm_AnyStaticTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result)
  }];
}

def Tfm_PermuteChunksOp : Tfm_Op<"permute_chunks", [Pure,
    SameOperandsAndResultShape, SameOperandsAndResultElementType,
    Tfm_Distributed]> {
  let summary = "reorders the equal chunks of one dim";
  let description = [{
    Cuts dim `dim` into `order.size()` equal chunks; chunk `j` of the result
    is chunk `order[j]` of the input. Resharding uses it around the
    collectives of a dim in Megatron's load-balanced (zigzag) order: an
    all-gather of the chunks of every rank gives them in rank order, one
    permutation makes that the natural order.

    ```mlir
    %y = tfm.permute_chunks %x dim 1 order [0, 2, 3, 1]
        : tensor<2x8x64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_AnyStaticTensor:$input, I64Attr:$dim,
                       DenseI64ArrayAttr:$order);
  let results = (outs Tfm_AnyStaticTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `order` $order attr-dict `:` type($input) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Ring attention (context parallelism's p2p), per rank
//===----------------------------------------------------------------------===//

// Upstream mesh.shift moves one tensor and LLVM 19 does not lower it; a ring
// step moves k and v (in backward also their gradients) as one grouped
// exchange, which is what TransformerEngine does and what the runtime's p2p
// batches express.
def Tfm_RingShiftOp : Tfm_Op<"ring_shift", [Pure, Tfm_Distributed]> {
  let summary = "passes tensors one step around a ring of ranks";
  let description = [{
    Every rank of each group of mesh axis `axis` sends its `inputs` to the
    rank `offset` places further (group rank `r + offset` mod the group
    size) and returns what it receives from `r - offset`, all as one grouped
    point-to-point exchange (even ranks post their sends first, odd ranks
    their receives: Megatron's order). Ring attention moves k and v with it.
    With `level L` the ring is this rank's group at level L of the axis'
    hierarchical groups (the plan's hierarchical cp sizes; Megatron-Core's
    create_hierarchical_groups) instead of its whole group.
    Per-rank IR: the results are the same tensors of another rank.

    ```mlir
    %k1, %v1 = tfm.ring_shift %k, %v on @dense axis "cp" offset 1
        : tensor<1x8x32xf32>, tensor<1x8x32xf32>
    ```
  }];
  let arguments = (ins Variadic<Tfm_AnyStaticTensor>:$inputs,
                       FlatSymbolRefAttr:$mesh, StrAttr:$axis,
                       I64Attr:$offset, OptionalAttr<I64Attr>:$level);
  let results = (outs Variadic<Tfm_AnyStaticTensor>:$results);
  let assemblyFormat = [{
    $inputs `on` $mesh `axis` $axis (`level` $level^)? `offset` $offset
    attr-dict `:`
    type($inputs) custom<SameTypes>(ref(type($inputs)), type($results))
  }];
  let hasVerifier = 1;
}

def Tfm_LevelAllToAllOp : Tfm_Op<"level_all_to_all", [Pure, Tfm_Distributed]> {
  let summary = "an all-to-all within one level of hierarchical groups";
  let description = [{
    The ranks of this rank's group at level `level` of mesh axis `axis`'
    hierarchical groups (the plan's hierarchical cp sizes, e.g. level 0 of
    a2a+p2p: consecutive cp ranks) exchange pieces: the input is cut into
    as many equal pieces along `split_dim` as the group has members, piece
    `j` goes to member `j`, and the pieces received are concatenated along
    `concat_dim` in member order (mesh.all_to_all's semantics, on a group
    that is not a mesh axis). Per-rank IR.

    ```mlir
    %y = tfm.level_all_to_all %x on @dense axis "cp" level 0 split 2
        concat 1 : tensor<1x8x64xf32> -> tensor<1x16x32xf32>
    ```
  }];
  let arguments = (ins Tfm_AnyStaticTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrAttr:$axis, I64Attr:$level, I64Attr:$split_dim,
                       I64Attr:$concat_dim);
  let results = (outs Tfm_AnyStaticTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh `axis` $axis `level` $level `split` $split_dim
    `concat` $concat_dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

// Pipeline parallelism: the activations and gradients one pipeline stage
// hands to its neighbours. Not Pure: a batch orders the program and a send
// has no result to keep it alive.
def Tfm_PipelineP2POp : Tfm_Op<"pipeline_p2p", [AttrSizedOperandSegments]> {
  let summary = "one batch of pipeline sends and receives";
  let description = [{
    Each tensor of `sends` goes to the rank `send_offsets[i]` places along
    mesh axis `axis` (-1: the previous stage, +1: the next; the last rank's
    next is the first, as in interleaved schedules); each result arrives
    from the rank `recv_offsets[j]` places away. All of them form one
    grouped exchange, posted in operand order (tfm-schedule-pipeline orders
    them as Megatron-Core does). `send_payloads` and `recv_payloads` name
    what moves, three integers per tensor: kind (0 activation, 1 gradient),
    micro-batch and the virtual stage that produced it;
    tfm-verify-pipeline-p2p proves from them that every send meets the
    receive that expects it. In a loop over micro-batches, `shifted by
    %base` adds the loop's micro-batch offset to every payload's
    micro-batch.

    ```mlir
    %g = tfm.pipeline_p2p sends(%act : tensor<1x8x64xf32>) to [1]
        recvs from [1] payloads [0, 3, 0] -> [1, 2, 1]
        on @dense axis "pp" : tensor<1x8x64xf32>
    ```
  }];
  let arguments = (ins Variadic<Tfm_AnyStaticTensor>:$sends,
                       Optional<Index>:$base,
                       DenseI64ArrayAttr:$send_offsets,
                       DenseI64ArrayAttr:$recv_offsets,
                       DenseI64ArrayAttr:$send_payloads,
                       DenseI64ArrayAttr:$recv_payloads,
                       FlatSymbolRefAttr:$mesh, StrAttr:$axis);
  let results = (outs Variadic<Tfm_AnyStaticTensor>:$results);
  let assemblyFormat = [{
    `sends` `(` ($sends^ `:` type($sends))? `)` `to` $send_offsets
    `recvs` `from` $recv_offsets `payloads` $send_payloads `->`
    $recv_payloads (`shifted` `by` $base^)? `on` $mesh `axis` $axis
    attr-dict (`:` type($results)^)?
  }];
  let hasVerifier = 1;
}

def Tfm_PipelineStepOp : Tfm_Op<"pipeline_step"> {
  let summary = "marks the start of a forward or backward pipeline step";
  let description = [{
    Written by tfm-schedule-pipeline before each `F<microbatch>.<chunk>` or
    `B<microbatch>.<chunk>` of a pp rank's step. It computes nothing: the
    runtime prints the step when tracing is on (`loom-run
    --trace-pipeline`), so a test can compare the order the compiled
    program runs with the schedule `loom-ranks --schedule` prints. In a loop
    over micro-batches the micro-batch is `microbatch + base`.

    ```mlir
    tfm.pipeline_step backward mb 3 chunk 1
    tfm.pipeline_step mb 2 + %m chunk 0
    ```
  }];
  let arguments = (ins UnitAttr:$backward, I64Attr:$microbatch,
                       Optional<Index>:$base, I64Attr:$chunk);
  let assemblyFormat = [{
    (`backward` $backward^)? `mb` $microbatch (`+` $base^)? `chunk` $chunk
    attr-dict
  }];
}

def Tfm_PipelineDataOp : Tfm_Op<"pipeline_data"> {
  let summary = "traces what a pipeline step computed";
  let description = [{
    Written by tfm-schedule-pipeline in a pp rank's step: after the first
    stage's forward step of a micro-batch marks, the micro-batch's token ids
    that step reads (`tokens`, int32); at the end of the last stage's
    forward step, the loss it computed (`loss`, one element). It computes
    nothing: with tracing on (`loom-run --trace-pipeline`) the runtime
    prints a checksum of the tokens or the loss, so a test can check that
    each step computed the micro-batch it says it did, not only that the
    steps ran in the schedule's order.

    ```mlir
    tfm.pipeline_data "tokens" mb 3 chunk 0 of %tokens : tensor<2x32xi32>
    tfm.pipeline_data "loss" mb 3 chunk 1 of %loss : tensor<f32>
    ```
  }];
  let arguments = (ins StrAttr:$what, I64Attr:$microbatch,
                       Optional<Index>:$base, I64Attr:$chunk,
                       AnyRankedTensor:$value);
  let assemblyFormat = [{
    $what `mb` $microbatch (`+` $base^)? `chunk` $chunk `of` $value `:`
    type($value) attr-dict
  }];
  let hasVerifier = 1;
}

// A pipelined step takes each batch input for all of its micro-batches at
// once (stacked on a leading dim) and returns its micro-batches' losses
// the same way, so that a loop over the micro-batch index can address them.
def Tfm_MicrobatchSliceOp : Tfm_Op<"microbatch_slice", [Pure]> {
  let summary = "one micro-batch of a stacked step input";
  let description = [{
    Micro-batch `index + base` of `stacked`, whose leading dim holds a
    step's micro-batches (`base`, when given, is a loop's run-time offset).
    The result is a copy (the inputs are a few bytes per token).

    ```mlir
    %t = tfm.microbatch_slice %tokens[3] : tensor<4x2x32xi32> -> tensor<2x32xi32>
    %u = tfm.microbatch_slice %tokens[1 + %m] : tensor<4x2x32xi32> -> tensor<2x32xi32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$stacked, I64Attr:$index,
                       Optional<Index>:$base);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $stacked `[` $index (`+` $base^)? `]` attr-dict `:` type($stacked) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_MicrobatchInsertOp : Tfm_Op<"microbatch_insert", [Pure,
    AllTypesMatch<["dest", "result"]>]> {
  let summary = "writes one micro-batch's value into a stacked step result";
  let description = [{
    `dest` with micro-batch `index + base` (its leading dim) replaced by
    `value`. The lowering writes `dest`'s buffer in place, so `dest` must
    have no other use (tfm-schedule-pipeline threads it from one insert to
    the next).

    ```mlir
    %l1 = tfm.microbatch_insert %loss into %l0[2] : tensor<f32> into tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$value, AnyRankedTensor:$dest,
                       I64Attr:$index, Optional<Index>:$base);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $value `into` $dest `[` $index (`+` $base^)? `]` attr-dict `:`
    type($value) `into` type($dest)
  }];
  let hasVerifier = 1;
}

def Tfm_EmptyOp : Tfm_Op<"empty", [Pure]> {
  let summary = "a tensor whose every element is written before it is read";
  let description = [{
    The start of a stacked step result that tfm.microbatch_insert fills.

    ```mlir
    %l = tfm.empty : tensor<4xf32>
    ```
  }];
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Tfm_GradsReadyOp : Tfm_Op<"grads_ready"> {
  let summary = "marks the gradients of a pipeline chunk as final";
  let description = [{
    Written by tfm-schedule-pipeline right after a pp rank's last backward
    step of model chunk `chunk`: its operands are the step's gradient
    results that chunk yields, summed over every micro-batch (and reduced
    over tp or cp where that is done once per step). The runtime tells the
    rank program, which starts their data-parallel reduction there while
    the schedule's remaining steps run (Megatron's overlapped gradient
    reduce); the results of the step are these values.

    ```mlir
    tfm.grads_ready chunk 1 of %g0, %g1 : tensor<64xf32>, tensor<64x64xf32>
    ```
  }];
  let arguments = (ins I64Attr:$chunk, Variadic<AnyRankedTensor>:$grads);
  let assemblyFormat = [{
    `chunk` $chunk (`of` $grads^ `:` type($grads))? attr-dict
  }];
}

class Tfm_SectionOp<string mnemonic> : Tfm_Op<mnemonic, [Pure,
    AttrSizedOperandSegments, Tfm_Distributed]> {
  code sectionDoc = [{
    The key/value block is that of cp rank `(r + kv_from) mod n` of the ring
    of mesh axis `axis` (`r` this rank, `n` the ring's size; with `level`,
    of that level of the axis' hierarchical groups); which
    section of the tile is computed follows from the two ranks
    (TransformerEngine's AttnFuncWithCPAndKVP2P): the diagonal when it is
    this rank's own block (a causal mask on local indices is exact in the
    load-balanced layout), the lower section (every query row, the block's
    first half of keys, no mask) for a block of a lower rank, the upper
    section (the second half of query rows, every key, no mask) for a
    higher one. Every section but the diagonal costs half a tile. With
    `tokens` (the whole sequence's, in order) and `eod`, keys of another
    document are masked as well (reset_attention_mask): the document ids of
    the queries and of the block are read at their global positions.
  }];
}

def Tfm_AttentionSectionOp : Tfm_SectionOp<"attention_section"> {
  let summary = "one step of ring attention: a tile merged into the result";
  let description = sectionDoc # [{

    Merges the tile's softmax-weighted values into `merge` (the output and
    log-sum-exp of earlier steps) by their log-sum-exps; without them (the
    first step, which must be the diagonal: `kv_from 0`) the tile is the
    result.

    ```mlir
    %o2, %lse2 = tfm.attention_section %q, %k1, %v1
        merge(%o1, %lse1 : tensor<1x8x64xf32>, tensor<1x4x8xf32>) kv_from -1
        on @dense axis "cp" heads 4 kv_heads 2 head_dim 16
        scale 2.500000e-01 : tensor<1x8x64xf32>, tensor<1x8x32xf32>
        -> tensor<1x4x8xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$query, Tfm_FloatTensor:$key,
                       Tfm_FloatTensor:$value, Variadic<AnyRankedTensor>:$merge,
                       Optional<Tfm_IdTensor>:$tokens,
                       I64Attr:$kv_from, FlatSymbolRefAttr:$mesh,
                       StrAttr:$axis, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       F64Attr:$scale, OptionalAttr<I64Attr>:$eod,
                       OptionalAttr<I64Attr>:$level);
  let results = (outs Tfm_FloatTensor:$result, Tfm_StatTensor:$result_lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`merge` `(` $merge^ `:` type($merge) `)`)?
    (`tokens` `(` $tokens^ `:` type($tokens) `)` `eod` $eod)?
    `kv_from` $kv_from `on` $mesh `axis` $axis (`level` $level^)?
    `heads` $num_heads `kv_heads` $num_kv_heads `head_dim` $head_dim
    `scale` $scale attr-dict
    `:` type($query) `,` type($key) `->` type($result_lse)
    custom<SameTypes>(ref(type($key)), type($value))
    custom<SameTypes>(ref(type($query)), type($result))
  }];
  let hasVerifier = 1;
}

def Tfm_AttentionSectionGradOp : Tfm_SectionOp<"attention_section_grad"> {
  let summary = "one step of ring attention's backward";
  let description = sectionDoc # [{

    From the final (merged) output and log-sum-exp and the output gradient,
    adds the tile's gradients to the query gradient and to the block's key
    and value gradients (`grads`, the three accumulators; none: they start
    at zero).

    ```mlir
    %dq, %dk, %dv = tfm.attention_section_grad %q, %k1, %v1, %o, %lse, %do
        grads(%dq0, %dk0, %dv0 : tensor<1x8x64xf32>, tensor<1x8x32xf32>,
        tensor<1x8x32xf32>) kv_from 1 on @dense axis "cp" heads 4
        kv_heads 2 head_dim 16 scale 2.500000e-01
        : tensor<1x8x64xf32>, tensor<1x8x32xf32>, tensor<1x4x8xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$query, Tfm_FloatTensor:$key,
                       Tfm_FloatTensor:$value, Tfm_FloatTensor:$out,
                       Tfm_StatTensor:$lse, Tfm_FloatTensor:$out_grad,
                       Variadic<Tfm_FloatTensor>:$grads,
                       Optional<Tfm_IdTensor>:$tokens, I64Attr:$kv_from,
                       FlatSymbolRefAttr:$mesh, StrAttr:$axis,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, F64Attr:$scale,
                       OptionalAttr<I64Attr>:$eod,
                       OptionalAttr<I64Attr>:$level);
  let results = (outs Tfm_FloatTensor:$query_grad, Tfm_FloatTensor:$key_grad,
                      Tfm_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $out `,` $lse `,` $out_grad
    (`grads` `(` $grads^ `:` type($grads) `)`)?
    (`tokens` `(` $tokens^ `:` type($tokens) `)` `eod` $eod)? `kv_from` $kv_from `on`
    $mesh `axis` $axis (`level` $level^)? `heads` $num_heads
    `kv_heads` $num_kv_heads
    `head_dim` $head_dim `scale` $scale attr-dict `:` type($query) `,`
    type($key) `,` type($lse)
    custom<SameTypes>(ref(type($key)), type($value))
    custom<SameTypes>(ref(type($query)), type($out))
    custom<SameTypes>(ref(type($query)), type($out_grad))
    custom<SameTypes>(ref(type($query)), type($query_grad))
    custom<SameTypes>(ref(type($key)), type($key_grad))
    custom<SameTypes>(ref(type($key)), type($value_grad))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//
//
// A mixture-of-experts MLP over the tokens of a micro-batch (T = B x S):
//
//   %logits          = tfm.linear %x32, %router_w32       (router, in f32)
//   %probs, %experts = tfm.moe_route %logits top_k k
//   %routed          = tfm.moe_route_counts %experts
//   %aux, %z         = tfm.moe_router_loss %logits, %routed ...
//   %rows, %counts, %row_map = tfm.moe_permute %x, %experts
//   %h               = tfm.grouped_linear %rows, %w1, %counts   (per expert)
//   ...
//   %y               = tfm.moe_unpermute %out_rows, %probs, %row_map
//
// Rows are the (token, slot) pairs grouped by expert: T x k rows, the
// dropless dispatch. The router's losses join the training objective
// through their gradient alone (seeded with the step's grad_scale by
// tfm-differentiate), as Megatron-Core's MoEAuxLossAutoScaler attaches them.

def Tfm_MoeRouteOp : Tfm_Op<"moe_route", [Pure, Tfm_Distributed]> {
  let summary = "top-k routing of each token to experts";
  let description = [{
    From the router's f32 logits `[B, S, E]`: `experts [B, S, k]` (i32, by
    descending score, ties to the lower expert) and their weights `probs
    [B, S, k]`. Without `pre_softmax` (Megatron's default, Mixtral's
    routing) the experts are the k largest logits and `probs` the softmax of
    those k logits; with it, the softmax over all E experts is taken first
    and the k largest scores are `probs`, not renormalized (Qwen2-MoE
    without `norm_topk_prob`, Megatron's `--moe-router-pre-softmax`).

    ```mlir
    %p, %e = tfm.moe_route %logits top_k 2 : tensor<2x8x4xf32> -> tensor<2x8x2xf32>, tensor<2x8x2xi32>
    ```
  }];
  let arguments = (ins Tfm_StatTensor:$logits, I64Attr:$top_k,
                       UnitAttr:$pre_softmax);
  let results = (outs Tfm_StatTensor:$probs, Tfm_IdTensor:$experts);
  let assemblyFormat = [{
    $logits `top_k` $top_k (`pre_softmax` $pre_softmax^)? attr-dict `:`
    type($logits) `->` type($probs) `,` type($experts)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeRouteGradOp : Tfm_Op<"moe_route_grad", [Pure,
    AllTypesMatch<["logits", "logits_grad"]>, Tfm_Distributed]> {
  let summary = "gradient of tfm.moe_route";
  let description = [{
    The logits' gradient from the gradient of `probs`, through the same
    softmax (the choice of experts has none).

    ```mlir
    %dl = tfm.moe_route_grad %logits, %e, %dp top_k 2 : tensor<2x8x4xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>
    ```
  }];
  let arguments = (ins Tfm_StatTensor:$logits, Tfm_IdTensor:$experts,
                       Tfm_StatTensor:$probs_grad, I64Attr:$top_k,
                       UnitAttr:$pre_softmax);
  let results = (outs Tfm_StatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $experts `,` $probs_grad `top_k` $top_k
    (`pre_softmax` $pre_softmax^)? attr-dict `:` type($logits) `,`
    type($experts) `,` type($probs_grad)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeRouteCountsOp : Tfm_Op<"moe_route_counts", [Pure,
    Tfm_Distributed]> {
  let summary = "how many of the tokens' top-k slots chose each expert";
  let description = [{
    `counts [E]` from tfm.moe_route's `experts [B, S, k]`: the (token, slot)
    pairs routed to each expert, before any token dropping. In f32 (exact
    below 2^24 pairs) because the router's load-balancing loss needs the
    counts of the whole micro-batch: where its tokens are split over ranks
    (context parallelism) the counts are a partial sum, summed by an
    ordinary all-reduce.

    ```mlir
    %c = tfm.moe_route_counts %e num_experts 4 : tensor<2x8x2xi32> -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Tfm_IdTensor:$experts, I64Attr:$num_experts);
  let results = (outs Tfm_StatTensor:$counts);
  let assemblyFormat = [{
    $experts `num_experts` $num_experts attr-dict `:` type($experts) `->`
    type($counts)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeRouterLossOp : Tfm_Op<"moe_router_loss", [Pure, Tfm_Distributed]> {
  let summary = "Megatron-Core's load-balancing and z losses of a router";
  let description = [{
    Over the T tokens of the micro-batch, with p = softmax(logits) per token:
    `load_balancing = aux_coeff * E / (k * T^2) * sum_e (sum_t p[t,e]) *
    counts[e]`, `counts` the pairs routed to each expert
    (tfm.moe_route_counts, so `T = sum_e counts[e] / k`), and `z_loss =
    z_coeff / T * sum_t logsumexp(logits[t])^2`. Both are training
    objectives that no op reads: tfm-differentiate seeds their gradients
    with the step's `grad_scale`, like the model's loss.

    Both losses are sums over tokens once `counts` (and so T) are fixed: on
    tokens split over ranks each rank computes its share from its own
    logits and the whole micro-batch's counts (Megatron-Core's counts
    all-reduced over tp x cp), and the shares sum to the loss.

    ```mlir
    %aux, %z = tfm.moe_router_loss %logits, %c top_k 2 aux_coeff 1.000000e-02 z_coeff 0.000000e+00
        : tensor<2x8x4xf32>, tensor<4xf32> -> tensor<f32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_StatTensor:$logits, Tfm_StatTensor:$counts,
                       I64Attr:$top_k, F64Attr:$aux_coeff, F64Attr:$z_coeff);
  let results = (outs Tfm_Loss:$load_balancing, Tfm_Loss:$z_loss);
  let assemblyFormat = [{
    $logits `,` $counts `top_k` $top_k `aux_coeff` $aux_coeff `z_coeff`
    $z_coeff attr-dict `:` type($logits) `,` type($counts) `->`
    type($load_balancing) `,` type($z_loss)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeRouterLossGradOp : Tfm_Op<"moe_router_loss_grad", [Pure,
    AllTypesMatch<["logits", "logits_grad"]>, Tfm_Distributed]> {
  let summary = "gradient of tfm.moe_router_loss";
  let description = [{
    `grad` times the logits' gradient of `load_balancing + z_loss` (the
    counts, a routing decision, have none).

    ```mlir
    %dl = tfm.moe_router_loss_grad %logits, %c, %scale top_k 2 aux_coeff 1.000000e-02 z_coeff 0.000000e+00
        : tensor<2x8x4xf32>, tensor<4xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_StatTensor:$logits, Tfm_StatTensor:$counts,
                       Tfm_Loss:$grad, I64Attr:$top_k, F64Attr:$aux_coeff,
                       F64Attr:$z_coeff);
  let results = (outs Tfm_StatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $counts `,` $grad `top_k` $top_k `aux_coeff` $aux_coeff
    `z_coeff` $z_coeff attr-dict `:` type($logits) `,` type($counts) `,`
    type($grad)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeDropOp : Tfm_Op<"moe_drop", [Pure,
    AllTypesMatch<["experts", "kept"]>, Tfm_Distributed]> {
  let summary = "token dropping: each expert keeps at most `capacity` pairs";
  let description = [{
    Megatron's expert capacity: of the (token, slot) pairs routed to an
    expert, at most `capacity` are kept; `kept` is `experts` with -1 for a
    dropped pair. `probs` keeps an expert's pairs of largest router
    probability (ties: the earlier pair), `position` its first pairs in
    (token, slot) order. A dropped pair adds nothing to its token's output
    and its probability gets no gradient.

    ```mlir
    %kept = tfm.moe_drop %p, %e num_experts 4 capacity 6 probs : tensor<2x8x2xf32>, tensor<2x8x2xi32>
    ```
  }];
  let arguments = (ins Tfm_StatTensor:$probs, Tfm_IdTensor:$experts,
                       I64Attr:$num_experts, I64Attr:$capacity,
                       Tfm_DropPolicy:$policy);
  let results = (outs Tfm_IdTensor:$kept);
  let assemblyFormat = [{
    $probs `,` $experts `num_experts` $num_experts `capacity` $capacity
    $policy attr-dict `:`
    type($probs) `,` type($experts)
  }];
  let hasVerifier = 1;
}

def Tfm_MoePermuteOp : Tfm_Op<"moe_permute", [Pure, Tfm_Distributed]> {
  let summary = "token dispatch order: each token once per expert, grouped by expert";
  let description = [{
    `rows [N, H]` holds `input[t]` once per (token t, slot j) pair, the
    pairs sorted by expert, then token, then slot; `counts [E]` (i32) is the
    number of rows of each expert and `row_map [B, S, k]` (i32) the row of
    each pair. A pair whose expert is -1 (dropped by tfm.moe_drop) has no
    row (-1 in `row_map`). Without `capacity`, N = B*S*k. With it (at most
    `capacity` pairs per expert), N = min(B*S*k, E*capacity) and rows past
    the kept pairs are zero; `pad_to_capacity` pads every expert's group
    with zero rows to `capacity` rows (N = E*capacity, every count
    `capacity`: Megatron's `--moe-pad-expert-input-to-capacity`, whose
    padding rows have router weight 0, as zero rows add nothing here).

    ```mlir
    %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
        : tensor<2x8x64xf32>, tensor<2x8x2xi32> -> tensor<32x64xf32>, tensor<4xi32>, tensor<2x8x2xi32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_IdTensor:$experts,
                       I64Attr:$num_experts, OptionalAttr<I64Attr>:$capacity,
                       UnitAttr:$pad_to_capacity);
  let results = (outs Tfm_FloatTensor:$rows, Tfm_IdTensor:$counts,
                      Tfm_IdTensor:$row_map);
  let assemblyFormat = [{
    $input `,` $experts `num_experts` $num_experts (`capacity` $capacity^)?
    (`pad_to_capacity` $pad_to_capacity^)? attr-dict `:`
    type($input) `,` type($experts) `->` type($rows) `,` type($counts) `,`
    type($row_map)
  }];
  let hasVerifier = 1;
}

def Tfm_MoePermuteGradOp : Tfm_Op<"moe_permute_grad", [Pure, Tfm_Distributed]> {
  let summary = "gradient of tfm.moe_permute: each token's rows summed";
  let description = [{
    `result[t] = sum_j rows_grad[row_map[t, j]]`.

    ```mlir
    %dx = tfm.moe_permute_grad %drows, %map : tensor<32x64xf32>, tensor<2x8x2xi32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$rows_grad, Tfm_IdTensor:$row_map);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $rows_grad `,` $row_map attr-dict `:` type($rows_grad) `,` type($row_map)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeUnpermuteOp : Tfm_Op<"moe_unpermute", [Pure, Tfm_Distributed]> {
  let summary = "combine: each token's expert outputs weighted by its router probabilities";
  let description = [{
    `result[t] = sum_j probs[t, j] * rows[row_map[t, j]]`, in f32.

    ```mlir
    %y = tfm.moe_unpermute %rows, %p, %map : tensor<32x64xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$rows, Tfm_StatTensor:$probs,
                       Tfm_IdTensor:$row_map);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $rows `,` $probs `,` $row_map attr-dict `:` type($rows) `,` type($probs)
    `,` type($row_map) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeUnpermuteGradOp : Tfm_Op<"moe_unpermute_grad", [Pure,
    AllShapesMatch<["rows", "rows_grad"]>,
    AllElementTypesMatch<["rows", "rows_grad"]>,
    AllShapesMatch<["probs", "probs_grad"]>,
    AllElementTypesMatch<["probs", "probs_grad"]>, Tfm_Distributed]> {
  let summary = "gradient of tfm.moe_unpermute";
  let description = [{
    `rows_grad[row_map[t, j]] = probs[t, j] * grad[t]`,
    `probs_grad[t, j] = <grad[t], rows[row_map[t, j]]>`.

    ```mlir
    %drows, %dp = tfm.moe_unpermute_grad %rows, %p, %map, %dy : tensor<32x64xf32>, tensor<2x8x2xf32>, tensor<2x8x2xi32>, tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$rows, Tfm_StatTensor:$probs,
                       Tfm_IdTensor:$row_map, Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$rows_grad, Tfm_StatTensor:$probs_grad);
  let assemblyFormat = [{
    $rows `,` $probs `,` $row_map `,` $grad attr-dict `:` type($rows) `,`
    type($probs) `,` type($row_map) `,` type($grad)
    `` custom<GradTypes>(ref(type($rows)), ref(type($probs)), type($rows_grad),
                         type($probs_grad))
  }];
  let hasVerifier = 1;
}

def Tfm_MoeGatherCountsOp : Tfm_Op<"moe_gather_counts", [Pure,
    Tfm_Distributed]> {
  let summary = "expert parallelism: every rank's expert counts, to every rank of the ep group";
  let description = [{
    The counts exchange of Megatron's all-to-all token dispatcher: the
    `counts [E]` of tfm.moe_permute of each rank of the group of mesh axis
    `axis` (the expert-parallel group), concatenated in group rank order
    into `[P * E]` (P the group's size). tfm.moe_dispatch and
    tfm.moe_combine read it to know which rows go where. The counts
    differ from rank to rank (each routes its own tokens); the result is
    the same on every rank of the group.

    ```mlir
    %all = tfm.moe_gather_counts %counts on @expert axis "ep"
        : tensor<4xi32> -> tensor<8xi32>
    ```
  }];
  let arguments = (ins Tfm_IdTensor:$counts, FlatSymbolRefAttr:$mesh,
                       StrAttr:$axis);
  let results = (outs Tfm_IdTensor:$result);
  let assemblyFormat = [{
    $counts `on` $mesh `axis` $axis attr-dict `:` type($counts) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeDispatchOp : Tfm_Op<"moe_dispatch", [Pure, Tfm_Distributed]> {
  let summary = "expert parallelism: each expert's rows to the rank that holds it";
  let description = [{
    Megatron's all-to-all token dispatch. The group of mesh axis `axis` (P
    ranks) holds the E experts in P equal runs (group rank r: experts
    r*E/P ..). `rows [N, H]` are this rank's rows grouped by expert (as
    tfm.moe_permute leaves them) and `all_counts [P * E]` every rank's rows
    per expert (tfm.moe_gather_counts). Each rank receives the rows of its
    own experts from every rank: `dispatched` holds them grouped by local
    expert, then by source rank (the order a grouped GEMM needs, Megatron's
    sort_chunks_by_idxs), zero past the last; `local_counts` are its
    experts' rows. The bound on the rows received is P * N (every rank's
    rows for one rank's experts: the dropless worst case).

    Global IR (before tfm-localize) gives the results their ep-split
    global shapes, `[P * P * N, H]` and `[E]`; per rank they are
    `[P * N, H]` and `[E / P]`.

    `allgather` moves the rows as Megatron's allgather token dispatcher
    does: every rank's rows are all-gathered over the group and each rank
    copies out those of its experts. The result is the same; the traffic is
    (P - 1) * N rows in per rank instead of the rows routed elsewhere.

    ```mlir
    %rows_d, %local = tfm.moe_dispatch %rows, %all on @expert axis "ep"
        : tensor<32x64xf32>, tensor<8xi32> -> tensor<64x64xf32>, tensor<2xi32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$rows, Tfm_IdTensor:$all_counts,
                       FlatSymbolRefAttr:$mesh, StrAttr:$axis,
                       UnitAttr:$allgather);
  let results = (outs Tfm_FloatTensor:$dispatched, Tfm_IdTensor:$local_counts);
  let assemblyFormat = [{
    $rows `,` $all_counts `on` $mesh `axis` $axis (`allgather` $allgather^)?
    attr-dict `:` type($rows) `,` type($all_counts) `->` type($dispatched)
    `,` type($local_counts)
  }];
  let hasVerifier = 1;
}

def Tfm_MoeCombineOp : Tfm_Op<"moe_combine", [Pure, Tfm_Distributed]> {
  let summary = "expert parallelism: the experts' output rows back to the ranks they came from";
  let description = [{
    The inverse of tfm.moe_dispatch (and its adjoint: each is the other's
    gradient): `dispatched` rows, laid out as tfm.moe_dispatch leaves them,
    return to the rank that sent them, at the place they had in its rows
    `[N, H]` (rows past the rank's counts are zero). With `allgather` each
    rank puts its experts' rows at their places among every rank's rows
    (zero elsewhere) and a reduce-scatter over the group returns each rank
    its own (Megatron's allgather dispatcher).

    ```mlir
    %rows = tfm.moe_combine %out_d, %all on @expert axis "ep"
        : tensor<64x64xf32>, tensor<8xi32> -> tensor<32x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$dispatched, Tfm_IdTensor:$all_counts,
                       FlatSymbolRefAttr:$mesh, StrAttr:$axis,
                       UnitAttr:$allgather);
  let results = (outs Tfm_FloatTensor:$rows);
  let assemblyFormat = [{
    $dispatched `,` $all_counts `on` $mesh `axis` $axis
    (`allgather` $allgather^)? attr-dict `:` type($dispatched) `,`
    type($all_counts) `->` type($rows)
  }];
  let hasVerifier = 1;
}

def Tfm_GroupedLinearOp : Tfm_Op<"grouped_linear", [Pure, Tfm_Distributed]> {
  let summary = "one linear layer per expert over its group of rows";
  let description = [{
    The rows of `input [M, K]` are E consecutive groups of `counts[0]`,
    ..., `counts[E-1]` rows (known at run time only); group e is multiplied
    by `weight[e]^T` (`weight [E, N, K]`, each expert's weight in the
    `torch.nn.Linear` layout). Rows past the groups are zero.

    ```mlir
    %h = tfm.grouped_linear %rows, %w, %counts : tensor<32x64xf32>, tensor<4x128x64xf32>, tensor<4xi32> -> tensor<32x128xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_IdTensor:$counts);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $counts attr-dict `:` type($input) `,`
    type($weight) `,` type($counts) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_GroupedLinearGradOp : Tfm_Op<"grouped_linear_grad", [Pure,
    AllShapesMatch<["input", "input_grad"]>,
    AllElementTypesMatch<["input", "input_grad"]>,
    AllShapesMatch<["weight", "weight_grad"]>,
    AllElementTypesMatch<["weight", "weight_grad"]>, Tfm_Distributed]> {
  let summary = "gradient of tfm.grouped_linear";
  let description = [{
    Per group e: `input_grad_e = grad_e weight[e]`, `weight_grad[e] =
    grad_e^T input_e` (zero for an expert with no rows).

    ```mlir
    %dx, %dw = tfm.grouped_linear_grad %rows, %w, %counts, %dh : tensor<32x64xf32>, tensor<4x128x64xf32>, tensor<4xi32>, tensor<32x128xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_IdTensor:$counts, Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$input_grad,
                      Tfm_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $counts `,` $grad attr-dict `:` type($input) `,`
    type($weight) `,` type($counts) `,` type($grad)
    `` custom<GradTypes>(ref(type($input)), ref(type($weight)),
                         type($input_grad), type($weight_grad))
  }];
  let hasVerifier = 1;
}

def Tfm_SigmoidGateOp : Tfm_Op<"sigmoid_gate", [Pure,
    AllTypesMatch<["input", "result"]>, Tfm_Distributed]> {
  let summary = "scales each row by the sigmoid of its gate: the shared expert's gate";
  let description = [{
    `result[..., h] = sigmoid(gate[..., 0]) * input[..., h]` for `gate
    [..., 1]` (Qwen2-MoE's `shared_expert_gate`).

    ```mlir
    %y = tfm.sigmoid_gate %x, %g : tensor<2x8x64xf32>, tensor<2x8x1xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$gate);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $gate attr-dict `:` type($input) `,` type($gate)
  }];
  let hasVerifier = 1;
}

def Tfm_SigmoidGateGradOp : Tfm_Op<"sigmoid_gate_grad", [Pure,
    AllShapesMatch<["input", "grad", "input_grad"]>,
    AllElementTypesMatch<["input", "grad", "input_grad"]>,
    AllShapesMatch<["gate", "gate_grad"]>,
    AllElementTypesMatch<["gate", "gate_grad"]>, Tfm_Distributed]> {
  let summary = "gradient of tfm.sigmoid_gate";
  let description = [{
    `input_grad = sigmoid(gate) * grad`, `gate_grad = sigmoid'(gate) *
    <grad, input>` per row.

    ```mlir
    %dx, %dg = tfm.sigmoid_gate_grad %x, %g, %dy : tensor<2x8x64xf32>, tensor<2x8x1xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$gate,
                       Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$gate_grad);
  let assemblyFormat = [{
    $input `,` $gate `,` $grad attr-dict `:` type($input) `,` type($gate) `,`
    type($grad)
    `` custom<GradTypes>(ref(type($grad)), ref(type($gate)), type($input_grad),
                         type($gate_grad))
  }];
}

#endif // LOOM_DIALECTS_TFM_TFMOPS_TD
