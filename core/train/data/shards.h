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
//
// A folder of shards is what `prepare` finished (train/data/prepare.h): it holds
// DIR/manifest.json, written last, listing every shard with its tokens and
// bytes; training reads the folder only through it (open_shards).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <optional>
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

// A shard read into memory, checked against a model's vocabulary when
// opened: a regular file (a FIFO, a device or a folder is refused by its kind
// without being read, and opening never waits: O_NONBLOCK); the magic,
// version and size (the header is read and checked before the tokens, at
// most kMaxShardTokens of them); a version-1 (uint16) file for a vocabulary
// over 65,536 (its ids may have been cut to 16 bits); a recorded vocabulary
// other than the model's; every token below the model's vocabulary; a file
// that changed while it was read (size or modification time). Read with
// read(), not mapped: a file truncated or rewritten later cannot fault the
// run (SIGBUS), which trains on the tokens it checked. Each failure throws
// std::invalid_argument with one line that names the file (and the token's
// index and id).
inline constexpr uint64_t kMaxShardTokens = 0x7FFFFFFFu;  // 2^31 - 1, as write_shard writes at most

class TokenShard {
 public:
  TokenShard(const std::filesystem::path& path, int64_t model_vocab);
  TokenShard(TokenShard&& o) noexcept = default;
  TokenShard& operator=(TokenShard&&) = delete;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard() = default;

  const ShardHeader& header() const { return header_; }
  uint64_t size() const { return header_.tokens; }
  uint64_t file_bytes() const { return kShardHeaderInts * 4 + header_.tokens * header_.token_bytes(); }
  int32_t operator[](uint64_t i) const {
    return header_.version == 1 ? static_cast<int32_t>(u16_[i]) : static_cast<int32_t>(u32_[i]);
  }
  // Tokens [begin, begin + out.size()) into out (the loader's window).
  void copy(uint64_t begin, std::span<int32_t> out) const;
  // Appends the tokens to a loader's stream (a view: the shard must outlive
  // the stream; a move keeps the memory it views).
  void append_to(TokenStream& stream) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  ShardHeader header_;
  std::vector<uint16_t> u16_;  // version 1
  std::vector<uint32_t> u32_;  // version 2
};

// DIR/manifest.json, which prepare writes last (docs/guarantees.md "Token
// shards and prepare"): the shards in order, each with its tokens and bytes.
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr int kManifestVersion = 1;
// Who holds a prepare's folder while it runs (util/files.h DirectoryLock); removed when it ends.
inline constexpr const char* kPrepareHolderName = "prepare.holder.json";
struct ManifestShard {
  std::string file;  // "train_000000.bin": a name in the folder, nothing else
  bool train = true;
  uint64_t tokens = 0, bytes = 0;
};
struct ShardManifest {
  std::vector<ManifestShard> shards;  // train then validation, in order
  uint64_t train_tokens = 0, val_tokens = 0;
  int64_t vocab = 0;
  uint64_t encoder_json_fnv1a64 = 0, vocab_bpe_fnv1a64 = 0;  // the tokenizer files' bytes
};
// The manifest's JSON text (deterministic: the same shards give the same bytes).
std::string manifest_text(const ShardManifest& m);
// DIR/manifest.json read and checked (version, names, counts adding up).
// Throws std::invalid_argument naming data.shards and the folder: "... has no
// manifest.json: not a finished prepare; run prepare again" when it is absent.
ShardManifest read_manifest(const std::filesystem::path& dir);
// Whether `name` is a file prepare writes (train_*.bin, val_*.bin,
// manifest.json, its holder record, and each one's temporaries "<name>.tmp.*").
bool is_prepare_file(const std::string& name);

// The shards `prepare` wrote to a folder (data.shards), as its manifest lists
// them, each opened and checked against `model_vocab` (TokenShard), read as
// two streams. Throws std::invalid_argument naming data.shards and the folder
// when it is missing, has no manifest, or disagrees with it (a listed file
// missing or of another size or token count; a train_*.bin or val_*.bin the
// manifest does not list), and TokenShard's errors for a bad file.
struct ShardSet {
  std::vector<TokenShard> train_files, val_files;
  TokenStream train, val;  // views of the files above
  std::string dir;
  // One line for the run's log: the folder, how many train and val shards, their tokens.
  std::string describe() const;
};
// The tokenizer files' hashes a manifest records (fnv1a64 of their bytes;
// train/data/corpus.h's load_bpe_tokenizer gives them).
struct TokenizerFiles {
  uint64_t encoder_json_fnv1a64 = 0, vocab_bpe_fnv1a64 = 0;
};
// `tokenizer`: the files the run encodes and decodes with, when it read them:
// a manifest written with other files is refused (the ids would name other
// tokens), even when the vocabulary's size is the same.
ShardSet open_shards(const std::string& dir, int64_t model_vocab,
                     const std::optional<TokenizerFiles>& tokenizer = std::nullopt);

}  // namespace gpt2
