#!/usr/bin/env python3
"""train.precision bf16 (docs/precision.md) on the stage programs.

  * serial bf16 against serial fp32, 10 steps of the small configuration:
    every step's loss within 1% (the issue's bound for the original
    configuration's 50 steps, measured in docs/precision.md);
  * dp 2, tp 2, pp 2 (1f1b, 2 microbatches), ZeRO-2 on dp 2, tp 2 with
    the vocabulary cut, and tp 2 with sequence parallelism (alone, with
    recomputation, and x pp 2 under zb-h1: the norms' bf16 outputs are
    gathered as bf16, and the plan counts their 2 bytes), all in bf16, against serial bf16. Only the order of
    fp32 sums differs between layouts, as in fp32, but a sum that differs in
    its last bits may round to the neighbouring bf16 at the next product
    (2^-8 relative), so the layouts agree less closely than in fp32:
      - losses within 1e-3 relative (a quarter of one bf16 rounding);
      - the update (final weights minus the initial ones) within 4 bf16
        roundings (4 x 2^-8 = 1.56e-2) of serial bf16's in relative 2-norm.
        Context parallelism (cp 2, cp 2 x tp 2 + sp) rounds at other places
        (each ring block's P is normalised over its block before its bf16
        rounding; D = dO . O comes from the fp32 output), so it is another
        bf16 computation of the same function, not serial bf16's with its
        sums reordered: measured 1.4e-2 from serial bf16's update, while as
        close to serial fp32's (1.95e-2) as serial bf16's is (2.0e-2). Its
        check: losses within 1e-3 of serial bf16's, and the update within
        1.25 times serial bf16's own distance from serial fp32's (the planted
        fault is 5 times that distance away: it fails); the llama variant
        (RoPE, grouped-query attention) on cp 2 and tp 2 + sp likewise,
        against its own serial runs;
        Measured on the AVX2 machine: 4.3e-3 (dp 2) to 7.0e-3 (tp 2 x dp 2),
        while serial fp32's update, the same data with other roundings, is
        2.0e-2 from it, and a learning rate 10% higher 1.0e-1: the check
        tells those apart (the planted fault below fails it). A bound
        on the largest weight difference cannot: Adam's normalised step moves
        an element whose gradient is noise by up to about lr either way, so
        any two runs may differ there by steps x lr;
  * the run's header names the bf16 path and its MFU peak is the bf16
    products' (provenance: precision, oneDNN's version and kernel);
  * a bf16 run's checkpoint (fp32 master weights) resumes in fp32, with the
    fp32 continuation's losses within 1% of the bf16 run's;
  * clear errors: an unknown precision;
  * the peer report (bench/peers/precision_report.py) computes the ratios
    and says which goals are met;
  * the CUDA stages plan bf16 as products only: their activations (device
    memory) stay f32, so their planned activation bytes are fp32's, while
    the serial stage's are fewer (the stored bf16 tensors at 2 bytes).

usage: precision_test.py --serial PATH --mpi PATH --mpiexec PATH --corpus PATH
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import json
import os
import shutil
import sys

from layout_checks import LayoutTest, common_args, floats, load, plan_agrees, records, refuser


def main():
    t = LayoutTest(__doc__, "precision_test_")
    a, check, programs, out = t.a, t.check, t.programs, t.out
    run, mpi = programs.run, programs.mpi
    B, T, C, L, NH = 8, 32, 64, 2, 4
    common = common_args(a.corpus, B, T, C, L, NH)
    bf16 = [*common, "--train.precision", "bf16"]
    steps = 10

    # ---- bf16 against fp32 ----
    t.serial(common, "serial fp32")
    r = run([a.serial, "train", *bf16, "--out", out("bf16")])
    check("serial bf16 runs", r.returncode == 0, r.stderr.strip()[-300:])
    if r.returncode != 0:
        return check.finish()
    f32 = [s["loss"] for s in records(out("serial"), "step")]
    b16 = [s["loss"] for s in records(out("bf16"), "step")]
    worst = max(abs(x - y) / y for x, y in zip(b16, f32))
    check("bf16 losses within 1% of fp32's at every step", len(b16) == steps and worst <= 0.01 and b16 != f32,
          f"worst {worst:.2e} relative; bf16 {' '.join(f'{x:.5f}' for x in b16)}")
    summary = records(out("bf16"), "summary")[0]
    prov = summary["provenance"]
    check("the header and provenance name the bf16 path and its peak",
          "bf16 products: oneDNN" in r.stderr and ("measured bf16 product" in r.stderr or "train.peak_gflops" in r.stderr),
          r.stderr.strip()[:300])
    check("provenance: precision bf16, oneDNN's version and kernel",
          prov.get("precision") == "bf16" and bool(prov.get("onednn")) and bool(prov.get("onednn_matmul")),
          f"precision {prov.get('precision')}, onednn {prov.get('onednn')}, kernel {prov.get('onednn_matmul')}")

    # ---- Layouts in bf16 against serial bf16 ----
    ub = 2.0 ** -8
    r = run([a.serial, "init", *common, "--out", out("init.bin")])
    check("the initial weights (serial init)", r.returncode == 0, r.stderr.strip()[-300:])
    if r.returncode != 0:
        return check.finish()
    init_w = floats(load(out("init.bin")).params)

    def update_difference(run_dir, ref_dir, init=init_w):
        """|| (w - w0) - (w_ref - w0) || / || w_ref - w0 ||: how far a run's update is from the reference's."""
        w = floats(load(os.path.join(run_dir, "checkpoint.bin")).params)
        ref = floats(load(os.path.join(ref_dir, "checkpoint.bin")).params)
        num = sum((x - y) ** 2 for x, y in zip(w, ref))
        den = sum((y - x0) ** 2 for y, x0 in zip(ref, init))
        return (num / den) ** 0.5 if len(w) == len(ref) == len(init) and den > 0 else float("inf")

    # The bound can fail: a planted fault (the learning rate 10% high) is far outside it.
    r = run([a.serial, "train", *bf16, "--optimizer.lr", "1.1e-3", "--out", out("bf16_lr")])
    fault = update_difference(out("bf16_lr"), out("bf16")) if r.returncode == 0 else 0.0
    check(f"a planted fault (optimizer.lr 10% high) moves the update more than 4 ub ({4 * ub:.3g}) from serial "
          f"bf16's: the layout checks below can fail", fault > 4 * ub, f"{fault:.2e} relative")
    fp32_difference = update_difference(out("serial"), out("bf16"))
    print(f"note: serial fp32's update is {fp32_difference:.2e} from serial bf16's (the same data, other roundings)")
    # Context parallelism rounds elsewhere (each ring block's P normalised over the block; D = dO . O in fp32), so
    # its bf16 is another bf16 computation of the function, not serial bf16's with its sums reordered: its update
    # must be as close to serial fp32's as serial bf16's is (within 1.25 times), which the fault also fails.
    bf16_error = update_difference(out("bf16"), out("serial"))
    fault_error = update_difference(out("bf16_lr"), out("serial")) if r.returncode == 0 else 0.0
    check(f"the planted fault's update is more than 1.25 times serial bf16's distance ({bf16_error:.2e}) from serial "
          f"fp32's: the context-parallel checks below can fail", fault_error > 1.25 * bf16_error,
          f"{fault_error:.2e} relative")
    ref_l = b16

    def bf16_layout(n, title, args, ref_losses, ref_bf16, ref_fp32, init, bf16_fp32_error):
        """A bf16 layout on n ranks against its serial bf16 run (losses within 1e-3 relative) and: with context
        parallelism, which rounds elsewhere, its update as close to the serial fp32 run's as the serial bf16 run's
        is (within 1.25 times); else its update within 4 ub of the serial bf16 run's. Returns the run folder, or
        None when the run failed."""
        d = out("bf16_" + str(len(check.results)))
        r = mpi(n, [*args, "--out", d], timeout=300)
        if r.returncode != 0:
            check(f"bf16 {title}", False, r.stderr.strip()[-300:])
            return None
        got_l = [s["loss"] for s in records(d, "step")]
        rel = max(abs(x - y) / y for x, y in zip(got_l, ref_losses))
        du = update_difference(d, ref_bf16, init)
        if "--parallel.cp" in args:
            de = update_difference(d, ref_fp32, init)
            check(f"bf16 {title} is serial bf16's function and precision (losses within 1e-3 relative of serial "
                  f"bf16's; the update as close to serial fp32's as serial bf16's, within 1.25 times)",
                  len(got_l) == steps and rel <= 1e-3 and de <= 1.25 * bf16_fp32_error,
                  f"losses {rel:.2e} relative; update {de:.2e} from fp32's against serial bf16's "
                  f"{bf16_fp32_error:.2e} ({du:.2e} from serial bf16's)")
        else:
            check(f"bf16 {title} equals serial bf16 (losses within 1e-3 relative, the update within {4 * ub:.3g} "
                  f"relative)", len(got_l) == steps and rel <= 1e-3 and du <= 4 * ub,
                  f"losses {rel:.2e} relative, update {du:.2e} relative")
        return d

    sp = ["--parallel.tp", "2", "--parallel.sequence_parallel", "true"]
    for n, title, extra in ((2, "dp 2", []), (2, "tp 2", ["--parallel.tp", "2"]),
                            (2, "pp 2 (1f1b, 2 microbatches)", ["--parallel.pp", "2", "--parallel.microbatches", "2"]),
                            (2, "ZeRO-2 on dp 2", ["--parallel.zero", "2"]),
                            (4, "tp 2 x dp 2 with the vocabulary cut", ["--parallel.tp", "2",
                                                                       "--parallel.vocab_parallel", "true"]),
                            (2, "tp 2 + sequence parallelism", sp),
                            (2, "tp 2 + sp, train.recompute full", [*sp, "--train.recompute", "full"]),
                            (4, "tp 2 + sp x pp 2 (zb-h1, 4 microbatches)",
                             [*sp, "--parallel.pp", "2", "--parallel.microbatches", "4", "--parallel.schedule",
                              "zb-h1"]),
                            (2, "cp 2", ["--parallel.cp", "2"]),
                            (4, "cp 2 x tp 2 + sp", ["--parallel.cp", "2", *sp])):
        d = bf16_layout(n, title, [*bf16, *extra], ref_l, out("bf16"), out("serial"), init_w, bf16_error)
        if d and ("--parallel.sequence_parallel" in extra or "--parallel.cp" in extra):  # bf16 gathers; f32 ring
            plan_agrees(check, programs, f"bf16 {title}", n, [*bf16, *extra], d)

    # ---- The llama variant (RoPE at the chunks' positions, grouped-query attention, RMSNorm, SwiGLU) ----
    llama = ["--model.arch", "llama", "--model.n_kv_head", "2"]
    refs = [run([a.serial, "init", *common, *llama, "--out", out("llama_init.bin")]),
            run([a.serial, "train", *common, *llama, "--out", out("llama_fp32")]),
            run([a.serial, "train", *bf16, *llama, "--out", out("llama_bf16")])]
    if any(x.returncode != 0 for x in refs):
        check("llama serial references (init, fp32, bf16)", False, " ".join(x.stderr.strip()[-200:] for x in refs))
    else:
        llama_w0 = floats(load(out("llama_init.bin")).params)
        llama_l = [s["loss"] for s in records(out("llama_bf16"), "step")]
        llama_error = update_difference(out("llama_bf16"), out("llama_fp32"), llama_w0)
        for n, title, extra in ((2, "llama, cp 2", ["--parallel.cp", "2"]), (2, "llama, tp 2 + sp", sp)):
            bf16_layout(n, title, [*bf16, *llama, *extra], llama_l, out("llama_bf16"), out("llama_fp32"), llama_w0,
                        llama_error)

    # ---- A bf16 checkpoint resumes in fp32 (its master weights are fp32) ----
    half = out("bf16_half")
    r = run([a.serial, "train", *bf16, "--train.steps", "5", "--out", half])
    if r.returncode == 0:
        d = out("bf16_then_fp32")
        shutil.copytree(half, d)
        r = run([a.serial, "train", *common, "--out", d, "--resume", os.path.join(d, "checkpoint.bin")])
        got = [s["loss"] for s in records(d, "step")] if r.returncode == 0 else []
        worst = max((abs(x - y) / y for x, y in zip(got, b16)), default=float("inf"))
        check("a bf16 checkpoint at step 5 resumes in fp32, within 1% of the bf16 curve",
              len(got) == steps and worst <= 0.01, f"worst {worst:.2e}; {r.stderr.strip()[-200:]}")
    else:
        check("a bf16 run stops at step 5 with a checkpoint", False, r.stderr.strip()[-300:])

    # ---- Errors ----
    error = refuser(check, programs, a, common, out)
    error("an unknown precision is refused", 1, ["--train.precision", "fp16"], "expected fp32 | bf16", serial=True)
    def activations(stage, *extra):
        r = run([a.serial, "plan", *extra, "--stage", stage])
        return (json.loads(r.stdout)["per_rank"][0]["memory"]["activations_bytes"] if r.returncode == 0 else None), r
    cuda_bf16, r = activations("cuda", *bf16)
    cuda_fp32, _ = activations("cuda", *common)
    serial_bf16, _ = activations("serial", *bf16)
    check("the CUDA stages plan bf16 (products only): fp32 activations there, fewer bytes on the serial stage",
          cuda_bf16 is not None and cuda_bf16 == cuda_fp32 and serial_bf16 is not None and serial_bf16 < cuda_bf16,
          f"cuda bf16 {cuda_bf16}, cuda fp32 {cuda_fp32}, serial bf16 {serial_bf16}; {r.stderr.strip()[-300:]}")

    # ---- The peer report (bench/peers/precision_report.py) ----
    import precision_report  # bench/peers, on the path layout_checks sets
    md = precision_report.render({"rounds": 1, "cpu_bf16": True, "cpu": "X", "blas_core": "K", "torch": "1.13",
                                  "rows": [{"threads": 1, "ours_fp32": 170.0, "ours_bf16": 100.0, "torch_fp32": 240.0,
                                            "torch_bf16": 160.0, "ours_bf16_backend": "cpu (bf16 products)"}]}, "abc")
    check("the peer report's ratios and goals (1.70x met, 2.40x not met, 1.60x met)",
          "| 1.70x | 2.40x | 1.60x |" in md and "1.70x met" in md and "2.40x **not met**" in md
          and "1.60x met" in md and "AVX512-BF16 present" in md and "abc" in md, md)

    shutil.rmtree(t.work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
