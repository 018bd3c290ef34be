// The `prepare` command (issue 32): text files -> train and validation token
// shards (train/data/shards.h) with GPT-2's BPE (model/bpe.h). Each input file is
// a document; the stream is <|endoftext|> before each document, then its
// tokens (GPT-2's and llm.c's convention). The last floor(n val_fraction)
// tokens are validation (split_tokens, as training splits a corpus); each
// part is written in shards of at most shard_tokens tokens:
// DIR/train_000000.bin ..., DIR/val_000000.bin ..., then DIR/manifest.json
// last (train/data/shards.h): a folder without it is not a finished prepare, and
// training refuses it. DIR must be absent or an empty folder (--overwrite:
// a previous prepare's files there are replaced, nothing else is touched),
// and is locked while prepare runs (docs/guarantees.md "Token shards and
// prepare").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpt2 {

struct PrepareRequest {
  std::vector<std::string> inputs;  // text files, one document each
  std::string encoder_json, vocab_bpe;
  std::string out_dir;
  double val_fraction = 0.1;
  uint64_t shard_tokens = 100'000'000;
  int threads = 1;        // at most max_threads() (train/config/threads.h); one a document at most is used
  bool overwrite = false;  // replace a previous prepare's files in out_dir
  bool progress = true;    // a progress line on stderr as the documents are encoded
};

struct PrepareSummary {
  uint64_t documents = 0, bytes = 0, train_tokens = 0, val_tokens = 0;
  int vocab = 0;
  int threads = 1;                  // used: min(threads, documents)
  std::vector<std::string> shards;  // the files written, in order
  std::string manifest;             // DIR/manifest.json
  double seconds = 0;               // encoding
};

// Validates the request (std::invalid_argument naming the option) and the
// output folder (util/files.h check_output) before anything is read or
// encoded, locks the folder, encodes and writes. A failure leaves no
// half-written shard (each is written whole and renamed into place) and no
// manifest: the shards it wrote are removed, and training refuses a folder
// without a manifest.
PrepareSummary prepare_shards(const PrepareRequest& req);

}  // namespace gpt2
