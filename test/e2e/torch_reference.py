#!/usr/bin/python3
# ===- torch_reference.py - PyTorch reference for loom-run's loss ---------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# An independent implementation of the models loom-import builds (see
# dialects/Tfm/TfmOps.td and lib/Import/ModelBuilder.cpp), in plain torch:
#   gpt2   pre-LN, learned positions, tanh (or exact) GELU MLP, biases, final
#          LayerNorm, lm head tied to wte unless the config unties it
#   llama  RMSNorm, rotate-half RoPE, GQA, SwiGLU MLP, no biases, untied head
#          unless the config ties it
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


def rope(x, pos, heads, head_dim, theta):
    B, S, _ = x.shape
    x = x.view(B, S, heads, head_dim)
    half = head_dim // 2
    inv_freq = 1.0 / theta ** (torch.arange(half, dtype=torch.float64) * 2 / head_dim)
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


def llama_logits(cfg, W, tokens, pos, doc):
    F = torch.nn.functional
    x = W["model.embed_tokens.weight"][tokens]
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        a = rms_norm(x, W[p + "input_layernorm.weight"], cfg.eps)
        # torch.nn.Linear layout: y = x W^T with W [out, in].
        q = rope(a @ W[p + "self_attn.q_proj.weight"].T, pos, cfg.heads,
                 cfg.head_dim, cfg.theta)
        k = rope(a @ W[p + "self_attn.k_proj.weight"].T, pos, cfg.kv_heads,
                 cfg.head_dim, cfg.theta)
        v = a @ W[p + "self_attn.v_proj.weight"].T
        o = attention(q, k, v, cfg.heads, cfg.kv_heads, cfg.head_dim, doc)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], cfg.eps)
        h = F.silu(m @ W[p + "mlp.gate_proj.weight"].T) * (m @ W[p + "mlp.up_proj.weight"].T)
        x = x + h @ W[p + "mlp.down_proj.weight"].T
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
        rel = abs(entry["loss"] - ref) / abs(ref)
        worst = max(worst, rel)
        print("step %d: loom %.8e torch %.8e relative difference %.2e"
              % (step + 1, entry["loss"], ref, rel))
    if not logged:
        sys.exit("%s has no steps" % args.metrics)
    if worst > args.rtol:
        sys.exit("FAIL: loss differs from PyTorch by %.2e (> %.0e)"
                 % (worst, args.rtol))
    print("loss matches PyTorch within %.0e" % args.rtol)


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
    args = p.parse_args()
    {"tokens": cmd_tokens, "check": cmd_check}[args.cmd](args)


if __name__ == "__main__":
    main()
