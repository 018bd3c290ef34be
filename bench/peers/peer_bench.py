#!/usr/bin/env python3
"""Ours against PyTorch, side by side: the training step of the original
configuration (L6 NH6 C384, T 256, batch 16; forward, backward, clipping and
the original Adam) with the same initial weights, thread count and BLAS
kernels, alternating ours and the peer round by round in one invocation.
Prints per thread count the median over all rounds' timed steps of each, and
the ratio of tokens/s.

usage: bench/peers/peer_bench.py [--build build] [--threads 1,2] [--rounds 3] [--steps 3] [--json OUT]

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
