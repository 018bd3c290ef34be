#!/usr/bin/env python3
"""The CUDA stages end to end (GPU suite): equivalence and interchangeability.

  * Without a CUDA device the cuda stage must say "no CUDA device" and exit 3;
    the test then reports itself skipped (exit 77) with that reason.
  * cuda vs serial: the same configuration and seed for 8 steps; every step's
    loss within 2e-4 relative and every final weight within 2e-4 absolute
    (different reduction orders in FP32, compounded over 8 updates).
  * mpi_cuda against cuda: R = 2 with one allreduce and with buckets,
    host-staged always and through NCCL where the machine has a GPU per rank
    (tests/nccl_test.cpp runs NCCL itself on one GPU). The ranks see exactly
    the serial batch, so the same tolerances hold.
  * Checkpoints are interchangeable: a cuda checkpoint generates the same
    greedy text on the serial stage and vice versa, and a cuda run resumed
    from its own checkpoint continues the loss curve of the uninterrupted run.

usage: cuda_stage_test.py --serial PATH --cuda PATH [--mpi-cuda PATH --mpiexec PATH] --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checkpoint_file import read_params  # noqa: E402
from checks import Checks  # noqa: E402


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if r["event"] == "step"]


def max_rel(a, b):
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("serial", "cuda", "corpus"):
        ap.add_argument("--" + k, required=True)
    ap.add_argument("--mpi-cuda")
    ap.add_argument("--mpiexec")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="cuda_stage_test_")
    # OpenMPI refuses to run as root unless told; harmless for MPICH.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    common = ["--data.corpus", os.path.abspath(a.corpus), "--model.block_size", "64", "--model.n_layer", "2",
              "--model.n_head", "2", "--model.n_embd", "64", "--train.batch_size", "8", "--train.seq_len", "64",
              "--train.steps", "8", "--train.threads", "1", "--train.peak_gflops", "50", "--optimizer.lr", "1e-3",
              "--generate.prompt_tokens", "16", "--generate.max_new_tokens", "12"]
    check = Checks()

    def run(cmd, extra_env=None):
        return subprocess.run(cmd, capture_output=True, text=True, env=dict(env, **(extra_env or {})), timeout=600)

    cuda_dir = os.path.join(work, "cuda")
    r = run([a.cuda, "train", "--out", cuda_dir] + common)
    if r.returncode == 3 and "no CUDA device" in r.stderr:
        print(f"SKIP: {r.stderr.strip().splitlines()[-1]}")
        return 77
    if r.returncode != 0:
        check("the cuda stage run", False, f"exit {r.returncode}: {r.stderr[-3000:]}")
        return check.finish()
    serial_dir = os.path.join(work, "serial")
    r = run([a.serial, "train", "--out", serial_dir] + common)
    if r.returncode != 0:
        check("the serial reference run", False, r.stderr[-2000:])
        return check.finish()

    ref, got = losses(serial_dir), losses(cuda_dir)
    rel = max_rel(got, ref)
    check(f"cuda: {len(got)}-step loss curve equals serial", len(got) == len(ref) and rel <= 2e-4,
          f"max relative difference {rel:.2e}, tolerance 2e-4")
    pc, ps = read_params(os.path.join(cuda_dir, "checkpoint.bin")), read_params(os.path.join(serial_dir, "checkpoint.bin"))
    worst = max(abs(x - y) for x, y in zip(pc, ps))
    check("cuda: final weights equal serial", len(pc) == len(ps) and worst <= 2e-4, f"max |diff| {worst:.2e}")

    # Checkpoints across stages: the same greedy text either way.
    for trained, other, name in ((cuda_dir, a.serial, "cuda -> serial"), (serial_dir, a.cuda, "serial -> cuda")):
        ckpt = os.path.join(trained, "checkpoint.bin")
        g1 = run([a.cuda if other == a.serial else a.serial, "generate", "--checkpoint", ckpt, "--prompt", "once upon a",
                  "--generate.max_new_tokens", "12"])
        g2 = run([other, "generate", "--checkpoint", ckpt, "--prompt", "once upon a", "--generate.max_new_tokens", "12"])
        check(f"checkpoint {name}: generation runs on both", g1.returncode == 0 and g2.returncode == 0,
              (g1.stderr + g2.stderr)[-1000:])
        check(f"checkpoint {name}: the same greedy text", g1.stdout == g2.stdout and g1.stdout.strip() != "",
              f"{g1.stdout.strip()!r} vs {g2.stdout.strip()!r}")

    # Resume: 4 steps, then 4 more from the checkpoint, against the 8-step run.
    half = os.path.join(work, "half")
    r = run([a.cuda, "train", "--out", half] + common + ["--train.steps", "4"])
    r2 = run([a.cuda, "train", "--out", half + "-resumed", "--resume", os.path.join(half, "checkpoint.bin")] + common)
    ok = r.returncode == 0 and r2.returncode == 0
    cont = losses(half) + losses(half + "-resumed") if ok else []
    check("cuda: resumed run continues the uninterrupted curve", ok and cont == got,
          (r.stderr + r2.stderr)[-1000:] if not ok else f"{cont} vs {got}")

    if a.mpi_cuda and a.mpiexec:
        # Two ranks: host-staged always; through NCCL only with a GPU per rank
        # (NCCL refuses two ranks on one device), decided before running so
        # that an NCCL failure on a machine with the GPUs is a failure.
        try:
            gpus = len([l for l in subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines()
                        if l.startswith("GPU ")])
        except OSError:
            gpus = 0
        hostfile = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hostfiles", "localhost")
        for n, mode, bucket in ((2, "host", "0"), (2, "host", "0.05"), (2, "nccl", "0"), (2, "nccl", "0.05")):
            if mode == "nccl" and gpus < n:
                print(f"skip R={n} through NCCL, bucket {bucket} MiB: {gpus} GPU(s) listed by nvidia-smi -L, NCCL needs one per rank")
                continue
            d = os.path.join(work, f"mpi_cuda-{n}-{mode}-{bucket}")
            # The first run also checks its placement against hostfiles/localhost.
            extra = ["--hostfile", hostfile] if (mode, bucket) == ("host", "0") else []
            r = run([a.mpiexec, "-n", str(n), a.mpi_cuda, "train", "--out", d, "--train.grad_bucket_mb", bucket] + common
                    + extra, {"GPT2_CUDA_ALLREDUCE": mode})
            mode = f"{mode}, bucket {bucket} MiB"
            if r.returncode != 0:
                check(f"mpi_cuda R={n} ({mode}) runs", False, r.stderr[-2000:])
                continue
            m = losses(d)
            rel = max_rel(m, got)
            check(f"mpi_cuda R={n} ({mode}): loss curve equals cuda", len(m) == len(got) and rel <= 2e-4,
                  f"max relative difference {rel:.2e}, tolerance 2e-4")
            pm = read_params(os.path.join(d, "checkpoint.bin"))
            worst = max(abs(x - y) for x, y in zip(pm, pc))
            check(f"mpi_cuda R={n} ({mode}): final weights equal cuda", len(pm) == len(pc) and worst <= 2e-4,
                  f"max |diff| {worst:.2e}")

    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
