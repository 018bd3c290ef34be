#!/usr/bin/env python3
"""Virtual stages (parallel.virtual_stages, interleaved-1f1b and zb-v) on real MPI ranks, against serial.

  * interleaved-1f1b and zb-v on pp 2 (4 layers: 4 chunks of one) and pp 4 (8 layers), each with 2 chunks a
    rank, train the serial configuration for 10 steps: every step's loss and the validation losses within 1e-5
    relative, every final weight within 1e-5 absolute; so do dp 2 x pp 2 with ZeRO-1 and without
    (interleaved), interleaved with full recomputation, and
    tp 2 x pp 2 (zb-v). For each, the plan equals the counts: every rank's memory by kind (the chunks' arenas)
    and rank 0's calls and bytes per group in every step (zb-v's turn on the last rank is a copy, no message).
  * Under train.deterministic both schedules on pp 2 and 4 give serial's parameters,
    Adam moments, records and text byte for byte, and zb-v on pp 2 in bf16 serial bf16's; the check can fail: 1f1b with accumulated gradients (no
    tree) differs.
  * The timeline (timeline.jsonl) names the virtual stage of each event: on pp 4 x 2 chunks, rank r serves
    stages r and r + 4 (interleaved), r and 7 - r (zb-v), each stage's forward and backward once per microbatch.
    Each rank's Chrome trace (traces/rank-<r>.json) holds the same events in microseconds, the rank in
    distributedInfo, passes on the compute lane inside their step's slice, waits on the communication lane.
  * A zb-v checkpoint at step 5 resumes on serial with the uninterrupted curve; a sharded interleaved one
    (each rank's file its two chunks) resumes on zb-v, whose ranks hold other chunks.
  * Bad input, one line and exit 2: chunks that do not divide the layers, more stages than layers,
    virtual stages under 1f1b, zb-v with 3 chunks, interleaved-1f1b with 1, microbatches not a multiple of pp,
    recomputation with zb-v's split backward, sequence parallelism with virtual stages, parallel.pass_times
    that are not three positive numbers or outside zb-v.

usage: virtual_stages_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import json
import os
import shutil

from layout_checks import LayoutTest, bit_runs, common_args, compare, layouts_equal_serial


def trace_problems(run_dir, ranks):
    """(ok, what is wrong) for a pipelined run's Chrome traces against its timeline.jsonl."""
    wrong = []
    timeline = [json.loads(line) for line in open(os.path.join(run_dir, "timeline.jsonl"))]
    for r in range(ranks):
        path = os.path.join(run_dir, "traces", f"rank-{r}.json")
        if not os.path.exists(path):
            return False, f"no {path}"
        trace = json.load(open(path))
        info = trace.get("distributedInfo", {})
        if info.get("rank") != r or info.get("world_size") != ranks:
            wrong.append(f"rank {r}: distributedInfo {info}")
        slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        if any(e["pid"] != r or e["ts"] < 0 or e["dur"] < 0 for e in slices):
            wrong.append(f"rank {r}: a slice of another pid or a negative time")
        step_of = {e["args"]["step"]: e for e in slices if e["cat"] == "step"}
        starts = [step_of[k]["ts"] for k in sorted(step_of)]
        if starts != sorted(starts) or len(step_of) != len(timeline):
            wrong.append(f"rank {r}: step slices {sorted(step_of)} starting at {starts}")
        for line in timeline:
            mine = next(x for x in line["ranks"] if x["rank"] == r)["events"]
            got = [e for e in slices if e["cat"] != "step" and e["args"]["step"] == line["step"]]
            if len(got) != len(mine):
                wrong.append(f"rank {r} step {line['step']}: {len(got)} slices for {len(mine)} events")
                continue
            box = step_of.get(line["step"])
            for want, e in zip(mine, got):
                lane = 1 if want[0] in ("recv", "send") else 0
                if e["name"] != want[0] or e["tid"] != lane or abs(e["dur"] - (want[3] - want[2]) * 1e3) > 0.01:
                    wrong.append(f"rank {r} step {line['step']}: {e['name']} tid {e['tid']} {e['dur']} us for {want}")
                if lane == 0 and box and not (box["ts"] - 0.01 <= e["ts"] and
                                              e["ts"] + e["dur"] <= box["ts"] + box["dur"] + 0.01):
                    wrong.append(f"rank {r} step {line['step']}: {e['name']} outside its step's slice")
    return not wrong, "; ".join(wrong[:4])


def main():
    t = LayoutTest(__doc__, "virtual_stages_test_")
    a, work, check, programs, out = t.a, t.work, t.check, t.programs, t.out
    B, T, C, NH = 8, 32, 64, 4
    # One fp32 provider for every product: a microbatch's shapes are not serial's, and train.gemm auto could
    # time another provider for them (their roundings differ by more than the layouts do).
    four = [*common_args(a.corpus, B, T, C, 4, NH), "--train.gemm", "onednn"]
    eight = [*common_args(a.corpus, B, T, C, 8, NH), "--train.gemm", "onednn"]
    il = ["--parallel.schedule", "interleaved-1f1b", "--parallel.virtual_stages", "2"]
    zbv = ["--parallel.schedule", "zb-v", "--parallel.virtual_stages", "2"]

    # ---- Equivalence with serial (and the plan against the counts) ----
    for name, common in (("serial4", four), ("serial8", eight)):
        r = programs.run([a.serial, "train", *common, "--out", out(name)])
        check(f"serial reference ({name[-1]} layers)", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    layouts_equal_serial(check, programs, four, [
        ("pp 2 x 2 chunks, m 4, interleaved-1f1b", 2, "il2", ["--parallel.pp", "2", "--parallel.microbatches", "4", *il]),
        ("pp 2 x 2 chunks, m 4, zb-v", 2, "zbv2", ["--parallel.pp", "2", "--parallel.microbatches", "4", *zbv]),
        ("dp 2 x pp 2 x 2 chunks with ZeRO-1, m 2, interleaved-1f1b", 4, "dp2il",
         ["--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.zero", "1", *il]),
        ("dp 2 x pp 2 x 2 chunks, m 2, interleaved-1f1b (the gradient's allreduce after the step)", 4, "dp2il_ar",
         ["--parallel.pp", "2", "--parallel.microbatches", "2", *il]),
        ("pp 2 x 2 chunks, m 4, interleaved-1f1b with full recomputation", 2, "il2_recompute",
         ["--parallel.pp", "2", "--parallel.microbatches", "4", *il, "--train.recompute", "full"]),
        ("tp 2 x pp 2 x 2 chunks, m 4, zb-v", 4, "tp2zbv",
         ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "4", *zbv]),
    ], out, reference="serial4")
    layouts_equal_serial(check, programs, eight, [
        ("pp 4 x 2 chunks, m 4, interleaved-1f1b", 4, "il4", ["--parallel.pp", "4", "--parallel.microbatches", "4", *il]),
        ("pp 4 x 2 chunks, m 8, zb-v", 4, "zbv4", ["--parallel.pp", "4", "--parallel.microbatches", "8", *zbv]),
    ], out, reference="serial8")
    # The timeline names the virtual stage each event served: pp 4, v 2 (8 stages), rank r holds r and r + 4
    # interleaved, r and 7 - r in the V; every stage runs each microbatch's forward and backward once a step.
    for name, m, held in (("il4", 4, lambda r: {r, r + 4}), ("zbv4", 8, lambda r: {r, 7 - r})):
        path = os.path.join(out(name), "timeline.jsonl")
        wrong = []
        if not os.path.exists(path):
            wrong.append("no timeline.jsonl")
        else:
            with open(path) as f:
                step = json.loads(f.readline())
            for rank in step["ranks"]:
                events = [e for e in rank["events"] if e[0] in ("F", "B", "BW")]
                stages = {e[4] if len(e) > 4 else None for e in events}
                if stages != held(rank["rank"]):
                    wrong.append(f"rank {rank['rank']} serves stages {sorted(stages)}")
                for st in stages:
                    for kinds in (("F",), ("B", "BW")):
                        mbs = sorted(e[1] for e in events if len(e) > 4 and e[4] == st and e[0] in kinds)
                        if mbs != list(range(m)):
                            wrong.append(f"rank {rank['rank']} stage {st} {kinds[0]}: microbatches {mbs}")
        check(f"{name}: the timeline's events name their virtual stage, each stage's F and B once per microbatch",
              not wrong, "; ".join(wrong[:4]))
        check(f"{name}: each rank's Chrome trace (traces/rank-<r>.json) holds its timeline's events, in "
              f"microseconds, passes on the compute lane inside their step's slice, waits on the communication lane",
              *trace_problems(out(name), 4))
    r = programs.mpi(2, [*four, "--parallel.pp", "2", "--parallel.microbatches", "4", *zbv, "--train.steps", "1",
                         "--out", out("zbv_log")])
    want = "pipeline: 2 stages of 2 chunks in the V shape (layers 0[0, 1)+[3, 4), 1[1, 2)+[2, 3)"
    check("the log names each rank's chunks (zb-v: rank 0 holds the first and the last)", want in r.stderr,
          "; ".join(l for l in r.stderr.splitlines() if "pipeline:" in l))
    # A pipelined run over an earlier one (--overwrite) writes its own timeline: the file is opened once the run
    # folder is cleared, not before (issue 69's review: built with the step, it was deleted as the run began).
    timeline = os.path.join(out("zbv_log"), "timeline.jsonl")
    lines_before = sum(1 for _ in open(timeline)) if os.path.exists(timeline) else 0
    r = programs.mpi(2, [*four, "--parallel.pp", "2", "--parallel.microbatches", "4", *zbv, "--train.steps", "2",
                         "--out", out("zbv_log"), "--overwrite"])
    lines_after = sum(1 for _ in open(timeline)) if os.path.exists(timeline) else 0
    check("a pipelined run overwriting another writes its own timeline.jsonl (1 step's line, then 2)",
          r.returncode == 0 and lines_before == 1 and lines_after == 2, f"exit {r.returncode}, lines "
          f"{lines_before} then {lines_after}: {r.stderr.strip()[-200:]}")
    steps = sorted({e["args"]["step"] for e in json.load(open(os.path.join(out("zbv_log"), "traces", "rank-0.json")))
                    ["traceEvents"] if e.get("cat") == "step"}) if os.path.exists(os.path.join(out("zbv_log"),
                                                                                                   "traces")) else None
    check("... and its own traces, rewritten after each recorded step (steps 0 and 1)",
          steps == [0, 1] and trace_problems(out("zbv_log"), 2)[0], f"steps {steps}")

    # ---- Serial's bits under train.deterministic ----
    train, same = bit_runs(check, programs, a.serial, out)
    det4 = [*four, "--train.deterministic", "true"]
    det8 = [*eight, "--train.deterministic", "true"]
    base4 = train("det_serial4", det4, 1)
    base8 = train("det_serial8", det8, 1)
    same("interleaved-1f1b on pp 2 (m 4) gives serial's bits", base4,
         train("det_il2", [*det4, "--parallel.pp", "2", "--parallel.microbatches", "4", *il], 1, 2))
    same("zb-v on pp 2 (m 4) gives serial's bits", base4,
         train("det_zbv2", [*det4, "--parallel.pp", "2", "--parallel.microbatches", "4", *zbv], 1, 2))
    same("interleaved-1f1b on pp 4 (m 4) gives serial's bits", base8,
         train("det_il4", [*det8, "--parallel.pp", "4", "--parallel.microbatches", "4", *il], 1, 4))
    bf16 = ["--train.precision", "bf16"]
    same("zb-v on pp 2 (m 4) in bf16 gives serial bf16's bits", train("det_serial4_bf16", [*det4, *bf16], 1),
         train("det_zbv2_bf16", [*det4, *bf16, "--parallel.pp", "2", "--parallel.microbatches", "4", *zbv], 1, 2))
    same("zb-v on pp 4 (m 4) gives serial's bits", base8,
         train("det_zbv4", [*det8, "--parallel.pp", "4", "--parallel.microbatches", "4", *zbv], 1, 4))
    accumulated = train("acc_1f1b", [*four, "--parallel.pp", "2", "--parallel.microbatches", "4"], 1, 2)
    if base4 is not None and accumulated is not None:
        check("the bit check can fail: 1f1b with accumulated gradients is not serial's deterministic bits",
              not all(p == q for p, q in zip(base4[0], accumulated[0])))

    # ---- A zb-v checkpoint resumes on serial ----
    r = programs.mpi(2, [*four, "--parallel.pp", "2", "--parallel.microbatches", "4", *zbv, "--train.steps", "5",
                         "--out", out("zbv_half")])
    check("zb-v stops at step 5 with a checkpoint", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    if r.returncode == 0:
        d = out("zbv_resumed")
        shutil.copytree(out("zbv_half"), d)
        r = programs.run([a.serial, "train", *four, "--out", d, "--resume", os.path.join(d, "checkpoint.bin")])
        if r.returncode != 0:
            check("the zb-v checkpoint resumes on serial", False, r.stderr.strip()[-300:])
        else:
            compare(check, "the zb-v checkpoint resumes on serial with the uninterrupted curve", out("serial4"), d)

    # ---- A sharded checkpoint of interleaved chunks (each rank's file holds its two chunks) resumes on zb-v ----
    r = programs.mpi(2, [*four, "--parallel.pp", "2", "--parallel.microbatches", "4", *il, "--train.steps", "5",
                         "--train.checkpoint_format", "sharded", "--out", out("il_sharded")])
    check("interleaved-1f1b writes a sharded checkpoint at step 5", r.returncode == 0,
          r.stderr.strip()[-300:] if r.returncode else "")
    if r.returncode == 0:
        d = out("il_sharded_on_zbv")
        shutil.copytree(out("il_sharded"), d)
        r = programs.mpi(2, [*four, "--parallel.pp", "2", "--parallel.microbatches", "4", *zbv, "--out", d,
                             "--resume", "auto"])
        if r.returncode != 0:
            check("the sharded interleaved checkpoint resumes on zb-v", False, r.stderr.strip()[-300:])
        else:
            compare(check, "the sharded interleaved checkpoint resumes on zb-v (other chunks a rank) with the "
                    "uninterrupted curve", out("serial4"), d)

    # ---- Bad input ----
    def error(title, n, args, needle):
        """A one-step run with `args` on n ranks: exit 2 with exactly one error line, naming `needle`."""
        d = out("err_" + str(len(check.results)))
        r = programs.run([a.mpiexec, "-n", str(n), a.mpi, "train", *four, "--train.steps", "1", "--out", d, *args],
                         timeout=120)
        lines = [line for line in r.stderr.splitlines() if "error" in line]
        check(title + " (exit 2, one line)", r.returncode == 2 and len(lines) == 1 and needle in lines[0],
              lines[0] if lines else f"exit {r.returncode}: {r.stderr.strip()[-200:]}")
    error("chunks that do not divide the layers are refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "2", *il, "--model.n_layer", "6"],
          "parallel.pp 2 x 2 = 4 chunks do not divide model.n_layer 6")
    error("more stages than layers are refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.schedule", "interleaved-1f1b",
           "--parallel.virtual_stages", "3"], "parallel.pp 2 x parallel.virtual_stages 3 = 6 stages for model.n_layer 4")
    error("virtual stages under 1f1b are refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.virtual_stages", "2"],
          "parallel.virtual_stages 2 with parallel.schedule 1f1b")
    error("zb-v with 3 chunks a rank is refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.schedule", "zb-v",
           "--parallel.virtual_stages", "3"], "parallel.schedule zb-v: each rank holds 2 chunks")
    error("interleaved-1f1b with one chunk is refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.schedule", "interleaved-1f1b"],
          "needs parallel.virtual_stages 2 or more")
    error("interleaved-1f1b with microbatches not a multiple of pp is refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "1", *il], "is not a multiple of parallel.pp 2")
    error("full recomputation with zb-v is refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "2", *zbv, "--train.recompute", "full"],
          "train.recompute full with parallel.schedule zb-v")
    error("parallel.pass_times that are not three positive numbers are refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "4", *zbv, "--parallel.pass_times", "1,0,2"],
          "parallel.pass_times 1,0,2: three positive numbers")
    error("parallel.pass_times outside zb-v is refused", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "4", *il, "--parallel.pass_times", "1,1,1"],
          "parallel.pass_times: shapes zb-v's lists only")
    error("sequence parallelism with virtual stages is refused", 4,
          ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "2", *il,
           "--parallel.sequence_parallel", "true"], "parallel.virtual_stages 2 with parallel.sequence_parallel")

    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    raise SystemExit(main())
