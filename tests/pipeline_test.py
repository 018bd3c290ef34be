#!/usr/bin/env python3
"""Pipeline parallelism and ZeRO-1 on real MPI ranks, against the serial stage.

  * pp 3 over 5 layers (an uneven split) under 1f1b and zb-h1 equals serial too, and so do the splits
    parallel.stage_layers 1,1,3 (the plan equal to its counts) and auto; counts that are not the layers'
    are refused.
  * pp 2 with 4 microbatches under gpipe, 1f1b and zb-h1 (2 ranks), ZeRO-1 on
    dp 2 (2 ranks), tp 2 x pp 2 and dp 2 x pp 2 with ZeRO-1 and zb-h1 (4 ranks)
    train the serial configuration for 10 steps: every step's loss and the
    validation losses within 1e-5 relative, every final weight within 1e-5
    absolute of serial's.
  * zb-h1's split backward accumulates what 1f1b's whole one does, in the
    same order: equal losses and bit-identical final weights.
  * Checkpoints interchange: a pp-2 checkpoint at step 5 resumes on serial and
    on ZeRO-1 dp 2, a ZeRO-1 one on pp 2 (zb-h1), with the uninterrupted curve.
  * Activation arenas in flight, as counted by each stage while it runs
    (metrics "stage_arenas"): gpipe m, 1f1b and zb-h1 at most p.
  * ZeRO-1: each rank's optimizer-state bytes (the summary's memory record)
    are 1/N of the full model's state, counted.
  * The pipeline group's communication per step (metrics "pp_calls",
    "pp_bytes" of rank 0, the first stage) equals the formula: m activations
    sent and m gradients received, each microbatch rows x seq_len x n_embd
    floats, plus the loss and the gradient norm's share (two doubles).
  * A stage that fails mid-run ends the whole job with a non-zero exit.
  * Clear errors: ranks not a product of tp and pp, microbatches not dividing
    the rows, more stages than layers, pp > 1 on the serial stage, a parallel
    run crossing a stage boundary, an unknown schedule.

usage: pipeline_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import os
import shutil
import subprocess
import sys

from layout_checks import LayoutTest, common_args, compare, layouts_equal_serial, load, plan_agrees, records, refuser


def main():
    t = LayoutTest(__doc__, "pp_test_")
    a, work, check, programs, out = t.a, t.work, t.check, t.programs, t.out
    run, mpi = programs.run, programs.mpi
    B, T, C, L, NH, M = 8, 32, 64, 2, 4, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    # ---- Equivalence with serial ----
    t.serial(common)
    layouts = [
        ("pp 2, m 4, gpipe", 2, "gpipe", ["--parallel.pp", "2", "--parallel.microbatches", str(M),
                                           "--parallel.schedule", "gpipe"]),
        ("pp 2, m 4, 1f1b", 2, "1f1b", ["--parallel.pp", "2", "--parallel.microbatches", str(M),
                                         "--parallel.schedule", "1f1b"]),
        ("pp 2, m 4, zb-h1", 2, "zbh1", ["--parallel.pp", "2", "--parallel.microbatches", str(M),
                                          "--parallel.schedule", "zb-h1"]),
        ("ZeRO-1 on dp 2", 2, "zero", ["--parallel.zero", "true"]),
        ("tp 2 x pp 2 (4 ranks, m 2, 1f1b)", 4, "tp2pp2", ["--parallel.tp", "2", "--parallel.pp", "2",
                                                          "--parallel.microbatches", "2"]),
        ("dp 2 x pp 2 with ZeRO-1 (4 ranks, m 2, zb-h1)", 4, "dp2pp2",
         ["--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.schedule", "zb-h1",
          "--parallel.zero", "true"]),
    ]
    # Gradient accumulation: the pipeline's microbatches (parallel.microbatches) on one stage.
    layouts += [
        ("accumulation: 4 micro-steps of 2 rows on dp 1", 1, "acc1", ["--parallel.microbatches", "4"]),
        ("accumulation: 2 micro-steps of 2 rows a replica on dp 2", 2, "acc2", ["--parallel.microbatches", "2"]),
        ("dp 2 without accumulation (the reference of the count below)", 2, "dp2", []),
        ("accumulation with a bucketed gradient sum on dp 2 (the buckets go during the last micro-step)", 2, "acc2b",
         ["--parallel.microbatches", "2", "--train.grad_bucket_mb", "0.01"]),
    ]
    layouts_equal_serial(check, programs, common, layouts, out)
    if os.path.isdir(out("acc2")) and os.path.isdir(out("dp2")):
        counts = [{(s["dp_calls"], s["dp_bytes"]) for s in records(out(d), "step")} for d in ("acc2", "dp2")]
        check("accumulation on dp 2: the data-parallel calls and bytes of a step are one step's (not one per "
              "micro-step)", counts[0] == counts[1] and len(counts[0]) == 1, str(counts))
    r = mpi(2, [*common, "--train.steps", "1", "--train.micro_batch", "2", "--out", out("acc_bad")])
    check("train.micro_batch, the second accumulation key, is refused naming parallel.microbatches",
          r.returncode == 2 and "no longer a setting" in r.stderr and "parallel.microbatches R / N" in r.stderr,
          r.stderr.strip()[-300:])

    # ---- Three stages over an uneven split (5 layers: 2, 2, 1): every stage holds
    # other arena counts under 1f1b (3, 2, 1), and the per-step gathers must agree ----
    # One fp32 provider for every product (train.gemm auto may choose OpenBLAS for one shape and oneDNN for
    # another, by timing, and a stage's shapes are not serial's: on a machine where both are close, the two
    # runs would differ by their providers' roundings, not by the layout).
    five = [*common, "--train.gemm", "onednn"]
    five[five.index("--model.n_layer") + 1] = "5"
    r = run([a.serial, "train", *five, "--out", out("serial5")])
    check("serial reference with 5 layers", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    for sched in ("1f1b", "zb-h1"):
        name = f"pp3_{sched}"
        r = mpi(3, [*five, "--parallel.pp", "3", "--parallel.microbatches", str(M), "--parallel.schedule", sched,
                    "--out", out(name)], timeout=600)
        if r.returncode != 0:
            check(f"pp 3 over 5 layers, m 4, {sched}", False, r.stderr.strip()[-400:])
            continue
        compare(check, f"pp 3 over 5 layers (2, 2, 1), m 4, {sched} equals serial", out("serial5"), out(name))
    # parallel.stage_layers: an explicit split (1, 1, 3) and auto equal serial; the log names the split, and the
    # plan's per-stage memory and traffic are the split's.
    for name, split, layers in (("pp3_split", "1,1,3", "0[0, 1), 1[1, 2), 2[2, 5)"), ("pp3_auto", "auto", None)):
        args = [*five, "--parallel.pp", "3", "--parallel.microbatches", str(M), "--parallel.schedule", "1f1b",
                "--parallel.stage_layers", split]
        r = mpi(3, [*args, "--out", out(name)], timeout=600)
        if r.returncode != 0:
            check(f"pp 3, parallel.stage_layers {split}", False, r.stderr.strip()[-400:])
            continue
        compare(check, f"pp 3 over 5 layers, parallel.stage_layers {split}, equals serial", out("serial5"), out(name))
        if layers:
            check(f"the log names the split {split}", f"(layers {layers}, parallel.stage_layers;" in r.stderr,
                  "; ".join(l for l in r.stderr.splitlines() if "pipeline:" in l))
            plan_agrees(check, programs, f"pp 3, parallel.stage_layers {split}", 3, args, out(name))
    r = mpi(2, [*common, "--train.steps", "1", "--parallel.pp", "2", "--parallel.stage_layers", "2,1",
                "--out", out("split_bad")])
    check("stage layers that do not sum to model.n_layer are one clear error",
          r.returncode == 2 and "parallel.stage_layers 2,1: the counts sum to 3, not model.n_layer 2" in r.stderr,
          r.stderr.strip()[-300:])

    # ---- The B/W split adds the same products in the same order ----
    if os.path.isdir(out("1f1b")) and os.path.isdir(out("zbh1")):
        same = [load(os.path.join(out(n), "checkpoint.bin")).params for n in ("1f1b", "zbh1")]
        losses = [[r["loss"] for r in records(out(n), "step")] for n in ("1f1b", "zbh1")]
        check("zb-h1 (backward split into B and W) gives 1f1b's losses and final weights bit for bit",
              same[0] == same[1] and losses[0] == losses[1])

    # ---- Arenas in flight, counted ----
    for name, want, rule in (("gpipe", [M, M], "m per stage"), ("1f1b", [2, 1], "at most p"),
                             ("zbh1", [2, 2], "at most p")):
        if not os.path.isdir(out(name)):
            check(f"arenas in flight under {name}", False, "no run")
            continue
        seen = [s.get("stage_arenas") for s in records(out(name), "step")]
        worst = [max(s[i] for s in seen) for i in range(2)] if all(seen) else None
        ok = worst == want if name == "gpipe" else worst is not None and max(worst) <= 2 and worst == want
        check(f"activation arenas in flight under {name}: {rule} ({want} per stage)", ok, f"counted {worst}")

    # ---- ZeRO-1's optimizer state, counted ----
    if os.path.isdir(out("zero")):
        full = records(out("serial"), "summary")[0]["provenance"]["memory"][0]["moments_bytes"]
        per_rank = [m["moments_bytes"] for m in records(out("zero"), "summary")[0]["provenance"]["memory"]]
        check("ZeRO-1: each of the 2 ranks holds 1/2 of the optimizer state", all(b * 2 == full for b in per_rank),
              f"ranks {per_rank} bytes, the whole model's {full}")

    # ---- The pipeline group's communication against the formula ----
    if os.path.isdir(out("1f1b")):
        mb_floats = (B // M) * T * C
        want = (2 * M + 2, 2 * M * 4 * mb_floats + 16)
        got = sorted({(s["pp_calls"], s["pp_bytes"]) for s in records(out("1f1b"), "step")})
        check("pipeline communication of the first stage per step equals the formula", got == [want],
              f"counted {got}, formula {want} (2m messages of {mb_floats} floats, 2 doubles)")

    # ---- Checkpoints across layouts ----
    halves = (("pp 2", 2, "pp_half", ["--parallel.pp", "2", "--parallel.microbatches", "2"]),
              ("ZeRO-1 dp 2", 2, "zero_half", ["--parallel.zero", "true"]))
    for title, n, name, args in halves:
        r = mpi(n, [*common, *args, "--train.steps", "5", "--out", out(name)])
        check(f"{title} stops at step 5 with a checkpoint", r.returncode == 0,
              r.stderr.strip()[-300:] if r.returncode else "")
    resumes = (("pp_half", "serial", [a.serial, "train"]),
               ("pp_half", "ZeRO-1 dp 2", [a.mpiexec, "-n", "2", a.mpi, "train", "--parallel.zero", "true"]),
               ("zero_half", "pp 2 (zb-h1, m 4)", [a.mpiexec, "-n", "2", a.mpi, "train", "--parallel.pp", "2",
                                                  "--parallel.microbatches", "4", "--parallel.schedule", "zb-h1"]))
    for src, title, cmd in resumes:
        d = out(f"resume_{src}_{len(check.results)}")
        if not os.path.isdir(out(src)):
            check(f"the {src} checkpoint resumes on {title}", False, "no run to resume")
            continue
        shutil.copytree(out(src), d)
        r = run([*cmd, *common, "--out", d, "--resume", os.path.join(d, "checkpoint.bin")], timeout=300)
        if r.returncode != 0:
            check(f"the {src} checkpoint resumes on {title}", False, r.stderr.strip()[-300:])
            continue
        compare(check, f"the {src.replace('_half', '')} checkpoint resumes on {title} with the uninterrupted curve",
                out("serial"), d)

    # ---- A failing stage ends the job (no rank left waiting on a peer) ----
    try:
        r = mpi(2, [*common, "--parallel.pp", "2", "--parallel.microbatches", str(M), "--out", out("fail")],
                timeout=60, hooks={"fail_rank": 1, "fail_step": 3})
        check("a stage failing mid-run ends the pipeline job with a non-zero exit, naming the rank",
              r.returncode != 0 and "rank 1: injected failure at step 3" in r.stderr, r.stderr.strip()[-300:])
    except subprocess.TimeoutExpired:
        check("a stage failing mid-run ends the pipeline job with a non-zero exit, naming the rank", False,
              "the job hung (killed after 60 s)")

    # ---- Errors ----
    error = refuser(check, programs, a, common, out)

    error("ranks not a product of tp and pp are refused", 3, ["--parallel.pp", "2"],
          "parallel.tp 1 x parallel.pp 2 = 2 does not divide the 3 ranks")
    error("microbatches not dividing a replica's rows are refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "3"], "parallel.microbatches 3 does not divide")
    error("more stages than layers are refused", 3, ["--parallel.pp", "3"], "1 to model.n_layer (2) stages")
    error("pp > 1 on the serial stage is refused", 1, ["--parallel.pp", "2"], "runs one process", serial=True)
    error("a parallel run crossing a stage boundary is refused", 4,
          ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.block_types", "parallel,parallel"],
          "crosses the boundary between pipeline stages 0 and 1")
    error("an unknown schedule is refused", 2, ["--parallel.pp", "2", "--parallel.schedule", "1f2b"],
          "unknown schedule '1f2b'")

    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
