#include "model/bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
constexpr size_t kCacheLimit = size_t{1} << 20;  // pieces cached before the cache starts afresh

// GPT-2's pre-tokenizer (bpe.h), \s spelt out as Unicode's White_Space
// (tiktoken's, Rust's \s): PCRE2's \s lacks U+0085 and counts U+180E.
#define GPT2_WS R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"
constexpr const char* kPattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" GPT2_WS R"(\p{L}\p{N}]+|[)" GPT2_WS
                                 R"(]+(?![^)" GPT2_WS R"(])|[)" GPT2_WS R"(]+)";
#undef GPT2_WS

// bytes_to_unicode: byte -> the code point that stands for it in encoder.json and vocab.bpe.
std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cp{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[static_cast<size_t>(b)] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[static_cast<size_t>(b)] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[static_cast<size_t>(b)] = true;
  uint32_t next = 256;
  for (size_t b = 0; b < 256; ++b) cp[b] = printable[b] ? static_cast<uint32_t>(b) : next++;
  return cp;
}

// The bytes a printable spelling stands for; false if a character is not one of bytes_to_unicode's.
bool spelled_bytes(std::string_view s, const std::unordered_map<uint32_t, char>& byte_of, std::string& out) {
  out.clear();
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    int len = 0;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c >> 5) == 0x6 && i + 1 < s.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
      len = 2;
    } else {
      return false;  // bytes_to_unicode's code points are all below U+0800
    }
    const auto it = byte_of.find(cp);
    if (it == byte_of.end()) return false;
    out.push_back(it->second);
    i += static_cast<size_t>(len);
  }
  return !out.empty();
}

// An encoder.json value as an error quotes it: a number as written, a string
// as a short excerpt, anything else by its kind (an array or object can be
// megabytes long; it is never written out whole).
std::string value_text(const nlohmann::json& value) {
  if (value.is_number() || value.is_boolean() || value.is_null()) return value.dump();
  if (value.is_string()) return "'" + excerpt(value.get_ref<const std::string&>()) + "'";
  return fmt::format("an {} of {} elements", value.type_name(), value.size());
}

}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  bool jit = false;
  Regex() {
    int err = 0;
    PCRE2_SIZE at = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(err, msg.data(), msg.size());
      throw std::logic_error(fmt::format("the GPT-2 pattern does not compile at {}: {}", at,
                                         reinterpret_cast<const char*>(msg.data())));
    }
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    match = pcre2_match_data_create_from_pattern(code, nullptr);
  }
  ~Regex() {
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // The next match in text from `pos`: [begin, end), or false.
  bool next(std::string_view text, size_t pos, size_t& begin, size_t& end) {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const int rc = jit ? pcre2_jit_match(code, subject, text.size(), pos, 0, match, nullptr)
                       : pcre2_match(code, subject, text.size(), pos, 0, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) throw std::runtime_error(fmt::format("the GPT-2 pattern failed at byte {} (PCRE2 error {})", pos, rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    begin = ov[0];
    end = ov[1];
    return true;
  }
};

BpeTokenizer::BpeTokenizer() : re_(std::make_unique<Regex>()) {}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

BpeTokenizer BpeTokenizer::from_text(std::string_view encoder_text, std::string_view vocab_text,
                                     const std::string& encoder_json, const std::string& vocab_bpe) {
  BpeTokenizer t;
  auto v = std::make_shared<Vocab>();
  const std::array<uint32_t, 256> cp = byte_code_points();
  std::unordered_map<uint32_t, char> byte_of;
  for (size_t b = 0; b < 256; ++b) byte_of[cp[b]] = static_cast<char>(b);

  // GPT-2's file nests one level; a deeply nested value would overflow the
  // stack where it is written out or compared (util/json.h).
  if (json_nesting(encoder_text) > kMaxJsonDepth) {
    throw std::invalid_argument(fmt::format("encoder.json '{}': arrays and objects nested deeper than {} levels; "
                                            "expected a JSON object of token -> id", encoder_json, kMaxJsonDepth));
  }
  const nlohmann::json enc = nlohmann::json::parse(encoder_text, nullptr, false);
  if (!enc.is_object() || enc.empty()) {
    throw std::invalid_argument(fmt::format("encoder.json '{}': not a JSON object of token -> id", encoder_json));
  }
  v->tokens.assign(enc.size(), std::string());
  std::vector<bool> seen(enc.size(), false);
  std::string bytes;
  for (const auto& [key, value] : enc.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= static_cast<int64_t>(enc.size())) {
      throw std::invalid_argument(fmt::format("encoder.json '{}': entry '{}' has id {}, not one of 0..{}", encoder_json,
                                              excerpt(key), value_text(value), enc.size() - 1));
    }
    const auto id = value.get<int32_t>();
    if (seen[static_cast<size_t>(id)]) {
      throw std::invalid_argument(fmt::format("encoder.json '{}': id {} appears twice", encoder_json, id));
    }
    seen[static_cast<size_t>(id)] = true;
    if (key == "<|endoftext|>") {
      v->eot = id;
      v->tokens[static_cast<size_t>(id)] = key;
      continue;
    }
    if (!spelled_bytes(key, byte_of, bytes)) {
      throw std::invalid_argument(fmt::format("encoder.json '{}': entry {} ('{}') is not spelt in GPT-2's byte "
                                              "characters", encoder_json, id, excerpt(key)));
    }
    v->tokens[static_cast<size_t>(id)] = bytes;
    v->ids.emplace(bytes, id);
  }
  // The merges: line k + 1 joins two tokens into the one whose id must be 256 + k (rank = id).
  std::istringstream merges{std::string(vocab_text)};
  std::string line, a, b;
  size_t lineno = 0, k = 0;
  while (std::getline(merges, line)) {
    ++lineno;
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || !spelled_bytes(std::string_view(line).substr(0, space), byte_of, a) ||
        !spelled_bytes(std::string_view(line).substr(space + 1), byte_of, b)) {
      throw std::invalid_argument(fmt::format("vocab.bpe '{}':{}: not a merge of two tokens: '{}'", vocab_bpe, lineno,
                                              excerpt(line)));
    }
    const auto it = v->ids.find(a + b);
    if (it == v->ids.end() || it->second != static_cast<int32_t>(256 + k)) {
      throw std::invalid_argument(fmt::format(
          "vocab.bpe '{}':{}: merge {} makes {} in encoder.json, not id {}: the files are not a GPT-2 pair",
          vocab_bpe, lineno, k, it == v->ids.end() ? std::string("no token") : fmt::format("id {}", it->second),
          256 + k));
    }
    ++k;
  }
  if (k == 0) throw std::invalid_argument(fmt::format("vocab.bpe '{}': no merges", vocab_bpe));
  for (size_t b0 = 0; b0 < 256; ++b0) {
    if (!v->ids.contains(std::string(1, static_cast<char>(b0)))) {
      throw std::invalid_argument(fmt::format("encoder.json '{}': byte {} has no token", encoder_json, b0));
    }
  }
  t.vocab_ = std::move(v);
  return t;
}

BpeTokenizer BpeTokenizer::from_tokens(std::vector<std::string> tokens, int32_t eot, const std::string& source) {
  BpeTokenizer t;
  auto v = std::make_shared<Vocab>();
  if (eot < -1 || eot >= static_cast<int32_t>(tokens.size())) {
    throw std::invalid_argument(fmt::format("{}: <|endoftext|> id {} outside {} tokens", source, eot, tokens.size()));
  }
  v->tokens = std::move(tokens);
  v->eot = eot;
  v->ids.reserve(v->tokens.size());
  for (size_t i = 0; i < v->tokens.size(); ++i) {
    if (static_cast<int32_t>(i) == eot) continue;
    if (!v->ids.emplace(v->tokens[i], static_cast<int32_t>(i)).second) {
      throw std::invalid_argument(fmt::format("{}: BPE token {} repeats an earlier one", source, i));
    }
  }
  for (size_t b0 = 0; b0 < 256; ++b0) {
    if (!v->ids.contains(std::string(1, static_cast<char>(b0)))) {
      throw std::invalid_argument(fmt::format("{}: byte {} has no BPE token", source, b0));
    }
  }
  t.vocab_ = std::move(v);
  return t;
}

const std::string& BpeTokenizer::token(int32_t id) const {
  if (id < 0 || id >= size()) throw std::out_of_range(fmt::format("token id {} (vocabulary {})", id, size()));
  return vocab_->tokens[static_cast<size_t>(id)];
}

int32_t BpeTokenizer::rank(std::string_view bytes) const {
  const auto it = vocab_->ids.find(bytes);
  return it == vocab_->ids.end() ? kNoRank : it->second;
}

// tiktoken's byte_pair_merge: merge the adjacent pair of lowest rank (the
// first of equals) until none has a rank; each part is then a token.
void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) {
  if (const auto whole = vocab_->ids.find(piece); whole != vocab_->ids.end()) {
    out.push_back(whole->second);
    return;
  }
  if (const auto hit = cache_.find(piece); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  const size_t n = piece.size();
  starts_.clear();
  ranks_.clear();
  for (size_t i = 0; i + 1 < n; ++i) {
    starts_.push_back(i);
    ranks_.push_back(rank(piece.substr(i, 2)));
  }
  starts_.push_back(n - 1);
  ranks_.push_back(kNoRank);
  starts_.push_back(n);
  ranks_.push_back(kNoRank);
  // Before part i + 1 is removed: the rank of parts i, i + 1 and i + 2 together, piece[start i, start i + 3),
  // which after the merge is part i's new pair (tiktoken's get_rank).
  const auto rank_at = [&](size_t i) {
    return i + 3 < starts_.size() ? rank(piece.substr(starts_[i], starts_[i + 3] - starts_[i])) : kNoRank;
  };
  for (;;) {
    size_t best = 0;
    int32_t min_rank = kNoRank;
    for (size_t i = 0; i + 1 < ranks_.size(); ++i) {
      if (ranks_[i] < min_rank) {
        min_rank = ranks_[i];
        best = i;
      }
    }
    if (min_rank == kNoRank) break;
    if (best > 0) ranks_[best - 1] = rank_at(best - 1);
    ranks_[best] = rank_at(best);
    starts_.erase(starts_.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    ranks_.erase(ranks_.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  const size_t first = out.size();
  for (size_t i = 0; i + 1 < starts_.size(); ++i) {
    const int32_t id = rank(piece.substr(starts_[i], starts_[i + 1] - starts_[i]));
    if (id == kNoRank) throw std::logic_error("bpe: a part without a token (every byte has one)");
    out.push_back(id);
  }
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
}

void BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  size_t pos = 0, begin = 0, end = 0;
  while (pos < text.size()) {
    if (!re_->next(text, pos, begin, end)) {
      encode_piece(text.substr(pos), out);  // bytes that are not UTF-8, to the end
      break;
    }
    if (begin > pos) encode_piece(text.substr(pos, begin - pos), out);  // the same, before the match
    encode_piece(text.substr(begin, end - begin), out);
    pos = end;
  }
}

BpeTokenizer BpeTokenizer::clone() const {
  BpeTokenizer t;
  t.vocab_ = vocab_;
  return t;
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string s;
  for (int32_t id : ids) s += token(id);
  return s;
}

}  // namespace gpt2
