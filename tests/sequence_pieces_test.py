#!/usr/bin/env python3
"""train.sequence_pieces (issue 47): context parallelism gives serial's bits under train.deterministic.

With `train.deterministic true` and `train.sequence_pieces 8` (every row of
64 tokens cut into 8 pieces of 8, paired p with 7 - p; every sum over the
batch's tokens a balanced tree over the pairs; kernels/sequence_pieces.h),
10 steps of a small model (2 layers, C 64, batch 8 x 64, validation every 5
steps) give byte-identical parameters and Adam moments, and identical loss,
gradient-norm and validation records and generated text, for:
  * the serial stage at 1 and 2 threads;
  * cp 2 and cp 4 (the mpi stage): each rank's two chunks are whole pairs,
    so its sums are a subtree of serial's tree, which the group's tree sum
    finishes; the attention reads every rank's keys and values, gathered,
    in serial's tiles;
  * cp 2 x tp 2, cp 2 x dp 2, and cp 2 at 2 threads with recomputation;
  * the llama preset (RMSNorm, RoPE, SwiGLU, grouped-query attention,
    untied head) on cp 2 against its serial run.
The plan's memory and every group's traffic (the gathers, the tree
reduce-scatters and tree sums that replace the ring) equal the counts for
each cp run. The pieces change the deterministic arithmetic (checked: serial with 8
pieces differs from serial with 1), and cp 2 without train.deterministic
differs from serial (so the checks above can fail).

Refused with one line naming the constraint: cp 2 with 2 pieces (not a
multiple of 2 cp), 3 pieces (not a power of two), pieces without
train.deterministic, and pieces with ZeRO.

usage: sequence_pieces_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import shutil
import sys

from layout_checks import LayoutTest, bit_runs, common_args, plan_agrees, refuser


def main():
    t = LayoutTest(__doc__, "sequence_pieces_test_")
    a, check, programs, out = t.a, t.check, t.programs, t.out
    B, T, C, L, NH = 8, 64, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    det = [*common, "--train.deterministic", "true"]
    pieces = [*det, "--train.sequence_pieces", "8"]

    train, same = bit_runs(check, programs, a.serial, out)

    ref = train("pieces_t1", pieces, 1)
    plain = train("plain_t1", det, 1)
    check("8 sequence pieces change the deterministic arithmetic (serial with 1 piece differs)",
          ref is not None and plain is not None and ref[0] != plain[0])
    same("pieces: 2 threads give serial 1 thread's bits", ref, train("pieces_t2", pieces, 2))
    same("pieces: cp 2 gives serial's bits", ref, train("pieces_cp2", [*pieces, "--parallel.cp", "2"], 1, ranks=2))
    same("pieces: cp 4 gives serial's bits", ref, train("pieces_cp4", [*pieces, "--parallel.cp", "4"], 1, ranks=4))
    same("pieces: cp 2 x tp 2 gives serial's bits", ref,
         train("pieces_cp2_tp2", [*pieces, "--parallel.cp", "2", "--parallel.tp", "2"], 1, ranks=4))
    same("pieces: cp 2 x dp 2 gives serial's bits", ref,
         train("pieces_cp2_dp2", [*pieces, "--parallel.cp", "2"], 1, ranks=4))
    same("pieces: cp 2 at 2 threads with recomputation gives serial's bits", ref,
         train("pieces_cp2_t2", [*pieces, "--parallel.cp", "2", "--train.recompute", "full"], 2, ranks=2))
    llama = [*pieces, "--model.arch", "llama", "--model.n_kv_head", "2"]
    same("pieces: llama (RMSNorm, RoPE, SwiGLU, grouped-query attention) on cp 2 gives its serial run's bits",
         train("pieces_llama", llama, 1), train("pieces_llama_cp2", [*llama, "--parallel.cp", "2"], 1, ranks=2))

    for name, n, extra in (("pieces_cp2", 2, ["--parallel.cp", "2"]), ("pieces_cp4", 4, ["--parallel.cp", "4"]),
                           ("pieces_cp2_tp2", 4, ["--parallel.cp", "2", "--parallel.tp", "2"]),
                           ("pieces_cp2_dp2", 4, ["--parallel.cp", "2"]),
                           ("pieces_cp2_t2", 2, ["--parallel.cp", "2", "--train.recompute", "full"])):
        plan_agrees(check, programs, name, n, [*pieces, *extra], out(name))
    fast = train("fast_cp2", [*common, "--parallel.cp", "2"], 1, ranks=2)
    fast_serial = train("fast_serial", common, 1)
    check("without train.deterministic cp 2 differs from serial (so the checks above can fail)",
          fast is not None and fast_serial is not None and fast[0] != fast_serial[0])

    error = refuser(check, programs, a, det, out)
    error("cp 2 with 2 pieces is refused, naming the multiple it needs", 2,
          ["--parallel.cp", "2", "--train.sequence_pieces", "2"], "a multiple of 2 cp = 4")
    error("cp 2 without pieces under train.deterministic is refused", 2, ["--parallel.cp", "2"],
          "a multiple of 2 cp = 4")
    error("3 pieces are refused", 1, ["--train.sequence_pieces", "3"], "must be a power of two", serial=True)
    error("pieces with ZeRO are refused", 2, ["--train.sequence_pieces", "8", "--parallel.zero", "1"],
          "not with parallel.zero 1")
    error_fast = refuser(check, programs, a, common, out)
    error_fast("pieces without train.deterministic are refused", 1, ["--train.sequence_pieces", "8"],
               "needs train.deterministic true", serial=True)

    shutil.rmtree(t.work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
