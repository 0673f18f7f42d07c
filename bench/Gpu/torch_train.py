#!/usr/bin/env python3
"""The PyTorch peer of bench/Gpu: one training step of a GPT-2 or Llama
model built from its Hugging Face config.json, on one GPU, in bf16 autocast
with f32 weights, fused AdamW and gradient clipping (what Loom's bf16 plan
with f32 main weights does), eager or torch.compile'd.

The same function as Loom's benchmark program: no dropout (Loom imports the
models without --hidden-dropout; the configs' attn/resid/embd_pdrop are
ignored here), the vocabulary padded as loom-compile pads it (to a multiple
of 128, Megatron's --make-vocab-size-divisible-by; the padding logits are
left out of the loss, as Loom keeps them out of the softmax), and AdamW
decaying only matrices (Loom's rule: >1-D non-bias parameters) with the
weight decay run.sh gives Loom as well.

  torch_train.py --config gpt2-124m.json --batch 8 --seq 1024 [--compile]

Prints one JSON line: tokens/s, step ms (median of the timed steps), peak
GPU memory, and the model FLOPs per token that bench/Gpu/run.sh turns into
MFU. Written from the models' definitions (HF's modeling code is not
imported), like test/e2e/torch_reference.py."""
import argparse, json, math, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F


VOCAB_MULTIPLE = 128  # loom-compile's --make-vocab-size-divisible-by default


def padded_vocab(c):
    return -(-c["vocab_size"] // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


class Gpt2Block(nn.Module):
    def __init__(s, c):
        super().__init__()
        d, s.h = c["n_embd"], c["n_head"]
        s.ln1, s.ln2 = nn.LayerNorm(d, eps=c["layer_norm_epsilon"]), nn.LayerNorm(d, eps=c["layer_norm_epsilon"])
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        inner = c.get("n_inner") or 4 * d
        s.fc, s.out = nn.Linear(d, inner), nn.Linear(inner, d)
        s.pa = s.pr = 0.0  # no dropout, as Loom's program

    def forward(s, x):
        B, S, D = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(D, -1)
        q, k, v = (t.view(B, S, s.h, D // s.h).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=s.pa if s.training else 0.0)
        x = x + F.dropout(s.proj(a.transpose(1, 2).reshape(B, S, D)), s.pr, s.training)
        return x + F.dropout(s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh")), s.pr, s.training)


class Gpt2(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(padded_vocab(c), c["n_embd"]), nn.Embedding(c["n_positions"], c["n_embd"])
        s.blocks = nn.ModuleList(Gpt2Block(c) for _ in range(c["n_layer"]))
        s.ln = nn.LayerNorm(c["n_embd"], eps=c["layer_norm_epsilon"])
        s.pe = 0.0  # no dropout, as Loom's program

    def forward(s, tokens):
        x = F.dropout(s.wte(tokens) + s.wpe(torch.arange(tokens.shape[1], device=tokens.device)), s.pe, s.training)
        for b in s.blocks:
            x = b(x)
        return s.ln(x) @ s.wte.weight.t()  # tied


def rope(x, theta):
    S, hd = x.shape[-2], x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd))
    ang = torch.outer(torch.arange(S, device=x.device, dtype=torch.float32), inv)
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class LlamaBlock(nn.Module):
    def __init__(s, c):
        super().__init__()
        d, s.h, s.kv = c["hidden_size"], c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
        s.hd, s.theta = d // s.h, c.get("rope_theta", 10000.0)
        s.n1, s.n2 = nn.RMSNorm(d, eps=c["rms_norm_eps"]), nn.RMSNorm(d, eps=c["rms_norm_eps"])
        s.q, s.k, s.v = nn.Linear(d, d, bias=False), nn.Linear(d, s.kv * s.hd, bias=False), nn.Linear(d, s.kv * s.hd, bias=False)
        s.o = nn.Linear(d, d, bias=False)
        f = c["intermediate_size"]
        s.gate, s.up, s.down = nn.Linear(d, f, bias=False), nn.Linear(d, f, bias=False), nn.Linear(f, d, bias=False)

    def forward(s, x):
        B, S, D = x.shape
        y = s.n1(x)
        q = rope(s.q(y).view(B, S, s.h, s.hd).transpose(1, 2), s.theta)
        k = rope(s.k(y).view(B, S, s.kv, s.hd).transpose(1, 2), s.theta)
        v = s.v(y).view(B, S, s.kv, s.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + s.o(a.transpose(1, 2).reshape(B, S, D))
        y = s.n2(x)
        return x + s.down(F.silu(s.gate(y)) * s.up(y))


class Llama(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.emb = nn.Embedding(padded_vocab(c), c["hidden_size"])
        s.blocks = nn.ModuleList(LlamaBlock(c) for _ in range(c["num_hidden_layers"]))
        s.norm = nn.RMSNorm(c["hidden_size"], eps=c["rms_norm_eps"])
        s.tied = c.get("tie_word_embeddings", False)
        if not s.tied:
            s.head = nn.Linear(c["hidden_size"], padded_vocab(c), bias=False)

    def forward(s, tokens):
        x = s.emb(tokens)
        for b in s.blocks:
            x = b(x)
        x = s.norm(x)
        return x @ s.emb.weight.t() if s.tied else s.head(x)


def flops_per_token(c, model, seq):
    """6 x (parameters used in matmuls) + causal-agnostic attention scores
    12 x layers x width x seq (the PaLM / Megatron MFU convention)."""
    n = sum(p.numel() for p in model.parameters())
    if c["model_type"] == "gpt2":
        n -= model.wpe.weight.numel()  # a lookup; wte is the (tied) head
        layers, width = c["n_layer"], c["n_embd"]
    else:
        if not model.tied:
            n -= model.emb.weight.numel()
        layers, width = c["num_hidden_layers"], c["hidden_size"]
    return 6 * n + 12 * layers * width * seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--weight-decay", type=float, default=0.1,
                    help="AdamW weight decay of matrices (run.sh gives Loom the same)")
    ap.add_argument("--flops-only", action="store_true",
                    help="print the model FLOPs per token and exit")
    a = ap.parse_args()
    c = json.load(open(a.config))
    torch.manual_seed(0)
    if a.flops_only:
        with torch.device("meta"):
            print(flops_per_token(c, (Gpt2 if c["model_type"] == "gpt2" else Llama)(c), a.seq))
        return
    model = (Gpt2 if c["model_type"] == "gpt2" else Llama)(c).cuda()
    for m in model.modules():  # HF's initializer_range, not N(0, 1)
        if isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=c.get("initializer_range", 0.02))
    fpt = flops_per_token(c, model, a.seq)
    # Loom's AdamW decays >1-D parameters only (not norms or biases).
    groups = [{"params": [p for p in model.parameters() if p.dim() > 1], "weight_decay": a.weight_decay},
              {"params": [p for p in model.parameters() if p.dim() <= 1], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=3e-4, fused=True)
    fwd = torch.compile(model) if a.compile else model

    def step(tokens, labels):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(tokens)
        # The padding logits stay out of the loss, as in Loom's softmax.
        logits = logits[..., : c["vocab_size"]]
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    gen = torch.Generator(device="cuda").manual_seed(1)
    times = []
    for i in range(a.warmup + a.steps):
        data = torch.randint(0, c["vocab_size"], (a.batch, a.seq + 1), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = step(data[:, :-1], data[:, 1:])
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t)
    ms = statistics.median(times) * 1e3
    tps = a.batch * a.seq / (ms / 1e3)
    print(json.dumps({"impl": "torch-compile" if a.compile else "torch-eager", "step_ms": round(ms, 2),
                      "tokens_per_s": round(tps, 1), "flops_per_token": fpt,
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "loss": round(float(loss), 4), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
