// Tokenizer: splitting rules, vocabulary construction and validation,
// encode/decode, and the vocabulary hash stored in checkpoints.
#include "model/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "util/hash.h"
#include "util/text.h"

namespace gpt2 {
namespace {

bool is_alnum(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// The C locale's isspace, spelled out so the rule does not depend on a locale.
bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Calls fn(token, offset) for each token of text in order; offset is the byte
// offset of the token's first byte.
template <typename Fn>
void for_each_token(TokenizerKind kind, std::string_view text, Fn&& fn) {
  const size_t n = text.size();
  if (kind == TokenizerKind::kChar) {
    for (size_t i = 0; i < n; ++i) fn(text.substr(i, 1), i);
    return;
  }
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (is_space(c)) {
      ++i;
    } else if (is_alnum(c)) {
      size_t j = i + 1;
      while (j < n && is_alnum(static_cast<unsigned char>(text[j]))) ++j;
      fn(text.substr(i, j - i), i);
      i = j;
    } else {
      fn(text.substr(i, 1), i);
      ++i;
    }
  }
}

// A token as it should appear in a one-line message: control and non-ASCII
// bytes escaped, and at most util/text.h's excerpt of it (a word token can be
// a 10 MB run of letters; a vocabulary entry any bytes at all).
std::string printable(std::string_view s) { return excerpt(s); }

bool is_punctuation(const std::string& tok) {
  return tok.size() == 1 && !is_alnum(static_cast<unsigned char>(tok[0]));
}

void fnv1a(uint64_t& h, std::string_view bytes) { h = fnv1a64(bytes.data(), bytes.size(), h); }

}  // namespace

std::string to_string(TokenizerKind kind) {
  return kind == TokenizerKind::kWord ? "word" : kind == TokenizerKind::kChar ? "char" : "gpt2";
}

TokenizerKind parse_tokenizer_kind(const std::string& name) {
  if (name == "word") return TokenizerKind::kWord;
  if (name == "char") return TokenizerKind::kChar;
  if (name == "gpt2") return TokenizerKind::kGpt2;
  throw std::invalid_argument(
      fmt::format("data.tokenizer: expected 'word', 'char' or 'gpt2', got '{}'", excerpt(name)));
}

Tokenizer::Tokenizer(TokenizerKind kind, std::vector<std::string> vocab)
    : kind_(kind), vocab_(std::move(vocab)) {
  byte_ids_.fill(-1);
  ids_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    ids_.emplace(vocab_[i], id);
    if (vocab_[i].size() == 1) byte_ids_[static_cast<unsigned char>(vocab_[i][0])] = id;
    longest_ = std::max(longest_, vocab_[i].size());
  }
  if (kind_ == TokenizerKind::kChar) longest_ = 1;  // every byte its own token ("[EOS]" is never encoded from text)
}

size_t Tokenizer::min_tokens(std::string_view text) const {
  size_t covered = text.size();
  if (kind_ == TokenizerKind::kWord) {
    covered = static_cast<size_t>(
        std::count_if(text.begin(), text.end(), [](char c) { return !is_space(static_cast<unsigned char>(c)); }));
  }
  return (covered + longest_ - 1) / longest_;
}

Tokenizer::Tokenizer() : Tokenizer(TokenizerKind::kWord, {kEosToken}) {}

Tokenizer Tokenizer::build(TokenizerKind kind, std::string_view corpus) {
  if (kind == TokenizerKind::kGpt2) {
    throw std::invalid_argument("data.tokenizer gpt2: its vocabulary comes from data.encoder_json and data.vocab_bpe, "
                                "not from the corpus");
  }
  std::vector<std::string> vocab;
  std::unordered_map<std::string_view, int32_t> seen;
  for_each_token(kind, corpus, [&](std::string_view tok, size_t) {
    if (seen.emplace(tok, static_cast<int32_t>(vocab.size())).second) vocab.emplace_back(tok);
  });
  vocab.emplace_back(kEosToken);
  return Tokenizer(kind, std::move(vocab));
}

Tokenizer Tokenizer::gpt2(BpeTokenizer bpe) {
  if (bpe.eot_id() != bpe.size() - 1) {
    throw std::invalid_argument(fmt::format("GPT-2 tokenizer: {} is id {}, not the last of {} (id {})", kGpt2EotToken,
                                            bpe.eot_id(), bpe.size(), bpe.size() - 1));
  }
  std::vector<std::string> vocab(static_cast<size_t>(bpe.size()));
  for (int32_t i = 0; i < bpe.size(); ++i) vocab[static_cast<size_t>(i)] = bpe.token(i);
  Tokenizer t(TokenizerKind::kGpt2, std::move(vocab));
  t.bpe_ = std::make_shared<BpeTokenizer>(std::move(bpe));
  return t;
}

Tokenizer Tokenizer::from_vocab(TokenizerKind kind, std::vector<std::string> vocab) {
  if (kind == TokenizerKind::kGpt2) {
    if (vocab.empty() || vocab.back() != kGpt2EotToken) {
      throw std::invalid_argument(fmt::format("tokenizer vocabulary: a gpt2 vocabulary ends with '{}'", kGpt2EotToken));
    }
    const auto eot = static_cast<int32_t>(vocab.size()) - 1;
    return gpt2(BpeTokenizer::from_tokens(std::move(vocab), eot, "tokenizer vocabulary"));
  }
  if (vocab.empty()) {
    throw std::invalid_argument(
        fmt::format("tokenizer vocabulary: empty, expected at least '{}'", kEosToken));
  }
  if (vocab.back() != kEosToken) {
    throw std::invalid_argument(
        fmt::format("tokenizer vocabulary: last entry must be '{}', got '{}'", kEosToken,
                    printable(vocab.back())));
  }
  std::unordered_map<std::string_view, size_t> seen;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const std::string& tok = vocab[i];
    auto [it, inserted] = seen.emplace(tok, i);
    if (!inserted) {
      throw std::invalid_argument(
          fmt::format("tokenizer vocabulary: entry '{}' appears twice (ids {} and {})",
                      printable(tok), it->second, i));
    }
    if (i + 1 < vocab.size() && tok.empty()) {
      throw std::invalid_argument(fmt::format("tokenizer vocabulary: entry {} is empty", i));
    }
    if (kind == TokenizerKind::kChar && i + 1 < vocab.size() && tok.size() != 1) {
      throw std::invalid_argument(fmt::format(
          "tokenizer vocabulary: char entry {} must be one byte, got '{}'", i, printable(tok)));
    }
  }
  return Tokenizer(kind, std::move(vocab));
}

const std::string& Tokenizer::token(int32_t id) const {
  if (id < 0 || id >= size()) {
    throw std::out_of_range(
        fmt::format("token id {} is out of range for a vocabulary of {} tokens", id, size()));
  }
  return vocab_[static_cast<size_t>(id)];
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, std::string_view source) const {
  std::vector<int32_t> ids;
  if (bpe_) {
    bpe_->encode(text, ids);
    return ids;
  }
  // Word tokens average several bytes; char tokens are one byte each.
  ids.reserve(kind_ == TokenizerKind::kChar ? text.size() : text.size() / 4 + 1);
  for_each_token(kind_, text, [&](std::string_view tok, size_t offset) {
    int32_t id = -1;
    if (tok.size() == 1) {
      id = byte_ids_[static_cast<unsigned char>(tok[0])];
    } else if (auto it = ids_.find(tok); it != ids_.end()) {
      id = it->second;
    }
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
    // Only on error: find the 1-based line and byte column of the token.
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    throw std::invalid_argument(
        fmt::format("{}:{}:{}: token '{}' is not in the vocabulary ({} tokens)", source, line,
                    offset - line_start + 1, printable(tok), size()));
  });
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += piece(ids[i], i);
  return out;
}

std::string Tokenizer::piece(int32_t id, size_t index) const {
  const std::string& tok = token(id);
  return kind_ == TokenizerKind::kWord && index > 0 && !is_punctuation(tok) ? " " + tok : tok;
}

uint64_t Tokenizer::vocab_hash() const {
  uint64_t h = kFnvOffsetBasis;
  fnv1a(h, to_string(kind_));
  fnv1a(h, std::string_view("\0", 1));
  for (const std::string& tok : vocab_) {
    const auto len = static_cast<uint32_t>(tok.size());
    const char len_bytes[4] = {static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff),
                               static_cast<char>((len >> 16) & 0xff),
                               static_cast<char>((len >> 24) & 0xff)};
    fnv1a(h, std::string_view(len_bytes, 4));
    fnv1a(h, tok);
  }
  return h;
}

std::vector<int32_t> tokenize_corpus(const Tokenizer& tok, std::string_view corpus,
                                     std::string_view source) {
  std::vector<int32_t> ids = tok.encode(corpus, source);
  ids.push_back(tok.eos_id());
  return ids;
}

}  // namespace gpt2
