#!/usr/bin/env python3
"""The mpi stage under a real single-node Slurm (scripts/slurm_local.sh; docs/cluster.md).

The test starts its own cluster (munge, slurmctld and slurmd as root, in a
temporary folder) and stops it at the end; without root or without Slurm and
munge installed it reports itself skipped (exit 77) with the reason.

  * A 2-rank job through `srun --mpi=pmi2` and one through `mpiexec` inside
    `sbatch` each give the local 2-rank run's losses, validation losses and
    final weights (within 1e-5; the same ranks and arithmetic).
  * Preemption: a job whose stage is sent `scancel --signal=TERM` mid-run
    saves and exits 4, its script asks Slurm to requeue it, and the second
    attempt resumes from the newest complete checkpoint (--resume auto) and
    finishes; under train.deterministic its final parameters, moments and
    records equal an uninterrupted run's byte for byte; the attempt count
    (SLURM_RESTART_COUNT + 1) is 2, and the run's provenance names the job and that attempt.

usage: slurm_test.py --mpi PATH --mpiexec PATH --corpus PATH --repo PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass, 77 if skipped.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from checks import Checks
from layout_checks import common_args, compare, final_state, records


def wait_for(predicate, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("mpi", "mpiexec", "corpus", "repo"):
        ap.add_argument("--" + k, required=True)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: the test starts slurmd, which needs root")
        return 77
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "srun") if shutil.which(b) is None]
    if missing:
        print(f"SKIP: {', '.join(missing)} not installed (bash scripts/setup.sh --tests installs slurm-wlm and munge)")
        return 77
    work = tempfile.mkdtemp(prefix="slurm_test_")
    cluster = os.path.join(work, "cluster")
    script = os.path.join(a.repo, "scripts", "slurm_local.sh")
    r = subprocess.run(["bash", script, "start", cluster], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        print(f"SKIP: a local Slurm did not start here: {r.stderr.strip()[-400:]}")
        subprocess.run(["bash", script, "stop", cluster], capture_output=True, timeout=60)
        return 77
    env = dict(os.environ, SLURM_CONF=os.path.join(cluster, "slurm.conf"), OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    check = Checks()
    try:
        run_checks(a, work, env, check)
    finally:
        subprocess.run(["scancel", "--user", "root"], capture_output=True, env=env, timeout=30)
        r = subprocess.run(["bash", script, "stop", cluster], capture_output=True, text=True, timeout=120)
        check("the test's Slurm stops", r.returncode == 0, r.stderr.strip()[-300:])
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


def job_state(env, job):
    r = subprocess.run(["scontrol", "show", "job", str(job)], capture_output=True, text=True, env=env, timeout=30)
    fields = dict(f.split("=", 1) for f in r.stdout.split() if "=" in f)
    return fields.get("JobState", ""), fields


def run_checks(a, work, env, check):
    out = lambda name: os.path.join(work, name)  # noqa: E731
    common = common_args(a.corpus, 8, 32, 64, 2, 4)
    stage = [a.mpi, "train", *common]

    def local(name, extra=()):
        return subprocess.run([a.mpiexec, "-n", "2", *stage, *extra, "--out", out(name)], capture_output=True,
                              text=True, env=env, timeout=300, stdin=subprocess.DEVNULL)

    r = local("local")
    check("the local 2-rank reference (mpiexec)", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")

    # ---- srun --mpi=pmi2: Slurm starts the ranks and wires them through PMI-2 ----
    r = subprocess.run(["srun", "--mpi=pmi2", "-n", "2", *stage, "--out", out("srun")], capture_output=True, text=True,
                       env=env, timeout=300, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        check("a 2-rank job through srun --mpi=pmi2", False, r.stderr.strip()[-300:])
    else:
        compare(check, "a 2-rank job through srun --mpi=pmi2 equals the local run", out("local"), out("srun"))

    # ---- sbatch with mpiexec inside the allocation (Hydra launches through Slurm) ----
    batch = out("mpiexec.sh")
    with open(batch, "w") as f:
        f.write("#!/bin/bash\n#SBATCH --ntasks=2\n")
        f.write(" ".join([a.mpiexec, "-n", "2", *stage, "--out", out("sbatch")]) + "\n")
    r = subprocess.run(["sbatch", "--wait", "--parsable", "--output", out("sbatch.log"), batch], capture_output=True,
                       text=True, env=env, timeout=300)
    if r.returncode != 0 or not os.path.exists(os.path.join(out("sbatch"), "metrics.jsonl")):
        log = open(out("sbatch.log")).read()[-300:] if os.path.exists(out("sbatch.log")) else ""
        check("a 2-rank job of mpiexec inside sbatch", False, (r.stderr.strip() + " " + log)[-400:])
    else:
        compare(check, "a 2-rank job of mpiexec inside sbatch equals the local run", out("local"), out("sbatch"))

    # ---- Preemption: TERM mid-run, the job requeues itself and resumes ----
    det = [*common, "--train.deterministic", "true", "--train.steps", "200", "--train.eval_every", "0",
           "--train.checkpoint_every", "5"]
    r = subprocess.run([a.mpiexec, "-n", "2", a.mpi, "train", *det, "--out", out("whole")], capture_output=True,
                       text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)
    check("the uninterrupted deterministic reference", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    batch = out("preempt.sh")
    run_dir, attempts = out("preempt"), out("attempts.txt")
    with open(batch, "w") as f:
        f.write("#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --requeue\n")
        f.write(f"echo $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) >> {attempts}\n")
        f.write(" ".join(["srun", "--mpi=pmi2", "-n", "2", a.mpi, "train", *det, "--out", run_dir, "--resume", "auto"])
                + "\n")
        # Exit 4: the stage saved and stopped on a signal; the job goes back in the queue to resume.
        f.write("rc=$?\nif [ $rc = 4 ]; then scontrol requeue $SLURM_JOB_ID; fi\nexit $rc\n")
    r = subprocess.run(["sbatch", "--parsable", "--output", out("preempt-%j.log"), batch], capture_output=True,
                       text=True, env=env, timeout=60)
    if r.returncode != 0:
        check("the preemptible job is submitted", False, r.stderr.strip()[-300:])
        return
    job = r.stdout.strip().split(";")[0]
    def steps():  # the metrics stream while it runs (renamed to metrics.jsonl when the run completes)
        path = os.path.join(run_dir, "metrics.jsonl.partial")
        return os.path.exists(path) and sum('"event":"step"' in line.replace(" ", "") for line in open(path)) >= 20

    started = wait_for(steps, 120)
    check("the preemptible job trains (20 steps seen in its metrics)", started)
    if not started:
        return
    r = subprocess.run(["scancel", "--signal=TERM", job], capture_output=True, text=True, env=env, timeout=30)
    check("scancel --signal=TERM reaches the job's step", r.returncode == 0, r.stderr.strip()[-300:])
    # A requeued job waits out Slurm's requeue delay (its BeginTime, two minutes here): the test moves its start
    # to now once it is back in the queue, as an administrator may.
    def done_or_nudged():
        state, fields = job_state(env, job)
        if state == "PENDING" and fields.get("Reason") == "BeginTime":
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True, env=env,
                           timeout=30)
        return state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
    finished = wait_for(done_or_nudged, 300)
    state, fields = job_state(env, job)
    check("the job is requeued and completes", finished and state == "COMPLETED",
          f"state {state}, restarts {fields.get('Restarts')}")
    seen = open(attempts).read().split() if os.path.exists(attempts) else []
    check("two attempts (SLURM_RESTART_COUNT + 1 = 1, 2)", seen == ["1", "2"], f"attempts {seen}")
    if finished and state == "COMPLETED":
        got, want = final_state(run_dir), final_state(out("whole"))
        same = all(p == q for p, q in zip(got[0], want[0]))
        summary = records(run_dir, "summary")
        slurm = summary[-1].get("provenance", {}).get("slurm", {}) if summary else {}
        check("the run's provenance names the Slurm job and its attempt 2",
              slurm.get("job_id") == job and slurm.get("attempt") == 2 and bool(slurm.get("nodes")), str(slurm))
        check("the preempted and requeued run ends with the uninterrupted run's bits (parameters, moments, last step)",
              same and got[1][-1] == want[1][-1], f"parameters and moments {'equal' if same else 'DIFFER'}; last step "
              f"{got[1][-1] if got[1] else None} / {want[1][-1] if want[1] else None}")


if __name__ == "__main__":
    sys.exit(main())
