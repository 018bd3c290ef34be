#!/usr/bin/env python3
"""How fast this machine's disk takes a checkpoint-sized write: N processes each
write G GiB of random bytes to a file of their own in DIR and fsync it; the
time from the start to the last fsync, and the MiB/s that gives, per try.

usage: disk_write_bw.py [--dir DIR] [--writers N] [--gib G] [--tries K]

The files are removed after each try. Used for the preemption budget in
docs/guarantees.md ("Signals and preemption"): a stop must write the run's
state before the scheduler's kill.
"""
import argparse
import os
import sys
import time
from multiprocessing import Process

CHUNK = 64 << 20


def write(path, gib, block):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for _ in range(gib * (1 << 30) // CHUNK):
            os.write(fd, block)
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp", help="the folder to write in [default: /tmp]")
    ap.add_argument("--writers", type=int, default=4, help="processes writing at once [default: 4]")
    ap.add_argument("--gib", type=int, default=2, help="GiB each writer writes [default: 2]")
    ap.add_argument("--tries", type=int, default=2, help="tries [default: 2]")
    a = ap.parse_args()
    if not (1 <= a.writers <= 64 and 1 <= a.gib <= 64 and 1 <= a.tries <= 100):
        ap.error("--writers 1-64, --gib 1-64, --tries 1-100")
    if not os.path.isdir(a.dir):
        ap.error(f"--dir: '{a.dir}' is not a folder")
    block = os.urandom(CHUNK)
    for t in range(a.tries):
        paths = [os.path.join(a.dir, f"disk_write_bw.{os.getpid()}.{i}") for i in range(a.writers)]
        t0 = time.time()
        procs = [Process(target=write, args=(p, a.gib, block)) for p in paths]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        dt = time.time() - t0
        for p in paths:
            if os.path.exists(p):
                os.remove(p)
        if any(p.exitcode != 0 for p in procs):
            print("disk_write_bw: a writer failed (no room?)", file=sys.stderr)
            return 1
        print(f"try {t + 1}: {a.writers} writer(s) x {a.gib} GiB, written and synced in {dt:.1f} s: "
              f"{a.writers * a.gib * 1024 / dt:.0f} MiB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
