// The JavaScript peers of our GPT-2 BPE (docs/tokenizer.md): tiktoken's
// gpt2 encoding (OpenAI's Rust core as WebAssembly) and gpt-3-encoder (a
// plain JavaScript port of OpenAI's encoder.py), timed on one file in this
// process after loading: the median of ROUNDS encodes, as MB/s (10^6 bytes).
// gpt-3-encoder is far slower (minutes for megabytes): it encodes the file's
// first JS_BYTES bytes (default 262144, cut at a line end) once.
//   node tokenizer_bench.cjs NODE_MODULES FILE [ROUNDS] [JS_BYTES]
const path = require("path");
const fs = require("fs");
const [modulesArg, file, roundsArg, jsBytesArg] = process.argv.slice(2);
const modules = path.resolve(modulesArg);
const rounds = Number(roundsArg || 3);
const text = fs.readFileSync(file, "utf8");
const bytes = Buffer.byteLength(text, "utf8");
function median(xs) { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; }
function time(encode, input, times) {
  const t = [];
  let n = 0;
  for (let r = 0; r < times; ++r) {
    const t0 = process.hrtime.bigint();
    n = encode(input).length;
    t.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const b = Buffer.byteLength(input, "utf8");
  return { bytes: b, seconds: median(t), tokens: n, mb_per_s: b / median(t) / 1e6 };
}
const { get_encoding } = require(path.join(modules, "tiktoken"));
const enc = get_encoding("gpt2");
const tiktoken = time((s) => enc.encode_ordinary(s), text, rounds);
enc.free();
const gpt3 = require(path.join(modules, "gpt-3-encoder"));
const cut = Buffer.from(text, "utf8").subarray(0, Number(jsBytesArg || 262144)).toString("utf8");
const js = time((s) => gpt3.encode(s), cut.slice(0, cut.lastIndexOf("\n") + 1), 1);
console.log(JSON.stringify({ bytes, tiktoken, "gpt-3-encoder": js }));
