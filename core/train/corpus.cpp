#include "train/corpus.h"

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

// The whole corpus is held in memory (and tokenized there): a larger file is
// more likely a mistake than a corpus for this engine.
constexpr uintmax_t kMaxCorpusBytes = uintmax_t{1} << 30;

}  // namespace

std::string read_corpus(const std::string& path) {
  if (path.empty()) throw std::invalid_argument("data.corpus: no corpus file given");
  // Checked before reading: a device (/dev/zero) or a FIFO never ends, and
  // reading it would end in bad_alloc rather than an error naming the file.
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    throw std::invalid_argument(fmt::format("data.corpus: '{}' is {}, expected a regular file", path,
                                            fs::is_directory(st) ? "a directory" : "not a regular file"));
  }
  if (fs::exists(st)) {
    const uintmax_t size = fs::file_size(path, ec);
    if (!ec && size > kMaxCorpusBytes) {
      throw std::invalid_argument(
          fmt::format("data.corpus: '{}' is {} bytes, above the limit of 1 GiB ({} bytes)", path, size, kMaxCorpusBytes));
    }
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    throw std::invalid_argument(fmt::format("data.corpus: cannot read '{}': {}", path,
                                            fs::exists(path) ? "not a readable file" : "no such file"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (text.find_first_not_of(" \t\r\n\v\f") == std::string::npos) {
    throw std::invalid_argument(fmt::format("data.corpus: '{}' is empty", path));
  }
  return text;
}

Corpus load_corpus(const std::string& path, TokenizerKind kind, const Tokenizer* vocabulary, Communicator& comm) {
  Corpus out;
  if (comm.rank() == 0) {
    const std::string text = read_corpus(path);
    out.tok = vocabulary ? *vocabulary : Tokenizer::build(kind, text);
    out.tokens = tokenize_corpus(out.tok, text, path);
  }
  if (comm.size() > 1) {
    std::vector<std::string> vocab = out.tok.vocab();
    broadcast_strings(comm, vocab, 0);
    broadcast_ints(comm, out.tokens, 0);
    out.tok = Tokenizer::from_vocab(kind, std::move(vocab));
  }
  return out;
}

}  // namespace gpt2
