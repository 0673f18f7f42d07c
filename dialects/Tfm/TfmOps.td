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
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_TFM_TFMOPS_TD
#define LOOM_DIALECTS_TFM_TFMOPS_TD

include "dialects/Tfm/TfmDialect.td"
include "dialects/Tfm/TfmEnums.td"
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
def Tfm_AnyStaticTensor : StaticShapeTensorOf<[F32, BF16, F16, I32]>;

class Tfm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tfm_Dialect, mnemonic, traits>;

// Elementwise ops whose operands and results all have one type.
class Tfm_ElementwiseOp<string mnemonic, list<Trait> traits = []>
    : Tfm_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType])>;

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
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads a parameter declared by tfm.param";
  let description = [{
    Yields the value of the parameter `name`. The result type is the
    parameter's type or, with `tp_split <d>`, this rank's shard of it: dim
    `d` divided by the plan's tensor-parallel size, the rank holding slice
    `tp_rank` of that dim (the tensor-parallel pass writes this).

    ```mlir
    %w = tfm.get_param @transformer.wte.weight : tensor<50257x768xf32>
    %q = tfm.get_param @model.layers.0.self_attn.q_proj.weight tp_split 0
        : tensor<2048x4096xbf16>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name, OptionalAttr<I64Attr>:$tp_split);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $name (`tp_split` $tp_split^)? attr-dict `:` type($result)
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

def Tfm_EmbeddingOp : Tfm_Op<"embedding", [Pure]> {
  let summary = "table lookup: token or learned position embedding";
  let description = [{
    `result[b, s, :] = table[ids[b, s], :]` for ids `[B, S]` and a table
    `[V, H]`. Used for the token embedding (ids are tokens) and the learned
    position embedding of GPT-2 (ids are position ids).

    With `vocab_parallel_axis <a>` (written by the tensor-parallel pass) the
    table is this rank's slice of the vocabulary along axis `a` of mesh
    @dense: rows `[r * V, (r + 1) * V)` for the rank's index `r` on that axis,
    with `V` the local table's rows. Ids outside the slice give zero rows, so
    the result is a partial sum over the axis (Megatron's
    VocabParallelEmbedding).

    ```mlir
    %e = tfm.embedding %tokens, %wte
        : tensor<2x8xi32>, tensor<512x64xf32> -> tensor<2x8x64xf32>
    %p = tfm.embedding %tokens, %wte_shard vocab_parallel_axis 3
        : tensor<2x8xi32>, tensor<256x64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_IdTensor:$ids, Tfm_FloatTensor:$table,
                       OptionalAttr<I64Attr>:$vocab_parallel_axis);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $table (`vocab_parallel_axis` $vocab_parallel_axis^)? attr-dict
    `:` type($ids) `,` type($table) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tfm_PositionIdsOp : Tfm_Op<"position_ids", [Pure, SameOperandsAndResultType]> {
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

def Tfm_EmbeddingGradOp : Tfm_Op<"embedding_grad", [Pure]> {
  let summary = "gradient of tfm.embedding with respect to the table";
  let description = [{
    Scatter-adds `grad[b, s, :]` into row `ids[b, s]` of a zero table of
    type `result`. With `vocab_parallel_axis`, the result is this rank's
    slice of the table gradient (see tfm.embedding).

    ```mlir
    %dt = tfm.embedding_grad %tokens, %dy
        : tensor<2x8xi32>, tensor<2x8x64xf32> -> tensor<512x64xf32>
    ```
  }];
  let arguments = (ins Tfm_IdTensor:$ids, Tfm_FloatTensor:$grad,
                       OptionalAttr<I64Attr>:$vocab_parallel_axis);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $grad (`vocab_parallel_axis` $vocab_parallel_axis^)? attr-dict
    `:` type($ids) `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

def Tfm_LayerNormOp : Tfm_Op<"layer_norm", [Pure, AllTypesMatch<["input", "result"]>]> {
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

def Tfm_LayerNormGradOp : Tfm_Op<"layer_norm_grad", [Pure,
    AllTypesMatch<["input", "grad", "input_grad"]>,
    AllTypesMatch<["weight", "weight_grad", "bias_grad"]>]> {
  let summary = "gradient of tfm.layer_norm";
  let description = [{
    Given the forward input, the weight and the gradient of the output,
    returns the gradients of the input, the weight and the bias (the bias
    gradient is the sum of `grad` over all rows whether or not the forward op
    had a bias; an unused result is dropped by later passes).

    ```mlir
    %dx, %dw, %db = tfm.layer_norm_grad %x, %w, %dy eps 1.000000e-05
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad, F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$weight_grad,
                      Tfm_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad `eps` $epsilon attr-dict `:` type($input) `,`
    type($weight)
  }];
  let hasVerifier = 1;
}

def Tfm_RmsNormOp : Tfm_Op<"rms_norm", [Pure, AllTypesMatch<["input", "result"]>]> {
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

def Tfm_RmsNormGradOp : Tfm_Op<"rms_norm_grad", [Pure,
    AllTypesMatch<["input", "grad", "input_grad"]>,
    AllTypesMatch<["weight", "weight_grad"]>]> {
  let summary = "gradient of tfm.rms_norm";
  let description = [{
    ```mlir
    %dx, %dw = tfm.rms_norm_grad %x, %w, %dy eps 1.000000e-06
        : tensor<2x8x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad, F64Attr:$epsilon);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad `eps` $epsilon attr-dict `:` type($input) `,`
    type($weight)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear
//===----------------------------------------------------------------------===//

def Tfm_LinearOp : Tfm_Op<"linear", [Pure]> {
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
    AllTypesMatch<["input", "input_grad"]>, AllTypesMatch<["weight", "weight_grad"]>]> {
  let summary = "gradient of tfm.linear";
  let description = [{
    Given the forward input `x`, the weight `W` and the output gradient `dy`:
    `input_grad = dy W`, `weight_grad = dy^T x` summed over all leading dims,
    and, when `bias` is present, `bias_grad = sum(dy)` over all leading dims.

    ```mlir
    %dx, %dw, %db = tfm.linear_grad %x, %w, %dy
        : tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<2x8x256xf32> -> tensor<256xf32>
    %dx2, %dw2 = tfm.linear_grad %x, %w, %dy
        : tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$weight,
                       Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$input_grad, Tfm_FloatTensor:$weight_grad,
                      Optional<Tfm_FloatTensor>:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad attr-dict `:` type($input) `,` type($weight)
    `,` type($grad) (`->` type($bias_grad)^)?
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Rotary position embedding
//===----------------------------------------------------------------------===//

class Tfm_RopeBase<string mnemonic> : Tfm_Op<mnemonic, [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_IdTensor:$positions,
                       I64Attr:$head_dim, F64Attr:$theta);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $positions `head_dim` $head_dim `theta` $theta attr-dict `:`
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

    ```mlir
    %q2 = tfm.rope %q, %pos head_dim 16 theta 1.000000e+04
        : tensor<2x8x64xf32>, tensor<2x8xi32>
    ```
  }];
}

def Tfm_RopeGradOp : Tfm_RopeBase<"rope_grad"> {
  let summary = "gradient of tfm.rope (rotation by the opposite angles)";
  let description = [{
    The rotation is orthogonal, so the input gradient is the output gradient
    rotated by the negated angles.

    ```mlir
    %dq = tfm.rope_grad %dq2, %pos head_dim 16 theta 1.000000e+04
        : tensor<2x8x64xf32>, tensor<2x8xi32>
    ```
  }];
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Tfm_AttentionOp : Tfm_Op<"attention", [Pure]> {
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
                       OptionalAttr<I64Attr>:$eod);
  let results = (outs Tfm_FloatTensor:$result, Tfm_StatTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`tokens` $tokens^)? `heads` $num_heads
    `kv_heads` $num_kv_heads `head_dim` $head_dim `scale` $scale `mask` $mask
    (`eod` $eod^)? attr-dict `:` type($query) `,` type($key) `,` type($value)
    (`,` type($tokens)^)? `->` type($result) `,` type($lse)
  }];
  let hasVerifier = 1;
}

def Tfm_AttentionGradOp : Tfm_Op<"attention_grad", [Pure,
    AllTypesMatch<["query", "out", "out_grad", "query_grad"]>,
    AllTypesMatch<["key", "key_grad"]>, AllTypesMatch<["value", "value_grad"]>]> {
  let summary = "gradient of tfm.attention";
  let description = [{
    Given the forward operands, its output and log-sum-exp and the output
    gradient, returns the gradients of query, key and value (flash-attention
    style: probabilities are recomputed from the log-sum-exp). Attributes
    are those of the forward op.

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
                       OptionalAttr<I64Attr>:$eod);
  let results = (outs Tfm_FloatTensor:$query_grad, Tfm_FloatTensor:$key_grad,
                      Tfm_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $out `,` $lse `,` $out_grad
    (`tokens` $tokens^)? `heads` $num_heads `kv_heads` $num_kv_heads
    `head_dim` $head_dim `scale` $scale `mask` $mask (`eod` $eod^)? attr-dict
    `:` type($query) `,` type($key) `,` type($value) `,` type($lse)
    (`,` type($tokens)^)?
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

def Tfm_GeluGradOp : Tfm_ElementwiseOp<"gelu_grad"> {
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
  let assemblyFormat = "$input `,` $grad $approximate attr-dict `:` type($input)";
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

def Tfm_SiluGradOp : Tfm_ElementwiseOp<"silu_grad"> {
  let summary = "gradient of tfm.silu";
  let description = [{
    `result = grad * (s + x s (1 - s))` with `s = sigmoid(x)`.

    ```mlir
    %dx = tfm.silu_grad %x, %dy : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input, Tfm_FloatTensor:$grad);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = "$input `,` $grad attr-dict `:` type($input)";
}

def Tfm_SwigluOp : Tfm_ElementwiseOp<"swiglu"> {
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
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($gate)";
}

def Tfm_SwigluGradOp : Tfm_Op<"swiglu_grad", [Pure,
    AllTypesMatch<["gate", "up", "grad", "gate_grad", "up_grad"]>]> {
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

def Tfm_BiasAddOp : Tfm_Op<"bias_add", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "adds a bias vector to every row: the bias of a row-parallel linear";
  let description = [{
    `result[..., j] = input[..., j] + bias[j]`. The tensor-parallel pass
    writes it after the all-reduce of a row-parallel linear, so the bias is
    added once and not once per rank. It appears after differentiation only
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

def Tfm_RepeatKvOp : Tfm_Op<"repeat_kv", [Pure]> {
  let summary = "repeats every key/value head `factor` times";
  let description = [{
    Views `input [..., N*D]` as N heads of `head_dim` D and writes each head
    `factor` times in a row: `[..., N*factor*D]`, head n becoming heads
    `[n*factor, (n+1)*factor)`. The tensor-parallel pass uses it when there
    are fewer kv heads than tp ranks: each rank then takes the one kv head its
    query heads read (Megatron replicates kv heads the same way).

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

def Tfm_RepeatKvGradOp : Tfm_Op<"repeat_kv_grad", [Pure]> {
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

def Tfm_AddOp : Tfm_ElementwiseOp<"add", [Commutative]> {
  let summary = "elementwise sum: residual connections, gradient accumulation";
  let description = [{
    ```mlir
    %h = tfm.add %x, %attn : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$lhs, Tfm_FloatTensor:$rhs);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Tfm_DropoutOp : Tfm_ElementwiseOp<"dropout"> {
  let summary = "inverted dropout with a deterministic, position-keyed mask";
  let description = [{
    Zeroes each element with probability `p` and scales the rest by
    `1 / (1 - p)`. The mask is a pure function of `seed` and the element's
    global index, so it does not depend on how the tensor is sharded, and the
    gradient is the same op applied to the output gradient (same seed, same
    mask). `p = 0` is the identity. Both attributes default to 0.

    After tensor parallelism the input may be this rank's slice of the
    global tensor: `split_dim` is the dim it is split on and `split_axis`
    the axis of mesh @dense it is split over (the rank's index in that
    group gives the slice), so the rank keys its elements by their global
    index and drops exactly the elements the unsharded program drops
    (sequence-parallel hidden dropout, for one).

    ```mlir
    %y = tfm.dropout %x p 1.000000e-01 seed 1234 : tensor<2x8x64xf32>
    %z = tfm.dropout %x p 1.000000e-01 seed 1234 {split_axis = 3 : i64, split_dim = 1 : i64} : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$input,
                       DefaultValuedAttr<F64Attr, "0.0">:$p,
                       DefaultValuedAttr<I64Attr, "0">:$seed,
                       OptionalAttr<I64Attr>:$split_dim,
                       OptionalAttr<I64Attr>:$split_axis);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = "$input `p` $p `seed` $seed attr-dict `:` type($input)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Tfm_CastOp : Tfm_Op<"cast", [Pure, SameOperandsAndResultShape]> {
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

def Tfm_CrossEntropyOp : Tfm_Op<"cross_entropy", [Pure]> {
  let summary = "masked mean cross-entropy of next-token logits";
  let description = [{
    `loss = sum(mask * (logsumexp(logits) - logits[label])) / sum(mask)` over
    all `[B, S]` positions, computed in f32: the mean over the tokens whose
    loss mask is non-zero (Megatron's `loss_func`).

    With `vocab_parallel_axis <a>`, `logits` hold this rank's slice of the
    vocabulary along axis `a` of mesh @dense and the loss is computed without
    gathering them (Megatron's vocab-parallel cross-entropy: all-reduces of
    the row maxima, of the sums of exponentials and of the target logits).

    ```mlir
    %loss = tfm.cross_entropy %logits, %labels, %mask
        : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<2x8xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$logits, Tfm_IdTensor:$labels,
                       Tfm_MaskTensor:$loss_mask,
                       OptionalAttr<I64Attr>:$vocab_parallel_axis);
  let results = (outs Tfm_Loss:$loss);
  let assemblyFormat = [{
    $logits `,` $labels `,` $loss_mask
    (`vocab_parallel_axis` $vocab_parallel_axis^)? attr-dict `:`
    type($logits) `,` type($labels) `,` type($loss_mask) `->` type($loss)
  }];
  let hasVerifier = 1;
}

def Tfm_CrossEntropyGradOp : Tfm_Op<"cross_entropy_grad", [Pure,
    AllTypesMatch<["logits", "result"]>]> {
  let summary = "gradient of tfm.cross_entropy with respect to the logits";
  let description = [{
    `result = (softmax(logits) - onehot(labels)) * mask / sum(mask) * grad`.
    With `vocab_parallel_axis`, on this rank's slice of the vocabulary (the
    softmax statistics are all-reduced over the axis).

    ```mlir
    %dlogits = tfm.cross_entropy_grad %logits, %labels, %mask, %dloss
        : tensor<2x8x512xf32>, tensor<2x8xi32>, tensor<2x8xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Tfm_FloatTensor:$logits, Tfm_IdTensor:$labels,
                       Tfm_MaskTensor:$loss_mask, Tfm_Loss:$grad,
                       OptionalAttr<I64Attr>:$vocab_parallel_axis);
  let results = (outs Tfm_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $loss_mask `,` $grad
    (`vocab_parallel_axis` $vocab_parallel_axis^)? attr-dict `:`
    type($logits) `,` type($labels) `,` type($loss_mask) `,` type($grad)
  }];
  let hasVerifier = 1;
}

#endif // LOOM_DIALECTS_TFM_TFMOPS_TD
