#!/usr/bin/env python3
"""What a training checkpoint costs a configuration (docs/formats.md, "Sharded
checkpoints"): for each mode (sync: the loop writes; async: a snapshot, written
in the background; file: one gathered file), a run of --steps steps saving
after every step, then a resume of its first checkpoint for one step. From the
runs' own log lines it reports the seconds each save kept the loop waiting,
the resident set per rank before each save and its peak during it, and the
peak per rank while resuming; from the summary, each rank's counted model
state (parameters, gradients and moments held).

usage: checkpoint_cost.py --config FILE [--stage PATH] [--ranks N] [--steps N]
                          [--modes sync,async,file] [--work DIR] [-- extra train options]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def notes(text, pattern):
    return [m.groups() for m in re.finditer(pattern, text)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--stage", default="build/stages/serial")
    ap.add_argument("--ranks", type=int, default=0, help="under mpiexec with this many ranks [default: none]")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--steps", type=int, default=3, help="steps, each followed by a save [default: 3]")
    ap.add_argument("--modes", default="sync,async", help="comma-separated: sync, async, file [default: sync,async]")
    ap.add_argument("--work", default=None, help="folder for the runs [default: a temporary one, removed]")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="checkpoint_cost_")
    launch = [a.mpiexec, "-n", str(a.ranks), a.stage] if a.ranks else [a.stage]
    mode_args = {"sync": ["--train.checkpoint_format", "sharded"],
                 "async": ["--train.checkpoint_format", "sharded", "--train.async_checkpoint", "true"],
                 "file": ["--train.checkpoint_format", "file"]}
    print(f"checkpoint_cost: {' '.join(launch)} train --config {a.config} {' '.join(a.extra)}; {a.steps} steps, "
          f"a save after each", flush=True)
    try:
        for mode in a.modes.split(","):
            run = os.path.join(work, mode)
            args = ["--config", a.config, *a.extra, "--train.steps", str(a.steps), "--train.checkpoint_every", "1",
                    "--train.keep_checkpoints", str(a.steps), *mode_args[mode]]
            t0 = time.time()
            r = subprocess.run([*launch, "train", *args, "--out", run], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{mode}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
                return 1
            log = r.stdout + r.stderr
            saves = notes(log, r"checkpoint after step (\d+): \S+ \(([\d.]+) s in the loop(?:, ([\d.]+) s of it the snapshot)?; resident set per rank "
                               r"before it, MB: ([\d ]+); its peak during it: ([\d ]+)\)")
            done = notes(log, r"checkpoint after step (\d+) complete: (.*)")
            with open(os.path.join(run, "metrics.jsonl")) as f:
                summary = [json.loads(x) for x in f if '"event":"summary"' in x][0]
            state = [round(m["model_state_bytes"] / 1e6) for m in summary["provenance"]["memory"]]
            step_s = [json.loads(x)["step_ms"] / 1000 for x in open(os.path.join(run, "metrics.jsonl"))
                      if '"event":"step"' in x]
            print(f"{mode}: {time.time() - t0:.1f} s; step times {' '.join(f'{s:.2f}' for s in step_s)} s; counted "
                  f"model state per rank, MB: {' '.join(map(str, state))}")
            for step, wait, snap, before, peak in saves:
                snap = f" ({float(snap):.3f} s the snapshot copy)" if snap else ""
                print(f"  save after step {step}: {float(wait):.3f} s in the loop{snap}; resident set per rank before, "
                      f"MB: {before.strip()}; peak during: {peak.strip()}")
            for step, what in done:
                print(f"  save after step {step} complete: {what}")
            if mode == "file":
                continue
            first = os.path.join(run, "checkpoints")
            folders = sorted(os.listdir(first))
            res = os.path.join(work, mode + "_resumed")
            r = subprocess.run([*launch, "train", *args, "--train.steps", "2", "--train.save_checkpoint", "false", "--resume",
                                os.path.join(first, folders[0]), "--out", res], capture_output=True, text=True)
            peak = notes(r.stdout + r.stderr, r"resumed at step (\d+): peak resident set while starting .* MB: ([\d ]+)")
            print(f"  resume of {folders[0]}: exit {r.returncode}; peak resident set per rank while starting, MB: "
                  f"{peak[0][1].strip() if peak else '?'}")
            shutil.rmtree(run, ignore_errors=True)
            shutil.rmtree(res, ignore_errors=True)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
