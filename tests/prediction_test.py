#!/usr/bin/env python3
"""The step-time model (docs/prediction.md): machine files, `plan --machine`, harness calibrate.

  * harness calibrate (--quick, the tiny shape) writes a machine file the stage programs read back:
    `serial plan --machine` then gives a positive step time, every rank's compute, and the notes;
    `harness run experiments/smoke.yaml --machine FILE` fills runs.csv's predicted_step_ms and
    prediction_error.
  * The model's arithmetic on synthetic machines (every kernel 1 ms at one shape): twice every kernel's
    time gives twice the serial step exactly; dp 2's communication is the plan's dp calls times the link's
    latency plus its bytes times a ring's 2 (n - 1) / n over the bandwidth; a pipeline's step is at least
    its slowest stage's microbatches and its bubble the schedule's.
  * The committed machine file (machines/) and measured runs (tests/data/prediction_runs.json, measured on
    that machine): every run's predicted step within its bound of the measured one (docs/prediction.md).
  * Bad machine files, exit 2 naming the file and the key: wrong schema, an unknown key, a negative time,
    an op the op table lacks, a missing link; calibrate refuses an existing --out without --overwrite.

usage: prediction_test.py --serial PATH --harness PATH --corpus PATH --repo PATH [--mpi PATH]
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks  # noqa: E402

OPS = ["encoder_forward", "encoder_backward", "layernorm_forward", "layernorm_backward", "matmul_forward",
       "matmul_backward", "attention_forward", "attention_backward", "gelu_forward", "gelu_backward",
       "residual_forward", "crossentropy_forward", "crossentropy_backward", "adam_update", "sum_squares"]
SHAPE = "{B: 4, T: 32, C: 64, NH: 4, V: 100, OC: 192, P: 100000}"


def machine(seconds=1e-3, latency_us=5.0, gbps=2.0, extra="", kernel_extra=""):
    lines = ["schema: gpt2-machine/1", "name: synthetic", "cores: 2", "peak_gflops: 10",
             f"node: {{latency_us: {latency_us}, gbytes_per_s: {gbps}}}", extra, "kernels:"]
    for op in OPS:
        lines.append(f"  - {{op: {op}, threads: 1, seconds: {seconds}, shape: {SHAPE}{kernel_extra}}}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serial", required=True)
    ap.add_argument("--mpi")
    ap.add_argument("--harness", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    check = Checks()
    work = tempfile.mkdtemp(prefix="prediction_test_")
    small = ["--data.corpus", a.corpus, "--model.block_size", "32", "--model.n_layer", "4", "--model.n_head", "4",
             "--model.n_embd", "64", "--train.batch_size", "8", "--train.seq_len", "32", "--train.threads", "1"]

    def write(name, text):
        path = os.path.join(work, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def plan(program, ranks, file, *extra):
        r = subprocess.run([program, "plan", *small, "--ranks", str(ranks), "--stage",
                            "serial" if ranks == 1 else "mpi", "--machine", file, *extra],
                           capture_output=True, text=True, timeout=300)
        try:
            return r, json.loads(r.stdout)
        except json.JSONDecodeError:
            return r, None

    # ---- calibrate, and the stages reading its file ----
    calibrated = os.path.join(work, "calibrated.yaml")
    r = subprocess.run([a.harness, "calibrate", "--quick", "--shapes", "tiny", "--repetitions", "1", "--out",
                        calibrated], capture_output=True, text=True, timeout=600)
    check("harness calibrate --quick writes a machine file", r.returncode == 0 and os.path.exists(calibrated),
          r.stderr.strip()[-400:])
    r, p = plan(a.serial, 1, calibrated)
    t = (p or {}).get("time", {})
    check("serial plan --machine reads it back: a positive step time, the rank's compute, the notes",
          r.returncode == 0 and t.get("step_s", 0) > 0 and t["ranks"][0]["compute_s"] > 0 and t.get("notes"),
          r.stderr.strip()[-300:] or json.dumps(t)[:300])
    r = subprocess.run([a.harness, "calibrate", "--quick", "--shapes", "tiny", "--repetitions", "1", "--out",
                        calibrated], capture_output=True, text=True, timeout=600)
    check("calibrate refuses an existing --out without --overwrite (exit 2, nothing run)",
          r.returncode == 2 and "--out" in r.stderr and "kernel_bench" not in r.stderr, r.stderr.strip()[-300:])

    # ---- harness run --machine: the prediction beside the measurement in runs.csv ----
    results, reports = os.path.join(work, "results"), os.path.join(work, "reports")
    r = subprocess.run([a.harness, "run", os.path.join(a.repo, "experiments", "smoke.yaml"), "--quiet", "--results",
                        results, "--reports", reports, "--machine", calibrated], capture_output=True, text=True,
                       timeout=600)
    rows = []
    runs_csv = os.path.join(results, "smoke", "runs.csv")
    if os.path.exists(runs_csv):
        with open(runs_csv) as f:
            rows = [row for row in csv.DictReader(f) if row["status"] == "ok"]
    filled = [row for row in rows if row.get("predicted_step_ms") and row.get("prediction_error")]
    consistent = all(abs(float(row["prediction_error"]) - (float(row["predicted_step_ms"]) / float(row["step_ms"]) - 1))
                     < 1e-6 for row in filled)
    check("harness run --machine: every ok run's runs.csv row has predicted_step_ms and prediction_error "
          "(predicted / measured - 1)", r.returncode == 0 and rows and len(filled) == len(rows) and consistent,
          f"exit {r.returncode}, {len(filled)} of {len(rows)} rows: {r.stderr.strip()[-300:]}")
    r = subprocess.run([a.harness, "run", os.path.join(a.repo, "experiments", "smoke.yaml"), "--results", results,
                        "--machine", os.path.join(work, "missing.yaml")], capture_output=True, text=True, timeout=120)
    check("harness run --machine with a missing file: exit 2 naming it, nothing run",
          r.returncode == 2 and "missing.yaml" in r.stderr, r.stderr.strip()[-300:])

    # ---- the model's arithmetic ----
    one, two = write("one.yaml", machine(1e-3)), write("two.yaml", machine(2e-3))
    (r1, p1), (r2, p2) = plan(a.serial, 1, one), plan(a.serial, 1, two)
    ok = r1.returncode == 0 and r2.returncode == 0
    s1 = p1["time"]["step_s"] if ok else 0
    s2 = p2["time"]["step_s"] if ok else 0
    check("twice every kernel's time gives twice the serial step", ok and s1 > 0 and abs(s2 - 2 * s1) <= 1e-12 * s2,
          f"{s1} then {s2}: {r1.stderr.strip()[-200:]}")
    if a.mpi:
        r, p = plan(a.mpi, 2, one)
        if r.returncode == 0:
            rank = p["per_rank"][0]
            dp = rank["comm"]["dp"]
            want = dp["calls"] * 5e-6 + dp["bytes"] * 1.0 / 2e9  # ring over 2 ranks: 2 (n - 1) / n = 1
            got = p["time"]["ranks"][0]["comm_s"]
            check("dp 2: communication = the plan's dp calls x latency + bytes x 2(n-1)/n / bandwidth",
                  dp["bytes"] > 0 and abs(got - want) <= 1e-12 * want, f"{got} s against {want} s ({dp})")
        else:
            check("dp 2 plans", False, r.stderr.strip()[-300:])
        r, p = plan(a.mpi, 2, one, "--parallel.pp", "2", "--parallel.microbatches", "4")
        if r.returncode == 0:
            t = p["time"]
            slowest = max(x["compute_s"] for x in t["ranks"])
            check("pp 2, m 4 (1f1b): the step is at least the slowest stage's work, its bubble the schedule's "
                  "(p - 1) / (m + p - 1) within the stages' imbalance",
                  t["step_s"] >= slowest and 0 < t["bubble"] < 0.5,
                  f"step {t['step_s']:.6f} s, slowest stage {slowest:.6f} s, bubble {t['bubble']:.3f}")
        else:
            check("pp 2 plans", False, r.stderr.strip()[-300:])

    # ---- the committed machine and runs ----
    runs_file = os.path.join(a.repo, "tests", "data", "prediction_runs.json")
    if os.path.exists(runs_file):
        with open(runs_file) as f:
            runs = json.load(f)
        machine_file = os.path.join(a.repo, runs["machine"])
        for run in runs["runs"]:
            program = a.serial if run["ranks"] == 1 else a.mpi
            if program is None:
                continue
            cmd = [program, "plan", "--config", os.path.join(a.repo, run["config"]), "--data.corpus", a.corpus,
                   "--ranks", str(run["ranks"]), "--stage", "serial" if run["ranks"] == 1 else "mpi",
                   "--machine", machine_file, *run["set"]]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                check(f"{run['name']}: plans", False, r.stderr.strip()[-300:])
                continue
            predicted = json.loads(r.stdout)["time"]["step_s"] * 1e3
            error = (predicted - run["measured_step_ms"]) / run["measured_step_ms"]
            check(f"{run['name']}: predicted step within {run['bound']:.0%} of the measured",
                  abs(error) <= run["bound"],
                  f"predicted {predicted:.1f} ms, measured {run['measured_step_ms']:.1f} ms: {error:+.1%}")
    else:
        check("tests/data/prediction_runs.json exists", False, runs_file)

    # ---- bad machine files ----
    bad = [
        ("a wrong schema", machine().replace("gpt2-machine/1", "gpt2-machine/9"), "schema"),
        ("an unknown key", machine(extra="colour: blue"), "colour"),
        ("a negative time", machine(-1.0), "seconds"),
        ("an op the op table lacks", machine().replace("gelu_backward", "gelu_sideways"), "gelu_sideways"),
        ("a link without a bandwidth", machine(gbps=0), "gbytes_per_s"),
        ("an unknown key in a kernel", machine(kernel_extra=", colour: 3"), "colour"),
    ]
    for what, text, key in bad:
        path = write("bad.yaml", text)
        r, _ = plan(a.serial, 1, path)
        check(f"a machine file with {what}: exit 2 naming the file and the key",
              r.returncode == 2 and "bad.yaml" in r.stderr and key in r.stderr, r.stderr.strip()[-300:])
    sys.exit(check.finish())


if __name__ == "__main__":
    main()
