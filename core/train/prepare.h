// The `prepare` command (issue 32): text files -> train and validation token
// shards (train/shards.h) with GPT-2's BPE (model/bpe.h). Each input file is
// a document; the stream is <|endoftext|> before each document, then its
// tokens (GPT-2's and llm.c's convention). The last floor(n val_fraction)
// tokens are validation (split_tokens, as training splits a corpus); each
// part is written in shards of at most shard_tokens tokens:
// DIR/train_000000.bin ..., DIR/val_000000.bin ...
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
  int threads = 1;
  bool progress = true;  // a progress line on stderr as the documents are encoded
};

struct PrepareSummary {
  uint64_t documents = 0, bytes = 0, train_tokens = 0, val_tokens = 0;
  int vocab = 0;
  std::vector<std::string> shards;  // the files written, in order
  double seconds = 0;               // encoding
};

// Validates the request (std::invalid_argument naming the option), encodes
// and writes. A failure leaves no half-written shard (each is written whole
// and renamed into place).
PrepareSummary prepare_shards(const PrepareRequest& req);

}  // namespace gpt2
