#!/usr/bin/env python3
"""The CUDA stage programs' behaviour that needs no GPU (suite stage).

  * `--help` works and names the stage's device rules.
  * On a machine without a CUDA device, `cuda train` and every rank of
    `mpi_cuda train` print "no CUDA device (...)" once and exit with status 3
    (kExitUnavailable: the harness records it as skipped), writing nothing.
    Where a GPU is present these checks do not apply and are skipped.
  * A bad GPT2_CUDA_ALLREDUCE value is a usage error (exit 2) naming the
    variable and the values it takes, on any machine.

usage: cuda_cli_test.py --cuda PATH --config PATH [--mpi-cuda PATH --mpiexec PATH [--hostfile PATH]]
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import os
import subprocess
import sys
import tempfile

from checks import Checks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cuda", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--mpi-cuda")
    ap.add_argument("--mpiexec")
    ap.add_argument("--hostfile")
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    work = tempfile.mkdtemp(prefix="cuda_cli_test_")
    check = Checks()

    def run(cmd, extra=None):
        return subprocess.run(cmd, capture_output=True, text=True, env=dict(env, **(extra or {})), timeout=300)

    r = run([a.cuda, "train", "--help"])
    check("cuda train --help", r.returncode == 0 and "CUDA_VISIBLE_DEVICES" in r.stdout and "train.tf32" in r.stdout,
          r.stderr[-500:])

    out = os.path.join(work, "run")
    r = run([a.cuda, "train", "--config", a.config, "--train.steps", "1", "--out", out])
    has_gpu = r.returncode == 0
    if has_gpu:
        print("skip the no-device checks: this machine has a CUDA device (the GPU suite covers it)")
    else:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        check("cuda without a device: exit 3, one line 'no CUDA device'",
              r.returncode == 3 and len(lines) == 1 and "cuda: error: no CUDA device (" in lines[0], r.stderr.strip())
        check("cuda without a device: no metrics stream or checkpoint written",
              not os.path.exists(os.path.join(out, "metrics.jsonl")) and
              not os.path.exists(os.path.join(out, "checkpoint.bin")))

    if a.mpi_cuda and a.mpiexec:
        r = run([a.mpi_cuda, "train", "--help"])
        check("mpi_cuda train --help", r.returncode == 0 and "GPT2_CUDA_ALLREDUCE" in r.stdout, r.stderr[-500:])
        r = run([a.mpiexec, "-n", "2", a.mpi_cuda, "train", "--config", a.config, "--train.steps", "1", "--out",
                 os.path.join(work, "bad")], {"GPT2_CUDA_ALLREDUCE": "fast"})
        check("mpi_cuda with GPT2_CUDA_ALLREDUCE=fast: exit 2 naming the variable and its values",
              r.returncode == 2 and "GPT2_CUDA_ALLREDUCE" in r.stderr and "auto, nccl or host" in r.stderr
              and r.stderr.count("error:") == 1, r.stderr.strip()[-800:])
        if not has_gpu:
            r = run([a.mpiexec, "-n", "2", a.mpi_cuda, "train", "--config", a.config, "--train.steps", "1", "--out",
                     os.path.join(work, "mpi")])
            check("mpi_cuda without a device: exit 3, 'no CUDA device' printed once",
                  r.returncode == 3 and r.stderr.count("no CUDA device (") == 1, r.stderr.strip()[-800:])
            if a.hostfile:
                # The placement check runs before the device is opened: it must
                # pass (it sums host counts, not device memory) and reach it.
                r = run([a.mpiexec, "-n", "2", a.mpi_cuda, "train", "--config", a.config, "--train.steps", "1",
                         "--hostfile", a.hostfile, "--out", os.path.join(work, "mpi-hostfile")])
                check("mpi_cuda --hostfile (this machine) passes the placement check, then exit 3 for the device",
                      r.returncode == 3 and r.stderr.count("no CUDA device (") == 1, r.stderr.strip()[-800:])

    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
