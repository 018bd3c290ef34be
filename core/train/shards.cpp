#include "train/shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "util/files.h"

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

TokenShard::TokenShard(const std::filesystem::path& path, int64_t model_vocab) : path_(path) {
  const std::string name = path.string();
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("token shard '{}': {}", name, why));
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(err == ENOENT ? "no such file" : fmt::format("cannot read: {}", std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ < kShardHeaderInts * 4) {
    ::close(fd);
    fail(fmt::format("{} bytes, shorter than the {}-byte header: not a token shard, or truncated", map_bytes_,
                     kShardHeaderInts * 4));
  }
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail(fmt::format("cannot map: {}", std::strerror(map_err)));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    const uint32_t magic = get_le32(bytes), version = get_le32(bytes + 4), count = get_le32(bytes + 8),
                   vocab = get_le32(bytes + 12);
    if (magic != static_cast<uint32_t>(kShardMagic)) {
      fail(fmt::format("magic {}, not {}: not an llm.c token shard", magic, kShardMagic));
    }
    if (version != 1 && version != 2) fail(fmt::format("version {} (1: uint16 tokens, 2: uint32)", version));
    header_.version = static_cast<int>(version);
    header_.tokens = count;
    header_.vocab = vocab;
    const size_t want = kShardHeaderInts * 4 + static_cast<size_t>(count) * header_.token_bytes();
    if (map_bytes_ != want) {
      fail(fmt::format("{} bytes, but its header says {} tokens of {} bytes ({} bytes): {}", map_bytes_, count,
                       header_.token_bytes(), want, map_bytes_ < want ? "truncated" : "trailing bytes"));
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
    u16_ = reinterpret_cast<const uint16_t*>(bytes + kShardHeaderInts * 4);
    u32_ = reinterpret_cast<const uint32_t*>(bytes + kShardHeaderInts * 4);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t id = version == 1 ? u16_[i] : u32_[i];  // unsigned: a uint32 id of 2^31 and more is no negative int
      if (id >= static_cast<uint64_t>(model_vocab)) {
        fail(fmt::format("token {} is id {}, outside the model's vocabulary of {}", i, id, model_vocab));
      }
    }
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)), header_(o.header_), map_(o.map_), map_bytes_(o.map_bytes_), u16_(o.u16_),
      u32_(o.u32_) {
  o.map_ = nullptr;
  o.u16_ = nullptr;
  o.u32_ = nullptr;
  o.header_ = ShardHeader{};
}

TokenShard::~TokenShard() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
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
    stream.append(std::span<const uint16_t>(u16_, header_.tokens));
  } else {
    stream.append(std::span<const uint32_t>(u32_, header_.tokens));
  }
}

ShardSet open_shards(const std::string& dir, int64_t model_vocab) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw std::invalid_argument(fmt::format("data.shards: '{}' is not a folder (make one with serial prepare)", dir));
  }
  std::vector<fs::path> train, val;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 5 || name.substr(name.size() - 4) != ".bin") continue;
    if (name.rfind("train_", 0) == 0) train.push_back(e.path());
    if (name.rfind("val_", 0) == 0) val.push_back(e.path());
  }
  if (train.empty()) {
    throw std::invalid_argument(fmt::format("data.shards: '{}' holds no train_*.bin (make them with serial prepare)",
                                            dir));
  }
  std::sort(train.begin(), train.end());
  std::sort(val.begin(), val.end());
  ShardSet set;
  for (const fs::path& p : train) set.train_files.emplace_back(p, model_vocab);
  for (const fs::path& p : val) set.val_files.emplace_back(p, model_vocab);
  for (const TokenShard& f : set.train_files) f.append_to(set.train);
  for (const TokenShard& f : set.val_files) f.append_to(set.val);
  return set;
}

}  // namespace gpt2
