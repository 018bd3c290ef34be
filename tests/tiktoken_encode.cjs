// tiktoken's `gpt2` encoding (the npm package: OpenAI's Rust core as
// WebAssembly) over a UTF-8 file: encode_ordinary's ids as little-endian
// uint32 into OUT. The reference of bpe_test.py.
//   node tiktoken_encode.cjs NODE_MODULES IN OUT
const path = require("path");
const fs = require("fs");
const [modules, input, output] = process.argv.slice(2);
const { get_encoding } = require(path.join(modules, "tiktoken"));
const enc = get_encoding("gpt2");
const ids = enc.encode_ordinary(fs.readFileSync(input, "utf8"));
fs.writeFileSync(output, Buffer.from(new Uint32Array(ids).buffer));
enc.free();
