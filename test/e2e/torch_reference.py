#!/usr/bin/python3
# ===- torch_reference.py - PyTorch reference for loom-run's loss ---------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# An independent implementation of the models loom-import builds (see
# dialects/Tfm/TfmOps.td and compiler/Import/ModelBuilder.cpp), in plain torch:
#   gpt2   pre-LN, learned positions, tanh (or exact) GELU MLP, biases, final
#          LayerNorm, lm head tied to wte unless the config unties it
#   llama  RMSNorm, rotate-half RoPE, GQA, SwiGLU MLP, untied head unless
#          the config ties it; biases on q/k/v and o (attention_bias) and on
#          the MLP (mlp_bias); Llama 3.x RoPE scaling (rope_scaling llama3)
#   qwen2  llama with biases on q, k and v only
#   mistral llama (a sliding window is refused by loom-import)
# It reads the weights from the safetensors checkpoint loom-run --save wrote
# (Hugging Face names and layouts), the batch geometry from the compiled
# program's manifest.json and the tokens from the same data file, and
# recomputes the loss of every step the way the driver defines batches
# (docs/MANIFEST.md): masked mean cross-entropy per micro-batch, averaged
# over micro-batches and data-parallel ranks.
#
#   torch_reference.py tokens FILE --count N --vocab V [--format int32|uint16]
#   torch_reference.py check --config C.json --manifest out/manifest.json
#       --checkpoint ckpt.safetensors --data FILE [--data-format int32|uint16]
#       --metrics m.jsonl [--rtol 1e-5]
#   torch_reference.py grads ... --checkpoint init.safetensors
#       --grads dumped.safetensors          (loom-run --train --dump-grads)
#   torch_reference.py train ... --checkpoint init.safetensors
#       --metrics m.jsonl --final final.safetensors --steps N [optimizer flags]
#   torch_reference.py falls --metrics m.jsonl --min-drop D [--window K]
#   torch_reference.py compare --metrics a.jsonl b.jsonl
#       --files a.safetensors b.safetensors ... [--rtol 1e-6]
#
# `grads` compares the gradients of the first step with autograd; `train`
# runs the same training as loom-run --train (torch.optim.AdamW, Megatron's
# learning-rate schedules, global-norm clipping, no weight decay for biases
# and 1-D tensors) from the same initial weights on the same batches and
# compares the loss curve and the final weights. Tensors are compared by
# their normwise relative difference |loom - torch| / |torch|.
#
# transformers and safetensors are not installed: safetensors is parsed
# with json + torch.frombuffer. Computation is float64 by default, so the
# reference is the exact loss and the tolerance measures loom's f32 error.
#
# ===-----------------------------------------------------------------------===#

import argparse
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if len(data) < 8:
        sys.exit("%s: not a safetensors file" % path)
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        dtype = DTYPES[t["dtype"]]
        count = (end - begin) // torch.tensor([], dtype=dtype).element_size()
        flat = torch.frombuffer(data, dtype=dtype, count=count,
                                offset=8 + n + begin)
        tensors[name] = flat.reshape(t["shape"]).clone()
    return tensors


# ===-----------------------------------------------------------------------===#
# Data, exactly as the driver reads it
# ===-----------------------------------------------------------------------===#

def read_tokens(path, fmt):
    if fmt:
        dtype = torch.int32 if fmt == "int32" else torch.int16
        with open(path, "rb") as f:
            raw = bytearray(f.read())
        t = torch.frombuffer(raw, dtype=dtype).to(torch.int64)
        return t if fmt == "int32" else t & 0xFFFF
    prefix = path[:-4] if path.endswith((".bin", ".idx")) else path
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", "not an MMIDIDX index"
    _, code, n, _ = struct.unpack("<QBQQ", idx[9:34])
    sizes = struct.unpack("<%di" % n, idx[34:34 + 4 * n])
    pointers = struct.unpack("<%dq" % n, idx[34 + 4 * n:34 + 12 * n])
    width = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 8: 2}[code]
    fmt_char = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}[code]
    with open(prefix + ".bin", "rb") as f:
        binary = f.read()
    out = []
    for size, ptr in zip(sizes, pointers):
        out.extend(struct.unpack("<%d%s" % (size, fmt_char),
                                 binary[ptr:ptr + size * width]))
    return torch.tensor(out, dtype=torch.int64)


def micro_batch(stream, step, micro, dp_rank, dp, nmb, B, S, eod):
    samples = (len(stream) - 1) // S
    first = ((step * nmb + micro) * dp + dp_rank) * B
    rows = [stream[((first + b) % samples) * S:][:S + 1] for b in range(B)]
    x = torch.stack(rows)
    tokens, labels = x[:, :-1], x[:, 1:]
    mask = torch.ones(tokens.shape, dtype=torch.float64)
    if eod is not None:
        mask[tokens == eod] = 0.0
    return tokens, labels, mask


# ===-----------------------------------------------------------------------===#
# Models
# ===-----------------------------------------------------------------------===#

class Config:
    def __init__(self, path):
        with open(path) as f:
            c = json.load(f)
        self.family = c.get("model_type") or ("gpt2" if "n_embd" in c else "llama")
        self.moe = None
        if self.family == "gpt2":
            self.layers, self.heads = c["n_layer"], c["n_head"]
            self.hidden = c["n_embd"]
            self.ffn = c.get("n_inner") or 4 * self.hidden
            self.kv_heads = self.heads
            self.eps = c.get("layer_norm_epsilon", 1e-5)
            self.tied = c.get("tie_word_embeddings", True)
            act = c.get("activation_function", "gelu_new")
            self.gelu = "none" if act == "gelu" else "tanh"
            self.head_dim = self.hidden // self.heads
        else:
            self.layers = c["num_hidden_layers"]
            self.hidden = c["hidden_size"]
            self.ffn = c["intermediate_size"]
            self.heads = c["num_attention_heads"]
            self.kv_heads = c.get("num_key_value_heads", self.heads)
            self.eps = c.get("rms_norm_eps", 1e-6)
            self.theta = c.get("rope_theta", 10000.0)
            self.tied = c.get("tie_word_embeddings", False)
            self.head_dim = c.get("head_dim", self.hidden // self.heads)
            # transformers' LlamaAttention / Qwen2Attention / LlamaMLP.
            if self.family == "qwen2":
                self.qkv_bias, self.o_bias, self.mlp_bias = True, False, False
            elif self.family == "llama":
                self.qkv_bias = self.o_bias = c.get("attention_bias", False)
                self.mlp_bias = c.get("mlp_bias", False)
            else:
                self.qkv_bias = self.o_bias = self.mlp_bias = False
            # transformers' MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock.
            if self.family in ("mixtral", "qwen2_moe"):
                mixtral = self.family == "mixtral"
                self.moe = {
                    "prefix": "block_sparse_moe." if mixtral else "mlp.",
                    "experts": c["num_local_experts" if mixtral else "num_experts"],
                    "k": c.get("num_experts_per_tok", 2),
                    "ffn": c["intermediate_size" if mixtral else "moe_intermediate_size"],
                    # Mixtral renormalizes the top-k probabilities; Qwen2-MoE
                    # only with norm_topk_prob.
                    "renormalize": mixtral or c.get("norm_topk_prob", False),
                    "aux_coeff": c.get("router_aux_loss_coef", 0.0),
                    "shared": 0 if mixtral else c.get("shared_expert_intermediate_size", 0),
                    "step": 1 if mixtral else c.get("decoder_sparse_step", 1),
                    "mlp_only": [] if mixtral else c.get("mlp_only_layers", []),
                    "names": ("w1", "w3", "w2") if mixtral
                             else ("gate_proj", "up_proj", "down_proj"),
                }
                if self.family == "qwen2_moe":
                    self.qkv_bias = True
            scaling = c.get("rope_scaling") or {}
            kind = scaling.get("rope_type", scaling.get("type", "default"))
            if kind not in ("default", "llama3"):
                sys.exit("rope_scaling %s is not modelled" % kind)
            self.rope_scaling = scaling if kind == "llama3" else None


def positions_and_docs(tokens, eod, reset_positions, reset_attention):
    B, S = tokens.shape
    pos = torch.arange(S).repeat(B, 1)
    doc = torch.zeros(B, S, dtype=torch.int64)
    if eod is not None and (reset_positions or reset_attention):
        for b in range(B):
            p, d = 0, 0
            for s in range(S):
                pos[b, s], doc[b, s] = p, d
                p += 1
                if tokens[b, s] == eod:  # the EOD belongs to its document
                    p, d = 0, d + 1
        if not reset_positions:
            pos = torch.arange(S).repeat(B, 1)
    return pos, doc if reset_attention else None


def attention(q, k, v, heads, kv_heads, head_dim, doc):
    B, S, _ = q.shape
    q = q.view(B, S, heads, head_dim).transpose(1, 2)
    k = k.view(B, S, kv_heads, head_dim).transpose(1, 2)
    v = v.view(B, S, kv_heads, head_dim).transpose(1, 2)
    group = heads // kv_heads  # query head h reads kv head h // group
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
    visible = torch.ones(S, S, dtype=torch.bool).tril()
    visible = visible.expand(B, 1, S, S)
    if doc is not None:
        visible = visible & (doc[:, None, :, None] == doc[:, None, None, :])
    scores = scores.masked_fill(~visible, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(B, S, heads * head_dim)


def llama3_inv_freq(inv_freq, scaling):
    """transformers' _compute_llama3_parameters: low frequencies (long
    wavelengths) divided by `factor`, high ones kept, a smooth blend in
    between."""
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (old_context / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    out = torch.where(wavelen > old_context / low, inv_freq / factor, blended)
    return torch.where(wavelen < old_context / high, inv_freq, out)


def rope(x, pos, heads, head_dim, theta, scaling=None):
    B, S, _ = x.shape
    x = x.view(B, S, heads, head_dim)
    half = head_dim // 2
    inv_freq = 1.0 / theta ** (torch.arange(half, dtype=torch.float64) * 2 / head_dim)
    if scaling is not None:
        inv_freq = llama3_inv_freq(inv_freq, scaling)
    angle = pos.to(torch.float64)[..., None] * inv_freq  # [B, S, half]
    cos, sin = angle.cos()[:, :, None, :], angle.sin()[:, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    y = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    return y.reshape(B, S, heads * head_dim)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def gpt2_logits(cfg, W, tokens, pos, doc):
    F = torch.nn.functional
    H = cfg.hidden
    x = W["transformer.wte.weight"][tokens] + W["transformer.wpe.weight"][pos]
    for i in range(cfg.layers):
        p = "transformer.h.%d." % i
        a = F.layer_norm(x, (H,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], cfg.eps)
        # HF Conv1D: y = x W + b with W stored [in, out].
        qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(H, dim=-1)
        o = attention(q, k, v, cfg.heads, cfg.heads, cfg.head_dim, doc)
        x = x + o @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        m = F.layer_norm(x, (H,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], cfg.eps)
        h = F.gelu(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"],
                   approximate=cfg.gelu)
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (H,), W["transformer.ln_f.weight"],
                     W["transformer.ln_f.bias"], cfg.eps)
    head = W["transformer.wte.weight"] if cfg.tied else W["lm_head.weight"]
    return x @ head.T


def moe_mlp(cfg, W, p, m, aux):
    """A sparse MoE block as transformers computes it (softmax over all
    experts, top-k, renormalized or not, each expert's SwiGLU MLP on its
    tokens, outputs summed with the routing weights; Qwen2-MoE's shared
    expert scaled by sigmoid(shared_expert_gate)). Appends Megatron-Core's
    load-balancing loss of the layer to `aux`: coeff * E / (k T^2) *
    sum_e (sum_t softmax[t, e]) * count[e], and its z-loss, z_coeff / T *
    sum_t logsumexp(logits[t])^2 (both with loom-compile's coefficients)."""
    F = torch.nn.functional
    mo = cfg.moe
    pre = p + mo["prefix"]
    E, k = mo["experts"], mo["k"]
    x = m.reshape(-1, m.shape[-1])
    scores = F.softmax(x @ W[pre + "gate.weight"].T, dim=-1)
    top, idx = torch.topk(scores, k, dim=-1)
    if mo["renormalize"]:
        top = top / top.sum(dim=-1, keepdim=True)
    gate_name, up_name, down_name = mo["names"]
    T = x.shape[0]
    keep = expert_capacity_mask(mo, idx, top, T)
    y = torch.zeros_like(x)
    for e in range(E):
        tok, slot = torch.where((idx == e) & keep)
        if tok.numel() == 0:
            continue
        xe = x[tok]
        # Hugging Face's names: one tensor per expert and projection.
        expert = lambda name: W[pre + "experts.%d.%s.weight" % (e, name)]
        h = F.silu(xe @ expert(gate_name).T) * (xe @ expert(up_name).T)
        out = h @ expert(down_name).T
        y = y.index_add(0, tok, out * top[tok, slot].unsqueeze(-1))
    if mo["aux_coeff"] > 0 and aux is not None:
        count = torch.bincount(idx.reshape(-1), minlength=E).to(scores.dtype)
        aux.append(mo["aux_coeff"] * E / (k * T * T)
                   * (scores.sum(dim=0) * count).sum())
    if mo.get("z_coeff", 0.0) > 0 and aux is not None:
        # Megatron's z-loss: the mean over tokens of logsumexp(logits)^2.
        lse = torch.logsumexp(x @ W[pre + "gate.weight"].T, dim=-1)
        aux.append(mo["z_coeff"] * (lse * lse).sum() / T)
    if mo["shared"]:
        s = pre + "shared_expert."
        h = F.silu(x @ W[s + "gate_proj.weight"].T) * (x @ W[s + "up_proj.weight"].T)
        shared = h @ W[s + "down_proj.weight"].T
        y = y + torch.sigmoid(x @ W[pre + "shared_expert_gate.weight"].T) * shared
    return y.reshape(m.shape)


def expert_capacity_mask(mo, idx, top, T):
    """Megatron's token dropping (--moe-expert-capacity-factor): each
    expert keeps at most ceil(T k / E * factor) of its (token, slot) pairs
    (never more than T), those of largest routing weight ("probs"; ties:
    the earlier pair) or its first ones ("position"). All kept without a
    factor."""
    keep = torch.ones_like(idx, dtype=torch.bool)
    factor = mo.get("capacity_factor")
    if not factor:
        return keep
    E, k = mo["experts"], mo["k"]
    cap = min(max(math.ceil(T * k / E * factor), 1), T)
    for e in range(E):
        tok, slot = torch.where(idx == e)  # (token, slot) order
        pairs = list(zip(tok.tolist(), slot.tolist()))
        if mo["drop_policy"] == "probs":
            pairs.sort(key=lambda ts: -float(top[ts[0], ts[1]]))  # stable
        for t, j in pairs[cap:]:
            keep[t, j] = False
    return keep


def is_moe_layer(cfg, i):
    mo = cfg.moe
    return (mo is not None and (i + 1) % mo["step"] == 0
            and i not in mo["mlp_only"])


def llama_logits(cfg, W, tokens, pos, doc, aux=None):
    F = torch.nn.functional

    def linear(prefix, x, bias):
        # torch.nn.Linear: y = x W^T + b with W [out, in].
        y = x @ W[prefix + ".weight"].T
        return y + W[prefix + ".bias"] if bias else y

    x = W["model.embed_tokens.weight"][tokens]
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        a = rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps)
        q = rope(linear(p + "self_attn.q_proj", a, cfg.qkv_bias), pos,
                 cfg.heads, cfg.head_dim, cfg.theta, cfg.rope_scaling)
        k = rope(linear(p + "self_attn.k_proj", a, cfg.qkv_bias), pos,
                 cfg.kv_heads, cfg.head_dim, cfg.theta, cfg.rope_scaling)
        v = linear(p + "self_attn.v_proj", a, cfg.qkv_bias)
        o = attention(q, k, v, cfg.heads, cfg.kv_heads, cfg.head_dim, doc)
        x = x + linear(p + "self_attn.o_proj", o, cfg.o_bias)
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        if is_moe_layer(cfg, i):
            x = x + moe_mlp(cfg, W, p, m, aux)
            continue
        h = (F.silu(linear(p + "mlp.gate_proj", m, cfg.mlp_bias))
             * linear(p + "mlp.up_proj", m, cfg.mlp_bias))
        x = x + linear(p + "mlp.down_proj", h, cfg.mlp_bias)
    x = rms_norm(x, W["model.norm.weight"], cfg.eps)
    head = W["model.embed_tokens.weight"] if cfg.tied else W["lm_head.weight"]
    return x @ head.T


def masked_mean_ce(logits, labels, mask):
    losses = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
        reduction="none")
    mask = mask.reshape(-1).to(losses.dtype)
    return (losses * mask).sum() / mask.sum()


# ===-----------------------------------------------------------------------===#
# Commands
# ===-----------------------------------------------------------------------===#

def cmd_tokens(args):
    # A fixed linear-congruential walk over the vocabulary.
    state, out = 2024, []
    for _ in range(args.count):
        state = (state * 1103515245 + 12345) % (1 << 31)
        out.append((state >> 8) % args.vocab)
    code = "i" if args.format == "int32" else "H"
    with open(args.file, "wb") as f:
        f.write(struct.pack("<%d%s" % (len(out), code), *out))


def cmd_check(args):
    torch.set_grad_enabled(False)
    cfg = Config(args.config)
    with open(args.manifest) as f:
        manifest = json.load(f)
    B, S = manifest["micro_batch_size"], manifest["seq_length"]
    nmb = manifest.get("num_microbatches", 1)
    dp_groups = manifest.get("groups", {}).get("dp") or [[0]]
    dp = len(dp_groups[0])
    eod = manifest.get("eod_token_id")
    dtype = torch.float64 if args.precision == "f64" else torch.float32
    W = {k: v.to(dtype) for k, v in read_safetensors(args.checkpoint).items()}
    stream = read_tokens(args.data, args.data_format)
    forward = gpt2_logits if cfg.family == "gpt2" else llama_logits
    with open(args.metrics) as f:
        logged = [json.loads(line) for line in f if line.strip()]
    worst = 0.0
    for entry in logged:
        step = entry["step"] - 1
        losses = []
        for m in range(nmb):
            for d in range(dp):
                tokens, labels, mask = micro_batch(stream, step, m, d, dp, nmb,
                                                   B, S, eod)
                pos, doc = positions_and_docs(tokens, args.eod_token_id,
                                              args.reset_position_ids,
                                              args.reset_attention_mask)
                logits = forward(cfg, W, tokens, pos, doc)
                losses.append(float(masked_mean_ce(logits, labels, mask)))
        ref = sum(losses) / len(losses)
        rel = relative_scalar(entry["loss"], ref)
        worst = max(worst, rel)
        print("step %d: loom %.8e torch %.8e relative difference %.2e"
              % (step + 1, entry["loss"], ref, rel))
    if not logged:
        sys.exit("%s has no steps" % args.metrics)
    if not worst <= args.rtol:
        sys.exit("FAIL: loss differs from PyTorch by %.2e (> %.0e)"
                 % (worst, args.rtol))
    print("loss matches PyTorch within %.0e" % args.rtol)


def cmd_trace(args):
    """A pipelined run's data trace (loom-run --trace-pipeline, the
    "D<m>.<c> tokens|loss" lines): every micro-batch the first stage's
    forward step traced must hold the tokens the data order gives that
    micro-batch of that step (a checksum of this rank's piece: its dp
    replica's samples, its cp rank's sequence ranges), and every loss the
    last stage traced in the first step must be PyTorch's loss of that
    micro-batch from the checkpoint. So a schedule that ran its steps in
    order on the wrong micro-batch's data fails here."""
    torch.set_grad_enabled(False)
    cfg = Config(args.config)
    with open(args.manifest) as f:
        manifest = json.load(f)
    B, S = manifest["micro_batch_size"], manifest["seq_length"]
    padded = manifest.get("padded_seq_length") or S
    nmb = manifest.get("num_microbatches", 1)
    dp_groups = manifest.get("groups", {}).get("dp") or [[0]]
    dp = len(dp_groups[0])
    dp_rank = {r: i for g in dp_groups for i, r in enumerate(g)}
    ranges = {r["rank"]: r.get("sequence_ranges") for r in manifest["ranks"]}
    eod = manifest.get("eod_token_id")
    W = {k: v.to(torch.float64) for k, v in read_safetensors(args.checkpoint).items()
         if not k.endswith(PADDING)}
    stream = read_tokens(args.data, args.data_format)
    forward = gpt2_logits if cfg.family == "gpt2" else llama_logits
    seen = {}  # (rank, kind, micro-batch) -> times traced: the step index
    tokens_ok, losses, worst = 0, 0, 0.0
    reference_loss = {}
    with open(args.trace) as f:
        lines = [l.split() for l in f if l.startswith("loom-trace: rank ")]
    for fields in lines:
        if len(fields) != 6:
            continue
        rank, (m, _), kind = int(fields[2]), fields[3][1:].split("."), fields[4]
        m = int(m)
        step = seen.get((rank, kind, m), 0)
        seen[(rank, kind, m)] = step + 1
        d = dp_rank[rank]
        tokens, labels, mask = micro_batch(stream, step, m, d, dp, nmb, B, S, eod)
        if kind == "tokens":
            full = torch.zeros(B, padded, dtype=torch.int64)
            full[:, :S] = tokens
            piece = (torch.cat([full[:, a:b] for a, b in ranges[rank]], dim=1)
                     if ranges.get(rank) else full)
            flat = piece.reshape(-1)
            want = int((flat * torch.arange(1, flat.numel() + 1)).sum())
            if int(fields[5]) != want:
                fail("rank %d step %d micro-batch %d: traced tokens %s, the data "
                     "order gives %d (dp rank %d, sequence ranges %s)"
                     % (rank, step + 1, m, fields[5], want, d, ranges.get(rank)))
            tokens_ok += 1
        elif step == 0:  # the loss from the checkpoint's weights
            if (m, d) not in reference_loss:
                pos, doc = positions_and_docs(tokens, args.eod_token_id,
                                              args.reset_position_ids,
                                              args.reset_attention_mask)
                reference_loss[(m, d)] = float(masked_mean_ce(
                    forward(cfg, W, tokens, pos, doc), labels, mask))
            rel = relative_scalar(float(fields[5]), reference_loss[(m, d)])
            worst = max(worst, rel)
            if not rel <= args.rtol:
                fail("rank %d micro-batch %d: traced loss %s, PyTorch's %.8e "
                     "(relative %.2e > %.0e)" % (rank, m, fields[5],
                                                 reference_loss[(m, d)], rel,
                                                 args.rtol))
            losses += 1
    want_tokens = sum(1 for (_, kind, _), n in seen.items() if kind == "tokens")
    if not tokens_ok or not losses or want_tokens < nmb:
        fail("%s: %d token checksums and %d first-step losses traced, of %d "
             "micro-batches: was the run traced (--trace-pipeline)?"
             % (args.trace, tokens_ok, losses, nmb))
    print("trace: %d micro-batch token checksums match the data order, %d "
          "first-step micro-batch losses match PyTorch within %.1e"
          % (tokens_ok, losses, worst))


def global_batches(args, manifest, stream, step):
    """The micro-batches of every data-parallel rank for step `step`."""
    B, S = manifest["micro_batch_size"], manifest["seq_length"]
    nmb = manifest.get("num_microbatches", 1)
    dp = len((manifest.get("groups", {}).get("dp") or [[0]])[0])
    eod = manifest.get("eod_token_id")
    for m in range(nmb):
        for d in range(dp):
            tokens, labels, mask = micro_batch(stream, step, m, d, dp, nmb,
                                               B, S, eod)
            pos, doc = positions_and_docs(tokens, args.eod_token_id,
                                          args.reset_position_ids,
                                          args.reset_attention_mask)
            yield tokens, labels, mask, pos, doc


def step_loss(args, cfg, manifest, W, stream, step, logged=False,
              router=None):
    """The loss the gradients are of: the mean over micro-batches and dp
    ranks of the masked mean cross-entropy of each micro-batch. With
    logged, also the loss loom-run logs, as Megatron reports it: the
    micro-batch means weighted by their unmasked tokens (the same unless
    the loss masks differ, e.g. with --eod-mask-loss)."""
    parts, objective, all_aux = [], 0, []
    for t, l, m, p, d in global_batches(args, manifest, stream, step):
        # A router's load-balancing losses are part of what is trained,
        # not of the loss that is logged (Megatron's "lm loss").
        aux = []
        logits = (gpt2_logits(cfg, W, t, p, d) if cfg.family == "gpt2"
                  else llama_logits(cfg, W, t, p, d, aux))
        lm = masked_mean_ce(logits, l, m)
        parts.append((lm, float(m.sum())))
        objective = objective + lm + sum(aux)
        all_aux += aux
    objective = objective / len(parts)
    if router is not None and all_aux and cfg.moe["aux_coeff"] > 0:
        # What loom-run logs as load_balancing_loss: the mean over layers,
        # micro-batches and replicas, without the coefficient (z-losses are
        # interleaved with them when on: then only the sum is checked).
        if cfg.moe.get("z_coeff", 0.0) == 0:
            router["load_balancing_loss"] = float(
                sum(all_aux) / len(all_aux) / cfg.moe["aux_coeff"])
    if not logged:
        return objective
    return objective, (sum(float(l) * n for l, n in parts)
                       / max(sum(n for _, n in parts), 1e-300))


PADDING = ".vocab_padding"


def zero_unused_grads(W):
    """A tensor the step never read (an expert no token was routed to) has
    a zero gradient, as loom's is."""
    for w in W.values():
        if w.grad is None:
            w.grad = torch.zeros_like(w)


def load_setup(args):
    cfg = Config(args.config)
    if cfg.moe is not None:
        if getattr(args, "moe_aux_loss_coeff", None) is not None:
            cfg.moe["aux_coeff"] = args.moe_aux_loss_coeff
        cfg.moe["z_coeff"] = getattr(args, "moe_z_loss_coeff", 0.0) or 0.0
        cfg.moe["capacity_factor"] = getattr(args, "moe_expert_capacity_factor",
                                             None)
        cfg.moe["drop_policy"] = getattr(args, "moe_token_drop_policy", "probs")
    with open(args.manifest) as f:
        manifest = json.load(f)
    dtype = torch.float64 if args.precision == "f64" else torch.float32
    # The rows loom pads the vocabulary with (saved apart, "<name>" +
    # PADDING) are not part of the Hugging Face model the reference is.
    W = {k: v.to(dtype).requires_grad_(True)
         for k, v in read_safetensors(args.checkpoint).items()
         if not k.endswith(PADDING)}
    stream = read_tokens(args.data, args.data_format)
    return cfg, manifest, W, stream


def fail(message):
    sys.exit("FAIL: " + message)


def relative(a, b):
    """Normwise relative difference |a - b| / |b| (b the reference; a zero
    b gives |a - b| itself, so anything but zero fails). NaN and infinity
    give infinity: as bad as it gets, and never below a tolerance."""
    if tuple(a.shape) != tuple(b.shape):
        return float("inf")  # never broadcast
    a, b = a.to(torch.float64), b.to(torch.float64)
    if not (bool(a.isfinite().all()) and bool(b.isfinite().all())):
        return float("inf")
    d = float((a - b).norm() / b.norm().clamp_min(1e-300))
    return d if math.isfinite(d) else float("inf")


def relative_scalar(a, b):
    """|a - b| / |b| of two logged numbers; NaN, infinity or a missing
    value (None) give infinity."""
    if a is None or b is None:
        return float("inf")
    a, b = float(a), float(b)
    if not (math.isfinite(a) and math.isfinite(b)):
        return float("inf")
    return abs(a - b) / max(abs(b), 1e-300)


def check_same_tensors(what, loom, ref, ignore=lambda name: False):
    """Two sets of tensors that must correspond one to one: the same names
    (a missing or an extra tensor is named), the same shapes, every value
    finite in both. Names for which ignore() holds are left out of both."""
    a = {k for k in loom if not ignore(k)}
    b = {k for k in ref if not ignore(k)}
    if a != b:
        fail("%s: missing %s, extra %s" % (what, sorted(b - a) or "none",
                                            sorted(a - b) or "none"))
    if not a:
        fail("%s: no tensors to compare" % what)
    for k in sorted(a):
        if tuple(loom[k].shape) != tuple(ref[k].shape):
            fail("%s %s: shape %s, expected %s" % (what, k, list(loom[k].shape),
                                                   list(ref[k].shape)))
        for side, t in (("loom", loom[k]), ("reference", ref[k])):
            t = t.detach()
            if not bool(t.isfinite().all()):
                fail("%s %s: the %s tensor holds %d non-finite values"
                     % (what, k, side, int((~t.isfinite()).sum())))
    return sorted(a)


def compare_tensors(what, loom, ref, ignore=lambda name: False, show=3):
    """Prints the `show` worst tensors; returns the worst normwise
    difference, after check_same_tensors."""
    names = check_same_tensors(what, loom, ref, ignore)
    diffs = sorted(((relative(loom[k], ref[k].detach()), k) for k in names),
                   reverse=True)
    for d, k in diffs[:show]:
        print("%s %s: relative difference %.2e" % (what, k, d))
    return diffs[0][0]


def key_bias_part(name, numel):
    """GPT-2's fused c_attn.bias: the index range of its key part, whose
    exact gradient is zero (softmax ignores a shift shared by every key),
    or None for any other tensor."""
    if not name.endswith("attn.c_attn.bias"):
        return None
    third = numel // 3
    return third, 2 * third


def compare_files(what, a_path, b_path, key_bias_bound=None, show=3):
    """Two loom files (b the reference run): check_same_tensors, then the
    worst normwise difference per tensor. With key_bias_bound, GPT-2's key
    bias (exactly zero gradient: what a run computes for it is rounding
    noise, which Adam turns into steps of up to lr whatever its size) is
    held to that absolute bound, and the rest of its tensor compared
    normwise; callers say why their bound is what it is."""
    A, B = read_safetensors(a_path), read_safetensors(b_path)
    check_same_tensors(what, A, B)
    if key_bias_bound is not None:
        for k in sorted(B):
            part = key_bias_part(k, B[k].numel())
            if part is None:
                continue
            lo, hi = part
            gap = float((A[k][lo:hi].double() - B[k][lo:hi].double()).abs().max())
            if not gap <= key_bias_bound:
                fail("%s %s: key bias differs by %.2e (> %.2e)"
                     % (what, k, gap, key_bias_bound))
            A[k] = torch.cat([A[k][:lo], B[k][lo:hi], A[k][hi:]])
    return compare_tensors(what, A, B, show=show)


def compare_metric_files(a_path, b_path, keys=("loss", "grad_norm")):
    """Two runs' --metrics-jsonl: the same steps, and the worst relative
    difference of `keys` over them. A value null (or absent) in one run only,
    NaN or infinite is infinitely far; null in both is not compared (a
    forward-only run logs no grad norm, a skipped f16 step no loss), but
    at least one value must be compared."""
    runs = []
    for path in (a_path, b_path):
        with open(path) as f:
            runs.append([json.loads(line) for line in f if line.strip()])
    a, b = runs
    if not a or [x.get("step") for x in a] != [y.get("step") for y in b]:
        fail("%s and %s log different steps (%d and %d)"
             % (a_path, b_path, len(a), len(b)))
    worst, where, compared = 0.0, None, 0
    for x, y in zip(a, b):
        for key in keys:
            if x.get(key) is None and y.get(key) is None:
                continue
            d = relative_scalar(x.get(key), y.get(key))
            compared += 1
            if where is None or d > worst:
                worst, where = max(worst, d), (x["step"], key, x.get(key), y.get(key))
    if not compared:
        fail("%s and %s: no %s logged to compare" % (a_path, b_path, " or ".join(keys)))
    return worst, where


def cmd_grads(args):
    cfg, manifest, W, stream = load_setup(args)
    loss = step_loss(args, cfg, manifest, W, stream, 0)
    loss.backward()
    zero_unused_grads(W)
    grads = read_safetensors(args.grads)
    worst = compare_tensors("gradient", grads,
                            {k: v.grad for k, v in W.items()},
                            ignore=lambda k: k.endswith(PADDING))
    if not worst <= args.rtol:
        sys.exit("FAIL: gradients differ from autograd by %.2e (> %.0e)"
                 % (worst, args.rtol))
    # Padding rows are out of the softmax and never looked up: no gradient.
    for k in sorted(k for k in grads if k.endswith(PADDING)):
        largest = float(grads[k].double().abs().max())
        print("gradient %s: largest magnitude %g" % (k, largest))
        if largest != 0.0:
            sys.exit("FAIL: the vocabulary padding %s has a gradient" % k)
    print("gradients match autograd within %.0e" % args.rtol)


def megatron_lr(args, num_steps):
    """OptimizerParamScheduler.get_lr in units of updates (Megatron counts
    samples, stepping by the global batch: the same ratios); num_steps =
    updates applied so far."""
    peak, floor = args.lr, args.min_lr
    warmup, decay = args.lr_warmup_steps, args.lr_decay_steps
    if args.lr_warmup_fraction is not None:
        warmup = args.lr_warmup_fraction * decay
    if warmup > 0 and num_steps <= warmup:
        return args.lr_warmup_init + (peak - args.lr_warmup_init) * num_steps / warmup
    style = args.lr_decay_style
    if style == "constant":
        return peak
    if num_steps > decay:
        return floor
    if style == "inverse-square-root":
        return max(floor, peak * math.sqrt(max(warmup, 1)) / math.sqrt(max(num_steps, 1)))
    if decay <= warmup:
        return peak
    ratio = (num_steps - warmup) / (decay - warmup)
    if style == "linear":
        coeff = 1.0 - ratio
    elif style == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    else:  # WSD: hold the peak, then anneal over the last wsd iterations
        start = decay - args.lr_wsd_decay_iters
        if num_steps <= start:
            coeff = 1.0
        else:
            w = (num_steps - start) / args.lr_wsd_decay_iters
            coeff = {"exponential": 2.0 * 0.5 ** w - 1.0,
                     "linear": 1.0 - w,
                     "cosine": 0.5 * (math.cos(math.pi * w) + 1.0),
                     "minus_sqrt": 1.0 - math.sqrt(w)}[args.lr_wsd_decay_style]
    return floor + coeff * (peak - floor)


def cmd_train(args):
    cfg, manifest, W, stream = load_setup(args)
    with open(args.metrics) as f:
        logged = [json.loads(line) for line in f if line.strip()]
    if len(logged) != args.steps:
        sys.exit("FAIL: %s has %d steps, expected %d"
                 % (args.metrics, len(logged), args.steps))
    # Megatron's no_weight_decay_cond: biases and 1-D tensors.
    decay = [w for k, w in sorted(W.items()) if w.dim() > 1 and not k.endswith(".bias")]
    no_decay = [w for k, w in sorted(W.items()) if not (w.dim() > 1 and not k.endswith(".bias"))]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps)
    # Adam divides each gradient element by its own magnitude, so an element
    # whose gradient f32 cannot resolve gets a move of O(lr) from rounding
    # noise in loom: GPT-2's key bias (exactly zero in exact arithmetic,
    # softmax ignores a shift shared by all keys), or an embedding row whose
    # gradient is ~eps at its first use. A sum of n f32 terms is known to
    # about n * 2^-24 of its largest term, n <= a few hundred here, so
    # elements with 0 < |g| <= 1e-5 max|g| of their tensor at some step are
    # "unresolved": they are held to --unresolved-bound x (the sum of the
    # step lrs) instead of the tolerance. Adam could move such an element by
    # up to lr (1 - beta1) / sqrt(1 - beta2) per step (Kingma & Ba 2.1), 3.2
    # lr with the default betas; observed in f32 runs is 1e-3 of the lr sum
    # from initial weights (gpt-tiny, llama-tiny) and up to 3.3e-2 from
    # trained ones (model-families, context-parallel), a third of the
    # default bound. The output says how many there are and how far they got.
    unresolved = {k: torch.zeros_like(w, dtype=torch.bool) for k, w in W.items()}
    start = {k: w.detach().clone() for k, w in W.items()}
    history = []  # (lr, clipped gradients) of every step, for the replays
    lr_sum = 0.0
    worst = 0.0
    for step in range(args.steps):
        opt.zero_grad()
        router = {}
        loss, logged_loss = step_loss(args, cfg, manifest, W, stream,
                                      args.first_step + step, logged=True,
                                      router=router)
        loss.backward()
        zero_unused_grads(W)
        for k, w in W.items():
            g = w.grad.abs()
            unresolved[k] |= (g > 0) & (g <= 1e-5 * g.max())
        norm = float(torch.nn.utils.clip_grad_norm_(
            list(W.values()), args.clip_grad if args.clip_grad > 0 else float("inf")))
        lr = megatron_lr(args, args.first_step + step)
        lr_sum += lr
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        history.append((lr, {k: w.grad.detach().clone() for k, w in W.items()}))
        entry = logged[step]
        if entry["grad_norm"] is None or entry["loss"] is None:
            sys.exit("FAIL: loom skipped step %d (non-finite gradients), "
                     "which this reference does not model" % entry["step"])
        rel = relative_scalar(entry["loss"], logged_loss)
        worst = max(worst, rel)
        if "load_balancing_loss" in router:
            lb_rel = relative_scalar(entry.get("load_balancing_loss"),
                                     router["load_balancing_loss"])
            print("step %d: load_balancing_loss loom %s torch %.8e relative "
                  "difference %.2e" % (entry["step"],
                                       entry.get("load_balancing_loss"),
                                       router["load_balancing_loss"], lb_rel))
            if not lb_rel <= args.rtol:
                sys.exit("FAIL: step %d: load_balancing_loss differs"
                         % entry["step"])
        norm_rel = relative_scalar(entry["grad_norm"], norm)
        print("step %d: loom %.8e torch %.8e relative difference %.2e | "
              "lr loom %.6e torch %.6e | grad norm loom %.6e torch %.6e"
              % (entry["step"], entry["loss"], logged_loss, rel, entry["lr"],
                 lr, entry["grad_norm"], norm))
        if abs(entry["lr"] - lr) > 1e-12 * max(1.0, lr) or not norm_rel <= args.grad_norm_rtol:
            sys.exit("FAIL: step %d: lr or grad norm differ" % entry["step"])
    if not worst <= args.rtol:
        sys.exit("FAIL: loss curve differs from PyTorch by %.2e (> %.0e)"
                 % (worst, args.rtol))
    print("loss curve matches PyTorch within %.0e" % args.rtol)
    loom = read_safetensors(args.final)
    count = sum(int(n.sum()) for n in unresolved.values())
    if count:
        bound = args.unresolved_bound * lr_sum
        gap = max(float((loom[k].to(torch.float64) - W[k].detach())[n].abs().max())
                  for k, n in unresolved.items() if n.any())
        print("%d elements with gradients below f32 resolution differ by up "
              "to %.2e (%.1e of the lr sum; bound %.2e)"
              % (count, gap, gap / lr_sum, bound))
        if not gap <= bound:
            sys.exit("FAIL: unresolved elements differ by %.2e > %.2e"
                     % (gap, bound))
        for k, n in unresolved.items():
            loom[k] = torch.where(n, W[k].detach().to(loom[k].dtype), loom[k])
    final = compare_tensors("final", loom, W, ignore=lambda k: k.endswith(PADDING))
    if not final <= args.param_rtol:
        sys.exit("FAIL: final parameters differ from PyTorch by %.2e (> %.0e)"
                 % (final, args.param_rtol))
    print("final parameters match PyTorch within %.0e" % args.param_rtol)
    check_sensitivity(args, start, history, {k: w.detach() for k, w in W.items()},
                      unresolved)
    if args.main_params:
        check_main_params(args, W)


SENSITIVITY_DOC = """
What the parameter comparison can see. A test that compares final
parameters at --param-rtol must be able to fail when loom's optimizer
differs in any of its parts; near a tolerance of 1e-5 weight decay (lr x wd
a step), Adam's epsilon and its bias correction can each move the result by
less than that. check_sensitivity replays AdamW (float64, the formulas of
torch.optim.AdamW, checked to reproduce it) on the clipped gradients the
reference recorded, once with each part changed, and measures how far each
moves the final parameters by the comparison's own statistic (the worst
normwise difference of a tensor, elements below f32 resolution left out as
above): weight decay off, epsilon 0, no bias correction, one step fewer.
Each must move them by --min-sensitivity x --param-rtol (default 10x), or
the run fails: its learning rate, step count, weight decay or epsilon leave
part of the optimizer unchecked. (The replay keeps the gradients of the
real trajectory; what the perturbed parameters would do to later
gradients is of second order over a few steps. The negative controls of
the matrices run the real thing.)
"""


def adamw_replay(args, start, history, wd=None, eps=None,
                 bias_correction=True, steps=None):
    """AdamW as torch.optim.AdamW computes it (decoupled weight decay,
    none for biases and 1-D tensors), on recorded (lr, gradients)."""
    wd = args.weight_decay if wd is None else wd
    eps = args.adam_eps if eps is None else eps
    b1, b2 = args.adam_beta1, args.adam_beta2
    W = {k: w.clone() for k, w in start.items()}
    m = {k: torch.zeros_like(w) for k, w in W.items()}
    v = {k: torch.zeros_like(w) for k, w in W.items()}
    for t, (lr, grads) in enumerate(history[:steps], start=1):
        for k, w in W.items():
            g = grads[k]
            decays = w.dim() > 1 and not k.endswith(".bias")
            if decays:
                w.mul_(1 - lr * wd)
            m[k].mul_(b1).add_(g, alpha=1 - b1)
            v[k].mul_(b2).addcmul_(g, g, value=1 - b2)
            mh, vh = (m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)) if bias_correction \
                else (m[k], v[k])
            denom = vh.sqrt() + eps
            # With epsilon 0 an element whose gradients were all zero has
            # 0 / 0: it does not move.
            w.sub_(lr * torch.where(denom > 0, mh / denom.clamp_min(1e-300),
                                    torch.zeros_like(mh)))
    return W


CONTROLS = ("no-weight-decay", "adam-eps", "one-step-fewer", "shifted-data")


def perturbed(kind, opt, steps):
    """A negative control's run: the flags `opt` and step count `steps` of
    a compared run with one thing changed, and whether it reads the data
    shifted by one token. The matrices run one plan so and require its
    comparison to fail (a check that cannot fail is no check)."""
    opt = list(opt)
    shifted = False
    def change(flag, value):
        if flag not in opt:
            sys.exit("--control %s: the run has no %s to change" % (kind, flag))
        opt[opt.index(flag) + 1] = value
    if kind == "no-weight-decay":
        change("--weight-decay", "0")
    elif kind == "adam-eps":
        change("--adam-eps", repr(float(opt[opt.index("--adam-eps") + 1]) / 10)
               if "--adam-eps" in opt else "")
    elif kind == "one-step-fewer":
        steps -= 1
    elif kind == "shifted-data":
        shifted = True
    else:
        sys.exit("--control: unknown kind %s (%s)" % (kind, ", ".join(CONTROLS)))
    return opt, steps, shifted


def check_sensitivity(args, start, history, final, unresolved):
    """See SENSITIVITY_DOC."""
    def distance(W):
        return max(relative(torch.where(unresolved[k], final[k], W[k]), final[k])
                   for k in final)

    same = distance(adamw_replay(args, start, history))
    if not same <= 1e-10:
        sys.exit("FAIL: the AdamW replay is %.2e from torch.optim.AdamW" % same)
    cases = [("weight decay off", dict(wd=0.0)),
             ("Adam epsilon 0", dict(eps=0.0)),
             ("no bias correction", dict(bias_correction=False)),
             ("one step fewer", dict(steps=len(history) - 1))]
    weakest = None
    for what, change in cases:
        d = distance(adamw_replay(args, start, history, **change))
        factor = d / args.param_rtol
        print("sensitivity: %s moves the final parameters by %.2e (%.1fx the "
              "tolerance)" % (what, d, factor))
        if weakest is None or factor < weakest[1]:
            weakest = (what, factor)
    if args.min_sensitivity and not weakest[1] >= args.min_sensitivity:
        sys.exit("FAIL: %s moves the final parameters by only %.1fx the "
                 "tolerance (< %gx): this comparison could not see it; "
                 "choose a learning rate, step count, weight decay or "
                 "epsilon where it can (--min-sensitivity)"
                 % (weakest[0], weakest[1], args.min_sensitivity))
    if args.min_sensitivity:
        print("the final parameters see each part of the optimizer (at least "
              "%gx the tolerance)" % args.min_sensitivity)


def check_main_params(args, W):
    """Mixed precision: loom's f32 main parameters (the optimizer file's
    optimizer.main_param.*) must have moved from the initial weights as the
    float64 loop's parameters did, within --delta-rtol normwise per tensor;
    the low-precision model file must be their rounding. Run it where the
    updates are below the model dtype's resolution (a small lr): a run
    without f32 main weights loses them, which the check also measures on
    the model file and requires to be far off (--delta-rtol x 4), so that
    the check could not pass without main weights."""
    init = read_safetensors(args.checkpoint)
    state = read_safetensors(args.main_params)
    model = read_safetensors(args.final)
    worst, lossy = 0.0, 0.0
    check_same_tensors("main parameters", {k[len("optimizer.main_param."):]: t
                        for k, t in state.items()
                        if k.startswith("optimizer.main_param.")}, W,
                       ignore=lambda k: k.endswith(PADDING))
    for k, w in sorted(W.items()):
        name = "optimizer.main_param." + k
        if name not in state:
            sys.exit("FAIL: %s has no f32 main parameter %s" % (args.main_params, name))
        main = state[name]
        if not torch.equal(main.to(model[k].dtype), model[k]):
            sys.exit("FAIL: %s is not the rounding of its main parameter" % k)
        start = init[k].to(torch.float64)
        moved = w.detach().to(torch.float64) - start
        loom_moved = main.to(torch.float64) - start
        file_moved = model[k].to(torch.float64) - start
        part = key_bias_part(k, moved.numel())
        if part is not None:
            # GPT-2's key bias has an exactly zero gradient: its movement is
            # rounding noise that Adam amplifies (see compare_files).
            lo, hi = part
            keep = torch.cat([torch.arange(lo), torch.arange(hi, moved.numel())])
            moved, loom_moved, file_moved = moved[keep], loom_moved[keep], file_moved[keep]
        worst = max(worst, relative(loom_moved, moved))
        lossy = max(lossy, relative(file_moved, moved))
    print("main parameters moved as PyTorch's within %.2e; the %s model file "
          "alone is off by %.2e" % (worst, str(model[k].dtype).split(".")[-1], lossy))
    if not worst <= args.delta_rtol:
        sys.exit("FAIL: main parameters moved differently (%.2e > %.0e)"
                 % (worst, args.delta_rtol))
    if not lossy > 4 * args.delta_rtol:
        sys.exit("FAIL: the model file alone is within %.2e: this run cannot "
                 "tell whether main weights are kept (use a smaller lr)" % lossy)


def cmd_falls(args):
    with open(args.metrics) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    k = args.window
    if len(losses) < 2 * k or None in losses:
        sys.exit("FAIL: %s: need %d finite losses" % (args.metrics, 2 * k))
    first, last = sum(losses[:k]) / k, sum(losses[-k:]) / k
    print("mean loss of the first %d steps %.4f, of the last %d steps %.4f"
          % (k, first, k, last))
    if not last < first - args.min_drop:
        sys.exit("FAIL: the loss fell by %.4f, expected more than %.4f"
                 % (first - last, args.min_drop))
    print("loss fell by more than %g" % args.min_drop)


def cmd_compare(args):
    """Two loom runs that should compute the same math (e.g. with and
    without the distributed optimizer): the same loss curve and grad norms,
    and the same tensors in each pair of files, within rtol."""
    worst, where = compare_metric_files(*args.metrics)
    print("loss curves and grad norms: worst relative difference %.2e" % worst)
    if not worst <= args.rtol:
        sys.exit("FAIL: the runs differ by %.2e (> %.0e) at step %s, %s: %s vs %s"
                 % ((worst, args.rtol) + where))
    if len(args.files) % 2:
        sys.exit("--files takes pairs")
    for left, right in zip(args.files[::2], args.files[1::2]):
        # GPT-2's key bias: see compare_files; --key-bias-bound is Adam's
        # reach over the run (each caller says how it chose it).
        diff = compare_files(os.path.basename(left), left, right,
                             args.key_bias_bound)
        if not diff <= args.rtol:
            sys.exit("FAIL: %s and %s differ by %.2e (> %.0e)"
                     % (left, right, diff, args.rtol))
    print("runs agree within %.0e" % args.rtol)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens", help="write a deterministic raw token file")
    t.add_argument("file")
    t.add_argument("--count", type=int, required=True)
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--format", choices=["int32", "uint16"], default="int32")
    c = sub.add_parser("check", help="recompute the logged losses")
    c.add_argument("--config", required=True, help="HF config.json (loom-import's input)")
    c.add_argument("--manifest", required=True)
    c.add_argument("--checkpoint", required=True)
    c.add_argument("--data", required=True)
    c.add_argument("--data-format", choices=["int32", "uint16"])
    c.add_argument("--metrics", required=True)
    c.add_argument("--rtol", type=float, default=1e-5)
    c.add_argument("--precision", choices=["f64", "f32"], default="f64")
    # loom-import's document options, when the model was imported with them.
    c.add_argument("--eod-token-id", type=int)
    c.add_argument("--reset-position-ids", action="store_true")
    c.add_argument("--reset-attention-mask", action="store_true")
    r = sub.add_parser("trace", help="check a pipelined run's traced "
                       "micro-batch data (cmd_trace)")
    r.add_argument("--config", required=True)
    r.add_argument("--manifest", required=True)
    r.add_argument("--checkpoint", required=True,
                   help="the weights the traced run started from")
    r.add_argument("--data", required=True)
    r.add_argument("--data-format", choices=["int32", "uint16"])
    r.add_argument("--trace", required=True, help="loom-run --trace-pipeline's stderr")
    r.add_argument("--rtol", type=float, default=1e-5)
    r.add_argument("--eod-token-id", type=int)
    r.add_argument("--reset-position-ids", action="store_true")
    r.add_argument("--reset-attention-mask", action="store_true")
    g = sub.add_parser("grads", help="compare --dump-grads with autograd")
    t = sub.add_parser("train", help="compare a loom-run --train run")
    for q in (g, t):
        q.add_argument("--config", required=True)
        q.add_argument("--manifest", required=True)
        q.add_argument("--checkpoint", required=True,
                       help="the initial weights (loom-run --steps 0 --save)")
        q.add_argument("--data", required=True)
        q.add_argument("--data-format", choices=["int32", "uint16"])
        q.add_argument("--rtol", type=float, default=1e-5)
        q.add_argument("--precision", choices=["f64", "f32"], default="f64")
        q.add_argument("--eod-token-id", type=int)
        q.add_argument("--reset-position-ids", action="store_true")
        q.add_argument("--reset-attention-mask", action="store_true")
        q.add_argument("--moe-aux-loss-coeff", type=float,
                       help="loom-compile's flag (default: the config's)")
        q.add_argument("--moe-z-loss-coeff", type=float, default=0.0)
        q.add_argument("--moe-expert-capacity-factor", type=float,
                       help="loom-compile's flag (default: dropless)")
        q.add_argument("--moe-token-drop-policy", choices=["probs", "position"],
                       default="probs")
    g.add_argument("--grads", required=True, help="loom-run --dump-grads FILE")
    t.add_argument("--metrics", required=True)
    t.add_argument("--final", required=True, help="loom-run --save FILE")
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--first-step", type=int, default=0,
                   help="steps already run before the initial checkpoint")
    t.add_argument("--param-rtol", type=float, default=1e-5)
    t.add_argument("--unresolved-bound", type=float, default=0.1,
                   help="bound on elements whose gradient f32 cannot resolve, "
                   "as a fraction of the sum of the step lrs")
    t.add_argument("--main-params",
                   help="loom's optimizer file: check its f32 main parameters "
                   "(mixed precision)")
    t.add_argument("--delta-rtol", type=float, default=2e-2,
                   help="tolerance of the main parameters' movement")
    t.add_argument("--grad-norm-rtol", type=float,
                   help="tolerance of the logged grad norms (default: --rtol)")
    t.add_argument("--min-sensitivity", type=float, default=10.0,
                   help="each part of AdamW must move the final parameters "
                        "by this many times --param-rtol (0: report only; "
                        "say why where a test passes it)" + SENSITIVITY_DOC)
    # loom-run's defaults.
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--min-lr", type=float, default=0.0)
    t.add_argument("--lr-decay-style", default="linear",
                   choices=["constant", "linear", "cosine",
                            "inverse-square-root", "WSD"])
    t.add_argument("--lr-warmup-iters", "--lr-warmup-steps", type=int,
                   default=0, dest="lr_warmup_steps")
    t.add_argument("--lr-warmup-fraction", type=float)
    t.add_argument("--lr-warmup-init", type=float, default=0.0)
    t.add_argument("--lr-decay-iters", "--lr-decay-steps", type=int,
                   dest="lr_decay_steps")
    t.add_argument("--lr-wsd-decay-iters", type=int)
    t.add_argument("--lr-wsd-decay-style", default="exponential",
                   choices=["exponential", "linear", "cosine", "minus_sqrt"])
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--adam-beta1", type=float, default=0.9)
    t.add_argument("--adam-beta2", type=float, default=0.999)
    t.add_argument("--adam-eps", type=float, default=1e-8)
    t.add_argument("--clip-grad", type=float, default=1.0)
    f = sub.add_parser("falls", help="check that a logged loss curve falls")
    f.add_argument("--metrics", required=True)
    f.add_argument("--window", type=int, default=5)
    f.add_argument("--min-drop", type=float, required=True)
    k = sub.add_parser("compare", help="two loom runs agree")
    k.add_argument("--metrics", nargs=2, required=True)
    k.add_argument("--files", nargs="*", default=[])
    k.add_argument("--rtol", type=float, default=1e-6)
    k.add_argument("--key-bias-bound", type=float, default=None,
                   help="hold GPT-2's key bias (a zero gradient) to this "
                        "absolute bound instead of --rtol")
    args = p.parse_args()
    if args.cmd == "train" and args.lr_decay_steps is None:
        args.lr_decay_steps = args.first_step + args.steps
    if args.cmd == "train" and args.grad_norm_rtol is None:
        args.grad_norm_rtol = args.rtol
    {"tokens": cmd_tokens, "check": cmd_check, "grads": cmd_grads, "trace": cmd_trace,
     "train": cmd_train, "falls": cmd_falls, "compare": cmd_compare}[args.cmd](args)


if __name__ == "__main__":
    main()
