// Token shards in llm.c's format (issue 32; DESIGN.md "Data and formats"):
// a header of 256 little-endian int32, then the tokens.
//   header[0]  20240520 (the magic)
//   header[1]  1: uint16 tokens (llm.c's); 2: uint32 tokens (ours, for a
//              vocabulary over 65,536 ids; llm.c reads version 1 only)
//   header[2]  the token count
//   header[3]  the vocabulary the tokens were made with (ours; llm.c
//              leaves it 0, which means "not recorded")
// The writer picks the width from the vocabulary, so a uint16 file never
// silently truncates a large vocabulary's ids (the training-system study's
// data incident); the reader checks a file against the model's vocabulary
// once, at load, and names the file and the offending id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "model/dataloader.h"

namespace gpt2 {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr size_t kShardHeaderInts = 256;

struct ShardHeader {
  int version = 1;       // 1: uint16 tokens, 2: uint32
  uint64_t tokens = 0;
  int64_t vocab = 0;     // 0: not recorded (llm.c's files)
  size_t token_bytes() const { return version == 1 ? 2 : 4; }
};

// Writes `tokens` (each in [0, vocab)) to `path` atomically (a temporary
// file renamed over it): version 1 when vocab <= 65,536, else version 2.
// Throws std::invalid_argument naming the first id out of range.
void write_shard(const std::filesystem::path& path, std::span<const int32_t> tokens, int64_t vocab);

// A shard mapped into memory, checked against a model's vocabulary when
// opened: the magic, version and size; a version-1 (uint16) file for a
// vocabulary over 65,536 (its ids may have been cut to 16 bits); a recorded
// vocabulary other than the model's; every token below the model's
// vocabulary. Each failure throws std::invalid_argument with one line that
// names the file (and the token's index and id).
class TokenShard {
 public:
  TokenShard(const std::filesystem::path& path, int64_t model_vocab);
  TokenShard(TokenShard&& o) noexcept;
  TokenShard& operator=(TokenShard&&) = delete;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  const ShardHeader& header() const { return header_; }
  uint64_t size() const { return header_.tokens; }
  int32_t operator[](uint64_t i) const {
    return header_.version == 1 ? static_cast<int32_t>(u16_[i]) : static_cast<int32_t>(u32_[i]);
  }
  // Tokens [begin, begin + out.size()) into out (the loader's window).
  void copy(uint64_t begin, std::span<int32_t> out) const;
  // Appends the mapped tokens to a loader's stream (a view: the shard must
  // outlive the stream).
  void append_to(TokenStream& stream) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  ShardHeader header_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* u16_ = nullptr;
  const uint32_t* u32_ = nullptr;
};

// The shards `prepare` wrote to a folder (data.shards): train_*.bin and
// val_*.bin in name order, each opened and checked against `model_vocab`
// (TokenShard), read as two streams. Throws std::invalid_argument naming
// data.shards and the folder when it is missing or has no train_*.bin, and
// TokenShard's errors for a bad file.
struct ShardSet {
  std::vector<TokenShard> train_files, val_files;
  TokenStream train, val;  // views of the files above
};
ShardSet open_shards(const std::string& dir, int64_t model_vocab);

}  // namespace gpt2
