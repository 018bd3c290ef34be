#!/usr/bin/python3
"""GPT-2 in PyTorch, exactly our model: the peer we measure against and the
reference the tests check against.

The model is written with torch.nn.functional on a dict of named tensors
(names as our parameter layout, core/model/params.cpp); the original project's Adam
is written out with torch's foreach kernels (PyTorch has no such variant).
The configuration's variant keys (checkpoint_file.resolve_variant: absent
or "auto" means the arch's choice, GPT-2's by default) select layernorm or
rmsnorm, pre- or post-norm blocks, learned or rotary positions (LLaMA's
interleaved pairs), gelu (tanh), relu or silu, a standard or SwiGLU MLP of H
hidden units, KVH key/value heads shared by groups of query heads, and an
lm_head tied to wte.
As a program it is the peer side of the harness's `kind: peer` experiments
(experiments/peer.yaml; bench/harness/runner/peer_experiment.h): it loads our
initial weights from a checkpoint written by `train_step --save-init` and
times training steps (forward, backward, clipping, Adam) with the same
configuration and thread count; the harness alternates it with ours and
reports the medians.

usage: torch_gpt2.py --init CKPT --threads N [--batch 16] [--seq 256] [--steps 5] [--warmup 1] [--json OUT]
Run it with Debian's /usr/bin/python3 (python3-torch) and OPENBLAS_NUM_THREADS=N.
"""
import argparse
import contextlib
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from checkpoint_file import read_checkpoint, resolve_variant


def _norm(x, w, b, kind):
    """layernorm (weight and bias) or rmsnorm (weight only), eps 1e-5, over the last dim."""
    if kind == "rmsnorm":
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-5) * w
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rope(x, theta):
    """Rotary position embedding on x (..., T, HS), Meta's LLaMA convention:
    the pair (x[2i], x[2i+1]) of the token at position t turns by the angle
    t * theta^(-2i/HS), i < HS/2 (interleaved pairs, not rotate_half).
    The angles are computed in float64 whatever x's dtype."""
    T, HS = x.shape[-2], x.shape[-1]
    inv = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]  # (T, HS/2)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


_ACTIVATIONS = {"gelu": lambda a: F.gelu(a, approximate="tanh"), "relu": F.relu, "silu": F.silu}


def gpt2_forward(p, cfg, tokens):
    """tokens (B,T) -> logits (B,T,V). p: name -> tensor, names as our layout.
    cfg: the sizes V T L NH C and the variant keys (resolve_variant); a key
    absent or "auto" is the arch's choice, GPT-2's when arch is absent too."""
    cfg = resolve_variant(cfg)
    L, NH, C, KVH, H = cfg["L"], cfg["NH"], cfg["C"], cfg["KVH"], cfg["H"]
    B, T = tokens.shape
    HS = C // NH
    kind, post, use_rope = cfg["norm"], cfg["norm_position"] == "post", cfg["position"] == "rope"
    act = _ACTIVATIONS[cfg["activation"]]
    x = p["wte"][tokens] if use_rope else p["wte"][tokens] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    # Pre-norm: x = x + attn(norm1(x)); x = x + mlp(norm2(x)).
    # Post-norm: x = norm1(x + attn(x)); x = norm2(x + mlp(x)).
    for l in range(L):
        w = lambda s: p[f"h.{l}.{s}"]
        norm1 = lambda z: _norm(z, w("ln1_w"), p.get(f"h.{l}.ln1_b"), kind)  # no bias under rmsnorm
        norm2 = lambda z: _norm(z, w("ln2_w"), p.get(f"h.{l}.ln2_b"), kind)
        h = x if post else norm1(x)
        q, k, v = (h @ w("qkv_w").T).split([NH * HS, KVH * HS, KVH * HS], dim=2)
        q = q.view(B, T, NH, HS).transpose(1, 2)
        k, v = (t.view(B, T, KVH, HS).transpose(1, 2) for t in (k, v))
        if use_rope:
            q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
        if KVH != NH:  # query head h reads key/value head h // (NH // KVH)
            k, v = (t.repeat_interleave(NH // KVH, dim=1) for t in (k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w("attn_proj_w").T + w("attn_proj_b")
        if post:
            x = norm1(x)
        h = x if post else norm2(x)
        a = h @ w("fc_w").T + w("fc_b")
        h = F.silu(a[..., :H]) * a[..., H:] if cfg["mlp"] == "swiglu" else act(a)
        x = x + h @ w("fc_proj_w").T + w("fc_proj_b")
        if post:
            x = norm2(x)
    x = _norm(x, p["lnf_w"], p.get("lnf_b"), kind)
    return x @ (p["wte"] if cfg["tie"] else p["lm_head"]).T


def lr_at(o, step):
    """Our schedules (core/model/optim.cpp): linear for adam_original, warm-up + cosine for adamw."""
    if o["kind"] == "adam_original":
        frac = min(step, o["decay_steps"]) / o["decay_steps"]
        return o["lr"] - (o["lr"] - o["min_lr"]) * frac
    if step < o["warmup_steps"]:
        return o["lr"] * (step + 1) / o["warmup_steps"]
    if step >= o["decay_steps"]:
        return o["min_lr"]
    frac = (step - o["warmup_steps"]) / max(o["decay_steps"] - o["warmup_steps"], 1)
    return o["min_lr"] + 0.5 * (o["lr"] - o["min_lr"]) * (1 + math.cos(math.pi * frac))


class OriginalAdam:
    """The reproduced project's Adam: eps added to the uncorrected sqrt(v),
    bias correction folded into the step size; no weight decay."""

    def __init__(self, params, o):
        self.params, self.o, self.t = params, o, 0
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self, lr):
        self.t += 1
        b1, b2, eps = self.o["beta1"], self.o["beta2"], self.o["eps"]
        step_size = lr * math.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t)
        grads = [p.grad for p in self.params]
        torch._foreach_mul_(self.m, b1)
        torch._foreach_add_(self.m, grads, alpha=1 - b1)
        torch._foreach_mul_(self.v, b2)
        torch._foreach_addcmul_(self.v, grads, grads, value=1 - b2)
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(self.params, self.m, denom, value=-step_size)


ORIGINAL_ADAM = {"kind": "adam_original", "lr": 1e-4, "min_lr": 1e-5, "warmup_steps": 0, "decay_steps": 10000,
                 "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 1.0}


def load_checkpoint(path):
    """(config, {name: float32 tensor}) from one of our checkpoints (core/train/formats/checkpoint.h)."""
    cfg, raw = read_checkpoint(path)
    flat = torch.frombuffer(bytearray(raw), dtype=torch.float32)
    params, off = {}, 0
    for name, shape in layout(cfg):
        k = math.prod(shape)
        params[name] = flat[off: off + k].view(*shape).clone()
        off += k
    return cfg, params


def layout(cfg):
    """Names and shapes in our buffer order (core/model/params.cpp). Biases of
    the norms only for layernorm, wpe only for learned positions, lm_head
    only when untied; qkv_w holds NH query, KVH key and KVH value heads."""
    cfg = resolve_variant(cfg)
    V, T, L, NH, C, KVH, H = (cfg[k] for k in ("V", "T", "L", "NH", "C", "KVH", "H"))
    HS, ln = C // NH, cfg["norm"] == "layernorm"
    fc = 2 * H if cfg["mlp"] == "swiglu" else H
    out = [("wte", (V, C))] + ([("wpe", (T, C))] if cfg["position"] == "learned" else [])
    for l in range(L):
        out += [(f"h.{l}.ln1_w", (C,))] + ([(f"h.{l}.ln1_b", (C,))] if ln else [])
        out += [(f"h.{l}.qkv_w", ((NH + 2 * KVH) * HS, C)), (f"h.{l}.attn_proj_w", (C, C)),
                (f"h.{l}.attn_proj_b", (C,))]
        out += [(f"h.{l}.ln2_w", (C,))] + ([(f"h.{l}.ln2_b", (C,))] if ln else [])
        out += [(f"h.{l}.fc_w", (fc, C)), (f"h.{l}.fc_b", (fc,)), (f"h.{l}.fc_proj_w", (C, H)),
                (f"h.{l}.fc_proj_b", (C,))]
    out += [("lnf_w", (C,))] + ([("lnf_b", (C,))] if ln else [])
    return out + ([] if cfg["tie"] else [("lm_head", (V, C))])


def bench(a):
    torch.set_num_threads(a.threads)
    cfg, params = load_checkpoint(a.init)
    for p in params.values():
        p.requires_grad_(True)
    plist = list(params.values())
    opt = OriginalAdam(plist, ORIGINAL_ADAM)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, cfg["V"], (a.batch * a.seq + 1,), generator=g)
    x, y = data[:-1].view(a.batch, a.seq), data[1:].view(a.batch, a.seq)
    times = []
    # --bf16: PyTorch's CPU mixed precision (autocast casts the matrix products' inputs to bf16; the weights,
    # their gradients and the optimizer stay fp32), the peer of our train.precision bf16.
    cast = torch.autocast("cpu", dtype=torch.bfloat16) if a.bf16 else contextlib.nullcontext()
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with cast:
            loss = F.cross_entropy(gpt2_forward(params, cfg, x).view(-1, cfg["V"]).float(), y.reshape(-1))
        for p in plist:
            p.grad = None
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plist, ORIGINAL_ADAM["grad_clip"])
        opt.step(lr_at(ORIGINAL_ADAM, s))
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt * 1e3)
    med = statistics.median(times)
    result = {"threads": a.threads, "precision": "bf16 autocast" if a.bf16 else "fp32", "median_ms": med, "min_ms": min(times), "max_ms": max(times),
              "tokens_per_s": a.batch * a.seq / (med / 1e3), "torch": torch.__version__,
              "torch_threads": torch.get_num_threads(), "parallel_info": torch.__config__.parallel_info()}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)
    print(f"peer (PyTorch {torch.__version__}{', bf16 autocast' if a.bf16 else ''}), {a.threads} threads: "
          f"median {med:.1f} ms/step")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="checkpoint with our initial weights (train_step --save-init)")
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (torch.autocast on the CPU)")
    sys.exit(bench(ap.parse_args()))
