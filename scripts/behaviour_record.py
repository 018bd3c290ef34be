#!/usr/bin/env python3
"""Records what the engine computes on a list of layouts, to compare as bytes
before and after a change that must not alter the arithmetic (issue 41: "Refactors
keep behaviour"; DEVELOPERS.md: "Same math, same bits").

For every layout of LAYOUTS it trains a small model (2 layers, C 64, batch 8
x 64, 6 steps, validation every 3) and records:
  * the SHA-256 of the final parameters and of each Adam moment (the
    checkpoint's tensor bytes; its header records settings such as threads
    that differ by design, so it is not hashed);
  * the loss, gradient-norm and validation records, as the metrics stream
    writes them;
  * the SHA-256 of the plan command's JSON for the layout (`mpi plan`), and
    the plan's text itself, so a difference can be read.
Then a sharded ZeRO-1 checkpoint of dp 2 resumed on tp 2, a run from an exported
safetensors folder (train.init_from) and evaluate's answers (the state's other
sources); and for every layout the tests train a plan too (PLANS).

    scripts/behaviour_record.py --out before.json             # record
    scripts/behaviour_record.py --out after.json --compare before.json

--compare prints one line per layout ("same" or what differs) and exits 1 if
anything differs. Records are for one machine and build type: OpenBLAS's
kernel and oneDNN's path decide the bits, so compare only records made side
by side on one machine (the file names its CPU and OpenBLAS kernel).
Needs build/stages/serial, build/stages/mpi and mpiexec.
"""
import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from layout_checks import load, records  # noqa: E402

SMALL = ["--model.block_size", "64", "--model.n_layer", "2", "--model.n_head", "4", "--model.n_embd", "64",
         "--train.batch_size", "8", "--train.seq_len", "64", "--train.steps", "6", "--train.threads", "1",
         "--train.peak_gflops", "50", "--optimizer.lr", "1e-3", "--generate.prompt_tokens", "8",
         "--generate.max_new_tokens", "4", "--data.val_fraction", "0.1", "--train.eval_every", "3",
         "--train.eval_batches", "2"]

# (name, ranks, extra settings): the layouts issue 41 lists, and a few more.
LAYOUTS = [
    ("serial fp32", 1, []),
    ("serial bf16", 1, ["--train.precision", "bf16"]),
    ("serial deterministic, 2 threads", 1, ["--train.deterministic", "true", "--train.threads", "2"]),
    ("serial recompute full", 1, ["--train.recompute", "full"]),
    ("serial accumulation of 4 micro-steps", 1, ["--parallel.microbatches", "4"]),
    ("dp 2 with buckets", 2, ["--train.grad_bucket_mb", "0.05"]),
    ("ZeRO-1 on dp 2", 2, ["--parallel.zero", "1"]),
    ("ZeRO-2 on dp 2", 2, ["--parallel.zero", "2"]),
    ("ZeRO-3 on dp 2", 2, ["--parallel.zero", "3"]),
    ("tp 2 with the vocabulary cut", 2, ["--parallel.tp", "2", "--parallel.vocab_parallel", "true"]),
    ("pp 2 gpipe", 2, ["--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.schedule", "gpipe"]),
    ("pp 2 1f1b", 2, ["--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule", "1f1b"]),
    ("pp 2 zb-h1", 2, ["--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule", "zb-h1"]),
    ("tp 2 x dp 2 ZeRO-3", 4, ["--parallel.tp", "2", "--parallel.zero", "3"]),
    ("dp 2 bf16", 2, ["--train.precision", "bf16"]),
    ("deterministic dp 2 ZeRO-1", 2, ["--train.deterministic", "true", "--parallel.zero", "1"]),
    ("deterministic tp 2 x pp 2", 4, ["--train.deterministic", "true", "--parallel.tp", "2", "--parallel.pp", "2",
                                      "--parallel.microbatches", "4"]),
    # Issue 69's additions: context and sequence parallelism, the virtual-stage schedules.
    ("cp 2", 2, ["--parallel.cp", "2"]),
    ("tp 2 + sequence parallelism", 2, ["--parallel.tp", "2", "--parallel.sequence_parallel", "true"]),
    ("pp 2 interleaved-1f1b, 2 virtual stages", 2, ["--model.n_layer", "4", "--parallel.pp", "2",
                                                   "--parallel.microbatches", "4", "--parallel.schedule",
                                                   "interleaved-1f1b", "--parallel.virtual_stages", "2"]),
    ("pp 2 zb-v, 2 virtual stages", 2, ["--model.n_layer", "4", "--parallel.pp", "2", "--parallel.microbatches", "4",
                                        "--parallel.schedule", "zb-v", "--parallel.virtual_stages", "2"]),
]

# Plans only (the engine's statement of memory and traffic), for layouts the tests train.
PLANS = [
    ("plan tp 2 spd", 2, ["--parallel.tp", "2", "--parallel.block_types", "spd,spd"]),
    ("plan tp 2 x pp 2 x dp 2 ZeRO-1", 8, ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.zero", "1",
                                           "--parallel.microbatches", "2"]),
    ("plan dp 4 ZeRO-3 recompute full", 4, ["--parallel.zero", "3", "--train.recompute", "full"]),
    ("plan deterministic pp 2 x dp 2 ZeRO-2", 4, ["--train.deterministic", "true", "--parallel.pp", "2",
                                                  "--parallel.zero", "2", "--parallel.microbatches", "2"]),
    ("plan pp 2 zb-h1 bf16", 2, ["--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule",
                                 "zb-h1", "--train.precision", "bf16"]),
]


def sha(data):
    return hashlib.sha256(data).hexdigest()


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
    flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
    return {"cpu": cpu, "avx512": "avx512f" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "host": platform.node()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="the record to write (JSON)")
    ap.add_argument("--compare", help="an earlier record: print what differs, exit 1 if anything does")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--mpiexec", default=shutil.which("mpiexec") or "mpiexec")
    ap.add_argument("--set", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                    help="a setting added to every command (e.g. --set train.gemm openblas: the products as before "
                         "issue 45, where the default now chooses per shape); recorded in the file")
    a = ap.parse_args()
    if os.path.exists(a.out):
        sys.exit(f"behaviour_record: error: {a.out} exists; give a new file (records are never overwritten)")
    if a.compare and not os.path.isfile(a.compare):
        sys.exit(f"behaviour_record: error: --compare {a.compare}: no such file")
    serial, mpi = os.path.join(a.build, "stages", "serial"), os.path.join(a.build, "stages", "mpi")
    for p in (serial, mpi):
        if not os.access(p, os.X_OK):
            sys.exit(f"behaviour_record: error: {p} is not built")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    common = ["--config", os.path.join(ROOT, "configs", "original.yaml"), *SMALL]
    for key, value in a.set:
        common += [f"--{key}", value]
    work = tempfile.mkdtemp(prefix="behaviour_")
    result = {"machine": machine(), "settings": a.set, "layouts": {}}

    def run(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            sys.exit(f"behaviour_record: error: {' '.join(cmd)}\n{r.stderr[-800:]}")
        return r

    def plan_of(n, extra):
        r = run([a.mpiexec, "-n", "1", mpi, "plan", *common, *extra, "--ranks", str(n)])
        return {"plan_sha256": sha(r.stdout.encode()), "plan": json.loads(r.stdout)}

    def record_run(d, n, extra):
        ck = load(os.path.join(d, "checkpoint.bin"))
        return {"ranks": n, "settings": extra,
                "params_sha256": sha(ck.params), "m_sha256": sha(ck.m), "v_sha256": sha(ck.v),
                "steps": [[s["loss"], s["grad_norm"]] for s in records(d, "step")],
                "evals": [s["val_loss"] for s in records(d, "eval")]}

    for i, (name, n, extra) in enumerate(LAYOUTS, 1):
        print(f"[{i}/{len(LAYOUTS) + len(PLANS)}] {name}", file=sys.stderr, flush=True)
        d = os.path.join(work, f"run{i}")
        run([serial, "train", *common, *extra, "--out", d] if n == 1
            else [a.mpiexec, "-n", str(n), mpi, "train", *common, *extra, "--out", d])
        result["layouts"][name] = {**record_run(d, n, extra), **plan_of(n, extra)}
    # Runs that start from a file (issue 69: the state's sources): a sharded ZeRO-1 checkpoint of dp 2 after 3
    # steps resumed on tp 2; training from an exported safetensors folder (train.init_from); evaluate's answer
    # for a checkpoint and for the folder (its time left out).
    print("[+] sources: sharded resume on another layout, init_from safetensors, evaluate", file=sys.stderr,
          flush=True)
    d = os.path.join(work, "sharded")
    run([a.mpiexec, "-n", "2", mpi, "train", *common, "--parallel.zero", "1", "--train.checkpoint_format",
         "sharded", "--train.steps", "3", "--out", d])
    resume_extra = ["--parallel.tp", "2", "--resume", os.path.join(d, "checkpoints", "step-00000003")]
    run([a.mpiexec, "-n", "2", mpi, "train", *common, *resume_extra, "--out", d])
    result["layouts"]["sharded dp 2 ZeRO-1 resumed on tp 2"] = record_run(
        d, 2, [*resume_extra[:-1], os.path.relpath(resume_extra[-1], work)])
    hf = os.path.join(work, "hf")
    run([serial, "export", "--checkpoint", os.path.join(work, "run1", "checkpoint.bin"), "--format", "hf",
         "--out", hf])
    d = os.path.join(work, "init_from")
    # The folder is GPT-2's layout, with q, k, v biases (zeros here): the run's model has them too.
    run([serial, "train", *common, "--model.bias", "all", "--train.init_from", hf, "--out", d])
    result["layouts"]["serial from an exported safetensors folder"] = record_run(
        d, 1, ["--model.bias", "all", "--train.init_from", "hf"])
    for what, model in (("checkpoint", os.path.join(work, "run1", "checkpoint.bin")),
                        ("training from safetensors", os.path.join(d, "checkpoint.bin"))):
        r = run([serial, "evaluate", "--model", model, "--data", os.path.join(ROOT, "data", "tiny_tales.txt"),
                 "--train.batch_size", "8", "--train.seq_len", "64", "--train.threads", "1", "--batches", "2"])
        answer = json.loads(r.stdout)
        answer.pop("seconds", None)
        answer["model"] = os.path.relpath(answer["model"], work)
        result["layouts"][f"evaluate: {what}"] = {"ranks": 1, "settings": [], "answer": answer}

    for i, (name, n, extra) in enumerate(PLANS, len(LAYOUTS) + 1):
        print(f"[{i}/{len(LAYOUTS) + len(PLANS)}] {name}", file=sys.stderr, flush=True)
        result["layouts"][name] = {"ranks": n, "settings": extra, **plan_of(n, extra)}
    shutil.rmtree(work)
    with open(a.out + ".tmp", "w") as f:
        json.dump(result, f, indent=1)
    os.rename(a.out + ".tmp", a.out)
    print(f"behaviour_record: {len(result['layouts'])} layouts recorded in {a.out}", file=sys.stderr)
    if not a.compare:
        return 0
    with open(a.compare) as f:
        before = json.load(f)
    if before["machine"] != result["machine"]:
        print(f"note: recorded on another machine or kernel: {before['machine']} against {result['machine']}")
    differ = 0
    for name, now in result["layouts"].items():
        was = before["layouts"].get(name)
        if was is None:
            print(f"new   {name}")
            continue
        keys = [k for k in now if k != "plan" and now.get(k) != was.get(k)]
        if not keys and now.get("plan") != was.get("plan"):
            keys = ["plan"]
        differ += bool(keys)
        print(f"{'same ' if not keys else 'DIFF '} {name}" + (f": {', '.join(keys)}" if keys else ""))
    for name in before["layouts"]:
        if name not in result["layouts"]:
            print(f"gone  {name}")
            differ += 1
    print(f"{len(result['layouts']) - differ} same, {differ} different")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
