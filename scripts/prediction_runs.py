#!/usr/bin/env python3
"""Measures training steps on this machine beside the step-time model's predictions (docs/prediction.md).

Each layout below trains --steps steps with the stage programs (1 thread a rank unless the layout says
otherwise); its measured step is the median of its steps' step_ms after the first (warm-up). The same
configuration's `plan --machine FILE` gives the predicted step. Writes --out (JSON: the machine file, every
run's command, measured and predicted milliseconds and the bound the test holds it to) and prints a
Markdown table. The runs are sequential; nothing else should run meanwhile.

usage: scripts/prediction_runs.py --machine machines/NAME.yaml --out tests/data/prediction_runs.json
                                  [--steps 8] [--build build] [--bound 0.15]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ORIGINAL = "configs/original.yaml"
SMALL = ["--model.block_size", "64", "--model.n_layer", "4", "--model.n_head", "4", "--model.n_embd", "128",
         "--train.batch_size", "16", "--train.seq_len", "64"]
PP = ["--parallel.pp", "2", "--parallel.microbatches", "4"]

# name, ranks, config, settings
LAYOUTS = [
    ("original, serial, 1 thread", 1, ORIGINAL, ["--train.threads", "1"]),
    ("original, serial, 2 threads", 1, ORIGINAL, ["--train.threads", "2"]),
    ("original, serial deterministic, 1 thread", 1, ORIGINAL, ["--train.threads", "1",
                                                              "--train.deterministic", "true"]),
    ("original, dp 2", 2, ORIGINAL, ["--train.threads", "1"]),
    ("original, tp 2", 2, ORIGINAL, ["--train.threads", "1", "--parallel.tp", "2"]),
    ("original, pp 2 1f1b m 4", 2, ORIGINAL, ["--train.threads", "1", *PP]),
    ("original, pp 2 zb-h1 m 4", 2, ORIGINAL, ["--train.threads", "1", *PP, "--parallel.schedule", "zb-h1"]),
    ("original, dp 2 ZeRO-1", 2, ORIGINAL, ["--train.threads", "1", "--parallel.zero", "1"]),
    ("small (L4 C128 T64), serial", 1, ORIGINAL, ["--train.threads", "1", *SMALL]),
    ("small (L4 C128 T64), dp 2", 2, ORIGINAL, ["--train.threads", "1", *SMALL]),
    ("small (L4 C128 T64), pp 2 1f1b m 4", 2, ORIGINAL, ["--train.threads", "1", *SMALL, *PP]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--build", default="build")
    ap.add_argument("--bound", type=float, default=0.15)
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    serial, mpi = os.path.join(a.build, "stages", "serial"), os.path.join(a.build, "stages", "mpi")
    rows, runs = [], []
    with tempfile.TemporaryDirectory(prefix="prediction_runs_") as work:
        for k, (name, ranks, config, settings) in enumerate(LAYOUTS):
            common = ["--config", os.path.join(repo, config), *settings]
            stage = "serial" if ranks == 1 else "mpi"
            out = os.path.join(work, f"run{k}")
            train = [serial] if ranks == 1 else ["mpiexec", "-n", str(ranks), mpi]
            r = subprocess.run([*train, "train", *common, "--train.steps", str(a.steps), "--generate.max_new_tokens",
                                "0", "--train.save_checkpoint", "false", "--out", out],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{name}: training failed: {r.stderr[-500:]}")
            with open(os.path.join(out, "metrics.jsonl")) as f:
                steps = [json.loads(line) for line in f]
            times = [s["step_ms"] for s in steps if s.get("event") == "step" and s["step"] > 0]
            measured = statistics.median(times)
            p = subprocess.run([serial if ranks == 1 else mpi, "plan", *common, "--ranks", str(ranks), "--stage",
                                stage, "--machine", a.machine], capture_output=True, text=True)
            if p.returncode != 0:
                sys.exit(f"{name}: plan failed: {p.stderr[-500:]}")
            predicted = json.loads(p.stdout)["time"]["step_s"] * 1e3
            error = (predicted - measured) / measured
            print(f"{name}: measured {measured:.1f} ms, predicted {predicted:.1f} ms ({error:+.1%})", flush=True)
            rows.append((name, ranks, measured, predicted, error))
            runs.append({"name": name, "ranks": ranks, "config": config, "set": settings,
                         "measured_step_ms": round(measured, 3), "measured_steps": [round(t, 3) for t in times],
                         "predicted_step_ms": round(predicted, 3), "bound": a.bound})
    with open(a.out, "w") as f:
        json.dump({"machine": os.path.relpath(os.path.abspath(a.machine), repo),
                   "command": " ".join(["scripts/prediction_runs.py", *sys.argv[1:]]),
                   "steps": a.steps, "runs": runs}, f, indent=1)
        f.write("\n")
    print("\n| layout | ranks | measured ms | predicted ms | error |\n|---|---:|---:|---:|---:|")
    for name, ranks, m, p, e in rows:
        print(f"| {name} | {ranks} | {m:.1f} | {p:.1f} | {e:+.1%} |")


if __name__ == "__main__":
    main()
