#!/usr/bin/env python3
"""Two builds of the mpi stage side by side (a change's before and after):
the same `train` arguments on RANKS ranks x 1 thread, the builds
alternated, ROUNDS rounds; per run the median step and time in
communication over steps 1.. (step 0 warms up), then the median over the
rounds, and each build's final losses (equal when the change keeps the
arithmetic).

  python3 scripts/mpi_build_ab.py BEFORE AFTER [--ranks 2] [--rounds 3] -- TRAIN ARGS...

BEFORE and AFTER are mpi stage programs (copy build/stages/mpi aside before
rebuilding). Example (docs/context_parallel.md, the ring's overlap):
  python3 scripts/mpi_build_ab.py /tmp/mpi_before build/stages/mpi -- \\
      --config configs/original.yaml --parallel.cp 2 --train.steps 6
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    argv = sys.argv[1:]
    train = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    for b in (a.before, a.after):
        if not os.access(b, os.X_OK):
            sys.exit(f"mpi_build_ab: {b} is not an executable program")
    if a.ranks < 1 or a.rounds < 1:
        sys.exit("mpi_build_ab: --ranks and --rounds must be at least 1")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    builds = {"before": a.before, "after": a.after}
    runs = {name: [] for name in builds}
    with tempfile.TemporaryDirectory(prefix="mpi_build_ab_") as work:
        for r in range(a.rounds):
            for name, program in builds.items():
                out = os.path.join(work, f"{name}_{r}")
                cmd = ["mpiexec", "-n", str(a.ranks), program, "train", *train, "--train.threads", "1",
                       "--generate.max_new_tokens", "0", "--train.save_checkpoint", "false", "--out", out]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"mpi_build_ab: {name} failed (exit {done.returncode}):\n{done.stderr[-800:]}")
                with open(os.path.join(out, "metrics.jsonl")) as f:
                    steps = [s for s in map(json.loads, f) if s.get("event") == "step"]
                timed = steps[1:] or steps
                runs[name].append((statistics.median(s["step_ms"] for s in timed),
                                   statistics.median(s["comm_ms"] for s in timed), [s["loss"] for s in steps]))
                print(f"round {r + 1} {name}: {runs[name][-1][0]:.0f} ms a step", file=sys.stderr, flush=True)
    print("| build | median step (ms) | per round | comm (ms), per round | final loss |")
    print("| --- | ---: | --- | --- | --- |")
    for name, v in runs.items():
        print(f"| {name} | {statistics.median(x[0] for x in v):.0f} | {', '.join(f'{x[0]:.0f}' for x in v)} | "
              f"{', '.join(f'{x[1]:.0f}' for x in v)} | {v[0][2][-1]:.6f} |")
    same = runs["before"][0][2] == runs["after"][0][2]
    print(f"\nlosses {'identical' if same else 'DIFFERENT'} between the builds (round 1)")


if __name__ == "__main__":
    main()
