#!/usr/bin/env python3
"""ZeRO stages 0 to 3 on real MPI ranks, against the serial stage.

  * Stages 0, 1, 2 and 3 on dp 2 and dp 4 (4 ranks oversubscribe 2 cores),
    stages 2 and 3 on tp 2 x dp 2 and stage 2 on pp 2 x dp 2 train the serial
    configuration for 10 steps: every step's loss and the validation losses
    within 1e-5 relative, every final weight within 1e-5 absolute of serial's.
  * Per-rank bytes, as the engine counted them (the summary's memory record),
    against the formula the test works out from the model's shape: with N
    data-parallel ranks, units u (the embeddings, each layer, the head) of
    count_u floats, chunk_u = ceil(count_u / N):
      stage 2: gradients held = 4 sum_u chunk_u (1/N of the buffer, padded),
               gradient slots = 2 x 4 N max_u chunk_u (one unit computing, one
               reduce-scattering: the bucket in flight);
      stage 3: parameters held = 4 sum_u chunk_u, gathered slots = 2 x 4 N
               max_u chunk_u (one unit in use, one prefetched), gradients as 2;
      every stage: moments = 2 x (what it shards); model state within 5% of
      ZeRO's formula (16, 8 + 8/N, 4 + 12/N, 16/N bytes per parameter).
  * A checkpoint written under stage 3 on dp 4 at step 5 resumes on serial, on
    dp 2 with stage 1 and on tp 2, continuing the uninterrupted serial curve.
  * Communication per step of stage 3 on dp 2 (metrics "dp_calls" and
    "dp_bytes"): two all-gathers of every unit (forward and backward), one
    reduce-scatter of every unit, two scalar allreduces (the loss, and the
    gradient norm's squares over the shards).
  * Clear errors: a stage outside 0..3, stage 3 with pp 2, stage 2 with tied
    embeddings, stage 2 with spd blocks; stage 2 with one data-parallel rank
    runs and says that it does nothing.

usage: zero_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import json
import math
import os
import shutil

from layout_checks import (LayoutTest, common_args, compare, layouts_equal_serial, load, plan_agrees,  # noqa: E402
                           records, refuser)


def units(V, T, C, L):
    """Floats per unit of the default GPT-2 (model/params.h): embeddings, layers, head."""
    layer = 2 * C + 3 * C * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C
    return [V * C + T * C] + [layer] * L + [2 * C + V * C]


def main():
    t = LayoutTest(__doc__, "zero_test_")
    a, work, check, programs, out = t.a, t.work, t.check, t.programs, t.out
    run, mpi = programs.run, programs.mpi
    B, T, C, L, NH = 8, 32, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    # ---- Equivalence with serial ----
    t.serial(common)
    layouts = []
    for n in (2, 4):
        for z in (0, 1, 2, 3):
            layouts.append((f"ZeRO-{z} on dp {n}", n, f"z{z}dp{n}", ["--parallel.zero", str(z)]))
    for z in (2, 3):
        layouts.append((f"ZeRO-{z} on tp 2 x dp 2", 4, f"z{z}tp2", ["--parallel.zero", str(z), "--parallel.tp", "2"]))
    layouts.append(("ZeRO-2 on pp 2 x dp 2 (m 2, 1f1b)", 4, "z2pp2",
                    ["--parallel.zero", "2", "--parallel.pp", "2", "--parallel.microbatches", "2"]))
    layouts_equal_serial(check, programs, common, layouts, out)

    # ---- Bytes per rank, counted, against the formula ----
    V = int(next(l.split(":")[1] for l in open(os.path.join(out("serial"), "config.yaml"))
                 if l.strip().startswith("vocab_size:")))
    counts = units(V, T, C, L)
    psi = sum(counts)
    for n in (2, 4):
        chunks = [math.ceil(c / n) for c in counts]
        shard, slot = 4 * sum(chunks), 4 * n * max(chunks)
        formula = {0: 16 * psi, 1: (8 + 8 / n) * psi, 2: (4 + 12 / n) * psi, 3: 16 / n * psi}
        for z in (0, 1, 2, 3):
            name = f"z{z}dp{n}"
            if not os.path.isdir(out(name)):
                continue
            mem = records(out(name), "summary")[0]["provenance"]["memory"]
            want = {  # None: not this check's (ZeRO-1's padded contiguous shard is the pipeline test's)
                "params_bytes": shard if z == 3 else 4 * psi if z != 1 else None,
                "grads_bytes": shard if z >= 2 else 4 * psi if z == 0 else None,
                "moments_bytes": 2 * shard if z >= 2 else 8 * psi if z == 0 else None,
                "gathered_bytes": 2 * slot if z == 3 else 0,
                "comm_buffer_bytes": 2 * slot if z >= 2 else 0,
            }
            bad = [f"rank {m['rank']} {k} {m[k]} != {v}" for m in mem for k, v in want.items()
                   if v is not None and m[k] != v]
            state = [m["model_state_bytes"] for m in mem]
            dev = max(abs(s - formula[z]) / formula[z] for s in state)
            check(f"ZeRO-{z} on dp {n}: bytes held per rank as counted equal the formula "
                  f"(shard {shard} B, slot {slot} B), model state within 5% of ZeRO's",
                  len(mem) == n and not bad and dev <= 0.05,
                  f"{'; '.join(bad) or 'all equal'}; model state {state[0]} B against {formula[z]:.0f} B "
                  f"({dev:.2%})")

    # ---- Stage 3's communication per step ----
    if os.path.isdir(out("z3dp2")):
        chunks = [math.ceil(c / 2) for c in counts]
        floats = 3 * 2 * sum(chunks)  # 2 all-gathers and 1 reduce-scatter of every unit, N x chunk floats each
        want = (3 * len(counts) + 2, 4 * floats + 2 * 8)
        got = sorted({(s["dp_calls"], s["dp_bytes"]) for s in records(out("z3dp2"), "step")})
        check("ZeRO-3 on dp 2: data-parallel communication per step equals the formula", got == [want],
              f"counted {got}, formula {want} (3 x {len(counts)} unit collectives, 2 scalars)")

    # ---- A stage-3 checkpoint resumes on other layouts ----
    r = mpi(4, [*common, "--parallel.zero", "3", "--train.steps", "5", "--out", out("z3_half")])
    check("ZeRO-3 on dp 4 stops at step 5 with a checkpoint", r.returncode == 0,
          r.stderr.strip()[-300:] if r.returncode else "")
    resumes = (("serial", [a.serial, "train"]),
               ("dp 2 with ZeRO-1", [a.mpiexec, "-n", "2", a.mpi, "train", "--parallel.zero", "1"]),
               ("tp 2", [a.mpiexec, "-n", "2", a.mpi, "train", "--parallel.tp", "2"]))
    for title, cmd in resumes:
        d = out(f"resume_{len(check.results)}")
        if not os.path.isdir(out("z3_half")):
            check(f"the ZeRO-3 checkpoint resumes on {title}", False, "no run to resume")
            continue
        shutil.copytree(out("z3_half"), d)
        r = run([*cmd, *common, "--out", d, "--resume", os.path.join(d, "checkpoint.bin")], timeout=300)
        if r.returncode != 0:
            check(f"the ZeRO-3 checkpoint resumes on {title}", False, r.stderr.strip()[-300:])
            continue
        compare(check, f"the ZeRO-3 dp 4 checkpoint resumes on {title} with the uninterrupted curve",
                out("serial"), d)

    # ---- Recomputation: the same bits as without, less activation memory, and the plan's counts ----
    for title, n, args in [("serial", 1, []), ("dp 2", 2, []), ("tp 2", 2, ["--parallel.tp", "2"]),
                           ("pp 2 (m 2, 1f1b)", 2, ["--parallel.pp", "2", "--parallel.microbatches", "2"]),
                           ("ZeRO-3 on dp 2", 2, ["--parallel.zero", "3"])]:
        dirs = []
        for rc in ("none", "full"):
            d = out(f"rc_{rc}_{title.split(' (')[0].replace(' ', '_')}")
            r = mpi(n, [*common, *args, "--train.recompute", rc, "--out", d], timeout=300)
            if r.returncode == 0:
                dirs.append(d)
            else:
                check(f"recompute {rc} on {title} runs", False, r.stderr.strip()[-300:])
        if len(dirs) != 2:
            continue
        losses = [[s["loss"] for s in records(d, "step")] for d in dirs]
        cks = [load(os.path.join(d, "checkpoint.bin")) for d in dirs]
        acts = [records(d, "summary")[0]["provenance"]["memory"][0]["activations_bytes"] for d in dirs]
        # Two stages of this 2-layer model hold one layer each: nothing to share, nothing saved.
        one_layer_stages = "pp 2" in title
        check(f"recompute full on {title}: losses and final parameters and moments bit-identical to none, "
              + ("the same activation memory (one layer a stage)" if one_layer_stages else "less activation memory"),
              losses[0] == losses[1] and cks[0].params == cks[1].params and cks[0].m == cks[1].m
              and cks[0].v == cks[1].v and (acts[1] == acts[0] if one_layer_stages else acts[1] < acts[0]),
              f"activations {acts[0]} -> {acts[1]} bytes")
        plan_agrees(check, programs, f"recompute full on {title}", n, [*common, *args, "--train.recompute", "full"],
                    dirs[1])

    # ---- Errors ----
    error = refuser(check, programs, a, common, out)
    error("recompute full with zb-h1", 2, ["--train.recompute", "full", "--parallel.pp", "2",
                                          "--parallel.microbatches", "2", "--parallel.schedule", "zb-h1"], "zb-h1")
    error("an unknown recompute setting", 2, ["--train.recompute", "selective"], "expected none | full")
    # 'attention' would be the same run as none (this engine's attention keeps only each row's
    # log-sum-exp): refused naming why, instead of accepted as a setting that changes nothing.
    error("recompute attention is refused, naming what the attention always does", 2,
          ["--train.recompute", "attention"], "use none (the same) or full")
    error("a ZeRO stage outside 0..3", 2, ["--parallel.zero", "4"], "parallel.zero")
    error("ZeRO-3 with pipeline stages", 2, ["--parallel.zero", "3", "--parallel.pp", "2"], "parallel.zero 3")
    error("ZeRO-2 with tied embeddings", 2, ["--parallel.zero", "2", "--model.tie_embeddings", "true"],
          "model.tie_embeddings")
    error("ZeRO-2 with spd blocks", 2, ["--parallel.zero", "2", "--parallel.tp", "2", "--parallel.block_types",
                                        "spd,spd"], "spd or parallel blocks")
    r = run([a.serial, "train", *common, "--train.steps", "1", "--parallel.zero", "2", "--out", out("one")])
    check("ZeRO-2 with one data-parallel rank runs and says it does nothing",
          r.returncode == 0 and "does nothing with one data-parallel rank" in r.stderr, r.stderr.strip()[-300:])

    if check.finish() == 0:
        shutil.rmtree(work, ignore_errors=True)
        return 0
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
