// Tokenizers: text <-> token ids, word-level (the reproduced project's) and
// char/byte-level, and GPT-2's byte-level BPE (model/bpe.h). A Tokenizer is a
// fixed vocabulary plus a splitting rule; it never grows after construction,
// so a word or char token missing from the vocabulary is an error, not a new
// id (BPE encodes every byte string).
//
//  * kWord: each maximal run of ASCII letters/digits [A-Za-z0-9] is one token;
//    every other non-whitespace byte (punctuation, any byte of a non-ASCII
//    UTF-8 sequence) is a token of its own; whitespace (space, \t, \n, \r, \v,
//    \f) is dropped; case is kept. "don't" -> don ' t.
//  * kChar: every byte, whitespace included, is a token.
//  * kGpt2: GPT-2's BPE, exactly tiktoken's `gpt2` encoding (model/bpe.h);
//    the vocabulary is the tokens' bytes in id order, "<|endoftext|>" last
//    (id 50256), which is the whole tokenizer (its ranks are its ids), so a
//    checkpoint that keeps the vocabulary keeps the tokenizer.
//
// The word/char vocabulary built from a corpus lists tokens in order of first
// occurrence, then "[EOS]" last (id V-1), as the reproduced project did.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <memory>
#include <vector>

#include "model/bpe.h"

namespace gpt2 {

enum class TokenizerKind { kWord, kChar, kGpt2 };

std::string to_string(TokenizerKind kind);  // "word" | "char" | "gpt2"
// Throws std::invalid_argument naming data.tokenizer and the bad name.
TokenizerKind parse_tokenizer_kind(const std::string& name);
inline void from_string(const std::string& name, TokenizerKind& kind) { kind = parse_tokenizer_kind(name); }

inline constexpr const char* kEosToken = "[EOS]";
inline constexpr const char* kGpt2EotToken = "<|endoftext|>";

class Tokenizer {
 public:
  // A word tokenizer whose vocabulary is only "[EOS]": a valid placeholder
  // (e.g. a struct member assigned later), not for training.
  Tokenizer();
  // Vocabulary from a corpus: tokens in order of first occurrence, then
  // "[EOS]" last (id size()-1).
  // kGpt2 has no corpus-built vocabulary: std::invalid_argument (gpt2()).
  static Tokenizer build(TokenizerKind kind, std::string_view corpus);
  // GPT-2's BPE (its files: train/data/corpus.h, load_bpe_tokenizer).
  static Tokenizer gpt2(BpeTokenizer bpe);
  // A fixed vocabulary (e.g. read from a checkpoint). Must be non-empty, with
  // unique entries and "[EOS]" last; a char vocabulary's other entries must be
  // single bytes; a gpt2 vocabulary ends with "<|endoftext|>" and holds every
  // byte. Otherwise std::invalid_argument.
  static Tokenizer from_vocab(TokenizerKind kind, std::vector<std::string> vocab);

  TokenizerKind kind() const { return kind_; }
  const std::vector<std::string>& vocab() const { return vocab_; }
  int size() const { return static_cast<int>(vocab_.size()); }
  int32_t eos_id() const { return static_cast<int32_t>(vocab_.size()) - 1; }
  // Throws std::out_of_range naming the id and the vocabulary size.
  const std::string& token(int32_t id) const;

  // Splits text and maps each token to its id. A token not in the vocabulary
  // throws std::invalid_argument
  //   "<source>:<line>:<col>: token 'xyz' is not in the vocabulary (N tokens)"
  // with 1-based line and byte column of the token's first byte.
  std::vector<int32_t> encode(std::string_view text, std::string_view source = "<text>") const;
  // At least how many tokens encode(text) gives, from its bytes alone, in one
  // pass and without encoding: each token covers at most the vocabulary's
  // longest entry's bytes (a word tokenizer's whitespace covers none). What
  // a text that must fit a budget of tokens is checked by first, so that an
  // oversized one costs no encoding (BPE's time grows faster than a word's
  // length).
  size_t min_tokens(std::string_view text) const;
  // kWord: tokens joined by one space, except no space at the start and none
  // before a punctuation token (a single byte that is not an ASCII letter or
  // digit). kChar and kGpt2: plain concatenation of the tokens' bytes.
  std::string decode(std::span<const int32_t> ids) const;
  // Token `id`'s text as decode() joins it at position `index` of a
  // sequence: decode(ids) is the concatenation of piece(ids[i], i).
  std::string piece(int32_t id, size_t index) const;

  // FNV-1a 64 over the kind's name, a 0 byte, then every entry as its length
  // (4 bytes, little-endian) followed by its bytes. The length prefix is the
  // separator: it stays unambiguous even for a char vocabulary holding '\0'.
  uint64_t vocab_hash() const;

 private:
  // Heterogeneous lookup: encode probes with string_views into the text and
  // allocates nothing per token.
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  Tokenizer(TokenizerKind kind, std::vector<std::string> vocab);

  TokenizerKind kind_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  size_t longest_ = 1;                 // the longest entry's bytes
  std::array<int32_t, 256> byte_ids_;  // id of each single-byte token, -1 if absent
  // kGpt2's encoder (its piece cache changes under encode: one Tokenizer per thread).
  std::shared_ptr<BpeTokenizer> bpe_;
};

// The training stream: encode(corpus) followed by one [EOS] id, as the
// reproduced project appended it.
std::vector<int32_t> tokenize_corpus(const Tokenizer& tok, std::string_view corpus,
                                     std::string_view source);

}  // namespace gpt2
