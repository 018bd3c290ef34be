#!/usr/bin/env python3
"""Megatron's sequence parallelism (parallel.sequence_parallel, issue 47) on
real MPI ranks, against the serial stage.

  * tp 2 + sp on 2 ranks, tp 4 + sp on 4, tp 2 x dp 2 + sp, tp 2 + sp
    with ZeRO-1, 2 and 3 on dp 2, tp 2 + sp x pp 2 (1f1b with 2
    microbatches, zb-h1 with 4), gpipe over 4 microbatches, with
    train.recompute full and with the vocabulary cut train the serial
    configuration for 10 steps: every step's loss and validation loss within
    1e-5 relative and every final weight within 1e-5 absolute of serial's;
    the run's plan equals what each rank counted (memory by kind, and rank
    0's calls and bytes per group every step: per layer 2 all-gathers and 2
    reduce-scatters of N x C forward, 4 all-gathers and 2 reduce-scatters
    backward (zb-h1: 6 all-gathers), one sum of the norms' 4 x C gradients).
  * The llama preset (RMSNorm, RoPE, SwiGLU, grouped-query attention) on tp
    2 + sp equals its serial run likewise.
  * Under train.deterministic, tp 2 and tp 4 + sp, tp 2 x dp 2 + sp, with
    ZeRO-1 and with pp 2 (1f1b and zb-h1) give serial's final parameters and
    both moments byte for byte (the reduce-scatters in tree_sum's order, the
    norms' weight gradients over every row, gathered), and their plans
    agree; so does llama (RMSNorm's one statistic) on tp 2 + sp.
  * Generation after training gives serial's text.
  * Per rank, the layers' activations with sp are smaller than tp 2's
    without (this arena keeps no attention scores or dropout masks, so the
    cut is what the residual stream and the norms take: stated, measured).
  * Refusals, one line each: sp with tp 1, with spd blocks, and a batch
    whose rows do not divide over tp. (bf16 runs: precision_test.)

usage: sequence_parallel_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
"""
import os
import shutil
import sys

from layout_checks import LayoutTest, common_args, compare, layouts_equal_serial, load, plan_agrees, records, refuser


def main():
    t = LayoutTest(__doc__, "sp_test_")
    a, work, check, programs, out = t.a, t.work, t.check, t.programs, t.out
    B, T, C, L, NH = 8, 32, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    sp = ["--parallel.sequence_parallel", "true"]
    t.serial(common)
    layouts_equal_serial(check, programs, common, [
        ("tp 2 + sp on 2 ranks", 2, "sp2", ["--parallel.tp", "2", *sp]),
        ("tp 4 + sp on 4 ranks", 4, "sp4", ["--parallel.tp", "4", *sp]),
        ("tp 2 x dp 2 + sp on 4 ranks", 4, "sp2dp2", ["--parallel.tp", "2", *sp]),
        ("tp 2 + sp, ZeRO-1 on dp 2", 4, "sp2z1", ["--parallel.tp", "2", "--parallel.zero", "1", *sp]),
        ("tp 2 + sp, ZeRO-2 on dp 2", 4, "sp2z2", ["--parallel.tp", "2", "--parallel.zero", "2", *sp]),
        ("tp 2 + sp, ZeRO-3 on dp 2", 4, "sp2z3", ["--parallel.tp", "2", "--parallel.zero", "3", *sp]),
        ("tp 2 + sp x pp 2 (1f1b, 2 microbatches)", 4, "sp2pp2",
         ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "2", *sp]),
        ("tp 2 + sp x pp 2 (zb-h1, 4 microbatches)", 4, "sp2zb",
         ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule", "zb-h1",
          *sp]),
        ("tp 2 + sp, gpipe over 4 microbatches", 2, "sp2mb4",
         ["--parallel.tp", "2", "--parallel.schedule", "gpipe", "--parallel.microbatches", "4", *sp]),
        ("tp 2 + sp, train.recompute full", 2, "sp2rc", ["--parallel.tp", "2", "--train.recompute", "full", *sp]),
        ("tp 2 + sp, the vocabulary cut", 2, "sp2v", ["--parallel.tp", "2", "--parallel.vocab_parallel", "true", *sp]),
    ], out)
    summary = lambda d: records(out(d), "summary")[0] if os.path.exists(out(d)) else {}  # noqa: E731
    check("generation after tp 2 + sp training gives serial's text",
          summary("sp2").get("generated_text") is not None and
          summary("sp2").get("generated_text") == summary("serial").get("generated_text"),
          f"{summary('sp2').get('generated_text')!r} against {summary('serial').get('generated_text')!r}")

    # train.deterministic: serial's final parameters and both moments, byte for byte.
    det = [*common, "--train.deterministic", "true"]
    r = programs.run([a.serial, "train", *det, "--out", out("serial_det")])
    check("deterministic serial reference", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    for title, n, name, args in (("tp 2 + sp", 2, "det_sp2", ["--parallel.tp", "2"]),
                                 ("tp 4 + sp", 4, "det_sp4", ["--parallel.tp", "4"]),
                                 ("tp 2 x dp 2 + sp", 4, "det_sp2dp2", ["--parallel.tp", "2"]),
                                 ("tp 2 + sp, ZeRO-1 on dp 2", 4, "det_sp2z1", ["--parallel.tp", "2", "--parallel.zero", "1"]),
                                 ("tp 2 + sp x pp 2", 4, "det_sp2pp2", ["--parallel.tp", "2", "--parallel.pp", "2",
                                                                  "--parallel.microbatches", "4"]),
                                 ("tp 2 + sp x pp 2, zb-h1", 4, "det_sp2zb",
                                  ["--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "4",
                                   "--parallel.schedule", "zb-h1"])):
        r = programs.mpi(n, [*det, *args, *sp, "--out", out(name)], timeout=600)
        if r.returncode != 0 or not os.path.exists(out("serial_det")):
            check(f"train.deterministic, {title}", False, r.stderr.strip()[-300:])
            continue
        x, y = load(os.path.join(out("serial_det"), "checkpoint.bin")), load(os.path.join(out(name), "checkpoint.bin"))
        check(f"train.deterministic, {title}: serial's final parameters and moments byte for byte",
              x.params == y.params and x.m == y.m and x.v == y.v)
        plan_agrees(check, programs, f"train.deterministic, {title}", n, [*det, *args, *sp], out(name))

    # The llama preset: RMSNorm (no biases), RoPE, SwiGLU, grouped-query attention.
    llama = [*common, "--model.arch", "llama", "--model.n_kv_head", "2"]
    r = programs.run([a.serial, "train", *llama, "--out", out("serial_llama")])
    check("llama serial reference", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    r = programs.mpi(2, [*llama, "--parallel.tp", "2", *sp, "--out", out("sp2_llama")], timeout=600)
    if r.returncode != 0:
        check("llama, tp 2 + sp", False, r.stderr.strip()[-300:])
    else:
        compare(check, "llama (RMSNorm, RoPE, SwiGLU, n_kv_head 2), tp 2 + sp, equals its serial run",
                out("serial_llama"), out("sp2_llama"))
        plan_agrees(check, programs, "llama, tp 2 + sp", 2, [*llama, "--parallel.tp", "2", *sp], out("sp2_llama"))

    # RMSNorm's one statistic under train.deterministic: llama on tp 2 + sp gives its serial run's bytes.
    r1 = programs.run([a.serial, "train", *llama, "--train.deterministic", "true", "--out", out("serial_llama_det")])
    r2 = programs.mpi(2, [*llama, "--train.deterministic", "true", "--parallel.tp", "2", *sp, "--out",
                          out("sp2_llama_det")], timeout=600)
    if r1.returncode == 0 and r2.returncode == 0:
        x, y = (load(os.path.join(out(d), "checkpoint.bin")) for d in ("serial_llama_det", "sp2_llama_det"))
        check("train.deterministic, llama on tp 2 + sp: its serial run's parameters and moments byte for byte",
              x.params == y.params and x.m == y.m and x.v == y.v)
        plan_agrees(check, programs, "train.deterministic, llama, tp 2 + sp", 2,
                    [*llama, "--train.deterministic", "true", "--parallel.tp", "2", *sp], out("sp2_llama_det"))
    else:
        check("train.deterministic, llama on tp 2 + sp", False, (r1.stderr + r2.stderr).strip()[-300:])

    # Activations per rank: tp 2 with and without sp.
    r = programs.mpi(2, [*common, "--parallel.tp", "2", "--out", out("tp2")], timeout=600)
    if r.returncode == 0 and os.path.exists(out("sp2")):
        without = records(out("tp2"), "summary")[0]["provenance"]["memory"][0]
        with_sp = records(out("sp2"), "summary")[0]["provenance"]["memory"][0]
        ratio = with_sp["arena_layers_bytes"] / without["arena_layers_bytes"]
        check(f"tp 2: the layers' activations per rank with sp are {ratio:.1%} of those without (residual stream and "
              "norms cut by 2; the MLP's and attention's tensors were already cut)",
              ratio < 0.85 and with_sp["activations_bytes"] < without["activations_bytes"],
              f"{with_sp['arena_layers_bytes']} against {without['arena_layers_bytes']} bytes")
    else:
        check("tp 2 without sp", False, r.stderr.strip()[-300:])

    error = refuser(check, programs, a, common, out)
    error("sp with tp 1 is refused", 1, sp, "parallel.tp is 1", serial=True)
    error("sp with spd blocks is refused", 2, ["--parallel.tp", "2", "--parallel.block_types", "spd,tp", *sp],
          "parallel.sequence_parallel")
    error("a batch whose rows do not divide over tp is refused", 2,
          ["--parallel.tp", "2", "--train.batch_size", "1", "--train.seq_len", "31", *sp], "do not divide")
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
