#!/usr/bin/python3
# ===- torch_check.py - loomrt numerics vs PyTorch ------------------------=== #
#
# usage: torch_check.py path/to/libloomrt_cpu.so
#
# Calls the runtime through ctypes and compares with PyTorch (Debian's
# python3-torch): attention forward/backward, cross-entropy, layer/RMS norm,
# RoPE (the Hugging Face Llama code), GELU, AdamW (torch.optim.AdamW) and
# the bf16/f16 casts. f32 results must agree within 1e-5 relative (the
# end-to-end target of the runtime issue); exits non-zero on any mismatch.
#
# ===----------------------------------------------------------------------=== #
import ctypes
import math
import sys

import torch
import torch.nn.functional as F

F32, BF16, F16 = 0, 1, 2
lib = ctypes.CDLL(sys.argv[1])
P = ctypes.c_void_p
I64 = ctypes.c_int64
I32 = ctypes.c_int32
FL = ctypes.c_float


def sig(name, *args, ret=None):
    fn = getattr(lib, name)
    fn.argtypes = list(args)
    fn.restype = ret
    return fn


attention_forward = sig("loomrt_attention_forward", I32, I64, I64, I64, I64,
                        I64, I64, FL, I32, P, P, P, P, P, P, P, P, P)
attention_backward = sig("loomrt_attention_backward", I32, I64, I64, I64, I64,
                         I64, I64, FL, I32, P, P, P, P, P, P, P, P, P, P, P,
                         P, P, I32)
ce_forward = sig("loomrt_cross_entropy_forward", I32, I64, I64, P, P, P, P, P)
ce_backward = sig("loomrt_cross_entropy_backward", I32, I64, I64, P, P, P, FL,
                  P)
ln_forward = sig("loomrt_layer_norm_forward", I32, I64, I64, P, P, P, FL, P)
ln_backward = sig("loomrt_layer_norm_backward", I32, I64, I64, P, P, P, FL, P,
                  P, I32, P, P, I32)
rms_forward = sig("loomrt_rms_norm_forward", I32, I64, I64, P, P, FL, P)
rms_backward = sig("loomrt_rms_norm_backward", I32, I64, I64, P, P, P, FL, P,
                   P, I32, P, I32)
rope_forward = sig("loomrt_rope_forward", I32, I64, I64, I64, I64, I64, FL,
                   I32, FL, FL, FL, I64, P, P, P)
gelu_forward = sig("loomrt_gelu_forward", I32, I32, I64, P, P)
adamw = sig("loomrt_adamw", I64, P, P, P, P, FL, FL, FL, FL, FL, I64, P, FL)
cast = sig("loomrt_cast", I32, P, I32, P, I64)

failures = []


def ptr(t):
    return None if t is None else t.data_ptr()


def check(name, got, want, rtol=1e-5, atol=1e-6):
    got, want = got.double(), want.double()
    err = (got - want).abs()
    bound = atol + rtol * want.abs()
    ok = bool((err <= bound).all())
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max abs err {err.max().item():.3g}")
    if not ok:
        failures.append(name)


torch.manual_seed(0)

# --- attention: causal GQA with documents, forward + backward ---------------
B, S, Nq, Nkv, D = 2, 17, 4, 2, 8
scale = 1.0 / math.sqrt(D)
q = torch.randn(B, S, Nq * D)
k = torch.randn(B, S, Nkv * D)
v = torch.randn(B, S, Nkv * D)
dout = torch.randn(B, S, Nq * D)
doc = torch.zeros(B, S, dtype=torch.int32)
doc[0, 9:] = 1
doc[1, 4:] = 1
doc[1, 12:] = 2

o = torch.empty_like(q)
lse = torch.empty(B, Nq, S)
attention_forward(F32, B, S, S, Nq, Nkv, D, scale, 1, None, None, ptr(doc),
                  ptr(doc), ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse))

qt = q.view(B, S, Nq, D).transpose(1, 2).clone().requires_grad_()
kt = k.view(B, S, Nkv, D).transpose(1, 2).clone().requires_grad_()
vt = v.view(B, S, Nkv, D).transpose(1, 2).clone().requires_grad_()
rep = Nq // Nkv
scores = qt @ kt.repeat_interleave(rep, 1).transpose(-1, -2) * scale
causal = torch.ones(S, S, dtype=torch.bool).tril()
same_doc = doc[:, :, None] == doc[:, None, :]
mask = (causal & same_doc)[:, None]
scores = scores.masked_fill(~mask, float("-inf"))
ref_lse = torch.logsumexp(scores, -1)
ref_o = torch.softmax(scores, -1) @ vt.repeat_interleave(rep, 1)
ref_o_flat = ref_o.transpose(1, 2).reshape(B, S, Nq * D)
check("attention o", o, ref_o_flat.detach())
check("attention lse", lse, ref_lse.detach())
ref_o_flat.backward(dout)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
attention_backward(F32, B, S, S, Nq, Nkv, D, scale, 1, None, None, ptr(doc),
                   ptr(doc), ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse),
                   ptr(dout), ptr(dq), ptr(dk), ptr(dv), 0)
check("attention dq", dq, qt.grad.transpose(1, 2).reshape(B, S, Nq * D), 1e-4, 1e-5)
check("attention dk", dk, kt.grad.transpose(1, 2).reshape(B, S, Nkv * D), 1e-4, 1e-5)
check("attention dv", dv, vt.grad.transpose(1, 2).reshape(B, S, Nkv * D), 1e-4, 1e-5)

# --- cross-entropy with a loss mask -----------------------------------------
N, V = 13, 50
logits = torch.randn(N, V) * 3
labels = torch.randint(0, V, (N,), dtype=torch.int32)
lmask = (torch.rand(N) > 0.3).float()
loss = torch.zeros(1)
ce_forward(F32, N, V, ptr(logits), ptr(labels), ptr(lmask), ptr(loss), None)
lt = logits.clone().requires_grad_()
ref = (F.cross_entropy(lt, labels.long(), reduction="none") * lmask).sum() / lmask.sum()
check("cross-entropy loss", loss, ref.detach().view(1))
ref.backward(torch.tensor(0.5))
dlogits = torch.empty_like(logits)
ce_backward(F32, N, V, ptr(logits), ptr(labels), ptr(lmask), 0.5, ptr(dlogits))
check("cross-entropy dlogits", dlogits, lt.grad)

# --- LayerNorm / RMSNorm ----------------------------------------------------
rows, H, eps = 9, 32, 1e-5
x = torch.randn(rows, H) * 2 + 1
w = torch.randn(H)
b = torch.randn(H)
dy = torch.randn(rows, H)
y = torch.empty_like(x)
ln_forward(F32, rows, H, ptr(x), ptr(w), ptr(b), eps, ptr(y))
xt, wt, bt = (t.clone().requires_grad_() for t in (x, w, b))
ref = F.layer_norm(xt, (H,), wt, bt, eps)
check("layer_norm y", y, ref.detach())
ref.backward(dy)
dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
ln_backward(F32, rows, H, ptr(x), ptr(w), ptr(dy), eps, None, ptr(dx), F32, ptr(dw),
            ptr(db), 0)
check("layer_norm dx", dx, xt.grad, 1e-4, 1e-5)
check("layer_norm dw", dw, wt.grad, 1e-4, 1e-5)
check("layer_norm db", db, bt.grad, 1e-4, 1e-5)

rms_forward(F32, rows, H, ptr(x), ptr(w), eps, ptr(y))
xt, wt = x.clone().requires_grad_(), w.clone().requires_grad_()
# transformers LlamaRMSNorm
ref = wt * (xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + eps))
check("rms_norm y", y, ref.detach())
ref.backward(dy)
rms_backward(F32, rows, H, ptr(x), ptr(w), ptr(dy), eps, None, ptr(dx), F32,
             ptr(dw), 0)
check("rms_norm dx", dx, xt.grad, 1e-4, 1e-5)
check("rms_norm dw", dw, wt.grad, 1e-4, 1e-5)

# --- RoPE: transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb --------
B, S, N, D, theta = 2, 11, 3, 16, 10000.0
x = torch.randn(B, S, N, D)
pos = torch.randint(0, 300, (B, S), dtype=torch.int32)
y = torch.empty_like(x)
rope_forward(F32, B, S, N, D, D, theta, 0, 1.0, 1.0, 1.0, 0, ptr(pos), ptr(x),
             ptr(y))
inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
freqs = pos.float()[..., None] * inv_freq  # [B,S,D/2]
emb = torch.cat((freqs, freqs), dim=-1)
cos, sin = emb.cos()[:, :, None], emb.sin()[:, :, None]


def rotate_half(t):
    return torch.cat((-t[..., D // 2:], t[..., : D // 2]), dim=-1)


check("rope", y, x * cos + rotate_half(x) * sin, 1e-5, 1e-5)


# transformers' _compute_llama3_parameters (modeling_rope_utils.py), verbatim.
def llama3_inv_freq(inv_freq, factor, low_freq_factor, high_freq_factor,
                    old_context_len):
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor,
                                 inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (
        high_freq_factor - low_freq_factor)
    smoothed_inv_freq = ((1 - smooth_factor) * inv_freq_llama / factor
                         + smooth_factor * inv_freq_llama)
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


# Llama 3.1's numbers (every band is hit at D = 128), and a tiny model's
# (original context 32: wavelengths 6.3 .. 19869 cross both thresholds).
for D, theta, scaling in ((128, 500000.0, (8.0, 1.0, 4.0, 8192)),
                          (16, 10000.0, (4.0, 1.0, 4.0, 32))):
    x = torch.randn(B, S, N, D)
    y = torch.empty_like(x)
    rope_forward(F32, B, S, N, D, D, theta, 1, *scaling, ptr(pos), ptr(x),
                 ptr(y))
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    inv_freq = llama3_inv_freq(inv_freq, *scaling)
    freqs = pos.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, :, None], emb.sin()[:, :, None]
    rot = torch.cat((-x[..., D // 2:], x[..., : D // 2]), dim=-1)
    check("rope llama3 D=%d" % D, y, x * cos + rot * sin, 1e-5, 1e-5)

# --- GELU -------------------------------------------------------------------
x = torch.randn(1000) * 4
y = torch.empty_like(x)
gelu_forward(F32, 0, x.numel(), ptr(x), ptr(y))
check("gelu erf", y, F.gelu(x))
gelu_forward(F32, 1, x.numel(), ptr(x), ptr(y))
check("gelu tanh", y, F.gelu(x, approximate="tanh"))

# --- AdamW: three steps of torch.optim.AdamW ---------------------------------
n = 257
p0 = torch.randn(n)
param, m, v = p0.clone(), torch.zeros(n), torch.zeros(n)
tp = torch.nn.Parameter(p0.clone())
opt = torch.optim.AdamW([tp], lr=3e-3, betas=(0.9, 0.95), eps=1e-8,
                        weight_decay=0.1, foreach=False)
for step in range(1, 4):
    g = torch.randn(n)
    tp.grad = g.clone()
    opt.step()
    adamw(n, ptr(param), ptr(g), ptr(m), ptr(v), 3e-3, 0.9, 0.95, 1e-8, 0.1, step, None, 0.0)
check("adamw param", param, tp.detach(), 1e-6, 1e-7)
# Moments may differ in the last bit (torch 2 switched to lerp_).
check("adamw exp_avg", m, opt.state[tp]["exp_avg"], 1e-5, 1e-8)
check("adamw exp_avg_sq", v, opt.state[tp]["exp_avg_sq"], 1e-5, 1e-10)

# --- casts: bit-exact with torch's round-to-nearest-even ----------------------
x = torch.cat([torch.randn(100000) * 100, torch.randn(1000) * 1e-6,
               torch.tensor([65504.0, 65520.0, 1e30, -0.0, float("inf")])])
for dt, tdt, name in ((BF16, torch.bfloat16, "bf16"), (F16, torch.float16, "f16")):
    out = torch.empty(x.numel(), dtype=torch.int16)
    cast(F32, ptr(x), dt, ptr(out), x.numel())
    want = x.to(tdt).view(torch.int16)
    ok = torch.equal(out, want)
    print(f"{'ok  ' if ok else 'FAIL'} cast f32->{name}: "
          f"{int((out != want).sum())} mismatching elements")
    if not ok:
        failures.append(f"cast {name}")

if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("all checks passed")
