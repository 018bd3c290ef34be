#!/usr/bin/python3
"""Tensor parallelism against PyTorch: Megatron and the sync-reduced blocks.

Runs our engine's tensor-parallel exporter (export_tp) under mpiexec and an
independent float64 PyTorch implementation of the same functions on the same
initial weights and batches, and compares every step's loss, every step's
gradient norm and the weights after the last step, for several block-type
lists at P = 2 tensor-parallel ranks and one P = 2 x dp = 2 case.

The functions (P shards; shard i holds heads [i*NH/P, (i+1)*NH/P), i.e. its
rows of q, k and v in qkv_w, its columns of attn_proj_w, its rows of fc_w and
fc_b and its columns of fc_proj_w):
  * 'tp' (Megatron): the standard GPT-2 block. Computed here as the sum over
    shards of their partial projections plus the bias, as the ranks do.
  * private runs: each 'spd' layer is a run; a maximal sequence of
    consecutive 'parallel' layers is one run. Over a run with input x, each
    shard i carries its own stream s_i (starting at x) through the run's
    layers using only its own heads and MLP columns:
        a_i = attn_i(LN1(s_i)) @ Wproj_i^T            (no bias)
        u_i = s_i + a_i + b_proj
        m_i = gelu(LN2(u_i) @ Wfc_i^T + b_fc_i) @ Wfcproj_i^T   (no bias)
        s_i = u_i + m_i + b_fcproj;   D_i += a_i + m_i
    and the run's output is x + sum_i D_i + sum over its layers of
    (b_proj + b_fcproj): one all-reduce per run instead of two per layer.
The leaves of the autograd graph are the full tensors; the shards are slices
of them, so each gradient lands in the full tensor as the ranks' gathered
shards (and the sum over shards for replicated tensors) must.

PyTorch runs in float64, so the differences measured are our float32 engine's
rounding alone. Tolerances (why these numbers):
  * losses: 1e-5 relative on every step (the issue's "equal within 1e-5 for
    5 steps"); the float32 forward through L layers of K-term products
    (K <= 4C) gives a few 1e-6, as torch_crosscheck measures without TP.
  * gradient norms: 1e-4 relative. On step 0 the whole gradient agrees within
    1e-5 in 2-norm (torch_crosscheck), which bounds the norm's error; later
    steps start from weights already apart by up to the weight tolerance.
    Adam is invariant to a uniform scale of the gradient (and clipping to 1
    with it), so a reduction that sums instead of averaging over dp, or
    counts a replicated tensor's gradient P times, leaves the losses and the
    weights almost unchanged: this check is what catches it.
  * weights after the steps: 1e-4 absolute, as torch_crosscheck: a gradient
    element that is pure rounding noise moves its weight by a full Adam step
    (lr = 1e-4) either way; an error in a formula shifts every step of every
    weight and the loss check catches it.

Modes:
  --exporter PATH --mpiexec PATH [--steps 5] [--case P:DP:blocks ...]
        run the exporter for each case (default: the five below) and compare
  --manifest DIR [DIR ...]   check existing export directories only
  --self-test                checks of this reference that need no exporter
Exit status: 0 all agree, 1 a mismatch or a failed exporter run (the worst
element is printed), 77 (skipped) if torch cannot be imported.
"""
import argparse
import math
import os
import signal
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print(f"tp_torch_reference: skipped: {e} (install python3-torch)")
    sys.exit(77)

# The PyTorch GPT-2, optimizers and schedule (shared with the peer benchmark),
# and the export reader of the whole-model check.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench", "peers"))
sys.path.insert(0, HERE)
from torch_gpt2 import ORIGINAL_ADAM, gpt2_forward, layout  # noqa: E402
from checks import Checks  # noqa: E402
from torch_crosscheck import load, train  # noqa: E402

torch.set_default_dtype(torch.float64)

BLOCK_TYPES = ("tp", "spd", "parallel")
EXPORT_TIMEOUT_S = 120
# The default cases: (P, dp, block types), small preset, 4 layers, batch 4.
MIX = ["tp", "parallel", "parallel", "spd"]
DEFAULT_CASES = [(2, 1, ["spd"] * 4), (2, 1, ["parallel"] * 4), (2, 1, MIX),
                 (2, 1, ["parallel", "spd", "tp", "parallel"]), (2, 2, MIX)]


# ---------------------------------------------------------------------------
# The tensor-parallel model
# ---------------------------------------------------------------------------

def block_runs(block_types):
    """[(kind, [layers])]: each 'tp' and each 'spd' layer alone; consecutive
    'parallel' layers grouped into one run."""
    runs = []
    for l, kind in enumerate(block_types):
        if kind not in BLOCK_TYPES:
            raise ValueError(f"unknown block type {kind!r} (expected one of {', '.join(BLOCK_TYPES)})")
        if kind == "parallel" and l > 0 and block_types[l - 1] == "parallel":
            runs[-1][1].append(l)
        else:
            runs.append((kind, [l]))
    return runs


def shard(p, l, C, P, i):
    """Layer l's weights held by shard i of P: slices (views) of the full
    tensors, so autograd puts their gradients into the full tensors."""
    c, f = C // P, 4 * C // P
    w = lambda s: p[f"h.{l}.{s}"]
    qkv = w("qkv_w")
    return {
        # The shard's rows of the q block, then the same rows of k and of v.
        "qkv_w": torch.cat([qkv[j * C + i * c: j * C + (i + 1) * c] for j in range(3)]),
        "attn_proj_w": w("attn_proj_w")[:, i * c:(i + 1) * c],
        "fc_w": w("fc_w")[i * f:(i + 1) * f],
        "fc_b": w("fc_b")[i * f:(i + 1) * f],
        "fc_proj_w": w("fc_proj_w")[:, i * f:(i + 1) * f],
    }


def shard_attn(h, s, heads, mask):
    """Causal attention over one shard's heads of the normalised input h
    (B,T,C), through the shard's columns of the output projection, no bias:
    the shard's partial sum of the projection, (B,T,C)."""
    B, T, _ = h.shape
    c = s["qkv_w"].shape[0] // 3  # C/P: the shard's width of q, k and v
    hs = c // heads
    q, k, v = (h @ s["qkv_w"].T).split(c, dim=2)
    q, k, v = (t.view(B, T, heads, hs).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, c)
    return y @ s["attn_proj_w"].T


def shard_mlp(h, s):
    """One shard's columns of the MLP on the normalised input h, through its
    columns of fc_proj, no output bias: its partial sum, (B,T,C)."""
    return F.gelu(h @ s["fc_w"].T + s["fc_b"], approximate="tanh") @ s["fc_proj_w"].T


def megatron_block(p, l, x, shards, heads, mask):
    """'tp': the standard block, each projection the sum of the shards'
    partial projections (the all-reduce) plus the bias."""
    w = lambda s: p[f"h.{l}.{s}"]
    C = x.shape[-1]
    h = F.layer_norm(x, (C,), w("ln1_w"), w("ln1_b"), eps=1e-5)
    x = x + sum(shard_attn(h, s, heads, mask) for s in shards) + w("attn_proj_b")
    h = F.layer_norm(x, (C,), w("ln2_w"), w("ln2_b"), eps=1e-5)
    return x + sum(shard_mlp(h, s) for s in shards) + w("fc_proj_b")


def private_run(p, layers, x, shards_of, heads, mask):
    """A run of 'spd' / 'parallel' layers: each shard carries its own stream
    through all the run's layers; one reduction of the streams' updates at
    the end, the biases added once there."""
    C, P = x.shape[-1], len(shards_of[layers[0]])
    streams = [x] * P
    updates = [torch.zeros_like(x) for _ in range(P)]
    biases = 0
    for l in layers:
        w = lambda s: p[f"h.{l}.{s}"]
        for i in range(P):
            s_i = shards_of[l][i]
            a = shard_attn(F.layer_norm(streams[i], (C,), w("ln1_w"), w("ln1_b"), eps=1e-5), s_i, heads, mask)
            u = streams[i] + a + w("attn_proj_b")
            m = shard_mlp(F.layer_norm(u, (C,), w("ln2_w"), w("ln2_b"), eps=1e-5), s_i)
            streams[i] = u + m + w("fc_proj_b")
            updates[i] = updates[i] + a + m
        biases = biases + w("attn_proj_b") + w("fc_proj_b")
    return x + sum(updates) + biases


def tp_forward(p, cfg, tokens, block_types, P):
    """tokens (B,T) -> logits (B,T,V) of the model with the given per-layer
    block types at P tensor-parallel shards. p: name -> full tensor."""
    L, NH, C = cfg["L"], cfg["NH"], cfg["C"]
    if len(block_types) != L:
        raise ValueError(f"{len(block_types)} block types for {L} layers")
    if NH % P or (4 * C) % P:
        raise ValueError(f"P = {P} does not divide NH = {NH} heads and 4C = {4 * C}")
    B, T = tokens.shape
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    shards_of = [[shard(p, l, C, P, i) for i in range(P)] for l in range(L)]
    heads = NH // P
    x = p["wte"][tokens] + p["wpe"][:T]
    for kind, layers in block_runs(block_types):
        if kind == "tp":
            x = megatron_block(p, layers[0], x, shards_of[layers[0]], heads, mask)
        else:
            x = private_run(p, layers, x, shards_of, heads, mask)
    x = F.layer_norm(x, (C,), p["lnf_w"], p["lnf_b"], eps=1e-5)
    return x @ p["lm_head"].T


# ---------------------------------------------------------------------------
# Checking an export
# ---------------------------------------------------------------------------

def check_export(check, directory, expect=None):
    """Compares one export directory with the reference: one check, its line
    followed by one line per comparison. expect: (P, dp, block_types) the run
    was asked for, checked against the manifest."""
    manifest, arr = load(directory)
    cfg, o, B, T = manifest["config"], manifest["optimizer"], manifest["B"], manifest["seq"]
    P, dp, block_types = manifest["tp"], manifest["dp"], manifest["block_types"]
    names, steps = manifest["params"], manifest["steps"]
    title = (f"P={P} dp={dp} [{','.join(block_types)}] (V{cfg['V']} T{T} L{cfg['L']} NH{cfg['NH']} "
             f"C{cfg['C']}), B={B}, {o['kind']}")
    if expect is not None and (P, dp, list(block_types)) != (expect[0], expect[1], list(expect[2])):
        check(title, False, "the manifest does not describe the run asked for: "
                            f"P={expect[0]} dp={expect[1]} [{','.join(expect[2])}]")
        return
    if [n for n, _ in layout(cfg)] != list(names):
        check(title, False, "the manifest's parameter names are not our layout's")
        return

    params = {n: torch.tensor(arr["param." + n].astype(np.float64), requires_grad=True) for n in names}
    batches = torch.tensor(arr["batches"].astype(np.int64))
    losses, norms = train(params, names, cfg, o, batches, B, T, steps,
                          lambda q, x: tp_forward(q, cfg, x, block_types, P))
    lines, ok_all = [], True

    def record(ok, line):
        nonlocal ok_all
        ok_all &= bool(ok)
        lines.append(f"  {'ok  ' if ok else 'FAIL'} {line}")

    # Per-step relative differences: losses, then gradient norms.
    for label, ours, ref, tol in (("losses", arr["losses"], losses, 1e-5),
                                  ("gradient norms", arr["grad_norms"], norms, 1e-4)):
        rel = np.abs(ours.astype(np.float64) - ref) / np.abs(ref)
        s = int(np.argmax(rel))
        record(rel[s] <= tol, f"{steps}-step {label}: max relative diff {rel[s]:.3e} at step {s} "
                              f"(ours {ours[s]:.8g}, torch {ref[s]:.8g}), tolerance {tol:.0e}")
    # Final weights: the worst element over all tensors, named.
    worst_name, worst_i, worst_d = None, 0, -1.0
    for n in names:
        d = np.abs(arr["final." + n].astype(np.float64) - params[n].detach().numpy())
        i = int(np.argmax(d))
        if d.flat[i] > worst_d:
            worst_name, worst_i, worst_d = n, i, float(d.flat[i])
    ours_w = arr["final." + worst_name].flat[worst_i]
    ref_w = params[worst_name].detach().numpy().flat[worst_i]
    record(worst_d <= 1e-4, f"weights after {steps} steps: max |diff| {worst_d:.3e} in {worst_name}[{worst_i}] "
                            f"(ours {ours_w:.8g}, torch {ref_w:.8g}), tolerance 1e-04")
    check(title, ok_all, f"losses ours {' '.join(f'{v:.5f}' for v in arr['losses'])}")
    print("\n".join(lines))


def run_exporter(args, P, dp, block_types, out):
    """Runs the exporter under mpiexec with R = P*dp ranks into out; returns
    None on success, else a message. A hang is ended after EXPORT_TIMEOUT_S:
    mpiexec runs in its own session, so its whole process group (mpiexec and
    the ranks it started) can be ended without touching anything else."""
    cmd = [args.mpiexec, "-n", str(P * dp), args.exporter, "--out", out, "--tp", str(P),
           "--blocks", ",".join(block_types), "--preset", "small", "--layers", str(len(block_types)),
           "--batch", str(args.batch), "--steps", str(args.steps), "--seed", "1337",
           "--optimizer", args.optimizer]
    # One thread per rank (R may exceed the cores); the two OpenMPI variables
    # let its mpiexec run as root in CI containers (MPICH ignores them).
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMP_WAIT_POLICY", "passive")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=EXPORT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                output, _ = proc.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                output = ""
        return f"timed out after {EXPORT_TIMEOUT_S} s: {' '.join(cmd)}\n{output[-2000:]}"
    if proc.returncode != 0:
        return f"exit status {proc.returncode}: {' '.join(cmd)}\n{output[-2000:]}"
    return None


def parse_case(text):
    """'P:DP:blocks' (blocks comma-separated) -> (P, dp, [block types])."""
    try:
        p, dp, blocks = text.split(":")
        case = (int(p), int(dp), blocks.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected P:DP:blocks, e.g. 2:1:tp,spd,parallel,parallel")
    try:
        block_runs(case[2])  # validates the names
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}")
    return case


# ---------------------------------------------------------------------------
# Self-test: properties of the reference itself, no exporter needed
# ---------------------------------------------------------------------------

def random_params(cfg, seed, std=0.2):
    """Random weights large enough (std 0.2) that the block types' differences
    show; layer-norm gains around 1."""
    g = torch.Generator().manual_seed(seed)
    p = {}
    for n, shape in layout(cfg):
        t = std * torch.randn(*shape, generator=g)
        p[n] = (1 + t if n.endswith(("ln1_w", "ln2_w", "lnf_w")) else t).requires_grad_(True)
    return p


def self_test():
    cfg = {"V": 64, "T": 32, "L": 4, "NH": 4, "C": 64}
    B, T = 2, cfg["T"]
    p = random_params(cfg, seed=1)
    names = [n for n, _ in layout(cfg)]
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, cfg["V"], (B, T + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    check = Checks()

    def logits_and_grads(forward):
        for q in p.values():
            q.grad = None
        logits = forward(p, x)
        F.cross_entropy(logits.reshape(-1, cfg["V"]), y.reshape(-1)).backward()
        return logits.detach(), {n: p[n].grad.clone() for n in names}

    def max_diff(a, b):
        return (a - b).abs().max().item()

    def same(title, forward, ref_forward, tol=1e-12):
        """forward equals ref_forward: logits within tol of the largest logit,
        every gradient within tol of its tensor's largest element."""
        la, ga = logits_and_grads(forward)
        lb, gb = logits_and_grads(ref_forward)
        dl = max_diff(la, lb) / max(1.0, lb.abs().max().item())
        dg = max(max_diff(ga[n], gb[n]) / max(gb[n].abs().max().item(), 1e-300) for n in names)
        check(title, dl <= tol and dg <= tol,
              f"logits rel. diff {dl:.1e}, gradients rel. diff {dg:.1e} (tolerance {tol:.0e})")

    def differ(title, forward, ref_forward, floor=1e-3):
        """forward and ref_forward give clearly different logits."""
        d = max_diff(logits_and_grads(forward)[0], logits_and_grads(ref_forward)[0])
        check(title, d > floor, f"max |logit diff| {d:.3f} (must exceed {floor:.0e})")

    standard = lambda q, t: gpt2_forward(q, cfg, t)
    tp = lambda blocks, P: (lambda q, t: tp_forward(q, cfg, t, blocks, P))
    mix = ["tp", "parallel", "parallel", "spd"]
    print(f"self-test: random weights (std 0.2), V{cfg['V']} T{T} L{cfg['L']} NH{cfg['NH']} C{cfg['C']}, B={B}")
    # (a) One shard: every private run is the standard blocks.
    for blocks in (["tp"] * 4, ["spd"] * 4, ["parallel"] * 4, mix, ["parallel", "spd", "tp", "parallel"]):
        same(f"(a) P=1 [{','.join(blocks)}] equals torch_gpt2", tp(blocks, 1), standard)
    # (b) Megatron sharding does not change the function.
    for P in (2, 4):
        same(f"(b) P={P} [tp]*4 equals torch_gpt2", tp(["tp"] * 4, P), standard)
    # (c) A 'parallel' run of length one is an 'spd' block.
    same("(c) P=2 [parallel,spd,tp,parallel] equals [spd,spd,tp,spd]",
         tp(["parallel", "spd", "tp", "parallel"], 2), tp(["spd", "spd", "tp", "spd"], 2))
    # (d) ... but the private blocks are another function at P > 1,
    differ("(d) P=2 [spd]*4 differs from torch_gpt2", tp(["spd"] * 4, 2), standard)
    # (e) and a run of two 'parallel' layers is not two 'spd' blocks.
    differ("(e) P=2 [parallel]*4 differs from [spd]*4", tp(["parallel"] * 4, 2), tp(["spd"] * 4, 2))
    # (f) The training loop (optimizer, clipping, schedule) at P=1 with private
    #     runs follows torch_gpt2's model step by step.
    batches = torch.randint(0, cfg["V"], (3, B * T + 1), generator=g)
    finals = []
    for forward in (tp(mix, 1), standard):
        q = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
        losses, norms = train(q, names, cfg, ORIGINAL_ADAM, batches, B, T, 3, forward)
        finals.append((losses, norms, torch.cat([q[n].detach().ravel() for n in names])))
    dl = np.abs(finals[0][0] - finals[1][0]).max()
    dn = np.abs(finals[0][1] - finals[1][1]).max() / finals[1][1].max()
    dw = max_diff(finals[0][2], finals[1][2])
    check(f"(f) P=1 [{','.join(mix)}] 3 adam_original steps equal torch_gpt2's",
          dl <= 1e-12 and dn <= 1e-12 and dw <= 1e-12,
          f"losses {' '.join(f'{v:.5f}' for v in finals[0][0])}, max diff loss {dl:.1e}, "
          f"grad norm {dn:.1e}, weight {dw:.1e} (tolerance 1e-12)")
    return check.finish()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exporter", help="path to the export_tp program")
    ap.add_argument("--mpiexec", help="path to mpiexec")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4, help="global batch of each case")
    ap.add_argument("--optimizer", default="adam_original", choices=["adam_original", "adamw"])
    ap.add_argument("--case", type=parse_case, action="append",
                    help="P:DP:blocks, e.g. 2:2:tp,parallel,parallel,spd (repeatable; default: the standard five)")
    ap.add_argument("--manifest", nargs="+", metavar="DIR", help="check existing export directories instead")
    ap.add_argument("--self-test", action="store_true", help="check the reference itself (no exporter)")
    args = ap.parse_args()

    if args.self_test:
        return self_test()
    check = Checks()
    if args.manifest:
        for d in args.manifest:
            check_export(check, d)
    else:
        if not args.exporter or not args.mpiexec:
            ap.error("--exporter and --mpiexec are required (or --manifest DIR, or --self-test)")
        with tempfile.TemporaryDirectory(prefix="tp_ref_") as work:
            for n, (P, dp, blocks) in enumerate(args.case or DEFAULT_CASES):
                out = os.path.join(work, f"case{n}")
                os.makedirs(out)
                error = run_exporter(args, P, dp, blocks, out)
                if error:
                    check(f"P={P} dp={dp} [{','.join(blocks)}]", False, f"the exporter run: {error}")
                else:
                    check_export(check, out, expect=(P, dp, blocks))
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
