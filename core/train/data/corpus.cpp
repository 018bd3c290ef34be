#include "train/data/corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "util/files.h"
#include "util/hash.h"

namespace gpt2 {

namespace fs = std::filesystem;

std::string read_corpus(const std::string& path) {
  if (path.empty()) throw std::invalid_argument("data.corpus: no corpus file given");
  // The whole corpus is held in memory (and tokenized there): a larger file
  // is more likely a mistake than a corpus for this engine. Its kind and size
  // are checked before anything is read: a device (/dev/zero) or a FIFO never ends.
  std::string text = read_input_file(path, kMaxCorpusBytes, "data.corpus", "a text corpus");
  if (text.find_first_not_of(" \t\r\n\v\f") == std::string::npos) {
    throw std::invalid_argument(fmt::format("data.corpus: '{}' is empty", path));
  }
  return text;
}

Corpus load_corpus(const DataConfig& d, const Tokenizer* vocabulary, Communicator& comm) {
  Corpus out;
  const bool shards = !d.shards.empty();
  std::optional<TokenizerFiles> tokenizer_files;  // rank 0, with shards: the files the ids are checked against
  if (comm.rank() == 0) {
    const std::string text = shards ? std::string() : read_corpus(d.corpus);
    if (vocabulary != nullptr) {
      out.tok = *vocabulary;
    } else if (d.tokenizer == TokenizerKind::kGpt2) {
      if (d.encoder_json.empty() || d.vocab_bpe.empty()) {
        throw std::invalid_argument(fmt::format("data.{}: data.tokenizer gpt2 needs GPT-2's encoder.json and vocab.bpe "
                                                "(data.encoder_json, data.vocab_bpe; docs/tokenizer.md)",
                                                d.encoder_json.empty() ? "encoder_json" : "vocab_bpe"));
      }
      TokenizerFiles files;
      out.tok = Tokenizer::gpt2(load_bpe_tokenizer(d.encoder_json, d.vocab_bpe, &files));
      if (shards) tokenizer_files = files;
    } else {
      out.tok = Tokenizer::build(d.tokenizer, text);
    }
    if (!shards) out.tokens = tokenize_corpus(out.tok, text, d.corpus);
  }
  if (comm.size() > 1) {
    std::vector<std::string> vocab = out.tok.vocab();
    broadcast_strings(comm, vocab, 0);
    if (!shards) broadcast_ints(comm, out.tokens, 0);
    if (comm.rank() != 0) out.tok = Tokenizer::from_vocab(d.tokenizer, std::move(vocab));
  }
  if (shards) {
    out.shards = open_shards(d.shards, out.tok.size(), tokenizer_files);
    out.split = Split{out.shards->train, out.shards->val};
  } else {
    out.split = split_tokens(std::span<const int32_t>(out.tokens), d.val_fraction);
  }
  return out;
}

uint64_t Corpus::hash() const { return split.val.hash(split.train.hash()); }

BpeTokenizer load_bpe_tokenizer(const std::string& encoder_json, const std::string& vocab_bpe, TokenizerFiles* files) {
  constexpr uint64_t kMaxBytes = uint64_t{64} << 20;  // GPT-2's are 1.0 MB and 0.46 MB
  const std::string enc = read_input_file(encoder_json, kMaxBytes, "encoder.json", "GPT-2's token -> id JSON");
  const std::string merges = read_input_file(vocab_bpe, kMaxBytes, "vocab.bpe", "GPT-2's merges");
  if (files != nullptr) *files = {fnv1a64(enc.data(), enc.size()), fnv1a64(merges.data(), merges.size())};
  return BpeTokenizer::from_text(enc, merges, encoder_json, vocab_bpe);
}

std::vector<std::vector<int32_t>> encode_documents(const BpeTokenizer& tok, std::span<const std::string_view> docs,
                                                   int threads) {
  if (threads < 1) throw std::invalid_argument(fmt::format("encode_documents: {} threads", threads));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(docs.size(), 1)));
  std::vector<std::vector<int32_t>> out(docs.size());
  std::atomic<size_t> next{0};  // documents are taken in turn: long and short ones share the threads
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  const auto work = [&](size_t t) {
    try {
      BpeTokenizer mine = tok.clone();
      for (size_t d = next++; d < docs.size(); d = next++) mine.encode(docs[d], out[d]);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < static_cast<size_t>(threads); ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return out;
}

}  // namespace gpt2
