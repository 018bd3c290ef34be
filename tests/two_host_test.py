#!/usr/bin/env python3
"""The MPI stage across two "hosts": two network namespaces joined by a veth pair.

  * Namespaces A (10.77.0.1/24) and B (10.77.0.2/24), each with its loopback
    and one end of a veth pair (named veth0 in both), a hosts file naming
    both (/etc/netns/NS/hosts, which `ip netns exec` mounts over /etc/hosts),
    and, through scripts/netns_launch, a hostname of its own.
  * An MPICH hostfile names the two addresses, one slot each. mpiexec runs
    inside A and starts B's proxy with scripts/netns_launch in place of ssh,
    so its control traffic and the ranks' traffic can only cross the veth.
    UCX, MPICH's transport here, is held to TCP on veth0: both namespaces
    share one kernel, and UCX would otherwise move the gradients through
    shared memory.
  * The serial stage and the MPI stage (2 ranks, one per host, --hostfile
    given to the stage too, so it checks the placement) train 10 steps of
    configs/small.yaml: every step's loss must equal serial within 1e-5
    absolute. The veth's byte counters must show at least half a gradient
    per step in each direction (what a 2-rank allreduce moves at the least).
  * Given a hostfile that lists host A only, the stage must refuse: it sees
    that its rank on B runs on a machine the file does not list.
  * Afterwards the namespaces, the veth pair and /etc/netns/NS are gone.

Needs root and a working `ip netns`; otherwise prints the reason and exits
77 (skipped). Every command has a timeout, and the namespaces are removed in
a finally block (after killing whatever still runs in them).

usage: two_host_test.py --serial PATH --mpi PATH --mpiexec PATH --launcher PATH
                        --config PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checks import Checks

SKIP = 77
STEPS = 10
IFACE = "veth0"  # the veth end's name inside each namespace (same name in both)
ADDR_A, ADDR_B = "10.77.0.1", "10.77.0.2"
# Seconds mpiexec may take to exit once the run's results are complete. The
# stage's finalize watchdog (kFinalizeGrace, core/parallel/mpi/mpi_comm.cpp)
# ends a rank that hangs in MPI_Finalize after 3 s: that constant and 30 s of
# slack for a slow or busy machine; a job still running after this is a hang.
# (What is checked is that it ended by itself, not how soon.)
FINALIZE_GRACE = 3 + 30
# The deadline of a set-up command (ip, instant here): only where a hang is decided.
SETUP_S = 60


class SetupError(Exception):
    pass


def sh(cmd, timeout=SETUP_S):
    """Runs a set-up command; a failure raises SetupError with its message."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SetupError(f"'{shlex.join(cmd)}' took over {timeout} s")
    if r.returncode != 0:
        raise SetupError(f"'{shlex.join(cmd)}' failed (exit {r.returncode}): {r.stderr.strip()}")
    return r.stdout


def veth_bytes(ns):
    """(received, sent) bytes of the veth end in namespace `ns`."""
    s = json.loads(sh(["ip", "-n", ns, "-s", "-j", "link", "show", IFACE]))[0]["stats64"]
    return s["rx"]["bytes"], s["tx"]["bytes"]


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if r["event"] == "step"]


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=SETUP_S)


class TwoHosts:
    """Two namespaces joined by a veth pair; remove() undoes whatever was made."""

    def __init__(self, tag):
        self.ns = [f"gpt2a{tag}", f"gpt2b{tag}"]
        self.veth = [f"gpt2va{tag}", f"gpt2vb{tag}"]  # names in the root namespace, before the move
        self.made_ns = []

    def create(self):
        for ns in self.ns:
            sh(["ip", "netns", "add", ns])
            self.made_ns.append(ns)
        sh(["ip", "link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1]])
        hosts = f"127.0.0.1 localhost\n{ADDR_A} {self.ns[0]}\n{ADDR_B} {self.ns[1]}\n"
        for ns, veth, addr in zip(self.ns, self.veth, (ADDR_A, ADDR_B)):
            sh(["ip", "link", "set", veth, "netns", ns])
            sh(["ip", "-n", ns, "link", "set", veth, "name", IFACE])
            sh(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", IFACE])
            sh(["ip", "-n", ns, "link", "set", "lo", "up"])
            sh(["ip", "-n", ns, "link", "set", IFACE, "up"])
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(hosts)

    def remove(self):
        """Kills what still runs inside, deletes the namespaces (and with them
        the veth pair) and their /etc/netns files. Never raises."""
        for ns in self.made_ns:
            try:
                pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                      timeout=SETUP_S).stdout.split()
                for pid in pids:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=SETUP_S)
            except subprocess.TimeoutExpired:
                print(f"warning: removing namespace {ns} timed out", file=sys.stderr)
        for veth in self.veth:  # left in the root namespace if set-up stopped before the move
            subprocess.run(["ip", "link", "del", veth], capture_output=True, timeout=SETUP_S)
        for ns in self.ns:
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)

    def leftovers(self):
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=SETUP_S).stdout
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=SETUP_S).stdout
        left = [ns for ns in self.ns if ns in listed.split() or os.path.exists(f"/etc/netns/{ns}")]
        return left + [v for v in self.veth if v + "@" in links or v + ":" in links]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("serial", "mpi", "mpiexec", "launcher", "config", "corpus"):
        ap.add_argument("--" + k, required=True)
    a = ap.parse_args()
    for k in ("serial", "mpi", "mpiexec", "launcher", "config", "corpus"):
        setattr(a, k, os.path.abspath(getattr(a, k)))

    if os.geteuid() != 0:
        print("skipped: needs root (ip netns add, ip netns exec, unshare --uts)")
        return SKIP
    missing = [p for p in ("ip", "unshare", "hostname") if not shutil.which(p)]
    if missing:
        print(f"skipped: {', '.join(missing)} not found")
        return SKIP

    check = Checks()

    work = tempfile.mkdtemp(prefix="two_host_test_")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    common = ["--config", a.config, "--data.corpus", a.corpus, "--train.steps", str(STEPS),
              "--train.threads", "1"]
    hosts = TwoHosts(os.getpid())
    started = time.time()
    try:
        try:
            hosts.create()
        except SetupError as e:
            if not hosts.made_ns:  # not even one namespace: this machine cannot run the test
                print(f"skipped: cannot create a network namespace: {e}")
                return SKIP
            raise

        hostfile = os.path.join(work, "hosts")
        with open(hostfile, "w") as f:
            f.write(f"# the two namespaces, one rank each\n{ADDR_A}:1\n{ADDR_B}:1\n")
        env["NETNS_LAUNCH_MAP"] = f"{ADDR_A}={hosts.ns[0]},{ADDR_B}={hosts.ns[1]}"

        # The runs' deadlines (60 s, and 120 s for a job across the namespaces) decide a hang only: the serial
        # run takes under a second here, the job 0.4 to 4 s.
        serial_dir = os.path.join(work, "serial")
        r = subprocess.run([a.serial, "train", "--out", serial_dir] + common, capture_output=True, text=True,
                           env=env, timeout=60)
        if r.returncode != 0:
            check("the serial reference run", False, r.stderr[-2000:])
            return check.finish()
        ref = losses(serial_dir)

        def mpi_job(out_dir, stage_hostfile, timeout=120):
            """Runs mpiexec inside namespace A, as a process group of its own
            (so that everything it started can be killed). Returns (exit code
            or None if killed, stderr, seconds, whether it was stuck in finalize)."""
            # -iface: Hydra advertises A's veth address to B's proxy. UCX_TLS /
            # UCX_NET_DEVICES: the ranks talk TCP over the veth, not shared memory.
            job = [a.mpiexec, "-launcher", "ssh", "-launcher-exec", a.launcher, "-iface", IFACE,
                   "-f", hostfile, "-n", "2", "-genv", "UCX_TLS", "tcp", "-genv", "UCX_NET_DEVICES", IFACE,
                   a.mpi, "train", "--out", out_dir, "--hostfile", stage_hostfile] + common
            log = os.path.join(work, os.path.basename(out_dir) + ".stderr")
            start = time.time()
            with open(log, "w") as err:
                # netns_launch, like ssh, hands its words to a shell: quote them.
                proc = subprocess.Popen([a.launcher, ADDR_A, shlex.join(job)], stdout=subprocess.DEVNULL,
                                        stderr=err, env=env, start_new_session=True)
                finished_at, stuck = None, False
                while proc.poll() is None:
                    now = time.time()
                    if finished_at is None and os.path.exists(os.path.join(out_dir, "metrics.jsonl")):
                        finished_at = now  # rank 0 has written everything: only MPI_Finalize is left
                    if now - start > timeout or (finished_at and now - finished_at > FINALIZE_GRACE):
                        stuck = finished_at is not None
                        kill_group(proc)
                        break
                    time.sleep(0.05)
            with open(log) as f:
                return (None if proc.returncode < 0 else proc.returncode), f.read(), time.time() - start, stuck

        before = veth_bytes(hosts.ns[0])
        mpi_dir = os.path.join(work, "mpi2")
        code, err, secs, stuck = mpi_job(mpi_dir, hostfile)
        after = veth_bytes(hosts.ns[0])
        ran = os.path.exists(os.path.join(mpi_dir, "metrics.jsonl"))
        # When a watchdog ended a rank stuck in MPI_Finalize (below), mpiexec's
        # own status is not the job's: 255 ("bad termination") or 141 (its
        # SIGPIPE writing to the ended rank) were seen. Accepted only with the
        # watchdog's note; the curve is checked below either way.
        watchdog = "MPI_Finalize did not return" in err
        check("R=2 across the two namespaces through the hostfile runs and ends by itself",
              ran and not stuck and (code == 0 or watchdog),
              f"exit {code} after {secs:.1f} s, killed {stuck}" + ("" if ran else f": {err[-2000:]}"))
        if watchdog:
            # MPICH 4.0.2 (ch4:ucx) with UCX 1.13.1 over TCP: a rank can wait
            # forever in MPI_Finalize for an acknowledgement from a peer that
            # has already left for the final PMI barrier (also on one host with
            # UCX_TLS=tcp). The watchdog ended it; the results were complete.
            print("note: a rank hung in MPI_Finalize and its watchdog ended it (MPICH 4.0.2 ch4:ucx over UCX TCP; "
                  "see docs/mpi_stage.md)")
        if ran:
            got = losses(mpi_dir)
            diff = max((abs(x - y) for x, y in zip(got, ref)), default=float("inf"))
            check(f"R=2 two-host {len(got)}-step loss curve equals serial", len(got) == len(ref) == STEPS
                  and diff <= 1e-5, f"max |difference| {diff:.2e}, tolerance 1e-5")
            with open(os.path.join(mpi_dir, "metrics.jsonl")) as f:
                summary = [json.loads(l) for l in f][-1]
            check("the metrics record 2 ranks", summary.get("ranks") == 2, f"ranks {summary.get('ranks')}")
        # The model's parameter count, from the serial stage's first line.
        m = re.search(r"\((\d+) parameters\)", r.stdout + r.stderr)
        n_params = int(m.group(1)) if m else 0
        rx, tx = after[0] - before[0], after[1] - before[1]
        need = STEPS * n_params * 4 // 2
        check("the gradients crossed the veth", n_params > 0 and rx >= need and tx >= need,
              f"{rx} bytes in, {tx} bytes out at {ADDR_A} during the run; at least {need} each way expected "
              f"(half of {STEPS} gradients of {n_params} floats)")

        # The stage's placement check sees two machines: a hostfile listing
        # host A alone must be refused by the rank on B.
        only_a = os.path.join(work, "only-a")
        with open(only_a, "w") as f:
            f.write(f"{ADDR_A}:2\n")
        code, err, secs, _ = mpi_job(os.path.join(work, "refused"), only_a)
        lines = [l for l in err.splitlines() if "error:" in l]
        check("a hostfile without host B is refused", code not in (0, None) and len(lines) == 1
              and "does not list" in err, f"exit {code} after {secs:.1f} s: {lines}")
    except SetupError as e:
        check("setting up the two namespaces", False, str(e))
    except subprocess.TimeoutExpired as e:
        check("every command within its time limit", False, str(e))
    finally:
        hosts.remove()
    left = hosts.leftovers()
    check("the namespaces, the veth pair and /etc/netns entries are gone", not left, f"left: {left}" if left else "")
    print(f"({time.time() - started:.1f} s)")
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
