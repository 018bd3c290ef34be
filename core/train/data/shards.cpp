#include "train/data/shards.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <unordered_set>

#include "util/checked.h"
#include "util/files.h"
#include "util/json.h"
#include "util/text.h"

namespace gpt2 {

namespace {

void put_le(std::string& out, uint32_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

uint32_t get_le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

}  // namespace

void write_shard(const std::filesystem::path& path, std::span<const int32_t> tokens, int64_t vocab) {
  if (vocab < 1 || vocab > (int64_t{1} << 31)) {
    throw std::invalid_argument(fmt::format("shard '{}': a vocabulary of {} ids", path.string(), vocab));
  }
  if (tokens.size() > 0x7FFFFFFFu) {
    throw std::invalid_argument(fmt::format("shard '{}': {} tokens (at most 2^31 - 1 a shard)", path.string(),
                                            tokens.size()));
  }
  ShardHeader h;
  h.version = vocab <= 65536 ? 1 : 2;
  std::string out;
  out.reserve(kShardHeaderInts * 4 + tokens.size() * h.token_bytes());
  std::array<uint32_t, kShardHeaderInts> header{};
  header[0] = static_cast<uint32_t>(kShardMagic);
  header[1] = static_cast<uint32_t>(h.version);
  header[2] = static_cast<uint32_t>(tokens.size());
  header[3] = static_cast<uint32_t>(vocab);
  for (uint32_t v : header) put_le(out, v, 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      throw std::invalid_argument(fmt::format("shard '{}': token {} is id {}, outside the vocabulary of {}",
                                              path.string(), i, tokens[i], vocab));
    }
    put_le(out, static_cast<uint32_t>(tokens[i]), h.token_bytes());
  }
  write_file_atomically(path, out);
}

namespace {

// Exactly n bytes from fd, or the reason there are fewer.
void read_exactly(int fd, void* dst, size_t n, const std::function<void(const std::string&)>& fail) {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::read(fd, out, std::min<size_t>(n, size_t{1} << 30));
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) fail(fmt::format("read failed: {}", std::strerror(errno)));
    if (r == 0) fail("truncated while it was read (the file changed; run prepare again)");
    out += r;
    n -= static_cast<size_t>(r);
  }
}

}  // namespace

TokenShard::TokenShard(const std::filesystem::path& path, int64_t model_vocab) : path_(path) {
  const std::string name = path.string();
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("token shard '{}': {}", name, why));
  };
  // Its kind first, without opening it: a FIFO or a device is never read.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    fail(err == ENOENT ? "no such file" : fmt::format("cannot read: {}", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) fail(fmt::format("is {}, expected an llm.c token shard", file_kind(st.st_mode)));
  // O_NONBLOCK: should the name have become a FIFO since, opening it does not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(err == ENOENT ? "no such file" : fmt::format("cannot read: {}", std::strerror(err)));
  }
  try {
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      fail(fmt::format("is {}, expected an llm.c token shard", file_kind(st.st_mode)));
    }
    const auto file_bytes = static_cast<uint64_t>(st.st_size);
    if (file_bytes < kShardHeaderInts * 4) {
      fail(fmt::format("{} bytes, shorter than the {}-byte header: not a token shard, or truncated", file_bytes,
                       kShardHeaderInts * 4));
    }
    std::array<unsigned char, kShardHeaderInts * 4> head{};
    read_exactly(fd, head.data(), head.size(), fail);
    const unsigned char* bytes = head.data();
    const uint32_t magic = get_le32(bytes), version = get_le32(bytes + 4), count = get_le32(bytes + 8),
                   vocab = get_le32(bytes + 12);
    if (magic != static_cast<uint32_t>(kShardMagic)) {
      fail(fmt::format("magic {}, not {}: not an llm.c token shard", magic, kShardMagic));
    }
    if (version != 1 && version != 2) fail(fmt::format("version {} (1: uint16 tokens, 2: uint32)", version));
    if (count > kMaxShardTokens) fail(fmt::format("{} tokens, above the most a shard holds (2^31 - 1)", count));
    header_.version = static_cast<int>(version);
    header_.tokens = count;
    header_.vocab = vocab;
    const uint64_t want = kShardHeaderInts * 4 + static_cast<uint64_t>(count) * header_.token_bytes();
    if (file_bytes != want) {
      fail(fmt::format("{} bytes, but its header says {} tokens of {} bytes ({} bytes): {}", file_bytes, count,
                       header_.token_bytes(), want, file_bytes < want ? "truncated" : "trailing bytes"));
    }
    if (version == 1 && model_vocab > 65536) {
      fail(fmt::format("uint16 tokens (version 1) for a vocabulary of {}: ids above 65,535 cannot be in it, and may "
                       "have been cut to 16 bits; prepare the data again (it writes uint32 for this vocabulary)",
                       model_vocab));
    }
    if (vocab != 0 && static_cast<int64_t>(vocab) != model_vocab) {
      fail(fmt::format("made with a vocabulary of {}, but the model's is {}: the data and the model do not match",
                       vocab, model_vocab));
    }
    // The tokens, read (not mapped) into memory the size the header and the file agree on.
    if (version == 1) {
      u16_.resize(count);
      read_exactly(fd, u16_.data(), u16_.size() * sizeof(uint16_t), fail);
    } else {
      u32_.resize(count);
      read_exactly(fd, u32_.data(), u32_.size() * sizeof(uint32_t), fail);
    }
    struct stat after {};
    if (::fstat(fd, &after) != 0 || after.st_size != st.st_size || after.st_mtim.tv_sec != st.st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != st.st_mtim.tv_nsec) {
      fail("changed while it was read (its size or modification time); run prepare again");
    }
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t id = version == 1 ? u16_[i] : u32_[i];  // unsigned: a uint32 id of 2^31 and more is no negative int
      if (id >= static_cast<uint64_t>(model_vocab)) {
        fail(fmt::format("token {} is id {}, outside the model's vocabulary of {}", i, id, model_vocab));
      }
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void TokenShard::copy(uint64_t begin, std::span<int32_t> out) const {
  if (begin > header_.tokens || out.size() > header_.tokens - begin) {
    throw std::out_of_range(fmt::format("token shard '{}': tokens [{}, {}) of {}", path_.string(), begin,
                                        begin + out.size(), header_.tokens));
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = (*this)[begin + i];
}

void TokenShard::append_to(TokenStream& stream) const {
  if (header_.version == 1) {
    stream.append(std::span<const uint16_t>(u16_));
  } else {
    stream.append(std::span<const uint32_t>(u32_));
  }
}

namespace {

namespace fs = std::filesystem;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// train_*.bin or val_*.bin: a name training would take for a shard.
bool is_shard_name(const std::string& name) {
  return ends_with(name, ".bin") && (starts_with(name, "train_") || starts_with(name, "val_"));
}

// A name prepare writes: "train_" or "val_", at least six digits, ".bin".
bool is_plain_shard_name(const std::string& name, bool train) {
  const std::string prefix = train ? "train_" : "val_";
  if (!starts_with(name, prefix.c_str()) || !ends_with(name, ".bin")) return false;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 4);
  return digits.size() >= 6 && digits.size() <= 10 &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

bool is_prepare_file(const std::string& name) {
  const size_t tmp = name.find(".tmp.");
  const std::string base = tmp == std::string::npos ? name : name.substr(0, tmp);
  return base == kManifestName || base == kPrepareHolderName || is_plain_shard_name(base, true) ||
         is_plain_shard_name(base, false);
}

std::string manifest_text(const ShardManifest& m) {
  Json shards = Json::array();
  for (const ManifestShard& s : m.shards) {
    shards.push_back(Json{{"file", s.file}, {"split", s.train ? "train" : "val"}, {"tokens", s.tokens},
                          {"bytes", s.bytes}});
  }
  const Json j{{"format", "llm.c token shards, written by prepare"},
               {"version", kManifestVersion},
               {"vocab", m.vocab},
               {"tokenizer",
                {{"encoder_json_fnv1a64", fmt::format("{:016x}", m.encoder_json_fnv1a64)},
                 {"vocab_bpe_fnv1a64", fmt::format("{:016x}", m.vocab_bpe_fnv1a64)}}},
               {"train_tokens", m.train_tokens},
               {"val_tokens", m.val_tokens},
               {"shards", shards}};
  return j.dump(1) + "\n";
}

// One entry of the manifest's list, checked (`after_train`: the entries
// before it are all training shards; `bad` and `count` report as
// read_manifest does).
template <typename Bad, typename Count>
ManifestShard manifest_shard(const Json& e, uint64_t width, bool after_train, const Bad& bad, const Count& count) {
  ManifestShard s;
  s.file = e["file"].get<std::string>();
  const std::string split = e["split"].get<std::string>();
  if (split != "train" && split != "val") bad(fmt::format("split {}, not train or val", excerpt(split)));
  s.train = split == "train";
  if (!is_plain_shard_name(s.file, s.train)) {
    bad(fmt::format("lists {} ({}), not a shard name prepare writes", excerpt(s.file), split));
  }
  if (s.train && !after_train) {
    bad(fmt::format("lists {} after validation shards", s.file));
  }
  s.tokens = count(e, "tokens", kMaxShardTokens);
  s.bytes = count(e, "bytes", kShardHeaderInts * 4 + kMaxShardTokens * 4);
  if (s.bytes != kShardHeaderInts * 4 + s.tokens * width) {
    bad(fmt::format("{}: {} bytes for {} tokens of {} bytes", s.file, s.bytes, s.tokens, width));
  }
  return s;
}

ShardManifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / kManifestName;
  std::error_code ec;
  if (fs::symlink_status(path, ec).type() == fs::file_type::not_found) {
    throw std::invalid_argument(fmt::format("data.shards: '{}' has no {}: not a finished prepare; run prepare again",
                                            dir.string(), kManifestName));
  }
  const std::string text = read_input_file(path, kMaxTextInputBytes, "data.shards", "prepare's manifest.json");
  const auto bad = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("data.shards: '{}': {}; run prepare again", path.string(), why));
  };
  // A manifest nests three levels; a deeper text is not one (and a deep one would overflow the stack).
  if (json_nesting(text, 8) > 8) bad("nested deeper than a manifest is: not prepare's");
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception&) {
    bad("not valid JSON");
  }
  const auto count = [&](const Json& o, const char* key, uint64_t max) -> uint64_t {
    if (!o.is_object() || !o.contains(key) || !o[key].is_number_unsigned() || o[key].get<uint64_t>() > max) {
      bad(fmt::format("'{}' is not a count up to {}", key, max));
    }
    return o[key].get<uint64_t>();
  };
  if (!j.is_object()) bad("not a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int64_t>() != kManifestVersion) {
    bad(fmt::format("version {}, not {} (the one this program reads)",
                    j.contains("version") ? excerpt(j["version"].dump()) : "missing", kManifestVersion));
  }
  ShardManifest m;
  const auto hash = [&](const char* key) -> uint64_t {
    const Json* t = j.contains("tokenizer") && j["tokenizer"].is_object() && j["tokenizer"].contains(key)
                        ? &j["tokenizer"][key] : nullptr;
    const std::string text = t != nullptr && t->is_string() ? t->get<std::string>() : "";
    if (text.size() != 16 || text.find_first_not_of("0123456789abcdef") != std::string::npos) {
      bad(fmt::format("tokenizer.{} is not 16 hexadecimal digits", key));
    }
    return std::stoull(text, nullptr, 16);
  };
  m.encoder_json_fnv1a64 = hash("encoder_json_fnv1a64");
  m.vocab_bpe_fnv1a64 = hash("vocab_bpe_fnv1a64");
  m.vocab = static_cast<int64_t>(count(j, "vocab", uint64_t{1} << 31));
  if (m.vocab < 1) bad("vocab 0");
  if (!j.contains("shards") || !j["shards"].is_array()) bad("no 'shards' list");
  const uint64_t width = m.vocab <= 65536 ? 2 : 4;
  uint64_t train = 0, val = 0;
  std::unordered_set<std::string> seen;
  for (const Json& e : j["shards"]) {
    if (!e.is_object() || !e.contains("file") || !e["file"].is_string() || !e.contains("split") ||
        !e["split"].is_string()) {
      bad("a shard without its 'file' and 'split'");
    }
    const ManifestShard s = manifest_shard(e, width, m.shards.empty() || m.shards.back().train, bad, count);
    if (!seen.insert(s.file).second) bad(fmt::format("lists {} twice", s.file));
    (s.train ? train : val) += s.tokens;
    m.shards.push_back(s);
  }
  if (train == 0) bad("lists no training tokens");
  m.train_tokens = count(j, "train_tokens", kMaxSignedBytes);
  m.val_tokens = count(j, "val_tokens", kMaxSignedBytes);
  if (m.train_tokens != train || m.val_tokens != val) {
    bad(fmt::format("train_tokens {} and val_tokens {}, but its shards hold {} and {}", m.train_tokens, m.val_tokens,
                    train, val));
  }
  return m;
}

std::string ShardSet::describe() const {
  const auto part = [](const std::vector<TokenShard>& files, const TokenStream& stream, const char* what) {
    if (files.empty()) return fmt::format("0 {} shards", what);
    const std::string first = files.front().path().filename().string(), last = files.back().path().filename().string();
    return fmt::format("{} {} shard{}, {} tokens ({})", files.size(), what, files.size() == 1 ? "" : "s",
                       stream.size(), files.size() == 1 ? first : first + " .. " + last);
  };
  return fmt::format("data.shards '{}' ({}): {}; {}", dir, kManifestName, part(train_files, train, "train"),
                     part(val_files, val, "val"));
}

ShardSet open_shards(const std::string& dir, int64_t model_vocab, const std::optional<TokenizerFiles>& tokenizer) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw std::invalid_argument(fmt::format("data.shards: '{}' is not a folder (make one with serial prepare)", dir));
  }
  const ShardManifest m = read_manifest(dir);
  if (tokenizer && (tokenizer->encoder_json_fnv1a64 != m.encoder_json_fnv1a64 ||
                    tokenizer->vocab_bpe_fnv1a64 != m.vocab_bpe_fnv1a64)) {
    throw std::invalid_argument(fmt::format(
        "data.shards: '{}' was prepared with other tokenizer files than data.encoder_json and data.vocab_bpe "
        "(encoder.json {:016x}, vocab.bpe {:016x} in {}; these are {:016x}, {:016x}): its ids would name other "
        "tokens; prepare it again with these files, or give the ones it was made with",
        excerpt(dir, 200), m.encoder_json_fnv1a64, m.vocab_bpe_fnv1a64, kManifestName,
        tokenizer->encoder_json_fnv1a64, tokenizer->vocab_bpe_fnv1a64));
  }
  // Every train_*.bin and val_*.bin there must be the manifest's: another
  // prepare's leftovers, or a file put there by hand, is not silently left out.
  std::unordered_set<std::string> listed;
  for (const ManifestShard& s : m.shards) listed.insert(s.file);
  std::vector<std::string> extra;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (is_shard_name(name) && !listed.contains(name)) extra.push_back(name);
  }
  if (!extra.empty()) {
    std::sort(extra.begin(), extra.end());
    throw std::invalid_argument(fmt::format("data.shards: '{}' holds {}{}, which {} does not list: the folder changed "
                                            "since prepare; run prepare again into an empty folder", dir,
                                            excerpt(extra.front()),
                                            extra.size() > 1 ? fmt::format(" and {} more", extra.size() - 1) : "",
                                            kManifestName));
  }
  ShardSet set;
  set.dir = dir;
  for (const ManifestShard& s : m.shards) {
    const fs::path path = fs::path(dir) / s.file;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) {
      throw std::invalid_argument(fmt::format("data.shards: '{}': {} lists {}, which is missing; run prepare again",
                                              dir, kManifestName, s.file));
    }
    const auto differs = [&](uint64_t bytes) {
      throw std::invalid_argument(fmt::format("data.shards: '{}' is {} bytes, {} says {}: the folder changed since "
                                              "prepare; run prepare again", path.string(), bytes, kManifestName,
                                              s.bytes));
    };
    if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) != s.bytes) differs(static_cast<uint64_t>(st.st_size));
    TokenShard shard(path, model_vocab);  // its kind, header, size and tokens
    if (shard.file_bytes() != s.bytes) differs(shard.file_bytes());
    if (shard.size() != s.tokens) {
      throw std::invalid_argument(fmt::format("data.shards: '{}' holds {} tokens, {} says {}; run prepare again",
                                              path.string(), shard.size(), kManifestName, s.tokens));
    }
    (s.train ? set.train_files : set.val_files).push_back(std::move(shard));
  }
  for (const TokenShard& f : set.train_files) f.append_to(set.train);
  for (const TokenShard& f : set.val_files) f.append_to(set.val);
  return set;
}

}  // namespace gpt2
