#!/usr/bin/env python3
"""The OpenMP wait policy the programs choose (kernels/cpu/omp_wait.h): with
neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set a stage (serial, and mpi under
mpiexec: the program re-executes itself before MPI_Init) and a tool
(train_step) run with a short spin and record "GOMP_SPINCOUNT=300 (engine)";
a policy set by the user is kept and recorded as the environment's.

usage: omp_wait_test.py --serial SERIAL --train-step TRAIN_STEP [--mpi MPI --mpiexec MPIEXEC]
Prints one line per case and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from checks import Checks

TINY = ["--model.block_size", "16", "--model.n_layer", "1", "--model.n_head", "2", "--model.n_embd", "16",
        "--train.batch_size", "2", "--train.seq_len", "16", "--train.steps", "1", "--train.threads", "2",
        "--train.peak_gflops", "10", "--generate.max_new_tokens", "0"]


def env_with(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                                            "GPT2_OMP_WAIT_POLICY", "OMP_DISPLAY_ENV")}
    env.update(extra)
    return env


def stage_policy(cmd, out, env):
    """The run's recorded policy, and what libgomp said it runs with (OMP_DISPLAY_ENV)."""
    r = subprocess.run(cmd + ["--out", out], env=dict(env, OMP_DISPLAY_ENV="verbose"), capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        return None, r.stderr[-800:]
    with open(os.path.join(out, "metrics.jsonl")) as f:
        summary = [json.loads(line) for line in f if '"summary"' in line][-1]
    shown = [x.strip() for x in r.stderr.splitlines() if "OMP_WAIT_POLICY =" in x or "GOMP_SPINCOUNT =" in x]
    return summary["provenance"]["omp_wait_policy"], shown[-2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serial", required=True)
    ap.add_argument("--train-step", required=True)
    ap.add_argument("--mpi")
    ap.add_argument("--mpiexec")
    a = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    corpus = ["--config", os.path.join(repo, "configs", "small.yaml")]
    work = tempfile.mkdtemp(prefix="omp_wait_test_")
    check = Checks(passes="title")

    serial = [os.path.abspath(a.serial), "train"] + corpus + TINY
    got, shown = stage_policy(serial, os.path.join(work, "engine"), env_with())
    # libgomp prints its settings once per start: the last lines are the re-executed program's.
    check("serial, nothing set: a short spin, chosen by the engine", got == "GOMP_SPINCOUNT=300 (engine)"
          and "GOMP_SPINCOUNT = '300'" in shown, f"{got} / {shown}")
    got, shown = stage_policy(serial, os.path.join(work, "active"), env_with(OMP_WAIT_POLICY="active"))
    check("serial, OMP_WAIT_POLICY=active: kept", got == "OMP_WAIT_POLICY=active (environment)"
          and "OMP_WAIT_POLICY = 'ACTIVE'" in shown, f"{got} / {shown}")
    got, _ = stage_policy(serial, os.path.join(work, "spin"), env_with(GOMP_SPINCOUNT="1000"))
    check("serial, GOMP_SPINCOUNT=1000: kept", got == "GOMP_SPINCOUNT=1000 (environment)", str(got))

    js = os.path.join(work, "train_step.json")
    r = subprocess.run([a.train_step, "--preset", "small", "--batch", "2", "--threads", "2", "--steps", "1",
                        "--warmup", "0", "--json", js], env=env_with(), capture_output=True, text=True, timeout=300)
    got = json.load(open(js)).get("omp_wait_policy") if r.returncode == 0 and os.path.exists(js) else r.stderr[-800:]
    check("train_step (tool_main), nothing set: chosen by the engine", got == "GOMP_SPINCOUNT=300 (engine)", str(got))

    if a.mpi and a.mpiexec:
        mpi = [a.mpiexec, "-n", "2", os.path.abspath(a.mpi), "train"] + corpus + TINY
        got, _ = stage_policy(mpi, os.path.join(work, "mpi"), env_with())
        check("mpi under mpiexec, nothing set: re-executed before MPI_Init", got == "GOMP_SPINCOUNT=300 (engine)",
              str(got))

    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
