#!/usr/bin/env python3
"""Architecture variants (model.arch, norm, position, mlp, n_kv_head, ...) on
real ranks, against the serial run of the same configuration.

The `llama` preset with grouped-query attention (RMSNorm, RoPE, SwiGLU,
2 key/value heads for 4 query heads) trains 10 steps serially, then on
data parallelism, ZeRO-1, tensor parallelism (tp 2: each rank one of the
key/value heads) and pipelines (pp 2 under 1f1b and zb-h1); every layout
must reproduce the serial losses, validation losses and final weights
within 1e-5 (layout_checks.compare). Post-norm with tp 2 likewise. Also:
the checkpoint records the variant and resumes it; the per-layer gradient
norms add up to the global norm; the step records carry the memory by
kind; and the combinations we cannot run are refused with one clear line.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from layout_checks import (LayoutTest, common_args, compare, layouts_equal_serial, load,  # noqa: E402
                           records, refuser)


def main():
    t = LayoutTest(__doc__, "arch_test_")
    a, check, programs, out = t.a, t.check, t.programs, t.out
    run, mpi = programs.run, programs.mpi
    B, T, C, L, NH = 8, 32, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    llama = [*common, "--model.arch", "llama", "--model.n_kv_head", "2"]
    r = t.serial([*llama, "--train.layer_grad_norms", "true"], "llama (n_kv_head 2) serial reference")
    if r.returncode == 0:
        head = load(os.path.join(out("serial"), "checkpoint.bin")).header
        want = {"model.arch": "llama", "model.norm": "rmsnorm", "model.position": "rope", "model.mlp": "swiglu",
                "model.activation": "silu", "model.n_kv_head": "2", "model.mlp_hidden": "176"}
        got = {k: head.get(k) for k in want}
        check("the checkpoint records the resolved variant", got == want, str(got))
        steps = records(out("serial"), "step")
        worst = max(abs(math.sqrt(sum(v * v for v in s["layer_grad_norms"])) - s["grad_norm"]) / s["grad_norm"]
                    for s in steps)
        check("per-layer gradient norms (embeddings, 2 layers, head) add up to the global norm",
              all(len(s["layer_grad_norms"]) == L + 2 for s in steps) and worst < 1e-5, f"worst {worst:.2e} relative")
        n_params = len(load(os.path.join(out("serial"), "checkpoint.bin")).params) // 4
        s0 = steps[0]
        check("step records carry memory by kind (parameters = 4 bytes x the parameter count; moments 2x)",
              s0["mem_params"] == 4 * n_params and s0["mem_moments"] == 8 * n_params and s0["mem_activations"] > 0
              and s0["peak_rss_mb"] > 0, f"{n_params} parameters, record {s0['mem_params']} {s0['mem_moments']} "
              f"{s0['mem_activations']} {s0['peak_rss_mb']}")

    layouts = [
        ("llama on dp 2", 2, "dp2", []),
        ("llama with ZeRO-1 on dp 2", 2, "zero", ["--parallel.zero", "true"]),
        ("llama on tp 2 (one key/value head per rank)", 2, "tp2", ["--parallel.tp", "2"]),
        ("llama on pp 2, m 4, 1f1b", 2, "pp2", ["--parallel.pp", "2", "--parallel.microbatches", "4"]),
        ("llama on pp 2, m 4, zb-h1", 2, "pp2zb", ["--parallel.pp", "2", "--parallel.microbatches", "4",
                                                   "--parallel.schedule", "zb-h1"]),
    ]
    layouts_equal_serial(check, programs, llama, layouts, out)

    # Post-norm with tied embeddings: serial against tp 2.
    post = [*common, "--model.norm_position", "post", "--model.tie_embeddings", "true"]
    r = run([a.serial, "train", *post, "--out", out("post")])
    r2 = mpi(2, [*post, "--parallel.tp", "2", "--out", out("post_tp2")], timeout=600)
    if r.returncode != 0 or r2.returncode != 0:
        check("post-norm, tied embeddings on tp 2", False, (r.stderr + r2.stderr).strip()[-400:])
    else:
        compare(check, "post-norm with tied embeddings on tp 2 equals serial", out("post"), out("post_tp2"))

    # Resume: the llama checkpoint of a 5-step run continues the 10-step curve.
    r = run([a.serial, "train", *llama, "--train.steps", "5", "--out", out("half")])
    r2 = run([a.serial, "train", *llama, "--resume", os.path.join(out("half"), "checkpoint.bin"), "--out",
              out("half")]) if r.returncode == 0 else r
    if r2.returncode != 0:
        check("a llama checkpoint resumes", False, r2.stderr.strip()[-300:])
    else:
        compare(check, "a llama checkpoint resumes (steps 5-9 equal the uninterrupted run)", out("serial"),
                out("half"), first=0)

    error = refuser(check, programs, a, common, out)

    error("tp larger than n_kv_head is refused", 4, ["--model.n_kv_head", "2", "--parallel.tp", "4"],
          "does not divide the 2 key/value heads")
    error("n_kv_head not dividing n_head is refused", 1, ["--model.n_kv_head", "3"], "must divide model.n_head 4",
          serial=True)
    error("tied embeddings across pipeline stages are refused", 2,
          ["--model.tie_embeddings", "true", "--parallel.pp", "2"], "model.tie_embeddings with parallel.pp 2")
    error("post-norm under zb-h1 is refused", 2,
          ["--model.norm_position", "post", "--parallel.pp", "2", "--parallel.schedule", "zb-h1"],
          "with model.norm_position post use gpipe, 1f1b or interleaved-1f1b")
    error("post-norm in private (spd) blocks is refused", 2,
          ["--model.norm_position", "post", "--parallel.tp", "2", "--parallel.block_types", "spd,spd"],
          "model.norm_position post needs tp blocks")
    error("SwiGLU with another activation is refused", 1, ["--model.mlp", "swiglu", "--model.activation", "relu"],
          "SwiGLU gates with silu", serial=True)
    error("an unknown component is refused, naming the choices", 1, ["--model.norm", "batchnorm"],
          "expected auto | layernorm | rmsnorm", serial=True)
    error("original initialisation of a variant is refused", 1, ["--model.arch", "llama", "--model.init", "original"],
          "use philox with another architecture", serial=True)
    error("per-layer gradient norms on a sharded layout are refused", 2,
          ["--parallel.tp", "2", "--train.layer_grad_norms", "true"], "train.layer_grad_norms")
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
