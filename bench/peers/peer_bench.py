#!/usr/bin/env python3
"""Ours against PyTorch, side by side: the training step of the original
configuration (L6 NH6 C384, T 256, batch 16; forward, backward, clipping and
the original Adam) with the same initial weights, thread count and BLAS
kernels, alternating ours and the peer round by round in one invocation.
Prints per thread count the median over all rounds' timed steps of each, and
the ratio of tokens/s.

usage: bench/peers/peer_bench.py [--build build] [--threads 1,2] [--rounds 3] [--steps 3] [--json OUT]
                                 [--report DIR]   (writes DIR/peer.md and DIR/peer.json)

Both sides run single-pool: ours uses OpenMP with OpenBLAS single-threaded
inside it; the peer gets torch.set_num_threads(N) and OPENBLAS_NUM_THREADS=N
(Debian's torch uses OpenBLAS; as installed its pools fight over the cores).
For both to use the machine's widest BLAS kernels, unset OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE for this command; the report names the kernel that ran.
A benchmark, not a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--report", help="directory for peer.md and peer.json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="peer_bench_")
    train_step = os.path.join(a.build, "bench", "train_step")
    init = os.path.join(work, "init.bin")
    subprocess.run([train_step, "--save-init", init], check=True)
    results = []
    for t in map(int, a.threads.split(",")):
        ours, peer, info = [], [], {}
        for r in range(a.rounds):
            out = os.path.join(work, f"ours-{t}-{r}.json")
            subprocess.run([train_step, "--threads", str(t), "--steps", str(a.steps), "--warmup", "1", "--json", out],
                           check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                o = json.load(f)
            ours.append(o["results"][0]["median_ms"])
            info = o
            out = os.path.join(work, f"peer-{t}-{r}.json")
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t), OMP_NUM_THREADS=str(t))
            subprocess.run(["/usr/bin/python3", os.path.join(HERE, "torch_gpt2.py"), "--init", init, "--threads", str(t),
                            "--steps", str(a.steps), "--warmup", "1", "--json", out], check=True, env=env,
                           stdout=subprocess.DEVNULL)
            with open(out) as f:
                peer.append(json.load(f)["median_ms"])
        om, pm = statistics.median(ours), statistics.median(peer)
        tokens = 16 * 256
        row = {"threads": t, "ours_ms": om, "peer_ms": pm, "ours_tokens_per_s": tokens / om * 1e3,
               "peer_tokens_per_s": tokens / pm * 1e3, "ratio": pm / om, "ours_rounds_ms": ours,
               "peer_rounds_ms": peer, "cpu": info.get("cpu"), "blas_core": info.get("blas_core")}
        results.append(row)
        print(f"{t} thread(s): ours {om:.0f} ms/step ({row['ours_tokens_per_s']:.0f} tok/s), PyTorch {pm:.0f} ms/step "
              f"({row['peer_tokens_per_s']:.0f} tok/s): ours is {row['ratio']:.2f}x  "
              f"[rounds ours {', '.join(f'{x:.0f}' for x in ours)}; peer {', '.join(f'{x:.0f}' for x in peer)}]",
              flush=True)
    print(f"machine: {results[0]['cpu']}, BLAS kernel {results[0]['blas_core']}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.report:
        write_report(a, results, info)
    return 0


def write_report(a, results, info):
    os.makedirs(a.report, exist_ok=True)
    with open(os.path.join(a.report, "peer.json"), "w") as f:
        json.dump({"machine": info, "results": results}, f, indent=1)
    coretype = os.environ.get("OPENBLAS_CORETYPE", "(unset)")
    lines = [
        "# Training step: ours against PyTorch, side by side",
        "",
        "The original configuration (L6 NH6 C384, T 256, batch 16: 4,096 tokens and 277.1 GFLOP per step): forward, "
        "backward, clipping and the original Adam, from the same initial weights, with the same thread count and "
        "BLAS kernels, ours and PyTorch alternating round by round.",
        "",
        f"Measured on {info.get('cpu')} ({info.get('cores')} cores), OpenBLAS kernel `{info.get('blas_core')}` "
        f"(OPENBLAS_CORETYPE={coretype}), {info.get('date')}.",
        "",
        "Reproduce with:",
        "",
        "```sh",
        f"env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 bench/peers/peer_bench.py --threads {a.threads} "
        f"--rounds {a.rounds} --steps {a.steps} --report {a.report}",
        "```",
        "",
        "| threads | ours ms/step (median) | PyTorch ms/step (median) | ours tokens/s | PyTorch tokens/s | ours / PyTorch |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(f"| {r['threads']} | {r['ours_ms']:.0f} | {r['peer_ms']:.0f} | {r['ours_tokens_per_s']:.0f} | "
                     f"{r['peer_tokens_per_s']:.0f} | {r['ratio']:.2f}x |")
    lines += ["", "Per-round medians (ms), ours / PyTorch:", ""]
    for r in results:
        lines.append(f"- {r['threads']} thread(s): {', '.join(f'{x:.0f}' for x in r['ours_rounds_ms'])} / "
                     f"{', '.join(f'{x:.0f}' for x in r['peer_rounds_ms'])}")
    lines += ["", "PyTorch is Debian's 1.13 (`python3-torch`, on OpenBLAS) running `bench/peers/torch_gpt2.py`, "
              "the same model the PyTorch cross-check tests against, with `torch.set_num_threads(N)` and "
              "`OPENBLAS_NUM_THREADS=N` so its two thread pools do not fight over the cores.", ""]
    with open(os.path.join(a.report, "peer.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
