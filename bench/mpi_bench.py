#!/usr/bin/env python3
"""Data-parallel step time on this machine: the MPI stage at R ranks x 1
thread on the original configuration, with one blocking gradient allreduce and
with bucketed allreduce overlapping backward. Reports the median over the
timed steps (the first step is warm-up) of step time, tokens/s and the share
of the step spent in communication, from the stage's own metrics stream.

usage: bench/mpi_bench.py [--build build] [--ranks 1,2] [--steps 6] [--buckets 0,4]
A benchmark, not a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--buckets", default="0,4", help="gradient bucket sizes in MiB; 0 = one allreduce")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mpi = os.path.join(a.build, "stages", "mpi")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    work = tempfile.mkdtemp(prefix="mpi_bench_")
    print(f"{'ranks':>5} {'bucket MiB':>10} {'median ms':>10} {'tokens/s':>9} {'comm ms':>8} {'comm share':>10}")
    for n in map(int, a.ranks.split(",")):
        for bucket in a.buckets.split(",") if n > 1 else ["0"]:
            out = os.path.join(work, f"r{n}-b{bucket}")
            cmd = ["mpiexec", "-n", str(n), mpi, "train", "--config", os.path.join(root, "configs/original.yaml"),
                   "--out", out, "--train.steps", str(a.steps + 1), "--train.threads", "1",
                   "--train.grad_bucket_mb", bucket, "--generate.max_new_tokens", "0"]
            r = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if r.returncode != 0:
                print(f"R={n} failed: {r.stderr[-1000:]}")
                return 1
            with open(os.path.join(out, "metrics.jsonl")) as f:
                steps = [x for x in map(json.loads, f) if x["event"] == "step"][1:]
            ms = statistics.median(x["step_ms"] for x in steps)
            comm = statistics.median(x["comm_ms"] for x in steps)
            tps = statistics.median(x["tokens_per_s"] for x in steps)
            print(f"{n:>5} {bucket:>10} {ms:>10.1f} {tps:>9.0f} {comm:>8.1f} {100 * comm / ms:>9.1f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
