"""The Python tests' one way of checking: a Checks list, called once per
property, that prints a line per check and ends with the count.

    check = Checks()
    check("the serial reference run", r.returncode == 0, r.stderr[-300:])
    ...
    return check.finish()  # "N passed, M failed"; exit status 0 if all passed, else 1

A check prints "ok   title: detail" or "FAIL title: detail" (no ": detail"
when the detail is empty), flushed at once so that its line comes before
whatever a slow or hung step prints next. A script that cannot go on (its
reference run failed) records that as a failed check and returns finish().
A note that is not a check (a skipped case and why) is a plain print.

No process a test starts may outlive it (issue 53): importing this module
tags the test's environment (TEST_TAG, inherited by every program it starts,
mpiexec's proxies and ranks included), and finish() checks, as one more
check, that no process with the tag is still alive, naming and ending any.
tests/leftover_test.py, last in the suite, checks the same of every test.
"""

import os
import signal
import subprocess
import sys
import time

# Every process a test starts carries "GPT2_TEST_TAG=<suite>:<script>.<pid>",
# the suite being the build folder meson runs it from (GPT2_SUITE; empty for
# a test run by hand): the leftovers test looks at its own suite's alone.
TEST_TAG = "GPT2_TEST_TAG"
SUITE = os.environ.get("GPT2_SUITE", "")
os.environ[TEST_TAG] = f"{SUITE}:{os.path.basename(sys.argv[0] or 'python')}.{os.getpid()}"


def tagged_processes(variable):
    """(pid, command line, value) of each live process but this one whose
    environment sets `variable` (a zombie's environment reads empty)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        prefix = variable.encode() + b"="
        for e in env:
            if e.startswith(prefix):
                found.append((int(entry), cmd[:160], e[len(prefix):].decode(errors="replace")))
                break
    return found


# The deadline for what should end at once (a refusal before any work, a
# stop that needs no more than a step): not a measure of speed, only the
# point where "it hangs" is decided, generous enough for a machine 5x slower
# than the slowest development machine, busy besides (DESIGN.md, contract 9).
PROMPT_S = 60


# The faults and delays a stage program installs when its environment names them (core/train/run/test_hooks.h):
# fail_rank, fail_step, long_step_s, checkpoint_delay_s, step_sleep_s. Not settings: every rank of an mpiexec,
# srun or harness job inherits the variable.
HOOKS_VARIABLE = "GPT2_TEST_HOOKS"


def hooks_text(hooks):
    """{"fail_rank": 0, "fail_step": 3} as the variable's value, "fail_rank=0,fail_step=3"."""
    return ",".join(f"{k}={v}" for k, v in hooks.items())


def with_hooks(env, hooks):
    """`env` (a dict) with the test hooks `hooks` installed; `env` itself when there are none."""
    return dict(env, **{HOOKS_VARIABLE: hooks_text(hooks)}) if hooks else env


def bounded_run(cmd, limit, **kw):
    """subprocess.run(cmd, capture_output=True, text=True, **kw) with a deadline of `limit` seconds, which ends
    in a result rather than an exception: the CompletedProcess with .seconds (how long it took, for a check's
    detail) and .timed_out (it was still running at the deadline and was killed: .returncode None, the output
    it had written)."""
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, **kw)
        r.timed_out = False
    except subprocess.TimeoutExpired as e:
        def text(x):
            return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
        r = subprocess.CompletedProcess(cmd, None, text(e.stdout), text(e.stderr))
        r.timed_out = True
    r.seconds = time.monotonic() - t0
    return r


# How long a test's processes may take to go once their work is over: the
# longest grace the programs give (the MPI_Finalize watchdog's kFinalizeGrace,
# core/parallel/mpi/mpi_comm.cpp, and the harness guardian's kGraceSeconds,
# bench/harness/runner/process.cpp: 3 s each) and 30 s of slack for a slow or
# busy machine. A wait on it ends as soon as they are gone.
GONE_S = 3 + 30


def own_processes():
    """(pid, command line) of each live process this test started (its tag)."""
    mine = os.environ[TEST_TAG]
    return [(pid, cmd) for pid, cmd, tag in tagged_processes(TEST_TAG) if tag == mine]


def wait_gone(find, limit=GONE_S):
    """Polls find() (a list of live processes) until it is empty or `limit`
    seconds have passed; returns what it found last."""
    deadline = time.time() + limit
    while True:
        left = find()
        if not left or time.time() > deadline:
            return left
        time.sleep(0.1)


def end_processes(found):
    """SIGKILL each (pid, ...) of `found` that is still there."""
    for pid, *_ in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Checks:
    """The checks of one test script, in order (`results`: each one's outcome).

    passes: what a passing check prints. "detail" (the default): its title
    and detail. "short": its detail only when shorter than 160 characters
    (long ones are program outputs that explain a failure). "title": its
    title alone, for details that only explain a failure (a program's
    stderr). "silent": nothing, for many small assertions whose titles name
    what failed; finish() still counts them."""

    PASSES = ("detail", "short", "title", "silent")

    def __init__(self, passes="detail"):
        if passes not in self.PASSES:
            raise ValueError(f"Checks(passes={passes!r}): expected one of {', '.join(self.PASSES)}")
        self.passes = passes
        self.results = []

    def __call__(self, title, ok, detail=""):
        ok = bool(ok)
        self.results.append(ok)
        if ok and self.passes == "silent":
            return
        if ok and (self.passes == "title" or (self.passes == "short" and len(detail) >= 160)):
            detail = ""
        print(f"{'ok  ' if ok else 'FAIL'} {title}{': ' + detail if detail else ''}", flush=True)

    def finish(self):
        """Checks that no process this test started is alive (ending any), then
        prints "N passed, M failed"; the exit status: 0 if every check passed, else 1."""
        # A job that just ended may still be tearing down (a rank after
        # mpiexec returned, a process mid-exit, a rank in its MPI_Finalize
        # watchdog): up to GONE_S, nothing when none is left.
        left = wait_gone(own_processes)
        self("no process this test started is still alive", not left,
             "; ".join(f"pid {pid}: {cmd}" for pid, cmd in left))
        end_processes(left)
        passed = sum(self.results)
        print(f"{passed} passed, {len(self.results) - passed} failed")
        return 0 if all(self.results) else 1
