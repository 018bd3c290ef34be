"""What the parallel-layout tests share (tensor_parallel_test.py,
pipeline_test.py, zero_test.py, arch_variants_test.py): their opening
(arguments, a work folder, the checks, the programs), reading a run's metrics and checkpoint, a check list
that prints a line per check, running the stage programs, and the
comparison of a layout's run with the serial reference (losses and
validation losses within 1e-5 relative, final weights within 1e-5 absolute).
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checkpoint_file import load  # noqa: E402,F401  (re-exported for the tests)
from checks import Checks, with_hooks  # noqa: E402  (LayoutTest's; re-exported for the tests)


def parse_args(doc):
    """The layout tests' arguments: --serial, --mpi, --mpiexec, --corpus."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    for k in ("serial", "mpi", "mpiexec", "corpus"):
        ap.add_argument("--" + k, required=True)
    return ap.parse_args()


class LayoutTest:
    """A layout test's opening: its arguments (parse_args), a work folder,
    the check list and the stage programs; out(name) is a path in the folder."""

    def __init__(self, doc, prefix):
        self.a = parse_args(doc)
        self.work = tempfile.mkdtemp(prefix=prefix)
        self.check = Checks()
        self.programs = Programs(self.a.mpiexec, self.a.mpi)

    def out(self, name):
        return os.path.join(self.work, name)

    def serial(self, args, title="serial reference"):
        """The serial stage trained with `args` into out("serial"), checked; its result."""
        r = self.programs.run([self.a.serial, "train", *args, "--out", self.out("serial")])
        self.check(title, r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
        return r


def records(run_dir, event):
    """The metrics stream's records of one kind ("step", "eval", "summary")."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if r["event"] == event]


def floats(raw):
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def common_args(corpus, B, T, C, L, NH, steps=10):
    """The small configuration every layout trains: validation held out and evaluated every 5 steps."""
    return ["--data.corpus", os.path.abspath(corpus), "--model.block_size", str(T), "--model.n_layer", str(L),
            "--model.n_head", str(NH), "--model.n_embd", str(C), "--train.batch_size", str(B),
            "--train.seq_len", str(T), "--train.steps", str(steps), "--train.threads", "1",
            "--train.peak_gflops", "50", "--optimizer.lr", "1e-3", "--generate.prompt_tokens", "8",
            "--generate.max_new_tokens", "4", "--data.val_fraction", "0.1", "--train.eval_every", "5",
            "--train.eval_batches", "2"]


class Programs:
    """The stage programs, run with one OpenBLAS and OpenMP thread."""

    def __init__(self, mpiexec, mpi):
        self.env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        self.mpiexec, self.mpi_exe = mpiexec, mpi

    def run(self, cmd, timeout=300, hooks=None):
        """`hooks`: test hooks to install (checks.with_hooks), e.g. {"fail_rank": 0, "fail_step": 6}."""
        return subprocess.run(cmd, capture_output=True, text=True, env=with_hooks(self.env, hooks), timeout=timeout)

    def mpi(self, n, args, timeout=300, command="train", hooks=None):
        return self.run([self.mpiexec, "-n", str(n), self.mpi_exe, command, *args], timeout, hooks)


def layouts_equal_serial(check, programs, common, layouts, out, reference="serial"):
    """Each (title, ranks, name, extra args) of `layouts` trained on the mpi
    stage into out(name), against the serial run in out(reference)."""
    for title, n, name, args in layouts:
        r = programs.mpi(n, [*common, *args, "--out", out(name)], timeout=600)
        if r.returncode != 0:
            check(title, False, r.stderr.strip()[-400:])
            continue
        compare(check, f"{title} equals serial (10 steps: losses, validation losses, final weights)", out(reference),
                out(name))
        plan_agrees(check, programs, title, n, [*common, *args], out(name))


# The memory record's kinds (the run summary's, per rank) that a plan states.
PLAN_MEMORY = ("params", "params_bytes", "grads_bytes", "moments_bytes", "arena_bytes", "arenas",
               "activations_bytes", "gathered_bytes", "comm_buffer_bytes", "model_state_bytes", "formula_bytes",
               "arena_embed_bytes", "arena_layers_bytes", "arena_head_bytes", "arena_scratch_bytes")


def final_state(run_dir):
    """The run's final parameters and both Adam moments (bytes), and its records: (loss, gradient norm) per step,
    the validation losses, the generated text."""
    ck = load(os.path.join(run_dir, "checkpoint.bin"))
    steps = [(r["loss"], r["grad_norm"]) for r in records(run_dir, "step")]
    evals = [r["val_loss"] for r in records(run_dir, "eval")]
    text = [r.get("generated_text") for r in records(run_dir, "summary")]
    return (ck.params, ck.m, ck.v), steps, evals, text


def bit_runs(check, programs, serial, out):
    """train(name, args, threads, ranks=0): a run (serial, or the mpi stage on `ranks`) into out(name), checked to
    finish, its final_state returned (None when it failed); same(title, x, y): two final states byte for byte
    (parameters and moments) and record for record."""
    def train(name, args, threads, ranks=0):
        d = out(name)
        full = [*args, "--train.threads", str(threads), "--out", d]
        r = programs.mpi(ranks, full) if ranks else programs.run([serial, "train", *full])
        check(f"{name} runs", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
        return final_state(d) if r.returncode == 0 else None

    def same(title, x, y):
        if x is None or y is None:
            check(title, False, "a run failed")
            return
        tensors = all(p == q for p, q in zip(x[0], y[0]))
        check(title, tensors and x[1] == y[1] and x[2] == y[2] and x[3] == y[3],
              f"parameters and moments {'equal' if tensors else 'DIFFER'}; records {x[1][-1]} / {y[1][-1]}")
    return train, same


def plan_agrees(check, programs, title, n, args, run_dir):
    """The mpi stage's plan of `args` on n ranks (`mpi plan`) against what the
    run in run_dir counted: every rank's memory by kind (the summary's memory
    record) and rank 0's calls and bytes per group in every step."""
    r = programs.mpi(1, [*args, "--ranks", str(n)], command="plan")
    if r.returncode != 0:
        check(f"{title}: plan", False, r.stderr.strip()[-300:])
        return
    plan = json.loads(r.stdout)
    memory = records(run_dir, "summary")[0]["provenance"]["memory"]
    wrong = [f"rank {got['rank']} {k}: counted {got.get(k)}, planned {want['memory'][k]}"
             for got, want in zip(memory, plan["per_rank"]) for k in PLAN_MEMORY if got.get(k) != want["memory"][k]]
    if len(memory) != len(plan["per_rank"]):
        wrong.append(f"{len(memory)} ranks counted, {len(plan['per_rank'])} planned")
    steps = records(run_dir, "step")
    for g in ("tp", "dp", "pp", "cp"):
        want = plan["per_rank"][0]["comm"][g]
        got = {(s[g + "_calls"], s[g + "_bytes"]) for s in steps}
        if got != {(want["calls"], want["bytes"])}:
            wrong.append(f"{g}: counted (calls, bytes) {sorted(got)}, planned {(want['calls'], want['bytes'])}")
    check(f"{title}: the plan equals the counts (memory on {n} ranks, rank 0's communication in {len(steps)} steps)",
          not wrong and bool(steps), "; ".join(wrong[:4]))


def refuser(check, programs, a, common, out):
    """error(title, ranks, args, needle, serial=False): a one-step run with
    `args` that must exit non-zero with exactly one error line, naming `needle`."""
    def error(title, n, args, needle, serial=False):
        d = out("err_" + str(len(check.results)))
        cmd = [a.serial, "train"] if serial else [a.mpiexec, "-n", str(n), a.mpi, "train"]
        r = programs.run([*cmd, *common, "--train.steps", "1", "--out", d, *args], timeout=120)
        lines = [l for l in r.stderr.splitlines() if "error" in l]
        check(title, r.returncode != 0 and any(needle in l for l in lines) and len(lines) == 1,
              lines[0] if lines else f"exit {r.returncode}: {r.stderr.strip()[-200:]}")
    return error


def compare(check, title, ref_dir, dir_, first=0):
    """The run in dir_ against the reference in ref_dir (from step `first` of the reference)."""
    ref_l = [r["loss"] for r in records(ref_dir, "step")][first:]
    got_l = [r["loss"] for r in records(dir_, "step")]
    if len(ref_l) != len(got_l) or not got_l:
        check(title, False, f"{len(got_l)} steps against {len(ref_l)}")
        return
    rel = max(abs(x - y) / abs(y) for x, y in zip(got_l, ref_l))
    pa = floats(load(os.path.join(ref_dir, "checkpoint.bin")).params)
    pb = floats(load(os.path.join(dir_, "checkpoint.bin")).params)
    dw = max(abs(x - y) for x, y in zip(pa, pb)) if len(pa) == len(pb) else float("inf")
    val = [[r["val_loss"] for r in records(d, "eval")] for d in (ref_dir, dir_)]
    val_rel = max((abs(x - y) / abs(y) for x, y in zip(val[1], val[0][-len(val[1]):])), default=float("inf"))
    check(title, rel <= 1e-5 and dw <= 1e-5 and val_rel <= 1e-5,
          f"losses {' '.join(f'{x:.6f}' for x in got_l)}; worst loss {rel:.2e} relative, worst weight {dw:.2e}, "
          f"validation losses {val_rel:.2e} relative")
