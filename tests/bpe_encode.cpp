// bpe_encode: GPT-2's BPE (model/bpe.h) over a file, for bpe_test.py and by
// hand. Writes the ids as little-endian uint32 (--out), checks that decoding
// them gives the file's bytes back, and prints the count and the time.
//   bpe_encode --encoder encoder.json --vocab vocab.bpe --in FILE [--out IDS]
// Exit 0; 1 when decode(encode(text)) differs from the text; 2 on bad input.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "model/bpe.h"
#include "train/corpus.h"

int main(int argc, char** argv) {
  std::string encoder, vocab, in, out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") {
      std::puts("usage: bpe_encode --encoder encoder.json --vocab vocab.bpe --in FILE [--out IDS]");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bpe_encode: error: %s needs a value\n", a.c_str());
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--encoder") encoder = v;
    else if (a == "--vocab") vocab = v;
    else if (a == "--in") in = v;
    else if (a == "--out") out = v;
    else {
      std::fprintf(stderr, "bpe_encode: error: unknown option %s (see --help)\n", a.c_str());
      return 2;
    }
  }
  if (encoder.empty() || vocab.empty() || in.empty()) {
    std::fprintf(stderr, "bpe_encode: error: --encoder, --vocab and --in are required (see --help)\n");
    return 2;
  }
  try {
    gpt2::BpeTokenizer tok = gpt2::load_bpe_tokenizer(encoder, vocab);
    std::ifstream f(in, std::ios::binary);
    if (!f) throw std::invalid_argument("--in '" + in + "': cannot open it");
    std::ostringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = tok.encode(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out.empty()) {
      std::ofstream o(out, std::ios::binary);
      for (int32_t id : ids) {
        const uint32_t u = static_cast<uint32_t>(id);
        const unsigned char b[4] = {static_cast<unsigned char>(u), static_cast<unsigned char>(u >> 8),
                                    static_cast<unsigned char>(u >> 16), static_cast<unsigned char>(u >> 24)};
        o.write(reinterpret_cast<const char*>(b), 4);
      }
      if (!o) throw std::runtime_error("--out '" + out + "': cannot write it");
    }
    const bool same = tok.decode(ids) == text;
    std::printf("%zu bytes -> %zu tokens in %.3f s (%.2f MB/s); decode gives the text back: %s\n", text.size(),
                ids.size(), s, s > 0 ? static_cast<double>(text.size()) / s / 1e6 : 0.0, same ? "yes" : "NO");
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bpe_encode: error: %s\n", e.what());
    return 2;
  }
}
