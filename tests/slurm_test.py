#!/usr/bin/env python3
"""The mpi stage under a real single-node Slurm (scripts/slurm_local.sh; docs/cluster.md).

The test starts its own cluster (munge, slurmctld and slurmd as root, in a
temporary folder) and stops it at the end; without root or without Slurm and
munge installed it reports itself skipped (exit 77) with the reason.

  * A 2-rank job through `srun --mpi=pmi2` and one through `mpiexec` inside
    `sbatch` each give the local 2-rank run's losses, validation losses and
    final weights (within 1e-5; the same ranks and arithmetic).
  * Preemption: a job whose stage is sent `scancel --signal=TERM` mid-run
    (its first attempt's steps sleep, the step_sleep_s test hook, so that it is
    still going when the signal arrives however fast the machine)
    saves and exits 4, its script asks Slurm to requeue it, and the second
    attempt resumes from the newest complete checkpoint (--resume auto) and
    finishes; under train.deterministic its final parameters, moments and
    records equal an uninterrupted run's byte for byte; the attempt count
    (SLURM_RESTART_COUNT + 1) is 2, and the run's provenance names the job and that attempt.
  * The time limit: a job submitted with `--time=5 --signal=TERM@60` whose
    limit is cut to one minute mid-run (scontrol update) is sent TERM by
    Slurm before the limit, saves, is requeued and resumes likewise (its
    steps sleep (the step_sleep_s test hook) so that it outlasts Slurm's 30 s
    time-limit pass with room to spare).

  * The harness: `harness run experiments/smoke.yaml --launcher slurm` gives the local launcher's runs.csv
    rows (but the timings and provenance) and loss.csv; a run preempted mid-way (scancel --signal=TERM) is
    requeued and resumed, and runs.csv counts 2 attempts; a run past its timeout_s is cancelled with its job, and
    so is the job of a harness killed outright (SIGKILL);
    `harness slurm-script` writes job scripts that
    run when submitted by hand (from a folder whose name holds quotes, '#', '%' and $(...), none of which
    runs). Bad input, one line, exit 2, nothing submitted: a partition that does not
    exist, Slurm not answering, Slurm not installed, a run needing more CPUs than the cluster has.

usage: slurm_test.py --mpi PATH --mpiexec PATH --corpus PATH --repo PATH --harness PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass, 77 if skipped.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from checks import HOOKS_VARIABLE, Checks, hooks_text, with_hooks
from layout_checks import common_args, compare, final_state, records


def wait_for(predicate, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


# Slurm's KillWait (its default, 30 s; scripts/slurm_local.sh does not set it): a cancelled job's processes get
# SIGTERM, then SIGKILL this long after, and the job is COMPLETING meanwhile. A cancelled job must be gone from
# the queue within it and 60 s of slack for a slow or busy machine (the stage ends on SIGTERM within a step).
KILL_WAIT_S = 30
GONE_S = KILL_WAIT_S + 60


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("mpi", "mpiexec", "corpus", "repo", "harness"):
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
        harness_checks(a, work, env, check)
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


def harness_checks(a, work, env, check):
    """The harness's Slurm launcher against its local one, preemption through it, slurm-script, bad input."""
    import csv
    out = lambda name: os.path.join(work, name)  # noqa: E731
    repo = os.path.abspath(a.repo)
    smoke = os.path.join(repo, "experiments", "smoke.yaml")

    def harness(*args, environ=None):
        return subprocess.run([a.harness, *args], capture_output=True, text=True, env=environ or env, timeout=600)

    def rows(results):
        with open(os.path.join(results, "smoke", "runs.csv")) as f:
            return {r["run_id"]: r for r in csv.DictReader(f)}

    r1 = harness("run", smoke, "--quiet", "--results", out("h_local"), "--reports", out("h_local_reports"))
    r2 = harness("run", smoke, "--quiet", "--launcher", "slurm", "--results", out("h_slurm"),
                 "--reports", out("h_slurm_reports"))
    check("harness run smoke.yaml, local and --launcher slurm", r1.returncode == 0 and r2.returncode == 0,
          (r1.stderr + r2.stderr).strip()[-400:])
    if r1.returncode == 0 and r2.returncode == 0:
        local, slurm = rows(out("h_local")), rows(out("h_slurm"))
        keys = ("stage", "ranks", "threads", "repetition", "tp", "pipeline", "status", "attempts", "steps",
                "final_loss", "val_loss", "params", "formula_dp_calls", "formula_dp_bytes")
        diff = [f"{i} {k}: {local[i].get(k)} / {slurm.get(i, {}).get(k)}" for i in local for k in keys
                if local[i].get(k) != slurm.get(i, {}).get(k)]
        check("the Slurm launcher's runs.csv rows equal the local one's (but timings and provenance)",
              not diff and set(local) == set(slurm) and any(r["status"] == "ok" for r in local.values()),
              "; ".join(diff[:4]))
        same_loss = open(os.path.join(out("h_local"), "smoke", "loss.csv")).read() == \
            open(os.path.join(out("h_slurm"), "smoke", "loss.csv")).read()
        check("and its loss.csv is the local one's", same_loss)
        skipped = [r["reason"] for r in slurm.values() if r["status"] == "skipped"]
        check("a stage the node cannot run is skipped with the program's own reason, not srun's",
              all("srun" not in why and why for why in skipped), "; ".join(skipped)[:300])

    # ---- A run preempted through the harness: requeued, resumed, two attempts counted ----
    exp = out("preempt_exp.yaml")
    with open(exp, "w") as f:
        f.write(f"name: preempt\ndescription: one long run\nbase: {os.path.join(repo, 'configs', 'original.yaml')}\n"
                "config:\n  model.block_size: 32\n  model.n_layer: 2\n  model.n_head: 4\n  model.n_embd: 64\n"
                "  train.batch_size: 8\n  train.seq_len: 32\n  train.steps: 120\n  train.checkpoint_every: 5\n"
                "  train.deterministic: true\n  generate.max_new_tokens: 0\n"
                f"  data.corpus: {os.path.abspath(a.corpus)}\n"
                "reports: [table1]\nrepetitions: 1\ntimeout_s: 600\ncheckpoints: true\n"
                "runs:\n  - {stage: mpi, ranks: 2, threads: 1}\n")
    # Its steps sleep 30 ms (the step_sleep_s test hook, which sbatch passes on with the harness's environment;
    # outside the arithmetic; the harness's second attempt too): the
    # 100 steps left after the 20 the test waits for last 3 s at the least, however fast the machine, and the
    # TERM reaches the step well within that.
    proc = subprocess.Popen([a.harness, "run", exp, "--quiet", "--launcher", "slurm", "--results", out("h_pre"),
                             "--reports", out("h_pre_reports")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=with_hooks(env, {"step_sleep_s": 0.03}))

    def partial_steps():
        return any(steps_seen(os.path.join(root, "metrics.jsonl.partial")) >= 20
                   for root, _, files in os.walk(out("h_pre")) if "metrics.jsonl.partial" in files)
    started = wait_for(partial_steps, 120)
    jobs = queue(env)
    if started and jobs:
        subprocess.run(["scancel", "--signal=TERM", jobs[0]], capture_output=True, env=env, timeout=30)
        def harness_done():
            nudge(env, jobs[0])
            return proc.poll() is not None
        wait_for(harness_done, 300)
    if proc.poll() is None:
        proc.kill()
    stdout, stderr = proc.communicate()
    logs = [os.path.join(root, "log.txt") for root, _, files in os.walk(out("h_pre")) if "log.txt" in files]
    check("a harness run preempted mid-way is requeued and completes", started and proc.returncode == 0,
          stderr.strip()[-300:] + ("" if proc.returncode == 0 else
                                   " | log.txt: " + " ".join(open(f).read()[-700:] for f in logs)))
    ended = [line for f in logs for line in open(f) if line.startswith("harness: job ")]
    check("the run's log.txt ends with the job's final state: COMPLETED after 1 restart",
          bool(ended) and "JobState=COMPLETED" in ended[-1] and "Restarts=1" in ended[-1], str(ended[-1:]))
    runs_csv = os.path.join(out("h_pre"), "preempt", "runs.csv")
    if os.path.exists(runs_csv):
        with open(runs_csv) as f:
            row = next(csv.DictReader(f))
        check("runs.csv counts its 2 attempts", row["status"] == "ok" and row["attempts"] == "2",
              f"status {row['status']}, attempts {row['attempts']}")

    # ---- A run past its timeout_s: the harness ends it, and its job with it ----
    slow = out("slow_exp.yaml")
    with open(exp) as f:
        text = f.read()
    with open(slow, "w") as f:
        f.write(text.replace("name: preempt", "name: slow").replace("train.steps: 120", "train.steps: 100000")
                .replace("timeout_s: 600", "timeout_s: 8"))  # 100000 steps of 30 ms sleep at the least: past 8 s
    r = harness("run", slow, "--quiet", "--launcher", "slurm", "--results", out("h_slow"),
                "--reports", out("h_slow_reports"))
    wait_for(lambda: not queue(env), GONE_S)  # a cancelled job is COMPLETING for a moment
    left = queue(env)
    check("a job past the experiment's timeout_s is cancelled with its run (failed: timed out, no job left)",
          r.returncode == 1 and "timed out" in r.stderr and not left,
          f"exit {r.returncode}; queue: {left!r}; {r.stderr.strip()[-300:]}")

    # ---- A harness killed outright (SIGKILL): its guardian cancels the run's job ----
    with open(out("killed_exp.yaml"), "w") as f:
        f.write(text.replace("name: preempt", "name: killed").replace("train.steps: 120", "train.steps: 100000"))
    proc = subprocess.Popen([a.harness, "run", out("killed_exp.yaml"), "--quiet", "--launcher", "slurm", "--results",
                             out("h_killed"), "--reports", out("h_killed_reports")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)
    running = wait_for(lambda: any(job_state(env, j)[0] == "RUNNING" for j in queue(env)), 120)
    proc.kill()
    proc.wait()
    gone = wait_for(lambda: not queue(env), GONE_S)
    check("a harness killed by SIGKILL leaves no job behind (its guardian cancels the job)", running and gone,
          f"job seen running: {running}; queue: {queue(env)!r}")

    # ---- slurm-script: job scripts for users who submit themselves ----
    # Into a folder whose name holds what sbatch's reading of an #SBATCH line (quotes, '#') and Slurm's file name
    # patterns ('%') treat specially, and a shell's $(...): the job's output still lands in the run's log.txt,
    # and nothing of the name runs (issue 70).
    mine = out("scripts $(touch pwned) #x%y'q\"")
    r = harness("slurm-script", smoke, "--out", mine)
    written = sorted(d for d in os.listdir(mine) if os.path.isdir(os.path.join(mine, d))) if os.path.isdir(mine) else []
    # smoke.yaml's five runs; a stage this build lacks (cuda without nvcc, mpi_cuda without NCCL) gets none.
    stages_dir = os.path.dirname(os.path.abspath(a.mpi))
    built = [s for s in ("serial", "mpi", "mpi", "cuda", "mpi_cuda") if os.access(os.path.join(stages_dir, s), os.X_OK)]
    check("harness slurm-script writes a job script per runnable run (one per built stage's run) and submit_all.sh",
          r.returncode == 0 and sorted(d.split("-")[0] for d in written) == sorted(built) and
          os.path.exists(os.path.join(mine, "submit_all.sh")),
          (r.stderr.strip() + f" {written} expected stages {built}")[-300:])
    two = [d for d in written if d.startswith("mpi-r2")]
    if two:
        script = os.path.join(mine, two[0], "job.sh")
        text = open(script).read()
        r = subprocess.run(["sbatch", "--wait", script], capture_output=True, text=True, env=env, timeout=300,
                           cwd=work)
        job_log = os.path.join(mine, two[0], "log.txt")
        job_log = open(job_log).read() if os.path.exists(job_log) else ""
        check("a written job script asks for the run's tasks and runs when submitted by hand, its output in the run's "
              "log.txt though the folder's name holds quotes, '#', '%' and $(...), none of which runs",
              "#SBATCH --ntasks=2" in text and r.returncode == 0 and
              os.path.exists(os.path.join(mine, two[0], "metrics.jsonl")) and
              "results in" in job_log and
              not os.path.exists(os.path.join(work, "pwned")), r.stderr.strip()[-300:] + " " + str(os.listdir(work)))

    # ---- Bad input: one line, exit 2, nothing submitted ----
    def refused(title, args, needle, environ=None):
        before = queue(env)
        res = out("refused_" + str(len(check.results)))
        r = harness("run", *args, "--quiet", "--launcher", "slurm", "--results", res, "--reports", res + "_reports",
                    environ=environ)
        lines = [line for line in r.stderr.splitlines() if "error" in line]
        after = queue(env)
        check(title + " (exit 2, one line, nothing submitted)",
              r.returncode == 2 and len(lines) == 1 and needle in lines[0] and before == after and
              not os.path.exists(os.path.join(res, "smoke")), lines[0] if lines else r.stderr.strip()[-200:])
    refused("a partition that does not exist is refused", [smoke, "--partition", "nosuch"],
            "partition nosuch: no such partition")
    def smoke_copy(name, more):
        """smoke.yaml as `name` in the work folder (its base made absolute), `more` appended."""
        with open(smoke) as f:
            text = f.read()
        with open(out(name), "w") as f:
            f.write(text.replace("base: ../configs/original.yaml",
                                 f"base: {os.path.join(repo, 'configs', 'original.yaml')}") + more)
        return out(name)
    keyed = smoke_copy("keyed.yaml", "launcher: slurm\nslurm:\n  partition: nosuch2\n")
    r = harness("run", keyed, "--quiet", "--results", out("keyed_results"), "--reports", out("keyed_reports"))
    lines = [line for line in r.stderr.splitlines() if "error" in line]
    check("an experiment's launcher: slurm and slurm.partition are taken (its missing partition refused, exit 2)",
          r.returncode == 2 and len(lines) == 1 and "partition nosuch2: no such partition" in lines[0],
          lines[0] if lines else r.stderr.strip()[-200:])
    # A configuration whose controller is not there (another port): sinfo fails at once.
    with open(env["SLURM_CONF"]) as f:
        conf = f.read()
    port = int(conf.split("SlurmctldPort=")[1].split()[0])
    with open(out("dead.conf"), "w") as f:
        f.write(conf.replace(f"SlurmctldPort={port}", f"SlurmctldPort={port + 7}"))
    refused("Slurm not answering is refused", [smoke], "Slurm's controller does not answer",
            dict(env, SLURM_CONF=out("dead.conf")))
    empty_bin = out("empty_bin")
    os.makedirs(empty_bin, exist_ok=True)
    refused("Slurm not installed is refused", [smoke], "sbatch not found on PATH", dict(env, PATH=empty_bin))
    cpus = os.cpu_count() or 2
    big = smoke_copy("big.yaml", f"  - stage: mpi\n    ranks: 2\n    threads: {cpus}\n")
    refused("a run needing more CPUs than the cluster has is refused", [big], f"needs {2 * cpus} CPUs")


def queue(env):
    """The ids of the jobs in Slurm's queue (running, pending or completing)."""
    return subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=env,
                          timeout=30).stdout.split()


def steps_seen(path):
    """The step records in a metrics stream while it runs (metrics.jsonl.partial; 0 before it exists)."""
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum('"event":"step"' in line.replace(" ", "") for line in f)


_pending_since = {}


def job_steps_alive(job):
    """The slurmstepd processes of job `job` on this node (each names its step: "slurmstepd: [JOB.batch]",
    "slurmstepd: [JOB.0]"): while any is there, slurmd is still ending an attempt of the job."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("slurmstepd") and f"[{job}." in cmd:
            found.append(int(pid))
    return found


def nudge(env, job, before=None):
    """A requeued job waits out Slurm's requeue delay (its BeginTime, two minutes here): its start moved to now
    once it has been back in the queue for 3 s and the last attempt's slurmstepd processes are gone, as an
    administrator may. (Started at once, the next attempt was seen to fail to launch, exit 1 and no output:
    slurmd still ending the last one; the event, not the 3 s, is what a slow machine needs.) `before` runs just
    before the start is moved. Returns the job's state."""
    state, fields = job_state(env, job)
    if state == "PENDING" and fields.get("Reason") == "BeginTime":
        since = _pending_since.setdefault((job, fields.get("Restarts")), time.time())
        if time.time() - since >= 3 and not job_steps_alive(job):
            if before:
                before()
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True, env=env,
                           timeout=30)
    return state


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
    det = [*common, "--train.deterministic", "true", "--train.steps", "120", "--train.eval_every", "0",
           "--train.checkpoint_every", "5"]
    r = subprocess.run([a.mpiexec, "-n", "2", a.mpi, "train", *det, "--out", out("whole")], capture_output=True,
                       text=True, env=env, timeout=600, stdin=subprocess.DEVNULL)
    check("the uninterrupted deterministic reference", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    def submit(name, sbatch=(), first=None):
        """A job that resumes its run: exit 4 (the stage saved and stopped on a signal) puts it back in the queue.
        `first`: test hooks of its first attempt only (checks.with_hooks)."""
        batch, run_dir, attempts = out(name + ".sh"), out(name), out(name + "-attempts.txt")
        with open(batch, "w") as f:
            f.write("#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --requeue\n" + "".join(f"#SBATCH {x}\n" for x in sbatch))
            f.write(f"echo $(( ${{SLURM_RESTART_COUNT:-0}} + 1 )) >> {attempts}\n")
            if first:
                f.write(f"[ \"${{SLURM_RESTART_COUNT:-0}}\" = 0 ] && export {HOOKS_VARIABLE}={hooks_text(first)}\n")
            f.write(" ".join(["srun", "--mpi=pmi2", "-n", "2", a.mpi, "train", *det, "--out", run_dir,
                              "--resume", "auto"]) + "\n")
            f.write("rc=$?\nif [ $rc = 4 ]; then\n  for try in 1 2 3 4 5; do scontrol requeue $SLURM_JOB_ID && exit 0; "
                    "sleep 2; done\nfi\nexit $rc\n")
        r = subprocess.run(["sbatch", "--parsable", "--output", out(name + "-%j.log"), batch], capture_output=True,
                           text=True, env=env, timeout=60)
        check(f"the {name} job is submitted", r.returncode == 0, r.stderr.strip()[-300:])
        return (r.stdout.strip().split(";")[0] if r.returncode == 0 else None), run_dir, attempts

    def trains(run_dir, title, n=20):
        ok = wait_for(lambda: steps_seen(os.path.join(run_dir, "metrics.jsonl.partial")) >= n, 120)
        check(f"{title} ({n} steps seen in its metrics)", ok)
        return ok

    def resumed(job, run_dir, attempts, title, pending=None):
        """The job requeued, resumed and completed, two attempts, the uninterrupted run's bits. `pending` runs
        when the requeued job is let start."""
        finished = wait_for(lambda: nudge(env, job, pending) in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 300)
        state, fields = job_state(env, job)
        logs = "".join(open(os.path.join(work, f)).read() for f in sorted(os.listdir(work))
                       if f.startswith(os.path.basename(run_dir) + "-") and f.endswith(".log"))
        check(f"{title}: the job is requeued and completes", finished and state == "COMPLETED",
              f"state {state}, restarts {fields.get('Restarts')}" +
              ("" if state == "COMPLETED" else f"; its log: {logs[-600:]}"))
        seen = open(attempts).read().split() if os.path.exists(attempts) else []
        check(f"{title}: two attempts (SLURM_RESTART_COUNT + 1 = 1, 2)", seen == ["1", "2"], f"attempts {seen}")
        if finished and state == "COMPLETED":
            got, want = final_state(run_dir), final_state(out("whole"))
            same = all(p == q for p, q in zip(got[0], want[0]))
            stops = [(p.get("signal"), p.get("step")) for p in records(run_dir, "preempted")]
            check(f"{title}: the first attempt saved and stopped on SIGTERM", len(stops) == 1 and
                  stops[0][0] == "SIGTERM", str(stops))
            summary = records(run_dir, "summary")
            slurm = summary[-1].get("provenance", {}).get("slurm", {}) if summary else {}
            check(f"{title}: the run's provenance names the Slurm job and its attempt 2",
                  slurm.get("job_id") == job and slurm.get("attempt") == 2 and bool(slurm.get("nodes")), str(slurm))
            check(f"{title}: the run ends with the uninterrupted run's bits (parameters, moments, last step)",
                  same and got[1][-1] == want[1][-1], f"parameters and moments {'equal' if same else 'DIFFER'}; "
                  f"last step {got[1][-1] if got[1] else None} / {want[1][-1] if want[1] else None}")

    # scancel --signal=TERM: what a preempting scheduler (or a user) sends. The first attempt's steps sleep 30 ms
    # (the step_sleep_s test hook, outside the arithmetic): the 100 steps left after the 20 the test waits for last 3 s
    # at the least, however fast the machine, and the TERM reaches the step well within that.
    job, run_dir, attempts = submit("preempt", first={"step_sleep_s": 0.03})
    if job is None or not trains(run_dir, "the preemptible job trains"):
        return
    r = subprocess.run(["scancel", "--signal=TERM", job], capture_output=True, text=True, env=env, timeout=30)
    check("scancel --signal=TERM reaches the job's step", r.returncode == 0, r.stderr.strip()[-300:])
    resumed(job, run_dir, attempts, "preempted by scancel")

    # The time limit: --signal=TERM@60 warns the job's step 60 s before its end. The job asks for 5 minutes; once
    # it trains its limit is cut to 1 minute, as if it had run for 4, so Slurm's next time-limit pass (every 30 s)
    # sends the TERM; the first attempt's steps sleep 0.6 s (the step_sleep_s hook, arithmetic untouched) so that it
    # is still going then: the 115 steps left after the 5 the test waits for last 69 s at the least, that pass's
    # 30 s and as much again of slack, however fast the machine (the stop follows the TERM within a step, so
    # the sleep costs no more than the pass). Back in the queue, its limit is 5 minutes again.
    job, run_dir, attempts = submit("timelimit", ("--time=5", "--signal=TERM@60"),
                                    {"step_sleep_s": 0.6})
    if job is None or not trains(run_dir, "the time-limited job trains", 5):
        return
    r = subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=1"], capture_output=True, text=True,
                       env=env, timeout=30)
    check("its time limit is cut to 1 minute (scontrol update TimeLimit=1)", r.returncode == 0,
          r.stderr.strip()[-300:])
    restore = lambda: subprocess.run(["scontrol", "update", f"JobId={job}", "TimeLimit=5"],  # noqa: E731
                                     capture_output=True, env=env, timeout=30)
    resumed(job, run_dir, attempts, "signalled before its time limit (--signal=TERM@60)", pending=restore)


if __name__ == "__main__":
    sys.exit(main())
