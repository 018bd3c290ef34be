#!/usr/bin/env python3
"""train.deterministic (issue 31): the same bits at any thread count and on every exact layout: dp, accumulation, ZeRO, pp and tp.

With `train.deterministic true`, 10 steps of a small model (2 layers, C 64,
batch 8 x 64: 512 rows, so the products' fixed blocks split between the
threads; with validation) give byte-identical parameters and Adam
moments, and identical loss, gradient-norm and validation records and
generated text, for:
  * the serial stage at 1 and 2 threads;
  * the serial stage at 2 threads with recomputation (train.recompute full);
  * the mpi stage on one rank at 2 threads;
  * RMSNorm and SwiGLU (the variants' kernels), at 1 and 2 threads;
  * dp 2 and dp 4 (the mpi stage), dp 2 at 2 threads each, accumulation of
    4 micro-steps, and dp 2 with accumulation and recomputation: the global
    batch's 4 canonical chunks of 2 rows, added in one balanced tree (a
    rank's subtree, then recursive doubling across ranks), give serial's
    bits.
  * ZeRO-1, 2 and 3 on dp 2, ZeRO-3 on dp 4, ZeRO-1 on dp 4 at 2 threads,
    and ZeRO-2 with accumulation and recomputation: the tree's last levels a
    canonical reduce-scatter into the shards, the norm an exact sum;
  * pp 2 under gpipe, 1f1b and zb-h1, pp 2 x dp 2, and pp 2 at 2 threads
    with recomputation, pp 2 x dp 2 with ZeRO-1 and 2: the microbatches are
    the chunks, each stage adds their gradients in the tree as they complete;
  * tp 2, tp 4, tp 2 x dp 2, tp 2 x pp 2, tp 2 at 2 threads with
    recomputation and tp 2 x dp 2 with ZeRO-3: the canonical pieces of the
    dimensions tp cuts, each rank's subtree then tree_sum, and product
    tiles at fixed places;
  * bf16: 2 threads, dp 2, pp 2 (zb-h1) and ZeRO-3 give serial bf16's bits.
A ZeRO-3 run stopped at step 6 and resumed as pp 2 ends with serial's bits,
and a serial run resumed as ZeRO-3 on dp 2 does too; model.init original
under ZeRO-3 on dp 2 gives serial's bits.
A run stopped at step 6 on 2 threads and resumed from its step-5
checkpoint on 1 thread ends with the uninterrupted run's bits. The
checkpoints are compared tensor bytes to tensor bytes (their headers
record train.threads, which differs by design). The default (false) still
runs the fast order: its result at 2 threads differs from its result at 1,
which shows the check above can fail.

What is not built yet is refused with one line naming the constraint:
spd blocks or bf16 under tp, a pipeline with microbatches that are not
the chunks,
data-parallel counts that do not hold whole subtrees (3 ranks), micro-steps
of part of a chunk, and the CUDA stages (their plan).

usage: determinism_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import os
import shutil
import sys

from layout_checks import LayoutTest, bit_runs, common_args, final_state, plan_agrees, records, refuser


def main():
    t = LayoutTest(__doc__, "determinism_test_")
    a, check, programs, out = t.a, t.check, t.programs, t.out
    run = programs.run
    B, T, C, L, NH = 8, 64, 64, 2, 4  # 512 rows: the products' fixed 256-row blocks split between threads
    common = common_args(a.corpus, B, T, C, L, NH)
    det = [*common, "--train.deterministic", "true"]

    train, same = bit_runs(check, programs, a.serial, out)

    ref = train("det_t1", det, 1)
    same("deterministic: 2 threads give serial 1 thread's bits (weights, moments, losses, norms, val, text)",
         ref, train("det_t2", det, 2))
    same("deterministic: recomputation at 2 threads gives the same bits",
         ref, train("det_t2_recompute", [*det, "--train.recompute", "full"], 2))
    same("deterministic: the mpi stage on one rank at 2 threads gives the same bits",
         ref, train("det_mpi1_t2", det, 2, ranks=1))
    # Data parallelism and accumulation: the batch's 4 canonical chunks (of 2
    # rows), whole subtrees per rank or micro-step, give serial's bits.
    same("deterministic: dp 2 gives serial's bits", ref, train("det_dp2", det, 1, ranks=2))
    same("deterministic: dp 4 gives serial's bits", ref, train("det_dp4", det, 1, ranks=4))
    same("deterministic: dp 2 at 2 threads each gives serial's bits", ref, train("det_dp2_t2", det, 2, ranks=2))
    same("deterministic: accumulation of 4 micro-steps of 2 rows gives serial's bits",
         ref, train("det_acc4", [*det, "--parallel.microbatches", "4"], 2))
    same("deterministic: dp 2 with accumulation (2 micro-steps of 2 rows) and recomputation gives serial's bits",
         ref, train("det_dp2_acc", [*det, "--parallel.microbatches", "2", "--train.recompute", "full"], 1, ranks=2))
    same("deterministic: dp 2 with accumulation (2 micro-steps of 2 rows) without recomputation gives serial's bits",
         ref, train("det_dp2_mbs", [*det, "--parallel.microbatches", "2"], 1, ranks=2))
    for n in (2, 4):
        plan_agrees(check, programs, f"deterministic dp {n}", n, det, out(f"det_dp{n}"))
    # ZeRO: the tree's last levels a reduce-scatter into the shards (recursive
    # halving), the update on the shard, the norm an exact sum over shards.
    for z in (1, 2, 3):
        same(f"deterministic: ZeRO-{z} on dp 2 gives serial's bits",
             ref, train(f"det_zero{z}", [*det, "--parallel.zero", str(z)], 1, ranks=2))
    same("deterministic: ZeRO-3 on dp 4 gives serial's bits",
         ref, train("det_zero3_dp4", [*det, "--parallel.zero", "3"], 1, ranks=4))
    same("deterministic: ZeRO-1 on dp 4 at 2 threads gives serial's bits",
         ref, train("det_zero1_dp4", [*det, "--parallel.zero", "1"], 2, ranks=4))
    for z, n in ((1, 2), (3, 2), (3, 4)):
        plan_agrees(check, programs, f"deterministic ZeRO-{z} dp {n}", n, [*det, "--parallel.zero", str(z)],
                    out(f"det_zero{z}" if n == 2 else f"det_zero{z}_dp{n}"))
    same("deterministic: ZeRO-2 on dp 2 with accumulation and recomputation gives serial's bits",
         ref, train("det_zero2_acc", [*det, "--parallel.zero", "2", "--parallel.microbatches", "2",
                                      "--train.recompute", "full"], 1, ranks=2))
    # Pipelines: the microbatches are the replica's canonical chunks; each
    # microbatch's backward (B and W apart under zb-h1) writes its own buffer,
    # and a stage adds them in the tree as they complete.
    for sched in ("gpipe", "1f1b", "zb-h1"):
        same(f"deterministic: pp 2 ({sched}, 4 microbatches) gives serial's bits", ref,
             train(f"det_pp2_{sched}", [*det, "--parallel.pp", "2", "--parallel.microbatches", "4",
                                        "--parallel.schedule", sched], 1, ranks=2))
    same("deterministic: pp 2 x dp 2 (1f1b, 2 microbatches) gives serial's bits", ref,
         train("det_pp2_dp2", [*det, "--parallel.pp", "2", "--parallel.microbatches", "2",
                               "--parallel.schedule", "1f1b"], 1, ranks=4))
    same("deterministic: pp 2 (gpipe) at 2 threads with recomputation gives serial's bits", ref,
         train("det_pp2_t2", [*det, "--parallel.pp", "2", "--parallel.microbatches", "4",
                              "--parallel.schedule", "gpipe", "--train.recompute", "full"], 2, ranks=2))
    pz = [*det, "--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.schedule", "zb-h1"]
    same("deterministic: pp 2 x dp 2 (zb-h1) with ZeRO-1 gives serial's bits", ref,
         train("det_pp2_dp2_zero1", [*pz, "--parallel.zero", "1"], 1, ranks=4))
    same("deterministic: pp 2 x dp 2 (zb-h1) with ZeRO-2 gives serial's bits", ref,
         train("det_pp2_dp2_zero2", [*pz, "--parallel.zero", "2"], 1, ranks=4))
    plan_agrees(check, programs, "deterministic pp 2 x dp 2 ZeRO-1", 4, [*pz, "--parallel.zero", "1"],
                out("det_pp2_dp2_zero1"))
    plan_agrees(check, programs, "deterministic pp 2 zb-h1", 2,
                [*det, "--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule", "zb-h1"],
                out("det_pp2_zb-h1"))
    plan_agrees(check, programs, "deterministic pp 2 x dp 2", 4,
                [*det, "--parallel.pp", "2", "--parallel.microbatches", "2", "--parallel.schedule", "1f1b"],
                out("det_pp2_dp2"))
    # Tensor parallelism: the row-parallel products and the column-parallel
    # input gradients are trees over the canonical pieces (4 here), this
    # rank's subtree then tree_sum; the column tiles make a shard's products
    # the whole product's calls there.
    same("deterministic: tp 2 gives serial's bits", ref, train("det_tp2", [*det, "--parallel.tp", "2"], 1, ranks=2))
    same("deterministic: tp 4 gives serial's bits", ref, train("det_tp4", [*det, "--parallel.tp", "4"], 1, ranks=4))
    same("deterministic: tp 2 x dp 2 gives serial's bits", ref,
         train("det_tp2_dp2", [*det, "--parallel.tp", "2"], 1, ranks=4))
    same("deterministic: tp 2 x pp 2 (1f1b, 4 microbatches) gives serial's bits", ref,
         train("det_tp2_pp2", [*det, "--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "4",
                               "--parallel.schedule", "1f1b"], 1, ranks=4))
    plan_agrees(check, programs, "deterministic tp 2 x dp 2", 4, [*det, "--parallel.tp", "2"], out("det_tp2_dp2"))
    plan_agrees(check, programs, "deterministic tp 2 x pp 2", 4,
                [*det, "--parallel.tp", "2", "--parallel.pp", "2", "--parallel.microbatches", "4",
                 "--parallel.schedule", "1f1b"], out("det_tp2_pp2"))
    same("deterministic: tp 2 at 2 threads with recomputation gives serial's bits", ref,
         train("det_tp2_t2", [*det, "--parallel.tp", "2", "--train.recompute", "full"], 2, ranks=2))
    same("deterministic: tp 2 x dp 2 with ZeRO-3 gives serial's bits", ref,
         train("det_tp2_zero3", [*det, "--parallel.tp", "2", "--parallel.zero", "3"], 1, ranks=4))
    # The other provider, forced with train.gemm (the runs above take the machine's: oneDNN's SGEMM where the CPU
    # has AVX-512, else OpenBLAS's; kernels/cpu/gemm.h deterministic_provider): the same fixed tiles give the same
    # bits at any thread count and on tp 2 and dp 2, and other bits than the machine's provider.
    flags = open("/proc/cpuinfo").read().split()
    other = "openblas" if "avx512f" in flags else "onednn"
    dn = [*det, "--train.gemm", other]
    dn_ref = train(f"det_{other}_t1", dn, 1)
    check(f"deterministic with {other}'s products differs from the machine's provider's (the checks below compare "
          f"{other} runs)", dn_ref is not None and ref is not None and dn_ref[0] != ref[0])
    same(f"deterministic, train.gemm {other}: 2 threads give 1 thread's bits", dn_ref, train(f"det_{other}_t2", dn, 2))
    same(f"deterministic, train.gemm {other}: tp 2 gives serial's bits", dn_ref,
         train(f"det_{other}_tp2", [*dn, "--parallel.tp", "2"], 1, ranks=2))
    same(f"deterministic, train.gemm {other}: dp 2 gives serial's bits", dn_ref,
         train(f"det_{other}_dp2", dn, 1, ranks=2))
    # bf16 (oneDNN's products, bf16 stored activations): the same chunks and
    # trees; thread-invariant as measured; tp refused (its pieces are fp32's).
    bf = [*det, "--train.precision", "bf16"]
    bf_ref = train("det_bf16_t1", bf, 1)
    check("deterministic bf16 differs from fp32 (the bf16 checks below compare bf16 runs)",
          bf_ref is not None and ref is not None and bf_ref[0] != ref[0])
    same("deterministic bf16: 2 threads give 1 thread's bits", bf_ref, train("det_bf16_t2", bf, 2))
    same("deterministic bf16: dp 2 gives serial's bits", bf_ref, train("det_bf16_dp2", bf, 1, ranks=2))
    same("deterministic bf16: pp 2 (zb-h1) gives serial's bits", bf_ref,
         train("det_bf16_pp2", [*bf, "--parallel.pp", "2", "--parallel.microbatches", "4",
                                "--parallel.schedule", "zb-h1"], 1, ranks=2))
    same("deterministic bf16: ZeRO-3 on dp 2 gives serial's bits", bf_ref,
         train("det_bf16_zero3", [*bf, "--parallel.zero", "3"], 1, ranks=2))
    # A batch of 6: 2 canonical chunks of 3 rows; dp 2 holds one each.
    six = [*det, "--train.batch_size", "6"]
    same("deterministic: batch 6 (2 chunks) on dp 2 gives serial's bits",
         train("det_b6", six, 1), train("det_b6_dp2", six, 1, ranks=2))
    variant = [*det, "--model.norm", "rmsnorm", "--model.mlp", "swiglu"]
    same("deterministic: RMSNorm and SwiGLU at 2 threads give their 1-thread bits",
         train("det_rms_t1", variant, 1), train("det_rms_t2", variant, 2))

    # Resume across thread counts: a 2-thread run stopped at step 6 (its
    # checkpoint at step 5), resumed in its directory at 1 thread, ends with
    # the uninterrupted 1-thread run's bits and records.
    d = out("det_resumed")
    crash = {"fail_rank": 0, "fail_step": 6}  # the test hooks: rank 0 fails at step 6
    r = run([a.serial, "train", *det, "--train.threads", "2", "--train.checkpoint_every", "5", "--out", d],
            hooks=crash)
    check("a 2-thread deterministic run stops at step 6 with its step-5 checkpoint",
          r.returncode != 0 and os.path.exists(os.path.join(d, "checkpoint.bin")), r.stderr.strip()[-200:])
    r = run([a.serial, "train", *det, "--train.threads", "1", "--out", d, "--resume", os.path.join(d, "checkpoint.bin")])
    if r.returncode == 0 and ref is not None:
        got = final_state(d)
        ref_steps = {s["step"]: (s["loss"], s["grad_norm"]) for s in records(out("det_t1"), "step")}
        resumed = {s["step"]: (s["loss"], s["grad_norm"]) for s in records(d, "step")}
        all_equal = bool(resumed) and all(ref_steps.get(k) == v for k, v in resumed.items())
        check("resumed at 1 thread, it ends with the uninterrupted run's bits (weights, moments, every step's record)",
              all(p == q for p, q in zip(got[0], ref[0])) and all_equal and sorted(resumed) == list(range(10)),
              f"steps {sorted(resumed)}")
    else:
        check("the resumed run completes", False, r.stderr.strip()[-300:])

    def stopped_then_resumed(name, stopper, stop_args, resumer, resume_args, stopped_as, resumed_as):
        """A deterministic run on `stopper` (its ranks, 0: serial) stopped at step 6, then resumed from its
        step-5 checkpoint on `resumer`, ends with serial's bits."""
        d = out(name)
        go = lambda ranks, args, hooks=None: (programs.mpi(ranks, args, hooks=hooks) if ranks
                                              else run([a.serial, "train", *args], hooks=hooks))
        r = go(stopper, [*det, *stop_args, "--train.checkpoint_every", "5", "--out", d], crash)
        check(f"a deterministic {stopped_as} run stops at step 6 with its step-5 checkpoint",
              r.returncode != 0 and os.path.exists(os.path.join(d, "checkpoint.bin")), r.stderr.strip()[-200:])
        r = go(resumer, [*det, *resume_args, "--out", d, "--resume", os.path.join(d, "checkpoint.bin")])
        if r.returncode == 0 and ref is not None:
            got = final_state(d)
            check(f"resumed as {resumed_as}, it ends with serial's bits (weights, moments, last step's record)",
                  all(p == q for p, q in zip(got[0], ref[0])) and got[1][-1] == ref[1][-1], f"records {got[1][-1:]}")
        else:
            check(f"the run resumed as {resumed_as} completes", False, r.stderr.strip()[-300:])

    # Resume across layouts: ZeRO-3 on dp 2 resumed as pp 2 (zb-h1); and into ZeRO-3 (its parameters load as
    # this rank's pieces, not into the model): a serial run resumed on dp 2 with ZeRO-3.
    stopped_then_resumed("det_resumed_layouts", 2, ["--parallel.zero", "3"], 2,
                         ["--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule", "zb-h1"],
                         "ZeRO-3 dp 2", "pp 2 (zb-h1)")
    stopped_then_resumed("det_resumed_into_zero3", 0, ["--train.threads", "1"], 2, ["--parallel.zero", "3"],
                         "serial", "ZeRO-3 on dp 2")
    # model.init original under ZeRO-3: drawn whole (one sequence over the model), then cut into the pieces.
    original = [*det, "--model.init", "original"]
    same("deterministic: model.init original with ZeRO-3 on dp 2 gives serial's bits",
         train("det_original", original, 1), train("det_original_zero3", [*original, "--parallel.zero", "3"], 1, ranks=2))

    fast1, fast2 = train("fast_t1", common, 1), train("fast_t2", common, 2)
    check("the default's fast order differs between 1 and 2 threads (so the checks above can fail)",
          fast1 is not None and fast2 is not None and fast1[0] != fast2[0])
    fast_dp2 = train("fast_dp2", common, 1, ranks=2)
    check("the default's dp 2 differs from its serial run (so the dp checks can fail)",
          fast1 is not None and fast_dp2 is not None and fast1[0] != fast_dp2[0])

    error = refuser(check, programs, a, det, out)
    error("spd blocks under tensor parallelism are refused, naming the constraint", 2,
          ["--parallel.tp", "2", "--parallel.block_types", "spd,spd"], "parallel.block_types tp")
    error("a pipeline whose microbatches are not the chunks is refused, naming the count", 2,
          ["--parallel.pp", "2", "--parallel.microbatches", "2"], "use parallel.microbatches 4")
    error("3 data-parallel ranks are refused, naming the allowed counts", 3, [], "use 1, 2 or 4 ranks")
    error("bf16 under tensor parallelism is refused", 2, ["--train.precision", "bf16", "--parallel.tp", "2"],
          "runs tensor parallelism in fp32 so far")
    error("a micro-step of part of a chunk is refused, naming the allowed counts", 1, ["--parallel.microbatches", "8"],
          "use parallel.microbatches dividing 4")
    error("more microbatches than a rank's rows are refused by the layout's own check", 4,
          ["--parallel.microbatches", "4"], "parallel.microbatches")
    r = run([a.serial, "plan", *det, "--stage", "cuda"])
    check("the CUDA stages are refused by their plan", r.returncode == 2 and "CPU stages only" in r.stderr,
          r.stderr.strip()[-300:])

    shutil.rmtree(t.work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
