#!/usr/bin/env python3
"""Tensor parallelism on real MPI ranks, against the serial stage.

  * tp 2 on 2 ranks and tp 2 x dp 2 on 4 ranks train the serial stage's
    configuration for 10 steps: every step's loss within 1e-5 relative and
    every final weight within 1e-5 absolute of serial's (the shards start from
    the same global weights; only the order of float sums differs).
    The validation loss (every 5 steps) agrees within 1e-5 relative too.
  * A tp-2 checkpoint (one full-model file, gathered from the shards) resumes
    on serial and on dp 2 (2 ranks, tp 1) with the uninterrupted curve.
  * The counted communication of a step (metrics "tp_calls", "tp_bytes",
    "dp_calls", "dp_bytes") equals the formula of each block type, for all
    tp, all spd, all parallel and a mix, at dp 1 and 2:
      tp group, per tp layer: 4 allreduces of N*C floats (2 forward, 2 backward);
      per private run of k layers (spd is a run of 1): 2 allreduces, N*C floats
      forward and N*C + 6*C*k backward (the stream gradient with the run's
      LayerNorm and bias gradients); plus 1 allreduce of a double (the
      gradient norm of the shards);
      dp group (dp > 1): 1 allreduce of the shard's gradient (4 bytes a
      parameter) and 1 of a double (the loss).
    N = rows per replica x seq_len. Bytes are the calls' buffers.
  * A spd model's checkpoint generates on mpi with its tensor-parallel group,
    and is refused, with the reason, by the serial stage.
  * parallel.vocab_parallel (the embedding, head and loss sharded by
    vocabulary rows) on tp 2 and tp 4 (padded rows), with pp 2 and with
    ZeRO-3, equals serial, its plan, generation and tied embeddings; so does the
    GPT-2-exact variant (q/k/v biases, tied, padding rows masked) on tp 2 with
    and without the vocabulary sharded; it holds half the embedding and head on
    tp 2 and sends the 3 sums a step more that it should; its checkpoints
    interchange with serial's both ways (vocab() below).
  * Clear errors: tp not dividing n_head or the rank count, a block_types list
    of the wrong length or with an unknown name, tp > 1 on the serial stage.

usage: tensor_parallel_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import os
import shutil
import sys

from layout_checks import LayoutTest, common_args, compare, load, plan_agrees, records, refuser


def main():
    t = LayoutTest(__doc__, "tp_test_")
    a, work, check, programs, out = t.a, t.work, t.check, t.programs, t.out
    run, mpi = programs.run, programs.mpi
    B, T, C, L, NH = 8, 32, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    # ---- Equivalence with serial ----
    t.serial(common)
    for n, title in ((2, "tp 2 on 2 ranks"), (4, "tp 2 x dp 2 on 4 ranks")):
        r = mpi(n, [*common, "--parallel.tp", "2", "--out", out(f"tp2_{n}")], timeout=600)
        if r.returncode != 0:
            check(title, False, r.stderr.strip()[-400:])
            continue
        compare(check, f"{title} equals serial (10 steps, losses and final weights)", out("serial"), out(f"tp2_{n}"))
        plan_agrees(check, programs, title, n, [*common, "--parallel.tp", "2"], out(f"tp2_{n}"))

    # ---- Checkpoints across layouts: a tp-2 checkpoint at step 5 resumes elsewhere ----
    r = mpi(2, [*common, "--parallel.tp", "2", "--train.steps", "5", "--out", out("tp2_half")])
    check("tp 2 stops at step 5 with a checkpoint", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    for title, cmd in (("serial", [a.serial, "train"]), ("dp 2", [a.mpiexec, "-n", "2", a.mpi, "train"])):
        d = out("resume_" + title.replace(" ", ""))
        if not os.path.isdir(out("tp2_half")):
            check(f"the tp-2 checkpoint resumes on {title}", False, "no tp-2 run to resume")
            continue
        shutil.copytree(out("tp2_half"), d)
        r = run([*cmd, *common, "--out", d, "--resume", os.path.join(d, "checkpoint.bin")], timeout=300)
        if r.returncode != 0:
            check(f"the tp-2 checkpoint resumes on {title}", False, r.stderr.strip()[-300:])
            continue
        compare(check, f"the tp-2 checkpoint resumes on {title} with the uninterrupted curve", out("serial"), d)

    # ---- The vocabulary-parallel embedding, head and loss ----
    vocab(t, common, B, T, C)

    # ---- Counted communication per step against the formula ----
    L4 = 4  # layers of the communication runs: room for every pattern

    def local_params(V, P):
        per_layer = 2 * C + 3 * C * C // P + C * C // P + C + 2 * C + 4 * C * C // P + 4 * C // P + C * 4 * C // P + C
        return V * C + T * C + L4 * per_layer + 2 * C + V * C

    def formula(types, P, dp):
        N = (B // dp) * T
        calls = bytes_ = 0
        i = 0
        while i < len(types):
            if P == 1 or types[i] == "tp":
                calls, bytes_ = calls + 4, bytes_ + 4 * 4 * N * C
                i += 1
                continue
            k = 1
            if types[i] == "parallel":
                while i + k < len(types) and types[i + k] == "parallel":
                    k += 1
            calls, bytes_ = calls + 2, bytes_ + 4 * N * C + 4 * (N * C + 6 * C * k)
            i += k
        if P > 1:
            calls, bytes_ = calls + 1, bytes_ + 8
        return calls, bytes_

    four = list(common)
    four[four.index("--model.n_layer") + 1] = str(L4)
    four[four.index("--train.steps") + 1] = "2"
    patterns = {"all tp": "tp,tp,tp,tp", "all spd": "spd,spd,spd,spd", "all parallel": "parallel,parallel,parallel,parallel",
                "mixed": "tp,parallel,parallel,spd"}
    for n, dp in ((2, 1), (4, 2)):
        for name, types in patterns.items():
            d = out(f"comm_{n}_{name.replace(' ', '_')}")
            r = mpi(n, [*four, "--parallel.tp", "2", "--parallel.block_types", types, "--out", d], timeout=300)
            if r.returncode != 0:
                check(f"communication of {name}, dp {dp}", False, r.stderr.strip()[-300:])
                continue
            V = int(load(os.path.join(d, "checkpoint.bin")).header["model.vocab_size"])
            want_tp = formula(types.split(","), 2, dp)
            want_dp = (2, 4 * local_params(V, 2) + 8) if dp > 1 else (0, 0)
            got = [(s["tp_calls"], s["tp_bytes"], s["dp_calls"], s["dp_bytes"]) for s in records(d, "step")]
            ok = all(g == (*want_tp, *want_dp) for g in got)
            check(f"communication of {name} on tp 2 x dp {dp} equals the formula", ok,
                  f"per step tp {got[0][0]} calls {got[0][1]} bytes, dp {got[0][2]} calls {got[0][3]} bytes; "
                  f"formula tp {want_tp[0]} / {want_tp[1]}, dp {want_dp[0]} / {want_dp[1]}")
            plan_agrees(check, programs, f"{name} on tp 2 x dp {dp}", n,
                        [*four, "--parallel.tp", "2", "--parallel.block_types", types], d)

    # ---- Generation from a spd checkpoint ----
    spd_ck = os.path.join(out("comm_2_all_spd"), "checkpoint.bin")
    if os.path.exists(spd_ck):
        gen = ["--checkpoint", spd_ck, "--prompt", "the", "--generate.max_new_tokens", "4", "--train.threads", "1"]
        r = mpi(2, gen, command="generate")
        check("a spd checkpoint generates on mpi with its tensor-parallel group",
              r.returncode == 0 and "on 2 tensor-parallel ranks" in r.stderr, (r.stderr + r.stdout).strip()[-300:])
        r = run([a.serial, "generate", *gen])
        check("the serial stage refuses a spd checkpoint, naming why", r.returncode == 2 and "tp=2:spd" in r.stderr
              and "mpiexec -n 2" in r.stderr, r.stderr.strip()[-300:])
    else:
        check("a spd checkpoint to generate from", False, "the all-spd run left none")

    # ---- Errors ----
    error = refuser(check, programs, a, common, out)

    error("tp not dividing n_head is refused", 3, ["--parallel.tp", "3"], "does not divide model.n_head")
    error("tp not dividing the rank count is refused", 3, ["--parallel.tp", "2"], "does not divide the 3 ranks")
    error("a block_types list of the wrong length is refused", 2, ["--parallel.tp", "2", "--parallel.block_types",
          "tp,spd,spd"], "has 3 entries but model.n_layer is 2")
    error("an unknown block type is refused", 2, ["--parallel.tp", "2", "--parallel.block_types", "tp,sdp"],
          "unknown block type 'sdp'")
    error("tp > 1 on the serial stage is refused", 1, ["--parallel.tp", "2"], "runs one process", serial=True)

    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


def vocab(t, common, B, T, C):
    """parallel.vocab_parallel: wte and lm_head cut by vocabulary rows over the
    tensor-parallel group, the loss from every shard's statistics. Against
    serial (losses, weights, validation, generated text), its plan, its bytes
    (the embedding and head halved on tp 2, padded on tp 4: 265 rows are 4 x 67
    less 3), its traffic (3 sums more a step than tp 2's: the embedding's N x C,
    the loss's 3 x N statistics and the head's N x C input gradient), tied
    embeddings, and checkpoints both ways."""
    check, programs, out, a = t.check, t.programs, t.out, t.a
    mpi, run = programs.mpi, programs.run
    vp = ["--parallel.vocab_parallel", "true"]
    for n, tp in ((2, 2), (4, 4)):
        args = [*common, "--parallel.tp", str(tp), *vp]
        d = out(f"vp{tp}")
        r = mpi(n, [*args, "--out", d], timeout=600)
        if r.returncode != 0:
            check(f"vocabulary-parallel tp {tp}", False, r.stderr.strip()[-400:])
            continue
        compare(check, f"vocabulary-parallel tp {tp} equals serial (10 steps, losses and final weights)", out("serial"), d)
        plan_agrees(check, programs, f"vocabulary-parallel tp {tp}", n, args, d)
        texts = [records(x, "summary")[0].get("generated_text") for x in (out("serial"), d)]
        check(f"vocabulary-parallel tp {tp} generates serial's tokens", texts[0] == texts[1] and texts[0] is not None,
              f"{texts[1]!r} against {texts[0]!r}")
    # Generation with a key/value cache: the decode step's one-token embedding and gathered row.
    kv = [*common, "--generate.kv_cache", "true", "--generate.max_new_tokens", "8"]
    r1 = run([a.serial, "train", *kv, "--out", out("kv_serial")], timeout=300)
    r2 = mpi(2, [*kv, "--parallel.tp", "2", *vp, "--out", out("kv_vp2")], timeout=300)
    texts = [records(out(x), "summary")[0].get("generated_text") if r.returncode == 0 else None
             for x, r in (("kv_serial", r1), ("kv_vp2", r2))]
    check("vocabulary-parallel tp 2 generates serial's tokens with a key/value cache",
          texts[0] is not None and texts[0] == texts[1], f"{texts[1]!r} against {texts[0]!r}")
    # Composition: with pipeline stages (the embedding on the first, the loss on the last) and with ZeRO-3.
    for title, extra in (("tp 2 x pp 2 (1f1b, 2 microbatches)", ["--parallel.pp", "2", "--parallel.microbatches", "2"]),
                         ("tp 2 x dp 2 ZeRO-3", ["--parallel.zero", "3"])):
        args = [*common, "--parallel.tp", "2", *vp, *extra]
        d = out("vp_" + str(len(check.results)))
        r = mpi(4, [*args, "--out", d], timeout=600)
        if r.returncode != 0:
            check(f"vocabulary-parallel {title}", False, r.stderr.strip()[-400:])
            continue
        compare(check, f"vocabulary-parallel {title} equals serial", out("serial"), d)
        plan_agrees(check, programs, f"vocabulary-parallel {title}", 4, args, d)
    V = int(load(os.path.join(out("serial"), "checkpoint.bin")).header["model.vocab_size"])
    if os.path.isdir(out("vp2")) and os.path.isdir(out("tp2_2")):
        mem = [records(x, "summary")[0]["provenance"]["memory"][0]["params_bytes"] for x in (out("tp2_2"), out("vp2"))]
        Vr = (V + 1) // 2
        check("vocabulary-parallel tp 2: each rank holds half the embedding and head rows (params bytes)",
              mem[0] - mem[1] == 4 * 2 * C * (V - Vr),
              f"{mem[1]} bytes against tp 2's {mem[0]}: {mem[0] - mem[1]} less, expected {4 * 2 * C * (V - Vr)}")
        N = B * T
        got = [(s["tp_calls"], s["tp_bytes"]) for s in records(out("vp2"), "step")]
        base = [(s["tp_calls"], s["tp_bytes"]) for s in records(out("tp2_2"), "step")]
        want = (base[0][0] + 3, base[0][1] + 4 * (2 * N * C + 3 * N))
        check("vocabulary-parallel tp 2: 3 more sums a step than tp 2 (embedding, loss statistics, head gradient)",
              set(got) == {want}, f"counted {sorted(set(got))}, expected {want}")
    # Tied embeddings: the head's matrix is the embedding's shard.
    tied = [*common, "--model.tie_embeddings", "true"]
    r1 = run([a.serial, "train", *tied, "--out", out("tied_serial")], timeout=300)
    r2 = mpi(2, [*tied, "--parallel.tp", "2", *vp, "--out", out("tied_vp2")], timeout=300)
    if r1.returncode != 0 or r2.returncode != 0:
        check("vocabulary-parallel tp 2 with tied embeddings", False, (r1.stderr + r2.stderr).strip()[-400:])
    else:
        compare(check, "vocabulary-parallel tp 2 with tied embeddings equals serial", out("tied_serial"), out("tied_vp2"))
    # The GPT-2-exact variant (issue 32): q/k/v biases split with the heads, the tied head, and 7 padding rows
    # (272 rows for the 265 ids) masked out of the loss: unsharded (each rank's whole logits, nothing summed)
    # and vocabulary-parallel (the padding on the last shard).
    exact = [*common, "--model.tie_embeddings", "true", "--model.bias", "all", "--model.vocab_size", "272",
             "--model.vocab_valid", "265"]
    r1 = run([a.serial, "train", *exact, "--out", out("exact_serial")], timeout=300)
    for title, extra, d in (("tp 2", [], "exact_tp2"), ("vocabulary-parallel tp 2", vp, "exact_vp2")):
        r2 = mpi(2, [*exact, "--parallel.tp", "2", *extra, "--out", out(d)], timeout=300)
        if r1.returncode != 0 or r2.returncode != 0:
            check(f"GPT-2-exact on {title}", False, (r1.stderr + r2.stderr).strip()[-400:])
        else:
            compare(check, f"GPT-2-exact (q/k/v biases, tied, 7 padding rows masked) on {title} equals serial",
                    out("exact_serial"), out(d))
    # Checkpoints both ways: a vocabulary-parallel one at step 5 resumes on
    # serial, a serial one at step 5 resumes vocabulary-parallel.
    half = ["--train.steps", "5"]
    ok = mpi(2, [*common, "--parallel.tp", "2", *vp, *half, "--out", out("vp_half")]).returncode == 0 and \
        run([a.serial, "train", *common, *half, "--out", out("serial_half")]).returncode == 0
    check("the vocabulary-parallel and serial runs stop at step 5 with checkpoints", ok)
    for title, src, cmd in (("a vocabulary-parallel checkpoint resumes on serial", "vp_half", [a.serial, "train"]),
                            ("a serial checkpoint resumes vocabulary-parallel on tp 2", "serial_half",
                             [a.mpiexec, "-n", "2", a.mpi, "train", "--parallel.tp", "2", *vp])):
        if not ok:
            continue
        d = out("resume_" + src)
        shutil.copytree(out(src), d)
        r = run([*cmd, *common, "--out", d, "--resume", os.path.join(d, "checkpoint.bin")], timeout=300)
        if r.returncode != 0:
            check(title, False, r.stderr.strip()[-300:])
            continue
        compare(check, f"{title} with the uninterrupted curve", out("serial"), d)


if __name__ == "__main__":
    sys.exit(main())
