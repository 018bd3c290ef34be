#!/usr/bin/env python3
"""The MPI stage under mpiexec: equivalence with the serial stage, and faults.

  * R = 2 and R = 4 ranks (4 oversubscribes 2 cores) train the same
    configuration and seed as the serial stage for 12 steps, with one blocking
    allreduce and with bucketed allreduce overlapping backward. Every step's
    loss must agree within 1e-5 relative and every final weight within 1e-5
    absolute: the ranks see exactly the serial batch and the gradient sum is
    the serial sum in another order, so only float rounding may differ (~1e-7).
  * A rank that fails mid-run (the fail_rank test hook) ends the whole job by itself
    with a non-zero exit (a hang is decided at 120 s), the message printed
    once, and no checkpoint and no finished metrics stream left behind.
  * A rank whose launcher stops answering (Hydra's proxy stopped while it
    trains 2,000 steps, its lines overflowing its stderr pipe) writes its
    results and ends by itself with its own status.
  * A batch not divisible by R, a missing corpus on rank 0 and a hostfile that
    does not match the job's placement are clear one-time errors.

--part two_ranks runs the serial reference and R = 2 alone (the quick tier,
tests/meson.build), --part rest everything else; the default, all of it.

usage: mpi_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH [--part all|two_ranks|rest]
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

# Our checkpoint format, read with the standard library (shared with the PyTorch peer).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checkpoint_file import read_params  # noqa: E402
from checks import PROMPT_S, TEST_TAG, Checks, bounded_run, end_processes, tagged_processes, with_hooks  # noqa: E402
from layout_checks import Programs, plan_agrees  # noqa: E402


# The script's parts (--part) and the rank counts each compares with serial.
PARTS = {"all": (2, 4), "two_ranks": (2,), "rest": (4,)}


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if r["event"] == "step"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("serial", "mpi", "mpiexec", "corpus"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--part", choices=PARTS, default="all",
                    help="two_ranks: R = 2 against serial (the quick tier's); rest: everything else; all: both")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mpi_test_")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    common = ["--data.corpus", os.path.abspath(a.corpus), "--model.block_size", "64", "--model.n_layer", "2",
              "--model.n_head", "4", "--model.n_embd", "64", "--train.batch_size", "8", "--train.seq_len", "64",
              "--train.steps", "12", "--train.threads", "1", "--train.peak_gflops", "50",
              "--optimizer.lr", "1e-3", "--generate.prompt_tokens", "16", "--generate.max_new_tokens", "4"]
    check = Checks()

    def mpirun(n, args, timeout=300, extra=(), hooks=None):
        """The job's result (bounded_run: .timed_out if still running after `timeout` s) and its seconds; `hooks`:
        test hooks its ranks install (checks.with_hooks)."""
        r = bounded_run([a.mpiexec, *extra, "-n", str(n), a.mpi, *args], timeout, env=with_hooks(env, hooks))
        return r, r.seconds

    serial_dir = os.path.join(work, "serial")
    r = subprocess.run([a.serial, "train", "--out", serial_dir] + common, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        check("the serial reference run", False, r.stderr)
        return check.finish()
    ref_losses, ref_params = losses(serial_dir), read_params(os.path.join(serial_dir, "checkpoint.bin"))

    for n in PARTS[a.part]:
        for bucket in ("0", "0.05"):
            d = os.path.join(work, f"mpi{n}-{bucket}")
            r, _ = mpirun(n, ["train", "--out", d, "--train.grad_bucket_mb", bucket] + common)
            if r.returncode != 0:
                check(f"R={n} bucket {bucket} MiB runs", False, r.stderr[-2000:])
                continue
            got = losses(d)
            rel = max(abs(x - y) / abs(y) for x, y in zip(got, ref_losses))
            check(f"R={n} bucket {bucket} MiB: {len(got)}-step loss curve equals serial",
                  len(got) == len(ref_losses) and rel <= 1e-5, f"max relative difference {rel:.2e}, tolerance 1e-5")
            p = read_params(os.path.join(d, "checkpoint.bin"))
            diff = max(abs(x - y) for x, y in zip(p, ref_params))
            check(f"R={n} bucket {bucket} MiB: final weights equal serial", len(p) == len(ref_params) and diff <= 1e-5,
                  f"max |difference| {diff:.2e} over {len(p)} weights, tolerance 1e-5")
            plan_agrees(check, Programs(a.mpiexec, a.mpi), f"R={n} bucket {bucket} MiB", n,
                        ["--train.grad_bucket_mb", bucket] + common, d)
            with open(os.path.join(d, "metrics.jsonl")) as f:
                rec = [json.loads(l) for l in f]
            step = next(x for x in rec if x["event"] == "step")
            summ = rec[-1]
            check(f"R={n}: metrics record ranks, communication time and bytes",
                  summ.get("ranks") == n and step.get("comm_bytes", 0) > 0 and "comm_ms" in step
                  and summ["provenance"].get("ranks") == n)

    if a.part == "two_ranks":
        return check.finish()

    # A rank failing mid-run ends the job by itself (5 steps take well under a second here: a job still running
    # after 120 s hangs).
    d = os.path.join(work, "fail")
    r, secs = mpirun(2, ["train", "--out", d, "--train.checkpoint_every", "2"] + common, timeout=120,
                     hooks={"fail_rank": 1, "fail_step": 5})
    count = r.stderr.count("injected failure")
    left = sorted(os.listdir(d)) if os.path.isdir(d) else []
    # The checkpoint of step 4 was complete before the failure; nothing partial remains.
    try:
        complete = len(read_params(os.path.join(d, "checkpoint.bin"))) == len(ref_params)
    except Exception:  # noqa: BLE001 - any parse failure means it is not complete
        complete = False
    check("a rank failing at step 5 ends the job", not r.timed_out and r.returncode != 0 and count == 1
          and "metrics.jsonl" not in left and complete and not any(".tmp" in f for f in left),
          f"exit {r.returncode} after {secs:.1f} s{' (still running: killed)' if r.timed_out else ''}, "
          f"message printed {count} time(s), left {left}")

    # A rank that finished its work exits by itself though its launcher stops
    # answering (issues 53 and 68): Hydra's proxy is stopped while the rank
    # trains, so it reads neither the rank's output nor MPI_Finalize's PMI
    # barrier. 2,000 steps' lines are some 3 times what the rank's stderr pipe
    # holds: the console drops what the pipe cannot take (util/console.h,
    # counted in the summary), the rank writes its results, gives its last
    # lines up after console::kExitStall (0.5 s) and its finalize watchdog
    # (parallel/mpi/mpi_comm.cpp, 3 s) ends it with the status it was going
    # to return. The bound is those two constants and generous slack; a rank
    # blocked on its output never ends at all.
    d = os.path.join(work, "stopped-launcher")
    # Hydra's pipe is the kernel's default, 16 pages: on a machine with pages
    # larger than 4 KiB, as many more lines to overflow it.
    launcher_steps = 2000 * max(1, 16 * os.sysconf("SC_PAGE_SIZE") // (64 << 10))
    # Each step sleeps 2 ms (the step_sleep_s test hook, outside the arithmetic): the
    # run lasts at least 4 s however fast the machine, so the proxy is stopped
    # (after the first step's line and a scan of /proc) long before its end.
    p = subprocess.Popen([a.mpiexec, "-n", "1", a.mpi, "train", "--out", d] + common
                         + ["--train.steps", str(launcher_steps)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=with_hooks(env, {"step_sleep_s": 0.002}), start_new_session=True)
    mine = os.environ[TEST_TAG]

    def job(program):
        return [pid for pid, cmd, tag in tagged_processes(TEST_TAG) if tag == mine and cmd.startswith(program)]

    # The first step's line has come through the proxy: the rank is past MPI_Init, training.
    first_step = ""
    for line in p.stderr:
        first_step += line
        if line.startswith("step "):
            break
    proxies, ranks = job("/usr/bin/hydra_pmi_proxy") or job("hydra_pmi_proxy"), job(a.mpi)
    metrics, deadline = os.path.join(d, "metrics.jsonl"), time.time() + 600
    done_at = gone_at = wait_status = None
    if len(proxies) == 1 and len(ranks) == 1:
        os.kill(proxies[0], signal.SIGSTOP)
        while time.time() < deadline and gone_at is None:
            if done_at is None and os.path.exists(metrics):  # written when the rank's work is done
                done_at = time.time()
            with open(f"/proc/{ranks[0]}/stat") as f:  # a zombie of the stopped proxy once it has exited
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z":
                gone_at, wait_status = time.time(), int(fields[-1])  # the last field: its wait status
            time.sleep(0.02)
        os.kill(proxies[0], signal.SIGCONT)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        end_processes([(pid,) for pid, _, tag in tagged_processes(TEST_TAG) if tag == mine])
        _, err = p.communicate()
    waited = gone_at - done_at if done_at and gone_at else None
    try:
        summary = [json.loads(l) for l in open(metrics)][-1]
    except (OSError, ValueError, IndexError):
        summary = {}
    steps_recorded = len(losses(d)) if summary else 0
    # Its note (stderr) cannot pass through the stopped proxy; its wait status
    # shows how it ended: exited with the status it was going to return (0),
    # not killed.
    check("a rank that finished its work exits by itself, with its own status, though its launcher stops "
          f"answering and {launcher_steps:,} steps' lines overflow its stderr pipe",
          waited is not None and waited < 3 + 0.5 + 30 and wait_status == 0 and steps_recorded == launcher_steps
          and summary.get("console_dropped_lines", 0) > 0,
          f"proxies {proxies}, ranks {ranks}; results written {done_at is not None} ({steps_recorded} steps, "
          f"{summary.get('console_dropped_lines')} console lines dropped), rank ended {gone_at is not None}, after "
          f"{waited if waited is None else round(waited, 2)} s, wait status {wait_status}; {(first_step + err)[-600:]}")

    # Input errors: each reported once, non-zero exit, by itself (before any training: a job still running
    # after PROMPT_S hangs).
    def one_error(title, n, args, needle, extra=()):
        r, secs = mpirun(n, args, timeout=PROMPT_S, extra=extra)
        lines = [l for l in r.stderr.splitlines() if "error:" in l]
        check(title, not r.timed_out and r.returncode != 0 and len(lines) == 1 and needle in r.stderr,
              f"exit {r.returncode} after {secs:.1f} s{' (still running: killed)' if r.timed_out else ''}: {lines}")

    one_error("batch 8 on 3 ranks", 3, ["train", "--out", os.path.join(work, "x3")] + common,
              "not divisible by the 3 ranks")
    one_error("missing corpus on rank 0", 2,
              ["train", "--out", os.path.join(work, "x4")] + common + ["--data.corpus", os.path.join(work, "nope")],
              "no such file")
    hostfile = os.path.join(work, "hosts")
    with open(hostfile, "w") as f:
        f.write("# one slot only, but the job has two ranks here\nlocalhost:1\n")
    one_error("hostfile with fewer slots than ranks", 2,
              ["train", "--hostfile", hostfile, "--out", os.path.join(work, "x5")] + common, "hostfile")
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
