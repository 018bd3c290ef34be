#!/usr/bin/env python3
"""The harness end to end, through the real stage programs (experiments/smoke.yaml):
CSV columns and loss rows, skip reasons, reuse, resume after an interruption,
a failing run that leaves earlier results intact, bad experiment files
that fail with one clear error before anything runs (and a --results,
--reports, train_step --json or compare --out that cannot be used: exit 2,
before any work), no serial program to
resolve configurations, and the other kinds of experiment at tiny settings:
kernels (the kernel benchmark programs, their JSON and kernels.md), peer
(ours against PyTorch; the PyTorch side is skipped, with the reason printed,
where /usr/bin/python3 cannot import torch) and mpi_step (the MPI stage's
step with and without bucketed allreduce).

--part smoke runs the smoke experiment once and checks its files and reports
alone (the quick tier, tests/meson.build); --part untrusted, the checks of
issue 70 alone (Slurm values from a file or the command line in job scripts,
compare's scratch folder, slurm-script --out, checkpoint keys without
`checkpoints: true`), which train nothing where the harness refuses what they
try, so they can be pointed at another build's harness by hand; the default,
all of it.

usage: harness_test.py --harness PATH --repo PATH [--part all|smoke|untrusted]
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import csv
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from checks import PROMPT_S, TEST_TAG, Checks, bounded_run, own_processes, tagged_processes, wait_gone, with_hooks

RUNS_COLUMNS = ("experiment,run_id,stage,ranks,threads,repetition,tp,block_types,pipeline,variant,config_digest,seed,status,reason,attempts,"
                "training_s,inference_s,tokens_per_s,final_loss,steps,comm_s,peak_rss_mb,step_ms,val_loss,mfu,params,"
                "activation_bytes,tp_calls,tp_bytes,"
                "dp_calls,dp_bytes,formula_tp_calls,formula_tp_bytes,formula_dp_calls,formula_dp_bytes,"
                "predicted_step_ms,prediction_error,git_commit,"
                "git_dirty,build_type,compiler,cpu,cores,blas_core,backend,host,date,source_hash,build_options,"
                "openblas,mpi,cuda").split(",")
LOSS_COLUMNS = "experiment,run_id,stage,ranks,threads,repetition,epoch,loss,val_loss".split(",")

# A tensor-parallel experiment at tiny settings: the standard model on one
# rank, and tp 2 with a mix of block types and with all tp on 2 ranks.
TP_SMOKE = """name: tp_smoke
base: ../configs/original.yaml
config:
  model.block_size: 32
  model.n_layer: 3
  model.n_head: 2
  model.n_embd: 32
  train.batch_size: 4
  train.seq_len: 32
  train.steps: 4
  train.eval_every: 2
  train.eval_batches: 1
  train.peak_gflops: 10
  data.val_fraction: 0.1
  generate.max_new_tokens: 0
reports: [tensor_parallel]
seeds: [1, 2]
timeout_s: 120
runs:
  - stage: mpi
    ranks: 1
    threads: 1
  - stage: mpi
    ranks: 2
    threads: 1
    config: {parallel.tp: 2, parallel.block_types: [tp, tp, tp]}
  - stage: mpi
    ranks: 2
    threads: 1
    config: {parallel.tp: 2, parallel.block_types: [spd, parallel, parallel]}
"""


def rows(path):
    with open(path, newline="") as f:
        r = list(csv.reader(f))
    return r[0], [dict(zip(r[0], x)) for x in r[1:]]


def digest(path):
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, path)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def check_bad_files(bad, title, exps, results, harness, check):
    """Each bad file {name: (text, expected words)} fails alone: exit 2, one
    line naming the file and the problem, and nothing written to results."""
    for name, (text, needle) in bad.items():
        with open(os.path.join(exps, name), "w") as f:
            f.write(text)
        r = harness("run", exp=name)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        check(f"{title} {name}", r.returncode == 2 and len(lines) == 1 and needle in r.stderr
              and name in r.stderr and not os.path.exists(os.path.join(results, name[:-5])), r.stderr.strip())


KERNELS_SMOKE = """kind: kernels
description: The kernel benchmarks for one tiny iteration.
repetitions: 2
min_time: 0
benchmarks:
  - program: kernel_bench
    args: [--quick]
    filter: "gelu_forward|matmul_forward.fc/"
  - program: allreduce_bench
    args: [--quick]
    ranks: 2
  - program: no_such_bench
"""

# kernel_bench_cuda: "ok" on a GPU machine; elsewhere it exits with status 3
# ("no CUDA device") or is not built (no CUDA toolkit), and either way the
# harness records it as skipped with that reason, not as failed.
KERNELS_CUDA_SMOKE = """kind: kernels
repetitions: 1
min_time: 0
benchmarks:
  - program: kernel_bench_cuda
    args: [--quick]
    filter: "gelu_forward/"
"""


def kernels_checks(a, exps, results, reports, env, check):
    with open(os.path.join(exps, "kernels_smoke.yaml"), "w") as f:
        f.write(KERNELS_SMOKE)

    def harness(*args, exp="kernels_smoke.yaml"):
        return subprocess.run([a.harness, *args, os.path.join(exps, exp), "--results", results, "--reports", reports],
                              capture_output=True, text=True, env=env, timeout=300)

    r = harness("run")
    check("kernels_smoke runs", r.returncode == 0, r.stderr[-1500:])
    res = os.path.join(results, "kernels_smoke")
    dirs = sorted(d for d in os.listdir(res) if os.path.isdir(os.path.join(res, d)))
    statuses = {d.rsplit("-", 1)[0]: json.load(open(os.path.join(res, d, "status.json"))) for d in dirs}
    check("each program has a result directory named program-hash", sorted(statuses) ==
          ["allreduce_bench", "kernel_bench", "no_such_bench"], str(dirs))
    with open(os.path.join(res, "programs.csv"), newline="") as f:
        index = {x["program"]: x for x in csv.DictReader(f)}
    check("programs.csv indexes the run: program, id, status", sorted(index) == sorted(statuses)
          and all(index[p]["status"] == statuses[p]["status"] and index[p]["id"].startswith(p + "-") for p in index),
          str(index))
    check("a missing program is skipped with its reason", statuses.get("no_such_bench", {}).get("status") == "skipped"
          and "not built" in statuses["no_such_bench"].get("reason", ""), str(statuses.get("no_such_bench")))
    kb = next(d for d in dirs if d.startswith("kernel_bench-"))
    data = json.load(open(os.path.join(res, kb, "benchmark.json")))
    medians = [b for b in data["benchmarks"] if b.get("aggregate_name") == "median"]
    # gelu_forward and matmul_forward.fc on naive, cpu/t1, cpu/t2 and cpu-openblas, cpu-onednn at t1 and t2;
    # gelu_forward.bf16 on naive, cpu-bf16/t1, /t2.
    fp32_variants = {"naive/t1", "cpu/t1", "cpu/t2", "cpu-openblas/t1", "cpu-openblas/t2", "cpu-onednn/t1",
                     "cpu-onednn/t2"}
    check("kernel_bench wrote Google Benchmark JSON with medians and the ceilings in its context",
          statuses["kernel_bench"]["status"] == "ok" and len(medians) == 2 * len(fp32_variants) + 3
          and "ceiling_sgemm_gflops_t2" in data["context"] and "ceiling_bf16_gflops_t2" in data["context"]
          and "blas_core" in data["context"], str(len(medians)))
    md_path = os.path.join(reports, "kernels_smoke", "kernels.md")
    md = open(md_path).read() if os.path.exists(md_path) else ""
    check("kernels.md: machine, ceilings, a table per kernel, the skip reason",
          "## Machine" in md and data["context"]["blas_core"] in md and "### matmul_forward.fc" in md
          and "### gelu_forward" in md and "### allreduce" in md and "no_such_bench | skipped" in md
          and "| tiny | cpu/t2 |" in md, md[:3000])
    with open(os.path.join(reports, "kernels_smoke", "kernels.csv"), newline="") as f:
        table = list(csv.DictReader(f))
    gelu = {x["variant"]: x for x in table if x["kernel"] == "gelu_forward"}
    gelu_bf16 = {x["variant"]: x for x in table if x["kernel"] == "gelu_forward.bf16"}
    check("kernels.csv: one row per benchmark, speed-up over naive of 1 for naive itself",
          len(table) == 2 * len(fp32_variants) + 3 + 2 and set(gelu) == fp32_variants  # + 2: allreduce_bench's rows
          and set(gelu_bf16) == {"naive/t1", "cpu-bf16/t1", "cpu-bf16/t2"}
          and abs(float(gelu["naive/t1"]["speedup_over_naive"]) - 1) < 1e-9
          and all(float(x["time_ms"]) > 0 and float(x["gflops"]) > 0 for x in table), str(table[:3]))
    check("the roofline chart's data and script are written",
          all(os.path.isfile(os.path.join(reports, "kernels_smoke", "roofline" + e)) for e in (".dat", ".gp")))
    r = harness("run")
    check("a rerun of the kernels experiment reuses the completed programs", r.returncode == 0
          and r.stderr.count("reused") == 2, r.stderr[-600:])
    os.remove(md_path)
    r = harness("report")
    check("report rebuilds kernels.md without running", r.returncode == 0 and "running" not in r.stderr
          and os.path.isfile(md_path), r.stderr[-500:])

    bad = {
        "k_unknown.yaml": ("kind: kernels\nrepetiton: 2\nbenchmarks:\n  - program: kernel_bench\n",
                           "did you mean 'repetitions'"),
        "k_kind.yaml": ("kind: kernel\nbenchmarks:\n  - program: kernel_bench\n", "unknown kind 'kernel'"),
        "k_out.yaml": ("kind: kernels\nbenchmarks:\n  - program: kernel_bench\n    args: [--benchmark_out=x.json]\n",
                       "set by the harness"),
        "k_empty.yaml": ("kind: kernels\nbenchmarks: []\n", "non-empty list"),
        "k_time.yaml": ("kind: kernels\nmin_time: -1\nbenchmarks:\n  - program: kernel_bench\n", "min_time"),
        "k_prog.yaml": ("kind: kernels\nbenchmarks:\n  - progam: kernel_bench\n", "did you mean 'program'"),
        "k_dotdot.yaml": ("kind: kernels\nbenchmarks:\n  - program: ..\n", "program: '..' must be a program name"),
    }
    check_bad_files(bad, "bad kernels experiment", exps, results, harness, check)
    for name in bad:
        os.remove(os.path.join(exps, name))

    with open(os.path.join(exps, "kernels_cuda_smoke.yaml"), "w") as f:
        f.write(KERNELS_CUDA_SMOKE)
    r = harness("run", exp="kernels_cuda_smoke.yaml")
    res = os.path.join(results, "kernels_cuda_smoke")
    st = [json.load(open(os.path.join(res, d, "status.json"))) for d in os.listdir(res)
          if os.path.isdir(os.path.join(res, d))] if os.path.isdir(res) else []
    check("kernel_bench_cuda: ok on a GPU, else skipped with its reason (exit 3: no CUDA device; or not built)",
          r.returncode == 0 and len(st) == 1
          and (st[0]["status"] == "ok" or (st[0]["status"] == "skipped" and (
              "kernel_bench_cuda: no CUDA device" in st[0]["reason"] or "not built" in st[0]["reason"]))),
          f"{st} {r.stderr[-600:]}")
    os.remove(os.path.join(exps, "kernels_cuda_smoke.yaml"))


PEER_SMOKE = """kind: peer
description: Ours against PyTorch for one tiny round.
preset: small
batch: 2
threads: 1
rounds: 1
steps: 1
warmup: 0
timeout_s: 300
"""

# The smoke model (L1 C32, block 32) on the MPI stage: 1 rank, and 2 ranks
# with one allreduce and with 1 MiB buckets.
MPI_STEP_SMOKE = """kind: mpi_step
description: The MPI step for a few tiny steps.
base: ../configs/original.yaml
config: {model.block_size: 32, model.n_layer: 1, model.n_head: 2, model.n_embd: 32, train.batch_size: 4,
         train.seq_len: 32, train.steps: 3, train.threads: 1, train.peak_gflops: 10,
         generate.max_new_tokens: 0}
ranks: [1, 2]
buckets: [0, 1]
warmup_steps: 1
timeout_s: 120
"""


def job_dirs(res):
    return {x["job"]: (x, os.path.join(res, x["id"])) for x in rows(os.path.join(res, "jobs.csv"))[1]}


def peer_checks(exps, results, reports, harness, check):
    with open(os.path.join(exps, "peer_smoke.yaml"), "w") as f:
        f.write(PEER_SMOKE)
    # Without PyTorch a job is skipped with the reason: an interpreter that cannot import torch.
    with open(os.path.join(exps, "peer_nopython.yaml"), "w") as f:
        f.write(PEER_SMOKE + "python: /nonexistent/python3\n")
    r = harness("run", exp="peer_nopython.yaml")
    jobs = job_dirs(os.path.join(results, "peer_nopython"))
    st = json.load(open(os.path.join(jobs["t1"][1], "status.json"))) if "t1" in jobs else {}
    check("a peer job whose interpreter cannot import torch is skipped with the reason",
          r.returncode == 0 and st.get("status") == "skipped" and "cannot import torch" in st.get("reason", ""),
          f"{st} {r.stderr[-600:]}")
    os.remove(os.path.join(exps, "peer_nopython.yaml"))
    torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True, text=True)
    if torch.returncode != 0:
        print("skip peer_smoke: /usr/bin/python3 cannot import torch: "
              + (torch.stderr.strip().splitlines() or ["?"])[-1], flush=True)
        return
    r = harness("run", exp="peer_smoke.yaml")
    res = os.path.join(results, "peer_smoke")
    jobs = job_dirs(res)
    row, d = jobs.get("t1", ({}, ""))
    files = sorted(os.listdir(d)) if d else []
    check("peer_smoke runs: one job, both sides' round outputs, no weights kept",
          r.returncode == 0 and row.get("status") == "ok"
          and files == ["job.json", "log.txt", "ours-0.json", "peer-0.json", "status.json"], f"{files} {r.stderr[-1500:]}")
    md_path = os.path.join(reports, "peer_smoke", "peer.md")
    md = open(md_path).read() if os.path.exists(md_path) else ""
    with open(os.path.join(reports, "peer_smoke", "peer.csv"), newline="") as f:
        table = list(csv.DictReader(f))
    check("peer.md and peer.csv: the machine, its BLAS kernel, the build, medians of both sides, the command",
          "with kernel `" in md and "(sources " in md and "PyTorch" in md and "harness run" in md and len(table) == 1
          and float(table[0]["ours_ms_median"]) > 0 and float(table[0]["peer_ms_median"]) > 0, md[:2000])
    r = harness("run", exp="peer_smoke.yaml")
    check("a rerun of the peer experiment reuses its job", r.returncode == 0 and r.stderr.count("reused") == 1,
          r.stderr[-600:])
    # With one busy process: a job of its own beside the idle one (reused), the
    # spinning process gone when the job ends, and the report's load columns.
    with open(os.path.join(exps, "peer_smoke.yaml"), "w") as f:
        f.write(PEER_SMOKE + "busy_processes: [0, 1]\n")
    r = harness("run", exp="peer_smoke.yaml")
    jobs = job_dirs(res)
    row, d = jobs.get("t1-busy1", ({}, ""))
    log = open(os.path.join(d, "log.txt")).read() if d else ""
    started = re.findall(r"busy process\(es\) running: pids ([\d ]+)", log)
    pids = [int(x) for x in started[0].split()] if started else []
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    check("busy_processes: a job t1-busy1 beside the reused t1, its busy process started and ended",
          r.returncode == 0 and sorted(jobs) == ["t1", "t1-busy1"] and row.get("status") == "ok"
          and r.stderr.count("reused") == 1 and len(pids) == 1 and not alive,
          f"{sorted(jobs)} {pids} {alive} {r.stderr[-1500:]}")
    md = open(md_path).read()
    with open(os.path.join(reports, "peer_smoke", "peer.csv"), newline="") as f:
        table = {x["busy_processes"]: x for x in csv.DictReader(f)}
    check("peer.md and peer.csv under load: the busy processes and each side's time over its idle time",
          "busy processes" in md and "ours / ours idle" in md and sorted(table) == ["0", "1"]
          and float(table["1"]["ours_over_idle"]) > 0 and table["0"]["ours_over_idle"] == "", md[:3000])


def mpi_step_checks(exps, results, reports, harness, check):
    with open(os.path.join(exps, "mpi_step_smoke.yaml"), "w") as f:
        f.write(MPI_STEP_SMOKE)
    r = harness("run", exp="mpi_step_smoke.yaml")
    res = os.path.join(results, "mpi_step_smoke")
    jobs = job_dirs(res)
    check("mpi_step_smoke: a job per rank count and bucket size (one rank: no buckets)",
          r.returncode == 0 and sorted(jobs) == ["r1-b0", "r2-b0", "r2-b1"], f"{sorted(jobs)} {r.stderr[-1500:]}")
    statuses = {k: v[0]["status"] for k, v in jobs.items()}
    md_path = os.path.join(reports, "mpi_step_smoke", "mpi_step.md")
    md = open(md_path).read() if os.path.exists(md_path) else ""
    if all(s == "ok" for s in statuses.values()):
        with open(os.path.join(reports, "mpi_step_smoke", "mpi_step.csv"), newline="") as f:
            table = list(csv.DictReader(f))
        check("mpi_step: each job's run in its directory, medians in mpi_step.md and .csv",
              all(os.path.isfile(os.path.join(d, "round-0", "metrics.jsonl")) for _, d in jobs.values())
              and len(table) == 3 and all(float(x["step_ms_median"]) > 0 for x in table)
              and "1 MiB buckets during backward" in md and "BLAS kernel" in md and "harness run" in md, md[:2000])
    else:
        reasons = {k: json.load(open(os.path.join(d, "status.json")))["reason"] for k, (_, d) in jobs.items()}
        check("mpi_step without MPI: jobs skipped with the reason", set(statuses.values()) == {"skipped"}
              and all("not built" in x or "mpiexec" in x for x in reasons.values()), str(reasons))
    bad = {
        "m_bucket.yaml": (MPI_STEP_SMOKE.replace("[0, 1]", "[0, -1]"), "buckets: expected a number >= 0"),
        "m_key.yaml": (MPI_STEP_SMOKE.replace("train.steps: 3", "train.step: 3"), "did you mean 'train.steps'"),
        "m_warm.yaml": (MPI_STEP_SMOKE.replace("warmup_steps: 1", "warmup_steps: 3"), "leaves no timed step"),
        "p_key.yaml": (PEER_SMOKE.replace("rounds:", "round:"), "did you mean 'rounds'"),
        "p_busy.yaml": (PEER_SMOKE + "busy_processes: [0, -1]\n", "busy_processes"),
        "p_busy2.yaml": (PEER_SMOKE + "busy_processes: [1, 1]\n", "busy_processes: a number appears twice"),
    }
    check_bad_files(bad, "bad peer or mpi_step experiment", exps, results, harness, check)
    for name in bad:
        os.remove(os.path.join(exps, name))


PP_SMOKE = """name: pp_smoke
base: ../configs/original.yaml
config:
  model.block_size: 32
  model.n_layer: 2
  model.n_head: 2
  model.n_embd: 32
  train.batch_size: 4
  train.seq_len: 32
  train.steps: 4
  train.peak_gflops: 10
  generate.max_new_tokens: 0
reports: [parallelism]
timeout_s: 120
runs:
  - {stage: mpi, ranks: 1, threads: 1}
  - {stage: mpi, ranks: 2, threads: 1, config: {parallel.zero: true}}
  - {stage: mpi, ranks: 2, threads: 1, config: {parallel.pp: 2, parallel.microbatches: 2, parallel.schedule: zb-h1}}
  - {stage: mpi, ranks: 2, threads: 1, config: {parallel.pp: 2, parallel.microbatches: 2, parallel.schedule: 1f1b}}
  - {stage: mpi, ranks: 2, threads: 1, config: {model.mlp: swiglu, model.n_kv_head: 1, model.tie_embeddings: true}}
  - {stage: mpi, ranks: 1, threads: 1, config: {train.deterministic: true}}
  - {stage: mpi, ranks: 2, threads: 1, config: {train.deterministic: true, parallel.pp: 2, parallel.microbatches: 4, parallel.schedule: gpipe}}
"""


def pipeline_checks(exps, results, reports, harness, check):
    """The parallelism report of a pipeline and a ZeRO-1 run (needs the mpi stage)."""
    with open(os.path.join(exps, "pp_smoke.yaml"), "w") as f:
        f.write(PP_SMOKE)
    bad = {"pp_serial.yaml": (PP_SMOKE.replace("{stage: mpi, ranks: 1, threads: 1}",
                                               "{stage: serial, config: {parallel.pp: 2}}"),
                              "pipeline stages run on the mpi stage"),
           "pp_ranks.yaml": (PP_SMOKE.replace("ranks: 2, threads: 1, config: {parallel.pp",
                                              "ranks: 3, threads: 1, config: {parallel.pp"),
                             "parallel.tp 1 x parallel.pp 2 = 2 does not divide the 3 ranks")}
    check_bad_files(bad, "bad pipeline experiment", exps, results, harness, check)
    for name in bad:
        os.remove(os.path.join(exps, name))
    r = harness("run", exp="pp_smoke.yaml")
    check("pp_smoke runs", r.returncode == 0, r.stderr[-1500:])
    _, runs = rows(os.path.join(results, "pp_smoke", "runs.csv"))
    check("runs.csv: the pipeline and ZeRO-1 layouts in the pipeline column",
          sorted(x["pipeline"] for x in runs) == ["", "", "", "pp2 m2 1f1b", "pp2 m2 zb-h1", "pp2 m4 gpipe", "zero"],
          str([x["pipeline"] for x in runs]))
    # The formula columns are the engine's plan (plan.json in each run folder), for every layout: a
    # variant's parameter count is its own (the harness once used GPT-2's for every model).
    counted = [(x["variant"], x["pipeline"], [(x[k], x["formula_" + k]) for k in ("tp_calls", "tp_bytes", "dp_calls", "dp_bytes")])
               for x in runs]
    check("runs.csv: every layout's counted communication equals its plan, the variant's dp bytes included",
          all(got == want != "" for _, _, pairs in counted for got, want in pairs)
          and any(v == "mlp=swiglu n_kv_head=1 tie_embeddings=true" and pairs[3][0] != "0" for v, _, pairs in counted)
          and all(os.path.exists(os.path.join(results, "pp_smoke", x["run_id"], "plan.json")) for x in runs),
          str(counted))
    before = {f: open(os.path.join(results, "pp_smoke", f)).read() for f in ("runs.csv", "loss.csv")}
    r = harness("reindex", exp=os.path.join(results, "pp_smoke"))
    after = {f: open(os.path.join(results, "pp_smoke", f)).read() for f in ("runs.csv", "loss.csv")}
    check("reindex rebuilds runs.csv and loss.csv from the run folders, unchanged", r.returncode == 0 and before == after,
          r.stderr[-300:])
    folder = os.path.join(reports, "pp_smoke")
    md = open(os.path.join(folder, "parallelism.md")).read() if os.path.exists(os.path.join(folder, "parallelism.md")) else ""
    with open(os.path.join(folder, "parallelism.csv"), newline="") as f:
        table = list(csv.DictReader(f))
    pp = [x for x in table if x["pp"] == "2" and x["schedule"] == "zb-h1"]
    zero = [x for x in table if x["zero"] == "1"]
    check("parallelism.csv: per rank of the pipeline run, arenas and communication equal their formulas",
          len(pp) == 2 and all(x["arenas_counted"] == x["arenas_theory"] == "2" and x["pp_calls"] == x["formula_pp_calls"]
                                and x["pp_bytes"] == x["formula_pp_bytes"] for x in pp), str(pp))
    check("parallelism.csv: ZeRO-1's moments are half the one-rank run's on each of 2 ranks",
          len(zero) == 2 and all(x["moments_bytes"] == x["formula_moments_bytes"] for x in zero)
          and float(zero[0]["moments_bytes"]) * 2 == float(next(x for x in table if x["ranks"] == "1")["moments_bytes"]),
          str(zero))
    check("parallelism.md: the tables, the zb-h1 timeline picture and the reading of zb-h1 against 1f1b at m 2",
          "## Memory per rank" in md and "parallelism_timeline_zb-h1.svg" in md
          and "## Reading: zb-h1 against 1f1b" in md and "- m 2: zb-h1's bubble is" in md
          and os.path.exists(os.path.join(folder, "parallelism_timeline_zb-h1.svg")), md[:2000])
    bits_path = os.path.join(folder, "parallelism_bits.csv")
    bits = list(csv.DictReader(open(bits_path, newline=""))) if os.path.exists(bits_path) else []
    check("parallelism_bits.csv: the deterministic pp 2 run's final state hashes to the one-rank deterministic run's",
          len(bits) == 2 and [b["reference"] for b in bits] == ["true", "false"]
          and bits[1]["pp"] == "2" and bits[1]["runs_bits_equal"] == bits[1]["runs_hashed"] == "1"
          and "## Bits equal to serial (train.deterministic)" in md and "yes (1/1 runs)" in md, str(bits))


T2O_SMOKE = """name: t2o_smoke
base: ../configs/original.yaml
config:
  model.block_size: 16
  model.n_layer: 1
  model.n_head: 2
  model.n_embd: 16
  model.init: original
  train.seed: 1234
  train.batch_size: 2
  train.seq_len: 16
  train.steps: 3
  train.peak_gflops: 10
  generate.max_new_tokens: 0
needs:
  data.corpus: the original project's corpus
reports: [table2_original]
timeout_s: 120
runs:
  - stage: serial
    threads: 1
  - stage: mpi
    ranks: 2
    threads: 1
"""


# PP_SMOKE's model and settings, two settings of one stage.
MIXED = (PP_SMOKE.split("reports:")[0].replace("name: pp_smoke", "name: mixed")
         + "reports: [table1, table2]\ntimeout_s: 120\nruns:\n"
         "  - {stage: serial, threads: 1, config: {optimizer.lr: 0.001, train.steps: 3}}\n"
         "  - {stage: serial, threads: 1, config: {optimizer.lr: 0.002}}\n")


def mixed_checks(exps, results, reports, harness, check):
    """Two settings on one stage are two report rows, each naming what sets it apart."""
    with open(os.path.join(exps, "mixed.yaml"), "w") as f:
        f.write(MIXED)
    r = harness("run", exp="mixed.yaml")
    _, runs = rows(os.path.join(results, "mixed", "runs.csv"))
    check("mixed: two settings of one stage run, each with its own configuration digest",
          r.returncode == 0 and len(runs) == 2 and len({x["config_digest"] for x in runs}) == 2, r.stderr[-800:])
    t1 = open(os.path.join(reports, "mixed", "table1.md")).read() if r.returncode == 0 else ""
    t2 = open(os.path.join(reports, "mixed", "table2.md")).read() if r.returncode == 0 else ""
    row_lines = [l for l in t1.splitlines() if l.startswith("| serial")]
    check("mixed: Table 1 has a row per setting (not one 'ok 2/2'), Table 2 a curve per setting, each named by the "
          "keys it differs in", len(row_lines) == 2 and all("ok 1/1" in l for l in row_lines) and "ok 2/2" not in t1
          and "{optimizer.lr=0.001 train.steps=3}" in t2 and "{optimizer.lr=0.002 train.steps=4}" in t2,
          "\n".join(row_lines) + t2[:1500])


def table2_original_checks(exps, results, reports, harness, work, check):
    """The original-corpus experiment: skipped with what to pass, and its report from a corpus made here."""
    with open(os.path.join(exps, "t2o_smoke.yaml"), "w") as f:
        f.write(T2O_SMOKE)
    r = harness("run", exp="t2o_smoke.yaml")
    md_path = os.path.join(reports, "t2o_smoke", "table2_original.md")
    md = open(md_path).read() if os.path.exists(md_path) else ""
    check("table2_original without the corpus: skipped, exit 0, the report says what to pass",
          r.returncode == 0 and "skipped" in r.stderr and "pass --set data.corpus=VALUE" in md
          and not os.path.exists(os.path.join(results, "t2o_smoke", "runs.csv")), r.stderr[-500:] + md[-500:])
    paper = os.path.join(work, "data", "paper")  # the paper's Table 2, where the report looks for it
    if not os.path.isdir(paper):
        shutil.copytree(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "paper"), paper)
    corpus = os.path.join(work, "made_corpus.txt")
    with open(corpus, "w") as f:
        for i in range(300):
            f.write(f"a story {i % 17} of the fox , and the hen {i % 5} .\n")
    r = harness("run", "--set", f"data.corpus={corpus}", exp="t2o_smoke.yaml")
    md = open(md_path).read() if os.path.exists(md_path) else ""
    check("table2_original with a corpus made here: our curves beside the paper's, deviations and where theirs part",
          r.returncode == 0 and "paper serial" in md and "Max |ours - paper|" in md.replace("\\|", "|")
          and "Where the paper's curves part" in md and "this corpus is not the original's" in md
          and f"--set data.corpus={corpus}" in md, r.stderr[-800:] + md[:1500])
    r = harness("run", "--set", "data.corpus", exp="t2o_smoke.yaml")
    check("--set without KEY=VALUE is refused", r.returncode == 2 and "not KEY=VALUE" in r.stderr, r.stderr[-300:])


def compare_checks(work, a_harness, env, check):
    """harness compare on two result sets written here: ratios, the U test's warnings, CSV out."""
    def write(name, rows):
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "runs.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(RUNS_COLUMNS)
            for k, (stage, ranks, t) in enumerate(rows):
                row = dict.fromkeys(RUNS_COLUMNS, "")
                row.update(experiment="x", run_id=f"{stage}-{ranks}-{k}", stage=stage, ranks=str(ranks), threads="1",
                           repetition=str(k), tp="1", seed="1", status="ok", attempts="1", training_s=str(t),
                           steps="10")
                w.writerow([row[c] for c in RUNS_COLUMNS])
        return d
    a = write("cmp_a", [("serial", 1, t) for t in (1.0, 1.1, 0.9)] + [("mpi", 2, 0.5)])
    b = write("cmp_b", [("serial", 1, t) for t in (2.0, 2.2, 1.8)] + [("mpi", 2, 0.25)] + [("mpi", 4, 0.2)])
    out = os.path.join(work, "cmp_out")
    r = subprocess.run([a_harness, "compare", a, b, "--out", out], capture_output=True, text=True, env=env, timeout=60)
    lines = {l.split("|")[1].strip(): l for l in r.stdout.splitlines() if l.startswith("| ") and "|" in l[2:]}
    serial, mpi2 = lines.get("serial r1 t1", ""), lines.get("mpi r2 t1", "")
    check("compare: medians and the ratio B / A per configuration",
          r.returncode == 0 and "| 2.000 |" in serial and "| 0.500 |" in mpi2, r.stdout[-1500:] + r.stderr[-300:])
    check("compare: 3 repetitions a side get a U test (p 0.1) marked unreliable; 1 gets none",
          "0.1000" in serial and "unreliable: 9+ repetitions recommended" in serial and "no test" in mpi2
          and "WARNING: results unreliable" in r.stdout, r.stdout[-1500:])
    check("compare: a configuration on one side only is listed; compare.md and compare.csv written",
          "Only in B: mpi r4 t1" in r.stdout and os.path.exists(os.path.join(out, "compare.csv"))
          and os.path.exists(os.path.join(out, "compare.md")), r.stdout[-600:])
    r = subprocess.run([a_harness, "compare", a, os.path.join(work, "nowhere")], capture_output=True, text=True, env=env,
                       timeout=60)
    check("compare: a side that names nothing is refused", r.returncode == 2 and "not a results folder" in r.stderr,
          r.stderr[-300:])
    garbage = os.path.join(work, "cmp_garbage")
    os.makedirs(garbage, exist_ok=True)
    with open(os.path.join(garbage, "runs.csv"), "w") as f:
        f.write("not,a\nruns,csv\n")
    r = subprocess.run([a_harness, "compare", a, garbage], capture_output=True, text=True, env=env, timeout=60)
    check("compare: an unreadable runs.csv is bad input (exit 2, one line naming it)",
          r.returncode == 2 and "cmp_garbage" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-300:])
    # --out follows util/files.h's check_output, before any side is read (issue 42).
    def compare_out(*extra):
        return subprocess.run([a_harness, "compare", a, b] + list(extra), capture_output=True, text=True, env=env,
                              timeout=60)

    def one_refusal(r, needle):
        lines = r.stderr.strip().splitlines()
        return r.returncode == 2 and len(lines) == 1 and lines[0].startswith("harness: error: --out: '") \
            and needle in lines[0] and r.stdout == ""

    md_before = open(os.path.join(out, "compare.md")).read()
    os.utime(os.path.join(out, "compare.md"), (1, 1))
    r = compare_out("--out", out)
    check("compare --out an existing folder with results: refused (exit 2, one line), compare.md untouched",
          one_refusal(r, "exists and is not empty") and "--overwrite" in r.stderr
          and os.path.getmtime(os.path.join(out, "compare.md")) == 1, r.stderr[-300:])
    r = compare_out("--out", out, "--overwrite")
    check("compare --out an existing folder with --overwrite: compare.md and compare.csv replaced",
          r.returncode == 0 and os.path.getmtime(os.path.join(out, "compare.md")) > 1
          and open(os.path.join(out, "compare.md")).read() == md_before, r.stderr[-300:])
    kept = os.path.join(work, "cmp_kept.md")
    with open(kept, "w") as f:
        f.write("mine\n")
    for extra in ([], ["--overwrite"]):
        r = compare_out("--out", kept, *extra)
        check(f"compare --out an existing file{' with --overwrite' if extra else ''}: refused, the file unchanged",
              one_refusal(r, "exists and is not a folder") and open(kept).read() == "mine\n", r.stderr[-300:])
    csv_a = open(os.path.join(a, "runs.csv")).read()
    r = compare_out("--out", a, "--overwrite")
    check("compare --out a compared side's folder: refused as its input, even with --overwrite",
          one_refusal(r, "is this command's input") and sorted(os.listdir(a)) == ["runs.csv"]
          and open(os.path.join(a, "runs.csv")).read() == csv_a, r.stderr[-300:])
    run_folder = os.path.join(work, "cmp_run")
    os.makedirs(run_folder, exist_ok=True)
    with open(os.path.join(run_folder, "run.json"), "w") as f:
        f.write("{}\n")
    r = compare_out("--out", os.path.join(run_folder, "cmp"))
    check("compare --out inside a training run's folder: refused", one_refusal(r, "training run folder")
          and sorted(os.listdir(run_folder)) == ["run.json"], r.stderr[-300:])
    r = compare_out("--out", os.path.join(work, "cmp_fresh"))
    check("compare --out a fresh folder: written", r.returncode == 0
          and os.path.exists(os.path.join(work, "cmp_fresh", "compare.csv")), r.stderr[-300:])


def tensor_parallel_checks(exps, results, reports, harness, mpi_built, check):
    with open(os.path.join(exps, "tp_smoke.yaml"), "w") as f:
        f.write(TP_SMOKE)
    bad = {
        "tp_serial.yaml": (TP_SMOKE.replace("  - stage: mpi\n    ranks: 1\n", "  - stage: serial\n    config: {parallel.tp: 2}\n"),
                           "parallel.tp 2: the serial stage runs one process"),
        "tp_ranks.yaml": (TP_SMOKE.replace("ranks: 2", "ranks: 3", 1), "parallel.tp 2 does not divide the 3 ranks"),
        "tp_batch.yaml": (TP_SMOKE.replace("ranks: 2", "ranks: [2, 6]", 1),
                          "is not divisible by the 3 data-parallel replicas (6 ranks / (parallel.tp 2 x parallel.pp 1))"),
        "tp_types.yaml": (TP_SMOKE.replace("[tp, tp, tp]", "[tp, tp]"), "block_types"),
        "tp_name.yaml": (TP_SMOKE.replace("[tp, tp, tp]", "[tp, tp, spx]"), "spx"),
    }
    check_bad_files(bad, "bad tensor-parallel experiment", exps, results, harness, check)
    for name in bad:
        os.remove(os.path.join(exps, name))
    r = harness("run", exp="tp_smoke.yaml")
    if not mpi_built:
        check("tp_smoke without MPI: the runs are skipped", r.returncode == 0, r.stderr[-800:])
        return
    check("tp_smoke runs", r.returncode == 0, r.stderr[-1500:])
    _, runs = rows(os.path.join(results, "tp_smoke", "runs.csv"))
    layouts = sorted((x["ranks"], x["tp"], x["block_types"]) for x in runs if x["status"] == "ok")
    check("runs.csv: every run completed, with its layout (tp, block types; none listed at tp 1)",
          layouts == [("1", "1", ""), ("1", "1", ""), ("2", "2", "spd,parallel,parallel"),
                      ("2", "2", "spd,parallel,parallel"), ("2", "2", "tp,tp,tp"), ("2", "2", "tp,tp,tp")], str(layouts))
    check("runs.csv: the counted communication equals the formula, step time and validation loss are recorded",
          all(x[k] == x["formula_" + k] and x[k] != "" for x in runs for k in ("tp_calls", "tp_bytes", "dp_calls", "dp_bytes"))
          and all(float(x["step_ms"]) > 0 and float(x["val_loss"]) > 0 for x in runs)
          and any(int(x["tp_calls"]) > 0 for x in runs),
          str([(x["tp_calls"], x["formula_tp_calls"], x["tp_bytes"], x["formula_tp_bytes"]) for x in runs]))
    _, loss = rows(os.path.join(results, "tp_smoke", "loss.csv"))
    check("loss.csv: 4 steps a run, the validation loss at the steps evaluated",
          len(loss) == 24 and sum(x["val_loss"] != "" for x in loss) == 12, str(len(loss)))
    md_path = os.path.join(reports, "tp_smoke", "tensor_parallel.md")
    md = open(md_path).read() if os.path.exists(md_path) else ""
    with open(os.path.join(reports, "tp_smoke", "tensor_parallel.csv"), newline="") as f:
        table = {x["block_types"]: x for x in csv.DictReader(f)}
    check("tensor_parallel.md and .csv: a row per layout, the formula matched, the standard model the reference",
          "Every counted call and byte equals the formula." in md and "(reference)" in md
          and sorted(table) == ["", "all tp", "spd,parallel,parallel"]
          and all(x["comm_equals_formula"] == "true" for x in table.values()), md[:3000])
    # All tp computes the standard model's function: equal validation losses,
    # seed by seed, at the metrics stream's 7 digits (up to float rounding).
    check("all tp: the standard model's validation loss seed by seed; spd/parallel: another function",
          abs(float(table["all tp"]["val_diff_max"])) < 1e-5 and abs(float(table["all tp"]["val_diff_min"])) < 1e-5
          and float(table["spd,parallel,parallel"]["val_diff_max"]) != 0, str(table))


def wait_none_left():
    """Waits until no process this test started is alive (checks.GONE_S at most); returns those left. A harness
    killed outright leaves its run to its guardian, which ends it (SIGTERM, then SIGKILL after kGraceSeconds):
    the next harness run must not find the killed one's run still holding its folder."""
    return wait_gone(own_processes)


def stand_in_processes():
    """The live processes of leftover_checks' stand-ins (the shell and its
    sleeps), found by this test's tag (tests/checks.py), which the harness and
    everything it starts inherit: not by the harness's own tag, so that the
    checks read the same whatever the harness does."""
    mine = os.environ[TEST_TAG]
    return [(pid, cmd) for pid, cmd, tag in tagged_processes(TEST_TAG)
            if tag == mine and ("/stages/serial" in cmd or cmd.startswith("sleep 300"))]


def leftover_checks(smoke, exps, results, a, work, env, check):
    """No process of a run outlives it (issue 53). Each stand-in serial stage
    behaves as MPICH's Hydra can: it starts a process in a session of its own
    (a process group does not hold it) and ignores SIGTERM. Before the fix,
    each case left its processes alive."""
    real_serial = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(a.harness))), "stages", "serial")
    exp = os.path.join(exps, "leftover.yaml")

    def stand_in(name, train, timeout_s=120):
        build = os.path.join(work, name)
        os.makedirs(os.path.join(build, "stages"))
        with open(os.path.join(build, "stages", "serial"), "w") as f:
            f.write(f'#!/bin/sh\ncase "$1" in config|plan) exec "{real_serial}" "$@";; esac\n{train}\n')
        os.chmod(os.path.join(build, "stages", "serial"), 0o755)
        with open(exp, "w") as f:
            f.write(smoke.split("runs:")[0].replace("name: smoke", f"name: {name}")
                    .replace("timeout_s: 120", f"timeout_s: {timeout_s}")
                    .replace("[table1, table2, scaling]", "[table1]") + "runs:\n  - stage: serial\n    threads: 1\n")
        return subprocess.Popen([a.harness, "run", exp, "--results", results, "--build", build, "--quiet"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)

    # The harness killed outright mid-run (SIGKILL to its process group, as
    # step 4 does): its guardian ends the run, SIGTERM then SIGKILL after 3 s
    # (kGraceSeconds, bench/harness/runner/process.cpp): that and 30 s of
    # slack for a slow or busy machine (the wait ends when they are gone).
    p = stand_in("leftover_killed", "trap '' TERM\nsetsid sleep 300 &\nsleep 300")
    deadline = time.time() + 120  # the event ends the wait; the deadline is for a far slower machine
    while len(stand_in_processes()) < 3 and time.time() < deadline:  # the shell and its two sleeps
        time.sleep(0.05)
    started = stand_in_processes()
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    left = wait_gone(stand_in_processes)
    check("a harness killed by SIGKILL mid-run leaves none of the run's processes (one in its own session, all "
          "ignoring SIGTERM)", len(started) >= 3 and not left, f"started {started}; left {left}")
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)

    # The program ends and leaves a process behind: the harness ends it and names it in the run's log.
    p = stand_in("leftover_exit", "setsid sleep 300 &\necho 'serial: error: this stand-in fails at once' >&2\nexit 1")
    p.communicate(timeout=120)
    left = stand_in_processes()
    logs = glob.glob(os.path.join(results, "leftover_exit", "*", "log.txt"))
    text = open(logs[0]).read() if logs else ""
    check("a program that ends leaving a process behind: the harness ends it and its log names it",
          not left and "harness: 1 process(es) of this run were still alive after it ended" in text
          and "sleep 300" in text, f"left {left}; log {text[-400:]}")
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)

    # A run past its timeout that ignores SIGTERM, with a process in a session of its own.
    p = stand_in("leftover_timeout", "trap '' TERM\nsetsid sleep 300 &\nsleep 300", timeout_s=2)
    _, err = p.communicate(timeout=120)
    left = stand_in_processes()
    check("a run past its timeout that ignores SIGTERM: recorded as timed out, none of its processes left",
          "timed out" in err and not left, f"left {left}; {err[-400:]}")
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    os.remove(exp)


def bad_places_checks(work, exps, a, env, check):
    """Issue 42, round three: a --results or --reports the harness cannot use, and a train_step --json it cannot
    write, are bad input (exit 2, one line naming the option) before any work; nothing is created."""
    afile = os.path.join(work, "a_file")
    with open(afile, "w") as f:
        f.write("kept\n")
    before = sorted(os.listdir(work))
    for title, args in [("--results a file", ["run", "--results", afile]),
                        ("--results below a file", ["run", "--results", os.path.join(afile, "sub")]),
                        ("--reports a file", ["run", "--reports", afile]),
                        ("report --results a file", ["report", "--results", afile]),
                        ("report --reports below a file", ["report", "--reports", os.path.join(afile, "x", "y")])]:
        opt = next(x for x in args if x.startswith("--"))
        # Before any run: nothing says "running" (a harness still going after PROMPT_S is taken for a hang).
        r = bounded_run([a.harness, args[0], os.path.join(exps, "smoke.yaml")] + args[1:], PROMPT_S, env=env)
        lines = r.stderr.strip().splitlines()
        check(f"harness {title}: exit 2, one line naming the option, before any run",
              not r.timed_out and r.returncode == 2 and len(lines) == 1
              and lines[0].startswith(f"harness: error: {opt}: '") and "running" not in r.stderr,
              f"exit {r.returncode} after {r.seconds:.1f} s: {r.stderr[-400:]}")
    check("refused --results and --reports created nothing, and the file is as it was",
          sorted(os.listdir(work)) == before and open(afile).read() == "kept\n", str(sorted(os.listdir(work))))
    train_step = os.path.join(os.path.dirname(os.path.abspath(a.harness)), "train_step")
    if not os.path.exists(train_step):
        return
    for title, path, needle in [("in a folder that does not exist", os.path.join(work, "nowhere", "t.json"),
                                 "does not exist"),
                                ("below a file", os.path.join(afile, "t.json"), f"its folder '{afile}'"),
                                ("a folder", work, "is a folder")]:
        # Before the benchmark: nothing on stdout (a train_step still going after PROMPT_S is taken for a hang).
        r = bounded_run([train_step, "--preset", "small", "--batch", "1", "--threads", "1", "--steps", "1",
                         "--warmup", "0", "--json", path], PROMPT_S, env=env)
        lines = r.stderr.strip().splitlines()
        check(f"train_step --json {title}: exit 2, one line, before the benchmark (nothing printed on stdout)",
              not r.timed_out and r.returncode == 2 and len(lines) == 1
              and lines[0].startswith("train_step: error: --json: ") and needle in lines[0] and r.stdout == "",
              f"exit {r.returncode} after {r.seconds:.1f} s: {r.stderr[-300:]} / {r.stdout[-200:]}")
    # The benchmarks' thread counts are bounded as train.threads is (65536 ended in the OpenMP runtime).
    r = subprocess.run([train_step, "--preset", "small", "--threads", "65536", "--steps", "1"], capture_output=True,
                       text=True, env=env, timeout=120)
    lines = r.stderr.strip().splitlines()
    check("train_step --threads 65536: exit 2, one line naming the bound, nothing run",
          r.returncode == 2 and len(lines) == 1 and "--threads: 65536 threads is above the limit" in lines[0]
          and r.stdout == "", f"exit {r.returncode}: {r.stderr[-300:]}")
    generate_bench = os.path.join(os.path.dirname(os.path.abspath(a.harness)), "generate_bench")
    if os.path.exists(generate_bench):
        r = subprocess.run([generate_bench, "--threads", "65536"], capture_output=True, text=True, env=env, timeout=120)
        lines = r.stderr.strip().splitlines()
        check("generate_bench --threads 65536: exit 2, one line naming the bound",
              r.returncode == 2 and len(lines) == 1 and "65536 threads is above the limit" in lines[0],
              f"exit {r.returncode}: {r.stderr[-300:]}")


# Issue 70, cause 8: what an experiment file or a command line says of Slurm is written into job scripts. Every
# field tried with a newline (a line the shell would run), a ';', a $(...) and backticks: each is refused where it
# is read (exit 2, one line naming the key or option, nothing written), by slurm-script and by run --launcher
# slurm. (The canary is the file the payload would make; a refusal runs nothing, so it never appears.)
SLURM_PAYLOADS = {"a newline": "x\ntouch pwned", "';'": "x; touch pwned", "$(...)": "$(touch pwned)",
                  "backticks": "`touch pwned`"}
SLURM_FIELDS = ("partition", "account", "time", "sbatch")


def slurm_value(field, payload):
    """The payload as the field's value: an sbatch option's value (--qos=...), else the value itself."""
    return "--qos=" + payload if field == "sbatch" else payload


def slurm_section(field, value):
    """An experiment's `slurm:` section setting `field` to `value` (JSON is YAML: its bytes, newline included)."""
    return f"slurm:\n  {field}: {'[' + json.dumps(value) + ']' if field == 'sbatch' else json.dumps(value)}\n"


def untrusted_input_checks(work, a, env, check):
    """Issue 70: Slurm values from an experiment file or the command line reach no shell (cause 8), compare's
    scratch folder is its own and removed however the compare ends (cause 9), slurm-script --out follows the output
    rules, and an experiment's checkpoint keys are not dropped without `checkpoints: true`."""
    here = os.path.join(work, "untrusted")
    os.makedirs(here)
    with open(os.path.join(a.repo, "experiments", "smoke.yaml")) as f:
        smoke = f.read().replace("base: ../configs/original.yaml",
                                 f"base: {os.path.join(work, 'configs', 'original.yaml')}")
    exp_path = os.path.join(here, "smoke.yaml")
    with open(exp_path, "w") as f:
        f.write(smoke)

    def harness(*args, cwd=here, environ=None):
        return bounded_run([os.path.abspath(a.harness), *args], PROMPT_S * 5, env=environ or env, cwd=cwd)

    def experiment(name, more):
        path = os.path.join(here, name + ".yaml")
        with open(path, "w") as f:
            f.write(smoke.replace("name: smoke", f"name: {name}") + more)
        return path

    def refused(r, needle, where):
        lines = r.stderr.strip().splitlines()
        return (not r.timed_out and r.returncode == 2 and len(lines) == 1 and needle in lines[0]
                and not os.path.exists(where) and not os.path.exists(os.path.join(here, "pwned")))

    # ---- every field, every payload, from the file and from the command line: slurm-script ----
    n = 0
    for field in SLURM_FIELDS:
        for what, payload in SLURM_PAYLOADS.items():
            value = slurm_value(field, payload)
            n += 1
            exp = experiment(f"slurm_{n}", slurm_section(field, value))
            out = os.path.join(here, f"jobs_{n}")
            r = harness("slurm-script", exp, "--out", out)
            check(f"slurm-script: the experiment's slurm.{field} with {what} is refused (exit 2, one line naming the "
                  "key at its line, nothing written)", refused(r, f"slurm_{n}.yaml:", out)
                  and f"slurm.{field}: '" in r.stderr, f"exit {r.returncode}: {r.stderr[-300:]}")
            out = os.path.join(here, f"jobs_cli_{n}")
            r = harness("slurm-script", exp_path, "--out", out, f"--{field}={value}")
            check(f"slurm-script --{field} with {what} is refused (exit 2, one line naming the option, nothing "
                  "written)", refused(r, f"harness: error: --{field}: '", out),
                  f"exit {r.returncode}: {r.stderr[-300:]}")
    # ---- run --launcher slurm: the same values refused before Slurm is asked or anything runs ----
    payload = SLURM_PAYLOADS["a newline"]
    for field in SLURM_FIELDS:
        value = slurm_value(field, payload)
        res = os.path.join(here, f"run_{field}")
        r = harness("run", exp_path, "--quiet", "--launcher", "slurm", "--results", res, "--reports", res + "_reports",
                    f"--{field}={value}")
        check(f"run --launcher slurm --{field} with a newline: refused, naming the option, before Slurm is asked",
              refused(r, f"harness: error: --{field}: '", res), f"exit {r.returncode}: {r.stderr[-300:]}")
        exp = experiment(f"run_slurm_{field}", "launcher: slurm\n" + slurm_section(field, value))
        r = harness("run", exp, "--quiet", "--results", res, "--reports", res + "_reports")
        check(f"run, the experiment's launcher: slurm and slurm.{field} with a newline: refused at its line",
              refused(r, f"slurm.{field}: '", res), f"exit {r.returncode}: {r.stderr[-300:]}")
    res = os.path.join(here, "results\ntouch pwned #")
    r = harness("run", exp_path, "--quiet", "--launcher", "slurm", "--results", res, "--reports", res + "_reports")
    check("run --launcher slurm --results a folder whose name holds a newline: refused before Slurm is asked "
          "(each run's #SBATCH --output is in it)", refused(r, "harness: error: --results: '", res)
          and "control character" in r.stderr, f"exit {r.returncode}: {r.stderr[-300:]}")
    # ---- values Slurm takes are written; the one a user names (the folder) only quoted ----
    # A folder named with $(...), backticks, ';', quotes, '#' and '%': the job script's shell lines carry it
    # single-quoted. Each script is run here by bash with srun and mpiexec standing in (they record their
    # arguments): nothing of the name runs, and the stage gets the run's folder exactly.
    odd = os.path.join(here, "jobs $(touch pwned) `touch pwned`; x#y%z\"q's")
    r = harness("slurm-script", exp_path, "--out", odd, "--partition=debug", "--account=proj_1", "--time=1-02:00",
                "--sbatch=--qos=low,--mem=8G,-N 1,--exclusive")
    stubs = os.path.join(here, "stubs")
    os.makedirs(stubs)
    for tool in ("srun", "mpiexec", "scontrol"):
        with open(os.path.join(stubs, tool), "w") as f:
            f.write("#!/bin/sh\nprintf '%s\\0' \"$@\" >> \"$STUB_LOG\"\n")
        os.chmod(os.path.join(stubs, tool), 0o755)
    scripts = sorted(glob.glob(os.path.join(glob.escape(odd), "*", "job.sh")))
    ran, wrong = [], []
    for script in scripts:
        run_dir = os.path.dirname(script)
        log = os.path.join(here, "stub.log")
        if os.path.exists(log):
            os.remove(log)
        job = subprocess.run(["bash", script], capture_output=True, text=True, cwd=here, timeout=PROMPT_S,
                             env=dict(env, PATH=stubs + os.pathsep + env.get("PATH", ""), STUB_LOG=log))
        argv = open(log).read().split("\0")[:-1] if os.path.exists(log) else []
        ran.append(job.returncode == 0 and argv[-5:] == ["--config", os.path.join(run_dir, "run.yaml"), "--out",
                                                         run_dir, "--overwrite"])
        if not ran[-1]:
            wrong.append(f"{script}: exit {job.returncode} {job.stderr[-200:]} argv {argv}")
    text = "".join(open(x).read() for x in scripts)
    check("slurm-script into a folder named with $(...), backticks, ';', quotes, '#' and '%': written, and its job "
          "scripts, run by bash (srun standing in), run nothing of the name and give the stage the run's folder",
          r.returncode == 0 and len(scripts) >= 1 and all(ran) and not os.path.exists(os.path.join(here, "pwned"))
          and "#SBATCH --partition=debug\n" in text and "#SBATCH --qos=low\n" in text and "#SBATCH -N 1\n" in text,
          f"exit {r.returncode}: {r.stderr[-300:]} {wrong[:2]}")
    out = os.path.join(here, "jobs\ntouch pwned #")
    r = harness("slurm-script", exp_path, "--out", out)
    check("slurm-script --out a folder whose name holds a newline: refused (an #SBATCH line cannot carry it)",
          refused(r, "harness: error: --out: '", out) and "control character" in r.stderr, r.stderr[-300:])

    # ---- slurm-script --out follows the output rules: not in a training run's folder ----
    run_like = os.path.join(here, "a_run")
    os.makedirs(run_like)
    with open(os.path.join(run_like, "run.json"), "w") as f:
        f.write("{}\n")
    r = harness("slurm-script", exp_path, "--out", os.path.join(run_like, "jobs"))
    check("slurm-script --out inside a training run's folder: refused (exit 2, one line), nothing written",
          refused(r, "training run folder", os.path.join(run_like, "jobs")) and os.listdir(run_like) == ["run.json"],
          f"exit {r.returncode}: {r.stderr[-300:]}")

    # ---- checkpoint keys need `checkpoints: true` (else the harness's train.save_checkpoint false drops them) ----
    res = os.path.join(here, "ckpt_results")

    def with_key(name, line, more=""):
        """smoke.yaml as `name` with `line` first in its config (line 7 of the file), `more` appended."""
        path = os.path.join(here, name + ".yaml")
        with open(path, "w") as f:
            f.write(smoke.replace("name: smoke", f"name: {name}").replace("config:\n", f"config:\n  {line}\n", 1)
                    + more)
        return path
    for title, exp, args, needle in [
            ("the experiment's train.checkpoint_every without checkpoints: true",
             with_key("ckpt_every", "train.checkpoint_every: 1"), [], "ckpt_every.yaml:7: train.checkpoint_every: "),
            ("the experiment's train.save_checkpoint: true without checkpoints: true",
             with_key("ckpt_save", "train.save_checkpoint: true"), [], "ckpt_save.yaml:7: train.save_checkpoint: "),
            ("--set train.checkpoint_every=2 without checkpoints: true", exp_path,
             ["--set", "train.checkpoint_every=2"], "--set train.checkpoint_every=2: ")]:
        r = harness("run", exp, "--quiet", "--results", res, "--reports", res + "_reports", *args)
        check(f"run: {title} is refused (exit 2, one line naming it and checkpoints: true), nothing run",
              refused(r, needle, res) and "checkpoints: true" in r.stderr, f"exit {r.returncode}: {r.stderr[-300:]}")
    r = harness("slurm-script", with_key("ckpt_kept", "train.save_checkpoint: false"), "--out",
                os.path.join(here, "ckpt_kept_jobs"))
    check("train.save_checkpoint: false without checkpoints: true (what the harness says anyway) is taken",
          r.returncode == 0, r.stderr[-300:])
    r = harness("slurm-script", with_key("ckpt_on", "train.checkpoint_every: 1", "checkpoints: true\n"), "--out",
                os.path.join(here, "ckpt_on_jobs"))
    yamls = glob.glob(os.path.join(here, "ckpt_on_jobs", "*", "run.yaml"))
    check("train.checkpoint_every with checkpoints: true is taken, and reaches the runs",
          r.returncode == 0 and yamls and all("checkpoint_every: 1\n" in open(y).read() for y in yamls),
          r.stderr[-300:])

    # ---- compare's scratch folder (cause 9): its own (mkdtemp under TMPDIR), removed however the compare ends ----
    # A REV:NAME side is read from git into the scratch folder: the repository's committed results.
    listed = subprocess.run(["git", "-C", a.repo, "ls-tree", "--name-only", "HEAD", "results/"], capture_output=True,
                            text=True, timeout=PROMPT_S)
    names = [p.split("/", 1)[1] for p in listed.stdout.split() if listed.returncode == 0]
    name = next((x for x in names if subprocess.run(["git", "-C", a.repo, "cat-file", "-e",
                                                     f"HEAD:results/{x}/runs.csv"], capture_output=True,
                                                    timeout=PROMPT_S).returncode == 0), None)
    if name is None:
        print(f"note: compare's scratch checks skipped: {a.repo} holds no committed results/*/runs.csv "
              f"({listed.stderr.strip()[:200]})")
        return
    tmp = os.path.join(here, "tmpdir")
    os.makedirs(tmp)
    tenv = dict(env, TMPDIR=tmp)
    r = harness("compare", f"HEAD:{name}", f"HEAD:{name}", environ=tenv)
    check(f"compare HEAD:{name} HEAD:{name} (read through the scratch folder): compared, no scratch folder left in "
          "TMPDIR", r.returncode == 0 and "B / A" in r.stdout and os.listdir(tmp) == [],
          f"exit {r.returncode}: {r.stderr[-300:]}; TMPDIR holds {os.listdir(tmp)}")
    r = harness("compare", f"HEAD:{name}", "HEAD:no_such_experiment", environ=tenv)
    check("a compare refused after one side was read (its other side names nothing): exit 2, no scratch folder left "
          "in TMPDIR", r.returncode == 2 and "no_such_experiment" in r.stderr and os.listdir(tmp) == [],
          f"exit {r.returncode}: {r.stderr[-300:]}; TMPDIR holds {os.listdir(tmp)}")
    # A link planted where the old scratch folder was, harness_compare_<pid> (bash's exec keeps the pid).
    target = os.path.join(here, "planted_target")
    os.makedirs(target)
    r = bounded_run(["bash", "-c", 'ln -s "$1" "$TMPDIR/harness_compare_$$" && exec "$2" compare "$3" "$3"', "plant",
                     target, os.path.abspath(a.harness), f"HEAD:{name}"], PROMPT_S * 5, env=tenv, cwd=here)
    check("a link planted at TMPDIR/harness_compare_<pid> is not written through (the scratch folder is a new one)",
          r.returncode == 0 and os.listdir(target) == [] and [x for x in os.listdir(tmp) if not os.path.islink(
              os.path.join(tmp, x))] == [], f"exit {r.returncode}: {r.stderr[-300:]}; the link's target holds "
          f"{os.listdir(target)}; TMPDIR holds {os.listdir(tmp)}")


# The tiny model of the pipeline smoke experiment (PP_SMOKE's config block, up to its steps).
TINY = PP_SMOKE.split("config:\n", 1)[1].split("  train.steps", 1)[0]
RESUME = """name: resume
base: ../configs/original.yaml
config:
""" + TINY + """  train.steps: 3000
  train.checkpoint_every: 50
  train.eval_every: 0
  train.peak_gflops: 10
  train.deterministic: true
  generate.max_new_tokens: 0
reports: [table1]
timeout_s: 300
checkpoints: true
runs:
  - stage: serial
    threads: 1
"""


def resume_checks(exps, results, reports, a, env, check):
    """Issue 43: the harness killed while a run trains, then run again: the run continues from its
    checkpoint (attempt 2, every step recorded once, the uninterrupted run's final state), the report
    complete. And --retries: a run that fails after a checkpoint is attempted again, each attempt resuming."""
    with open(os.path.join(exps, "resume.yaml"), "w") as f:
        f.write(RESUME)
    cmd = [a.harness, "run", os.path.join(exps, "resume.yaml"), "--results", results, "--reports", reports]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    res = os.path.join(results, "resume")
    # Its first checkpoint comes at step 50 of 3000 (about 3 s of steps here): 2950 steps are left when the test
    # kills the harness, a few milliseconds after that checkpoint, on a machine 10x faster too.
    deadline = time.time() + 120

    def checkpointed():
        if not os.path.isdir(res):
            return False
        return any(d.endswith(".attempt") and os.path.exists(os.path.join(res, d, "checkpoint.bin"))
                   for d in os.listdir(res))
    while time.time() < deadline and p.poll() is None and not checkpointed():
        time.sleep(0.005)
    if p.poll() is not None:
        check("the harness is still running when its run has a checkpoint (to be killed)", False,
              p.stderr.read()[-600:])
        return
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    left = wait_none_left()  # its guardian ends the run (it saves and stops at its step's end)
    if left:
        check("the killed harness's run ends", False, f"left {left}")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    _, rows_ = rows(os.path.join(res, "runs.csv"))
    run_dir = os.path.join(res, rows_[0]["run_id"]) if rows_ else ""
    log = open(os.path.join(run_dir, "log.txt")).read() if run_dir and os.path.exists(os.path.join(run_dir, "log.txt")) else ""
    steps = []
    if run_dir and os.path.exists(os.path.join(run_dir, "metrics.jsonl")):
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            steps = [json.loads(x)["step"] for x in f if '"event":"step"' in x]
    check("the harness killed mid-run, run again: the run resumes from its checkpoint (attempt 2), every step "
          "recorded once, the report complete",
          r.returncode == 0 and "attempt 2, continuing the last" in r.stderr and "--resume auto: resuming from" in log
          and steps == list(range(3000)) and rows_ and rows_[0]["status"] == "ok" and rows_[0]["attempts"] == "2"
          and os.path.exists(os.path.join(reports, "resume", "table1.md")),
          f"exit {r.returncode}, rows {rows_[:1]}, steps {len(steps)}: {r.stderr[-600:]}")
    # --retries: a run that fails at step 30 (after its step-20 checkpoint) is attempted 3 times, each resuming.
    with open(os.path.join(exps, "resume.yaml"), "w") as f:
        f.write(RESUME.replace("name: resume", "name: retries").replace("train.steps: 3000", "train.steps: 40")
                .replace("train.checkpoint_every: 50", "train.checkpoint_every: 20"))
    # Every attempt fails at step 30 (the fail_step test hook, which the harness's programs inherit).
    r = subprocess.run([*cmd, "--retries", "2"], capture_output=True, text=True,
                       env=with_hooks(env, {"fail_rank": 0, "fail_step": 30}), timeout=300)
    _, rows_ = rows(os.path.join(results, "retries", "runs.csv"))
    check("--retries 2: a run failing after a checkpoint is attempted 3 times, each resuming it; failed, attempts 3",
          r.returncode == 1 and r.stderr.count("continuing the last") == 2 and rows_
          and rows_[0]["status"] == "failed" and rows_[0]["attempts"] == "3", f"rows {rows_[:1]}: {r.stderr[-600:]}")
    r = subprocess.run([*cmd, "--retries", "-1"], capture_output=True, text=True, env=env, timeout=60)
    check("--retries -1 is refused", r.returncode == 2 and "--retries" in r.stderr, r.stderr[-300:])
    os.remove(os.path.join(exps, "resume.yaml"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--harness", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--part", choices=("all", "smoke", "untrusted"), default="all",
                    help="smoke: the smoke experiment's first run and its files alone (the quick tier); untrusted: the "
                    "checks of what an experiment file or command line someone sent cannot make the harness do "
                    "(issue 70), alone; all: everything")
    a = ap.parse_args()
    a.repo = os.path.abspath(a.repo)
    work = tempfile.mkdtemp(prefix="harness_test_")
    exps = os.path.join(work, "experiments")
    os.makedirs(exps)
    shutil.copy(os.path.join(a.repo, "experiments", "smoke.yaml"), exps)
    with open(os.path.join(a.repo, "configs", "original.yaml")) as f:
        base = f.read().replace("../data/tiny_tales.txt", os.path.join(a.repo, "data", "tiny_tales.txt"))
    os.makedirs(os.path.join(work, "configs"))
    with open(os.path.join(work, "configs", "original.yaml"), "w") as f:
        f.write(base)
    results, reports = os.path.join(work, "results"), os.path.join(work, "reports")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    check = Checks(passes="short")  # long details only for failures

    def harness(*args, exp="smoke.yaml", timeout=300, hooks=None):
        """`hooks`: test hooks every stage program the harness starts installs (checks.with_hooks)."""
        return subprocess.run([a.harness, *args, os.path.join(exps, exp), "--results", results, "--reports", reports],
                              capture_output=True, text=True, env=with_hooks(env, hooks), timeout=timeout)

    # 0. Places the harness cannot use, and what a file or command line someone sent cannot make it do: refused
    # before anything runs.
    if a.part == "untrusted":
        untrusted_input_checks(work, a, env, check)
        return check.finish()
    if a.part == "all":
        bad_places_checks(work, exps, a, env, check)
        untrusted_input_checks(work, a, env, check)
    # 1. A full run of the smoke experiment.
    r = harness("run")
    check("smoke runs", r.returncode == 0, r.stderr[-1500:] if r.returncode else "")
    progress = [l for l in r.stderr.splitlines() if ": step 3/3, loss " in l and "tokens/s" in l and "left" in l]
    check("a progress line per completed run (output not a terminal), from the stage's metrics stream",
          len(progress) == 3, "\n".join(progress) or r.stderr[-800:])
    rq = harness("run", "--force", "--quiet")
    check("--quiet: no progress lines", rq.returncode == 0 and not any(": step 3/3" in l for l in rq.stderr.splitlines()),
          rq.stderr[-600:])
    header, runs = rows(os.path.join(results, "smoke", "runs.csv"))
    check("runs.csv has the documented columns", header == RUNS_COLUMNS, str(header))
    by_stage = {(x["stage"], x["ranks"]): x for x in runs}
    ok_runs = [x for x in runs if x["status"] == "ok"]
    check("serial and mpi at 1 and 2 ranks completed",
          {(x["stage"], x["ranks"]) for x in ok_runs} == {("serial", "1"), ("mpi", "1"), ("mpi", "2")},
          str([(x["stage"], x["ranks"], x["status"], x["reason"]) for x in runs]))
    check("completed runs carry numbers and provenance",
          all(float(x["training_s"]) > 0 and float(x["final_loss"]) > 0 and x["steps"] == "3" and x["cpu"]
              and x["git_commit"] for x in ok_runs))
    check("provenance: the sources' hash, the build options and flags, OpenBLAS's version; MPICH's on mpi runs",
          all(len(x["source_hash"]) == 12 and "buildtype=" in x["build_options"] and "flags=" in x["build_options"]
              and x["openblas"] for x in ok_runs)
          and all(x["mpi"].startswith("MPICH") for x in ok_runs if x["stage"] == "mpi"),
          str([(x["source_hash"], x["openblas"], x["mpi"]) for x in ok_runs]))
    smoke_md = open(os.path.join(reports, "smoke", "table1.md")).read()
    check("every report's header names the build and the libraries",
          "(sources " in smoke_md and "options `buildtype=" in smoke_md and "OpenBLAS " in smoke_md
          and "MPICH" in smoke_md, smoke_md[:1200])
    for st in (("cuda", "1"), ("mpi_cuda", "2")):
        x = by_stage.get(st, {})
        # Not built (no nvcc), or built and without a GPU at run time.
        check(f"{st[0]} is skipped with its reason", x.get("status") == "skipped"
              and any(w in x.get("reason", "") for w in ("not built", "no CUDA device"))
              and x.get("training_s") == "", f"{x.get('status')}: {x.get('reason')}")
    lheader, loss = rows(os.path.join(results, "smoke", "loss.csv"))
    check("loss.csv: documented columns, 3 epochs per completed run", lheader == LOSS_COLUMNS and len(loss) == 9
          and sorted({x["epoch"] for x in loss}) == ["0", "1", "2"], f"{len(loss)} rows")
    serial_loss = [x["loss"] for x in loss if x["stage"] == "serial"]
    mpi2_loss = [x["loss"] for x in loss if x["stage"] == "mpi" and x["ranks"] == "2"]
    check("mpi at 2 ranks logs the serial losses", len(serial_loss) == 3 and all(
        abs(float(p) - float(q)) <= 1e-5 * float(q) for p, q in zip(mpi2_loss, serial_loss)), f"{serial_loss} {mpi2_loss}")
    for name in ("runs.md", "table1.md", "table1.csv", "table2.md", "table2.csv", "scaling.md"):
        check(f"reports/smoke/{name} written", os.path.isfile(os.path.join(reports, "smoke", name)))
    t1 = open(os.path.join(reports, "smoke", "table1.md")).read()
    check("table1.md names the machine and the skipped stages' reason",
          ("not built" in t1 or "no CUDA device" in t1) and "Measured on" in t1)
    if a.part == "smoke":
        return check.finish()

    # 2. Rerunning reuses completed runs (skipped ones are tried again: the
    # hardware may have appeared), leaving the completed runs' files as they were.
    done_dirs = [os.path.join(results, "smoke", x["run_id"]) for x in ok_runs]
    before = [digest(d) for d in done_dirs]
    r = harness("run")
    check("a rerun reuses the completed runs", r.returncode == 0 and r.stderr.count("reused") == 3
          and [digest(d) for d in done_dirs] == before, r.stderr[-800:])
    # 3. report rebuilds from stored results.
    os.remove(os.path.join(reports, "smoke", "table1.md"))
    r = harness("report")
    check("report rebuilds the reports without running", r.returncode == 0 and "running" not in r.stderr
          and os.path.isfile(os.path.join(reports, "smoke", "table1.md")), r.stderr[-500:])

    # 4. Interrupt a forced rerun after its first run finished; the next run resumes.
    serial_dir = next(os.path.join(results, "smoke", x["run_id"]) for x in runs if x["stage"] == "serial")
    status = os.path.join(serial_dir, "status.json")
    t_start = time.time()
    p = subprocess.Popen([a.harness, "run", os.path.join(exps, "smoke.yaml"), "--results", results, "--reports",
                          reports, "--force"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    deadline = time.time() + 120  # the event ends the wait; the deadline is for a far slower machine
    while time.time() < deadline and not (os.path.exists(status) and os.path.getmtime(status) >= t_start):
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    left = wait_none_left()  # the run under way when it was killed, ended by the harness's guardian
    if left:
        check("the killed harness's run ends", False, f"left {left}")
    r = harness("run")
    _, runs2 = rows(os.path.join(results, "smoke", "runs.csv"))
    check("after an interruption, the next run reuses what finished and completes the rest",
          r.returncode == 0 and "reused" in r.stderr and sum(x["status"] == "ok" for x in runs2) == 3, r.stderr[-800:])

    # 5. A failing run leaves the earlier results intact.
    with open(os.path.join(exps, "smoke.yaml")) as f:
        smoke = f.read()
    with open(os.path.join(exps, "smoke.yaml"), "w") as f:
        # Another seed makes it a run of its own (the others are reused, so only it starts, with the failure hook).
        f.write(smoke + "  - stage: serial\n    threads: 1\n    config: {train.seed: 7}\n")
    _, runs_before = rows(os.path.join(results, "smoke", "runs.csv"))
    done_dirs = [os.path.join(results, "smoke", x["run_id"]) for x in runs_before if x["status"] == "ok"]
    before = [digest(d) for d in done_dirs]
    r = harness("run", hooks={"fail_rank": 0, "fail_step": 1})
    _, runs3 = rows(os.path.join(results, "smoke", "runs.csv"))
    failed = [x for x in runs3 if x["status"] == "failed"]
    intact = [digest(d) for d in done_dirs] == before
    check("a failing run is recorded as failed with its error, exit 1",
          r.returncode == 1 and len(failed) == 1 and "injected failure" in failed[0]["reason"], str(failed))
    check("... and every earlier result is intact", intact and sum(x["status"] == "ok" for x in runs3) == 3)
    # 6. A forced rerun that does not complete (here the serial program only
    # resolves configurations and fails to train, the other stage programs are
    # missing: every attempt fails or is skipped) keeps the completed runs.
    serial_ok = next(x for x in runs3 if x["stage"] == "serial" and x["status"] == "ok")
    keep = digest(os.path.join(results, "smoke", serial_ok["run_id"]))
    empty_build = os.path.join(work, "empty-build")
    os.makedirs(os.path.join(empty_build, "stages"))
    with open(os.path.join(exps, "smoke.yaml"), "w") as f:
        f.write(smoke)
    # 6a. Without the serial program the harness cannot resolve a configuration: it says so.
    r = harness("run", "--build", empty_build)
    check("without the serial program: one error saying the harness needs it, nothing run",
          r.returncode == 2 and "needs the serial stage program" in r.stderr and "smoke.yaml" in r.stderr
          and len(r.stderr.strip().splitlines()) == 1, r.stderr[-600:])
    real_serial = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(a.harness))), "stages", "serial")
    stand_in = os.path.join(empty_build, "stages", "serial")
    with open(stand_in, "w") as f:
        f.write(f'#!/bin/sh\ncase "$1" in config|plan) exec "{real_serial}" "$@";; esac\n'
                'echo "serial: error: this stand-in only resolves and plans configurations" >&2\nexit 1\n')
    os.chmod(stand_in, 0o755)
    r = harness("run", "--force", "--build", empty_build)
    _, runs4 = rows(os.path.join(results, "smoke", "runs.csv"))
    serial4 = next(x for x in runs4 if x["run_id"] == serial_ok["run_id"])
    conditions = {"still ok": serial4["status"] == "ok",
                  "files kept": digest(os.path.join(results, "smoke", serial_ok["run_id"])) == keep,
                  "attempt kept": os.path.isdir(os.path.join(results, "smoke", serial_ok["run_id"] + ".last-attempt"))}
    check("a forced rerun that does not complete keeps the earlier completed run", all(conditions.values()),
          f"{conditions}: {r.stderr[-600:]}")
    # 6b. Runs recorded by another build (here: other stage programs under --build) are not reused but rerun;
    # the stand-in's attempts do not complete, so the earlier runs stay as they were.
    done_dirs = [os.path.join(results, "smoke", x["run_id"]) for x in runs4 if x["status"] == "ok"]
    before = [digest(d) for d in done_dirs]
    r = harness("run", "--build", empty_build)
    check("runs done by another build are rerun, not reused, and kept until a rerun completes",
          "reused" not in r.stderr and r.stderr.count("done earlier by another build") == len(done_dirs) > 0
          and [digest(d) for d in done_dirs] == before, r.stderr[-800:])
    r = harness("run")
    check("... and its own build's runs are reused again", r.stderr.count("reused") == len(done_dirs), r.stderr[-800:])

    # 6c. A report after an interruption counts the planned repetitions: "ok 1/3", not "ok 1/1". Each run's 3
    # steps sleep 0.5 s (the step_sleep_s test hook, outside the arithmetic), so that the second repetition is still
    # under way when the test, having seen the first recorded, kills the harness: however fast the machine.
    with open(os.path.join(exps, "reps.yaml"), "w") as f:
        f.write(smoke.split("runs:")[0].replace("name: smoke", "name: reps").replace("repetitions: 1", "repetitions: 3")
                .replace("[table1, table2, scaling]", "[table1]")
                + "runs:\n  - stage: serial\n    threads: 1\n")
    p = subprocess.Popen([a.harness, "run", os.path.join(exps, "reps.yaml"), "--results", results, "--reports",
                          reports], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=with_hooks(env, {"step_sleep_s": 0.5}), start_new_session=True)
    reps_dir = os.path.join(results, "reps")

    def first_run_recorded():
        # runs.csv is rewritten (atomically) after each run; a run's status.json comes just before that, so
        # waiting for status.json alone raced the harness's write of runs.csv under load.
        path = os.path.join(reps_dir, "runs.csv")
        return os.path.isfile(path) and any(x["status"] == "ok" for x in rows(path)[1])

    deadline = time.time() + 120  # the event ends the wait; the deadline is for a far slower machine
    while time.time() < deadline and not first_run_recorded():
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    left = wait_none_left()  # the second repetition, ended by the harness's guardian
    if left:
        check("the killed harness's run ends", False, f"left {left}")
    r = harness("report", exp="reps.yaml")
    t1_path = os.path.join(reports, "reps", "table1.md")
    t1 = open(t1_path).read() if os.path.exists(t1_path) else ""
    _, reps_rows = rows(os.path.join(reps_dir, "runs.csv"))
    check("an interrupted experiment's report says ok 1/3 (the planned repetitions), runs.csv lists the runs not run",
          r.returncode == 0 and "ok 1/3; not run 2/3" in t1
          and sorted(x["status"] for x in reps_rows) == ["not run", "not run", "ok"], f"{r.stderr[-500:]} {t1[-800:]}")
    os.remove(os.path.join(exps, "reps.yaml"))
    # 6d. No process of a run outlives it, however the run or the harness ends.
    leftover_checks(smoke, exps, results, a, work, env, check)
    # 6e. A run the harness was killed in resumes from its checkpoint; --retries resumes a failing run.
    resume_checks(exps, results, reports, a, env, check)

    # 7. Bad experiment files: one clear error each, before anything runs.
    bad = {
        "syntax.yaml": ("runs: [\n", "syntax error"),
        "unknown.yaml": ("base: ../configs/original.yaml\nrepetitons: 2\nruns:\n  - stage: serial\n",
                         "did you mean 'repetitions'"),
        "badtype.yaml": ("base: ../configs/original.yaml\nrepetitions: two\nruns:\n  - stage: serial\n", "repetitions"),
        "nocorpus.yaml": ("base: ../configs/original.yaml\nconfig: {data.corpus: nope.txt}\nruns:\n  - stage: serial\n",
                          "nope.txt"),
        "zero.yaml": ("base: ../configs/original.yaml\nconfig: {train.steps: 0}\nruns:\n  - stage: serial\n", "train.steps"),
        "ranks.yaml": ("base: ../configs/original.yaml\nruns:\n  - stage: mpi\n    ranks: [2, 3]\n",
                       "ranks.yaml:4: train.batch_size 16 is not divisible by the 3 ranks"),
        "stage.yaml": ("base: ../configs/original.yaml\nruns:\n  - stage: mpii\n", "did you mean 'mpi'"),
        "bigrep.yaml": ("base: ../configs/original.yaml\nrepetitions: 99999999999\nruns:\n  - stage: serial\n",
                        "bigrep.yaml:2: repetitions: '99999999999' is out of range (allowed 1..1073741824)"),
        "bigseed.yaml": ("base: ../configs/original.yaml\nseeds: [1, 99999999999999999999]\nruns:\n  - stage: serial\n",
                         "seeds: '99999999999999999999' is out of range"),
        "dupkey.yaml": ("base: ../configs/original.yaml\nrepetitions: 1\nrepetitions: 2\nruns:\n  - stage: serial\n",
                        "dupkey.yaml:3: duplicate key 'repetitions' (first at line 2)"),
        "dupcfg.yaml": ("base: ../configs/original.yaml\nruns:\n  - stage: serial\n    config:\n      train.steps: 1\n"
                        "      train.steps: 2\n", "dupcfg.yaml:6: duplicate key 'train.steps' (first at line 5)"),
        # Names that would escape the results and reports folders.
        "dotdot.yaml": ("name: ..\nbase: ../configs/original.yaml\nruns:\n  - stage: serial\n", "name: '..' must be a plain word"),
        "dot.yaml": ("name: .\nbase: ../configs/original.yaml\nruns:\n  - stage: serial\n", "name: '.' must be a plain word"),
        "slash.yaml": ("name: a/b\nbase: ../configs/original.yaml\nruns:\n  - stage: serial\n", "must be a plain word"),
        # Nested aliases: nine levels would expand to 9^9 nodes; refused before anything is built.
        "aliases.yaml": ("base: ../configs/original.yaml\nx0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
                         + "".join(f"x{k}: &a{k} [{', '.join(['*a' + str(k - 1)] * 9)}]\n" for k in range(1, 9))
                         + "runs:\n  - stage: serial\n", "YAML aliases (*name) are not accepted"),
    }
    around = {d: sorted(os.listdir(d)) for d in (work, results, reports)}
    check_bad_files(bad, "bad experiment", exps, results, harness, check)
    check("names that would escape ('..', '.', 'a/b') wrote nothing beside the results and reports folders",
          around == {d: sorted(os.listdir(d)) for d in (work, results, reports)}, str(around))
    r = harness("run", exp="unknown.yaml")
    check("an unknown key's error names its line", "unknown.yaml:2:" in r.stderr, r.stderr)
    # --set takes configuration keys only, and its errors name the option (there is no line of the file to name).
    for value, needle in [("config=/etc/hostname", "--set: 'config' is not a configuration key"),
                          ("out=/tmp/x", "--set: 'out' is not a configuration key"),
                          ("help=1", "--set: 'help' is not a configuration key"),
                          ("train.steps=0", "--set train.steps=0: train.steps: must be positive")]:
        r = harness("run", "--set", value)
        check(f"--set {value}: one error naming the option, nothing run", r.returncode == 2
              and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1 and ".yaml:0" not in r.stderr,
              r.stderr[-300:])
    # "Reproduce with" is shell-quoted: a value with spaces, quotes or $(...) pastes back as itself.
    odd = os.path.join(work, "my corpus $(touch pwned) 'q'.txt")
    shutil.copy(os.path.join(a.repo, "data", "tiny_tales.txt"), odd)
    scratch = os.path.join(work, "quoted-reports")
    r = subprocess.run([a.harness, "report", os.path.join(exps, "smoke.yaml"), "--set", f"data.corpus={odd}",
                        "--results", results, "--reports", scratch], capture_output=True, text=True, env=env, timeout=120)
    md = open(os.path.join(scratch, "smoke", "table1.md")).read() if r.returncode == 0 else ""
    line = next((l for l in md.splitlines() if l.startswith("build/bench/harness run")), "")
    echoed = subprocess.run(["bash", "-c", "printf '%s\\n' " + line.split(" --set ", 1)[-1]], capture_output=True,
                            text=True, cwd=work, timeout=PROMPT_S).stdout.strip() if line else ""
    check("'Reproduce with' quotes a --set value with spaces, quotes and $(...): the shell reads it back whole",
          echoed == f"data.corpus={odd}" and not os.path.exists(os.path.join(work, "pwned")), f"{line!r} -> {echoed!r}")
    r = subprocess.run([os.path.abspath(a.harness), "run", os.path.join(exps, "smoke.yaml"), "--results", "--force"],
                       capture_output=True, text=True, env=env, cwd=work)
    check("an option where a value is expected: exit 2, one line, no folder named '--force'",
          r.returncode == 2 and r.stderr.strip() == "harness: error: --results: missing value (got the option '--force')"
          and not os.path.exists(os.path.join(work, "--force")), r.stderr)
    stage_errors = {
        "cfgkey.yaml": ("base: ../configs/original.yaml\nruns:\n  - stage: serial\n    config: {train.stepz: 3}\n",
                        "cfgkey.yaml:4: unknown key 'train.stepz' (did you mean 'train.steps'?)"),
        "cfgtype.yaml": ("base: ../configs/original.yaml\nconfig:\n  train.steps: x\nruns:\n  - stage: serial\n",
                         "cfgtype.yaml:3: train.steps: expected an integer, got 'x'"),
        "cfgval.yaml": ("base: ../configs/original.yaml\nruns:\n  - stage: serial\n  - stage: mpi\n"
                        "    config: {model.block_size: 128}\n",
                        "cfgval.yaml:5: train.seq_len: 256 exceeds model.block_size 128"),
        "cfgrun.yaml": ("base: ../configs/zero_steps.yaml\nruns:\n  - stage: serial\n",
                        "cfgrun.yaml:3: this run's configuration is invalid: train.steps: must be positive, got 0"),
        "cfgbase.yaml": ("base: ../configs/bad_key.yaml\nruns:\n  - stage: serial\n",
                         "cfgbase.yaml:1: base: "),
        # The serial program's message itself holds "error: ": it is passed on whole.
        "cfgyaml.yaml": ("base: ../configs/broken.yaml\nruns:\n  - stage: serial\n",
                         "broken.yaml:2:1: YAML syntax error: "),
    }
    with open(os.path.join(work, "configs", "zero_steps.yaml"), "w") as f:
        f.write(base.replace("steps: 50", "steps: 0"))
    with open(os.path.join(work, "configs", "broken.yaml"), "w") as f:
        f.write("model: [\n")
    with open(os.path.join(work, "configs", "bad_key.yaml"), "w") as f:
        f.write(base.replace("steps: 50", "stepz: 50"))
    check_bad_files({k: (v[0], v[1]) for k, v in stage_errors.items()}, "stage's error at the file:line",
                    exps, results, harness, check)

    # 8. A kernels experiment: the benchmark programs through Google Benchmark's JSON.
    kernels_checks(a, exps, results, reports, env, check)
    # 9. The PyTorch peer and the MPI step, at tiny settings.
    peer_checks(exps, results, reports, harness, check)
    mpi_step_checks(exps, results, reports, harness, check)
    # 10. Tensor parallelism's layouts and their report.
    mpi_built = any(x["stage"] == "mpi" and x["status"] == "ok" for x in runs)
    tensor_parallel_checks(exps, results, reports, harness, mpi_built, check)
    mixed_checks(exps, results, reports, harness, check)
    if mpi_built:
        pipeline_checks(exps, results, reports, harness, check)
        table2_original_checks(exps, results, reports, harness, work, check)
    compare_checks(work, a.harness, env, check)

    r = subprocess.run([a.harness, "list", "--experiments", exps], capture_output=True, text=True)
    check("list names the experiments and why stages are unavailable",
          r.returncode == 0 and "smoke" in r.stdout and "cuda" in r.stdout
          and ("not built" in r.stdout or os.path.exists(os.path.join(os.path.dirname(a.harness), "..", "stages", "cuda"))),
          r.stdout)
    check("list names the kernels experiment", "kernels_smoke" in r.stdout and "benchmark programs" in r.stdout,
          r.stdout)
    check("list names the peer and mpi_step experiments", "peer_smoke" in r.stdout and "peer jobs" in r.stdout
          and "mpi_step_smoke" in r.stdout and "MPI jobs" in r.stdout, r.stdout)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
