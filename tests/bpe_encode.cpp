// bpe_encode: GPT-2's BPE (model/bpe.h) over a file, for bpe_test.py and by
// hand. Writes the ids as little-endian uint32 (--out), checks that decoding
// them gives the file's bytes back, and prints the count and the time.
// --documents N cuts the file into N documents (at the first newline after
// each N-th of its bytes), each encoded alone, on --threads T threads.
//   bpe_encode --encoder encoder.json --vocab vocab.bpe --in FILE [--out IDS] [--documents N] [--threads T]
// Exit 0; 1 when decode(encode(text)) differs from the text; 2 on bad input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "model/bpe.h"
#include "train/data/corpus.h"

int main(int argc, char** argv) {
  std::string encoder, vocab, in, out;
  int documents = 1, threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") {
      std::puts("usage: bpe_encode --encoder encoder.json --vocab vocab.bpe --in FILE [--out IDS] [--documents N] "
                "[--threads T]");
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
    else if (a == "--documents" || a == "--threads") {
      int& n = a == "--documents" ? documents : threads;
      try {
        n = std::stoi(v);
      } catch (const std::exception&) {
        n = 0;
      }
      if (n < 1) {
        std::fprintf(stderr, "bpe_encode: error: %s must be a whole number >= 1, got '%s'\n", a.c_str(), v.c_str());
        return 2;
      }
    } else {
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
    // The documents: [cut i, cut i + 1), each cut at the first newline after i / N of the text.
    std::vector<std::string_view> docs;
    size_t begin = 0;
    for (int d = 1; d <= documents; ++d) {
      size_t end = d == documents ? text.size() : text.find('\n', text.size() / documents * d);
      end = end == std::string::npos ? text.size() : std::max(begin, end);
      docs.emplace_back(text.data() + begin, end - begin);
      begin = end;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids;
    if (documents == 1 && threads == 1) {
      ids = tok.encode(text);
    } else {
      for (const std::vector<int32_t>& d : gpt2::encode_documents(tok, docs, threads)) {
        ids.insert(ids.end(), d.begin(), d.end());
      }
    }
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
