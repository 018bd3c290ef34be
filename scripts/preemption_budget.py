#!/usr/bin/env python3
"""The preemption budget of a configuration: how long a training run takes from
SIGTERM to its exit, its checkpoint written (docs/guarantees.md, "Signals and
preemption"). Each try starts `train` into a fresh folder, waits until it has
recorded --after steps, then a random part of a step more, sends SIGTERM (to
the program, or to mpiexec with --ranks), and reports the seconds to the
exit as this script saw them and as the run's preempted record says.

usage: preemption_budget.py --config FILE [--stage PATH] [--ranks N]
                            [--mpiexec PATH] [--after N] [--tries K]
                            [--work DIR] [-- extra train options]

Prints one line per try and the range; exit 0 when every try stopped with
status 4 (or 0 under MPICH's mpiexec, pmodels/mpich#7057) and its record.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def steps_in(d):
    try:
        with open(os.path.join(d, "metrics.jsonl.partial")) as f:
            return [json.loads(x) for x in f if '"event":"step"' in x]
    except (OSError, ValueError):
        return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="the run's YAML configuration")
    ap.add_argument("--stage", default="build/stages/serial", help="the stage program [default: build/stages/serial]")
    ap.add_argument("--ranks", type=int, default=0, help="run under mpiexec with this many ranks [default: none]")
    ap.add_argument("--mpiexec", default="mpiexec", help="[default: mpiexec]")
    ap.add_argument("--after", type=int, default=2, help="steps recorded before the signal [default: 2]")
    ap.add_argument("--tries", type=int, default=3, help="[default: 3]")
    ap.add_argument("--seed", type=int, default=None, help="the random moments' seed [default: printed]")
    ap.add_argument("--work", default=None, help="folder for the runs [default: a new temporary one, removed]")
    ap.add_argument("extra", nargs="*", help="more train options (after --)")
    a = ap.parse_args()
    if not (0 <= a.ranks <= 64 and 1 <= a.after <= 10000 and 1 <= a.tries <= 100):
        ap.error("--ranks 0-64, --after 1-10000, --tries 1-100")
    for path, what in ((a.config, "--config"), (a.stage, "--stage")):
        if not os.path.isfile(path):
            ap.error(f"{what}: '{path}' is not a file")
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rnd = random.Random(seed)
    work = a.work or tempfile.mkdtemp(prefix="preemption_budget_")
    if a.work and os.path.exists(work) and os.listdir(work):
        ap.error(f"--work: '{work}' is not empty")
    os.makedirs(work, exist_ok=True)
    cmd = ([a.mpiexec, "-n", str(a.ranks)] if a.ranks else []) + [a.stage, "train", "--config", a.config, *a.extra]
    print(f"preemption_budget: {' '.join(cmd)}; SIGTERM after {a.after} steps and a random part of the next "
          f"(seed {seed})", flush=True)
    seen, ok = [], True
    for t in range(a.tries):
        d = os.path.join(work, f"try_{t}")
        p = subprocess.Popen([*cmd, "--out", d], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        while p.poll() is None and len(steps_in(d)) < a.after:
            time.sleep(0.01)
        done = steps_in(d)
        if p.poll() is not None or not done:
            print(f"try {t + 1}: the run ended before {a.after} steps: {p.stderr.read()[-300:]}")
            ok = False
            continue
        time.sleep(rnd.uniform(0, 1) * done[-1]["step_ms"] / 1000)
        t0 = time.time()
        os.kill(p.pid, signal.SIGTERM)
        p.communicate()
        wall = time.time() - t0
        stops = []
        with open(os.path.join(d, "metrics.jsonl.partial")) as f:
            stops = [json.loads(x) for x in f if '"event":"preempted"' in x]
        good = p.returncode in ((4, 0) if a.ranks else (4,)) and len(stops) == 1
        ok = ok and good
        if good:
            seen.append(wall)
        print(f"try {t + 1}: exit {p.returncode}, {wall:.2f} s from SIGTERM to the exit"
              + (f" (the record: {stops[0]['signal_to_exit_s']:.2f} s, after step {stops[0]['step']}, step "
                 f"{'abandoned' if stops[0].get('abandoned_step') else 'finished'}; a step took "
                 f"{done[-1]['step_ms'] / 1000:.2f} s)" if stops else " (no preempted record)"), flush=True)
    if seen:
        print(f"preemption_budget: {min(seen):.2f}-{max(seen):.2f} s over {len(seen)} tries")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
