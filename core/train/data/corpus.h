// The training data as every rank needs it: rank 0 reads and tokenizes the
// corpus (with a given vocabulary when resuming) and broadcasts the result,
// so only rank 0 needs the file; or token shards (data.shards: prepare's
// folder, read through its manifest.json), which every rank reads itself.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <optional>

#include "parallel/comm.h"
#include "model/bpe.h"
#include "model/data_config.h"
#include "model/dataloader.h"
#include "model/tokenizer.h"
#include "train/data/shards.h"

namespace gpt2 {

// Reads a whole text file; errors name data.corpus and the path (missing,
// unreadable, empty).
std::string read_corpus(const std::string& path);

// GPT-2's BPE from its two files (model/bpe.h); errors name the file:
// missing, unreadable, or not GPT-2's format.
// `files`, when given, gets the two files' hashes (what prepare's manifest
// records and training compares), from the bytes read for the tokenizer.
BpeTokenizer load_bpe_tokenizer(const std::string& encoder_json, const std::string& vocab_bpe,
                                TokenizerFiles* files = nullptr);

// Each document encoded alone (no piece spans two) on `threads` threads (at
// most one a document),
// each with its own tokenizer on `tok`'s vocabulary (BpeTokenizer::clone:
// its own cache); the ids of document d in out[d], the same at any thread
// count. A thread's failure is rethrown here.
std::vector<std::vector<int32_t>> encode_documents(const BpeTokenizer& tok, std::span<const std::string_view> docs,
                                                   int threads);

// The run's data: the tokenizer, and the tokens as the loader's streams.
// Movable (the streams view `tokens`' or the shards' memory, which a move
// keeps), not copyable.
struct Corpus {
  Corpus() = default;
  Corpus(Corpus&&) = default;
  Corpus& operator=(Corpus&&) = default;
  Corpus(const Corpus&) = delete;
  Corpus& operator=(const Corpus&) = delete;

  Tokenizer tok;
  std::vector<int32_t> tokens;    // data.corpus: encode(text) then [EOS]; empty with data.shards
  std::optional<ShardSet> shards;  // data.shards: the files, read into memory
  Split split;                     // training and validation streams (data.val_fraction, or the val_*.bin files)
  int64_t size() const { return split.train.size() + split.val.size(); }
  // FNV-1a 64 of every token, training then validation, as int32 (for a
  // corpus, fnv1a64 of `tokens`: the split is its two slices): compared
  // across ranks, recorded in checkpoints.
  uint64_t hash() const;
};

// The run's data (`d`), with `vocabulary` (a checkpoint's tokenizer) when
// given, else word/char built from the text or gpt2 from d.encoder_json and
// d.vocab_bpe. A corpus: rank 0 reads and tokenizes it and every rank gets
// the tokenizer and the tokens. Shards: rank 0 makes the tokenizer, every
// rank reads the files its manifest lists itself (each checked against the
// tokenizer's vocabulary). Errors name the key and the file.
Corpus load_corpus(const DataConfig& d, const Tokenizer* vocabulary, Communicator& comm);

}  // namespace gpt2
