// GPT-2's byte-level BPE (issue 32; DESIGN.md "Data and formats"): the
// tokenizer of GPT-2 and of tiktoken's `gpt2` encoding, from the two files
// OpenAI published with the model:
//   encoder.json  token -> id, each token's bytes written as printable
//                 characters (bytes_to_unicode: the printable Latin-1 bytes
//                 as themselves, the other 68 bytes as U+0100..U+0143);
//                 50,257 entries, <|endoftext|> = 50256;
//   vocab.bpe     the merges in rank order ("#version" line, then "a b").
//
// Encoding (tiktoken's encode_ordinary, exactly):
//  1. The text is cut into pieces by GPT-2's pre-tokenizing pattern
//       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//     (PCRE2, UTF and Unicode properties, JIT). \s is Unicode's White_Space,
//     as tiktoken's Rust pattern has it, spelt out: PCRE2's own \s lacks
//     U+0085 and counts U+180E.
//  2. Each piece's bytes are merged pairwise, lowest rank first, where a
//     byte string's rank is its id (GPT-2's ids are the merge order: checked
//     at load, merge k makes id 256 + k); the final parts are the ids.
//  Pieces repeat (words), so a piece's ids are cached.
// Bytes that are not UTF-8 match no part of the pattern; each maximal run
// of them is a piece of its own, merged as bytes (decode gives them back).
// <|endoftext|> in the text is ordinary text here; the training stream adds
// the id itself.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpt2 {

class BpeTokenizer {
 public:
  // From both files' contents (train/data/corpus.h's load_bpe_tokenizer reads
  // them); throws std::invalid_argument naming the file (`encoder_name`,
  // `vocab_name`) and the line or entry for malformed JSON, a token whose
  // characters are not bytes_to_unicode's, or merges out of GPT-2's order.
  static BpeTokenizer from_text(std::string_view encoder_json, std::string_view vocab_bpe,
                                const std::string& encoder_name, const std::string& vocab_name);
  // From the tokens' bytes in id order (what a checkpoint keeps: GPT-2's
  // ranks are its ids, so the list is the whole tokenizer), `eot` the id of
  // <|endoftext|>. Throws std::invalid_argument naming `source` for a
  // repeated token or a byte with no token of its own.
  static BpeTokenizer from_tokens(std::vector<std::string> tokens, int32_t eot, const std::string& source);
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  int size() const { return static_cast<int>(vocab_->tokens.size()); }  // 50,257 for GPT-2
  int32_t eot_id() const { return vocab_->eot; }                         // <|endoftext|>, -1 if absent
  // A token's bytes (<|endoftext|> as its text); std::out_of_range otherwise.
  const std::string& token(int32_t id) const;

  // Appends the ids of `text` to `out`. Not thread-safe (the piece cache):
  // one tokenizer per thread.
  void encode(std::string_view text, std::vector<int32_t>& out);
  std::vector<int32_t> encode(std::string_view text) {
    std::vector<int32_t> out;
    encode(text, out);
    return out;
  }
  // The bytes of the ids, concatenated; an id out of range throws
  // std::out_of_range naming it.
  std::string decode(std::span<const int32_t> ids) const;
  // Another tokenizer on the same (immutable, shared) vocabulary, with its
  // own pattern match data and an empty cache: one per thread
  // (train/data/corpus.h, encode_documents).
  BpeTokenizer clone() const;

 private:
  BpeTokenizer();
  void encode_piece(std::string_view piece, std::vector<int32_t>& out);
  int32_t rank(std::string_view bytes) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Vocab {
    std::vector<std::string> tokens;  // id -> bytes
    std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids;  // bytes -> id (= rank)
    int32_t eot = -1;
  };
  std::shared_ptr<const Vocab> vocab_;  // shared by clones: never changed after loading
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
  struct Regex;  // PCRE2's compiled pattern and match data
  std::unique_ptr<Regex> re_;
  std::vector<size_t> starts_;  // encode_piece's scratch: the parts' start offsets
  std::vector<int32_t> ranks_;  // and each adjacent pair's rank
};

}  // namespace gpt2
