#!/usr/bin/env python3
"""Context parallelism (parallel.cp, issue 47) on real MPI ranks, against
the serial stage.

  * cp 2 on 2 ranks, cp 4 on 4, cp 2 x tp 2, cp 2 x dp 2, cp 2 x pp 2 (1f1b
    with 2 microbatches, zb-h1 with 4), cp 2 with ZeRO-1 and ZeRO-3 on dp 2,
    with train.recompute full, and cp 2 x tp 2 with the vocabulary cut or
    with sequence parallelism train
    the serial configuration for 10 steps: every step's loss and validation
    loss within 1e-5 relative and every final weight within 1e-5 absolute of
    serial's; the run's plan equals what each rank counted (memory by kind,
    and rank 0's calls and bytes per group every step: the ring's 3 cp - 2
    shifts of a key/value block per layer and microbatch).
  * The llama preset (RoPE at the chunks' positions, grouped-query
    attention, RMSNorm, SwiGLU) on cp 2 and cp 2 x tp 2, and post-norm
    blocks on cp 2, equal their serial runs likewise.
  * Generation after training gives serial's text; a sharded ZeRO-1
    checkpoint of cp 2 x dp 2 resumes on serial to serial's losses.
  * Per rank activation bytes at T 4096 (the plan's count, which the runs
    above check against the engine's): cp 4 at most 30% of cp 1's.
  * Refusals, one line each: a sequence that does not cut into 2 cp chunks,
    cp with train.deterministic but without train.sequence_pieces (sequence_pieces_test: with them, serial's
    bits), with spd blocks, on the serial stage, and a grid that does not divide the
    ranks. (bf16 runs: precision_test.)

usage: context_parallel_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
"""
import json
import os
import shutil
import sys

from layout_checks import LayoutTest, common_args, layouts_equal_serial, records, refuser


def main():
    t = LayoutTest(__doc__, "cp_test_")
    a, work, check, programs, out = t.a, t.work, t.check, t.programs, t.out
    B, T, C, L, NH = 8, 32, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    cp2, cp4 = ["--parallel.cp", "2"], ["--parallel.cp", "4"]
    t.serial(common)
    layouts_equal_serial(check, programs, common, [
        ("cp 2 on 2 ranks", 2, "cp2", cp2),
        ("cp 4 on 4 ranks", 4, "cp4", cp4),
        ("cp 2 x tp 2 on 4 ranks", 4, "cp2tp2", [*cp2, "--parallel.tp", "2"]),
        ("cp 2 x dp 2 on 4 ranks", 4, "cp2dp2", cp2),
        ("cp 2 x pp 2 (1f1b, 2 microbatches)", 4, "cp2pp2", [*cp2, "--parallel.pp", "2", "--parallel.microbatches", "2"]),
        ("cp 2 x pp 2 (zb-h1, 4 microbatches)", 4, "cp2zb",
         [*cp2, "--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule", "zb-h1"]),
        ("cp 2, ZeRO-1 on dp 2", 4, "cp2z1", [*cp2, "--parallel.zero", "1"]),
        ("cp 2, ZeRO-3 on dp 2", 4, "cp2z3", [*cp2, "--parallel.zero", "3"]),
        ("cp 2, train.recompute full", 2, "cp2rc", [*cp2, "--train.recompute", "full"]),
        ("cp 2 x tp 2, the vocabulary cut", 4, "cp2v", [*cp2, "--parallel.tp", "2", "--parallel.vocab_parallel", "true"]),
        ("cp 2 x tp 2 + sequence parallelism", 4, "cp2sp", [*cp2, "--parallel.tp", "2",
                                                             "--parallel.sequence_parallel", "true"]),
    ], out)
    summary = lambda d: records(out(d), "summary")[0] if os.path.exists(out(d)) else {}  # noqa: E731
    check("generation after cp 2 training gives serial's text",
          summary("cp2").get("generated_text") is not None and
          summary("cp2").get("generated_text") == summary("serial").get("generated_text"),
          f"{summary('cp2').get('generated_text')!r} against {summary('serial').get('generated_text')!r}")

    # Checkpoints stay layout-free: a sharded ZeRO-1 checkpoint of cp 2 x dp 2 after 5 steps resumes on serial.
    d = out("cp_resume")
    r = programs.mpi(4, [*common, *cp2, "--parallel.zero", "1", "--train.checkpoint_format", "sharded",
                         "--train.steps", "5", "--out", d], timeout=600)
    if r.returncode == 0:
        r = programs.run([a.serial, "train", *common, "--resume", os.path.join(d, "checkpoints", "step-00000005"),
                          "--out", d])
    if r.returncode != 0:
        check("a cp 2 x dp 2 checkpoint resumed on serial", False, r.stderr.strip()[-300:])
    else:
        got, want = ([s["loss"] for s in records(x, "step")] for x in (d, out("serial")))
        rel = max((abs(x - y) / y for x, y in zip(got, want)), default=float("inf"))
        check("a sharded ZeRO-1 checkpoint of cp 2 x dp 2 after 5 steps resumes on serial to serial's 10 losses "
              "(within 1e-5 relative)", len(got) == len(want) == 10 and rel <= 1e-5, f"worst {rel:.2e}")

    # The llama preset: RoPE turned at each chunk's positions, RMSNorm, SwiGLU, grouped-query attention.
    llama = [*common, "--model.arch", "llama", "--model.n_kv_head", "2"]
    r = programs.run([a.serial, "train", *llama, "--out", out("serial_llama")])
    check("llama serial reference", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    layouts_equal_serial(check, programs, llama, [
        ("llama (RMSNorm, RoPE, SwiGLU, n_kv_head 2) on cp 2", 2, "cp2_llama", cp2),
        ("llama on cp 2 x tp 2", 4, "cp2tp2_llama", [*cp2, "--parallel.tp", "2"]),
    ], out, reference="serial_llama")

    # Post-norm blocks (the attention's ring the same, the norms after it).
    post = [*common, "--model.norm_position", "post"]
    r = programs.run([a.serial, "train", *post, "--out", out("serial_post")])
    check("post-norm serial reference", r.returncode == 0, r.stderr.strip()[-300:] if r.returncode else "")
    layouts_equal_serial(check, programs, post, [("post-norm blocks on cp 2", 2, "cp2_post", cp2)], out,
                         reference="serial_post")

    # Activations per rank at T 4096, from the plan (whose counts the runs above check against the engine's).
    long_args = [*common_args(a.corpus, 1, 4096, C, L, NH), "--train.eval_every", "0"]
    arena = {}
    for cp in (1, 4):
        r = programs.mpi(1, [*long_args, "--parallel.cp", str(cp), "--ranks", str(cp)], command="plan")
        if r.returncode == 0:
            arena[cp] = json.loads(r.stdout)["per_rank"][0]["memory"]["activations_bytes"]
        else:
            check(f"plan of cp {cp} at T 4096", False, r.stderr.strip()[-300:])
    if len(arena) == 2:
        ratio = arena[4] / arena[1]
        check(f"at T 4096 cp 4 keeps {ratio:.1%} of cp 1's activations per rank (at most 30%)", ratio <= 0.30,
              f"{arena[4]} against {arena[1]} bytes")

    error = refuser(check, programs, a, common, out)
    error("a sequence that does not cut into 2 cp chunks is refused", 2, [*cp2, "--train.seq_len", "30"],
          "does not cut into")
    error("cp with train.deterministic but without sequence pieces is refused", 2,
          [*cp2, "--train.deterministic", "true"], "needs train.sequence_pieces a multiple of 2 cp")
    error("cp with spd blocks is refused", 4, [*cp2, "--parallel.tp", "2", "--parallel.block_types", "spd,tp"],
          "block_types")
    error("cp on the serial stage is refused", 1, cp2, "mpi stage", serial=True)
    error("a grid that does not divide the ranks is refused", 3, cp2, "parallel.cp 2")
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
