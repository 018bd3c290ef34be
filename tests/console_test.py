#!/usr/bin/env python3
"""A run never waits for its own progress lines (DESIGN.md, contract 9;
util/console.h).

  * A serial run of 2,000 steps whose stdout and stderr are one pipe that
    nobody reads (its lines are some 3 times a pipe's 64 KiB; more steps
    where pages, and so pipes, are larger) finishes, exits 0, writes every
    step's record, its checkpoint and its summary; every step's line reached
    the pipe or is counted in the summary as dropped (some, since they cannot
    all fit), and what did reach the pipe is whole lines.
  * The same run with endless steps, sent SIGTERM once its pipe is half full
    and it has gone on for as many steps again (far more lines than the pipe
    and the console's buffer hold), stops as any run does: the
    checkpoint written, the stop recorded, exit status 4.
  * A step's MFU above 100% (a train.peak_gflops below the machine's) is said
    once, not on every step's line, and kept in the summary.

Waits are for events (the process's end, the pipe's fill, the metrics
stream's steps), each bounded generously (minutes) for a slow or busy
machine; the amounts of output do not depend on the machine's speed.

usage: console_test.py --serial PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import array
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import termios
import time

from checks import Checks

F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
PATIENCE_S = 300  # for what takes about a second here: a machine 5x slower and busy still makes it


def records(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        path += ".partial"  # an unfinished run's stream (train/run/metrics.h)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def in_pipe(fd):
    n = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serial", required=True)
    ap.add_argument("--corpus", required=True)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="console_test_")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    tiny = ["--data.corpus", os.path.abspath(a.corpus), "--model.block_size", "16", "--model.n_layer", "1",
            "--model.n_head", "2", "--model.n_embd", "16", "--train.batch_size", "2", "--train.seq_len", "16",
            "--train.threads", "1", "--generate.prompt_tokens", "8", "--generate.max_new_tokens", "4"]
    check = Checks()

    def unread(out, steps, extra=()):
        """The run with stdout and stderr on one pipe this test never reads; (process, read end)."""
        r, w = os.pipe()
        p = subprocess.Popen([a.serial, "train", "--out", out, "--train.steps", str(steps), *tiny, *extra],
                             stdout=w, stderr=w, env=env)
        os.close(w)
        return p, r

    # The pipe's size: 64 KiB with 4 KiB pages (16 of them), more with larger
    # pages; the amounts of output scale with it (2,000 lines of about 100
    # bytes for 64 KiB).
    probe_r, probe_w = os.pipe()
    pipe_bytes = fcntl.fcntl(probe_w, F_GETPIPE_SZ)
    os.close(probe_r)
    os.close(probe_w)
    lines_n = 2000 * max(1, pipe_bytes // (64 << 10))

    # 1. Lines some 3 times the pipe into a pipe nobody reads. A peak of 1e-6
    # GFLOP/s puts every step's MFU above 100%: the note is said once.
    d = os.path.join(work, "unread")
    p, r = unread(d, lines_n, ["--train.peak_gflops", "1e-6"])
    try:
        code = p.wait(timeout=PATIENCE_S)
    except subprocess.TimeoutExpired:
        p.kill()
        code = p.wait()
        check("a run into an unread pipe finishes", False, f"still running after {PATIENCE_S} s (blocked on output)")
        return check.finish()
    held = in_pipe(r)
    text = os.read(r, held).decode(errors="replace") if held else ""
    os.close(r)
    rec = records(d)
    steps = [x for x in rec if x["event"] == "step"]
    summary = rec[-1] if rec and rec[-1]["event"] == "summary" else {}
    dropped = summary.get("console_dropped_lines", 0)
    check(f"{lines_n:,} steps into a pipe nobody reads: exit 0, every step recorded, checkpoint and summary written",
          code == 0 and len(steps) == lines_n and summary.get("status") == "ok"
          and os.path.isfile(os.path.join(d, "checkpoint.bin")),
          f"exit {code}, {len(steps)} step records, summary {bool(summary)}")
    whole = text.endswith("\n")  # every line in the pipe complete
    lines = text.split("\n")[:-1]  # split on "\n" alone (splitlines also cuts at other control characters)
    step_lines = sum(l.startswith("step ") for l in lines)
    # Every step's line reached the pipe or is counted: the summary is written
    # once the console has given up what waited (console::kExitStall).
    check("the summary counts the lines the console dropped, and the pipe holds whole lines",
          dropped > 0 and held > pipe_bytes // 2 and whole
          and lines_n <= step_lines + dropped <= lines_n + 20,
          f"{dropped} dropped, {len(lines)} lines ({step_lines} steps', {held} bytes) in the pipe")
    over = [l for l in lines if "above 100%" in l]
    check("an MFU above 100% is said once, not on every step's line, and kept in the summary",
          len(over) == 1 and "said once" in over[0] and sum(l.startswith("step ") for l in lines) > 100
          and "above 100%" in summary.get("provenance", {}).get("mfu_note", ""),
          f"{len(over)} line(s) say it; mfu_note {summary.get('provenance', {}).get('mfu_note')!r}")

    # 2. Endless steps into an unread pipe, stopped by SIGTERM once the pipe
    # is half full and as many steps again have run past it.
    d = os.path.join(work, "stopped")
    p, r = unread(d, 10**8)
    deadline, full_at, stepped = time.time() + PATIENCE_S, None, 0
    while time.time() < deadline and p.poll() is None:
        stepped = sum(x["event"] == "step" for x in records(d))
        # Half the pipe taken: another lines_n lines (some 3 times the pipe)
        # are more than the rest of the pipe and the console's 64 KiB buffer hold.
        if full_at is None and in_pipe(r) >= pipe_bytes // 2:
            full_at = stepped
        if full_at is not None and stepped >= full_at + lines_n:
            break
        time.sleep(0.05)
    ran_past = full_at is not None and stepped >= full_at + lines_n and p.poll() is None
    p.send_signal(signal.SIGTERM)
    try:
        code = p.wait(timeout=PATIENCE_S)
    except subprocess.TimeoutExpired:
        p.kill()
        code = p.wait()
    os.close(r)
    rec = records(d)
    stops = [x for x in rec if x["event"] == "preempted"]
    check("endless steps into an unread pipe run on past the full pipe and buffer, and SIGTERM stops them: exit 4, the stop "
          "recorded, the checkpoint written",
          ran_past and code == 4 and len(stops) == 1 and stops[0].get("signal") == "SIGTERM"
          and os.path.isdir(os.path.join(d, "checkpoints")) and os.listdir(os.path.join(d, "checkpoints")),
          f"pipe half full at step {full_at}, signalled at step {stepped}, exit {code}, records {stops}")
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
