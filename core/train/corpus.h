// The training text as every rank needs it: rank 0 reads and tokenizes the
// corpus (with a given vocabulary when resuming) and broadcasts the result,
// so only rank 0 needs the file.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dist/comm.h"
#include "model/bpe.h"
#include "model/tokenizer.h"

namespace gpt2 {

// Reads a whole text file; errors name data.corpus and the path (missing,
// unreadable, empty).
std::string read_corpus(const std::string& path);

// GPT-2's BPE from its two files (model/bpe.h); errors name the file:
// missing, unreadable, or not GPT-2's format.
BpeTokenizer load_bpe_tokenizer(const std::string& encoder_json, const std::string& vocab_bpe);

// Each document encoded alone (no piece spans two) on `threads` threads,
// each with its own tokenizer on `tok`'s vocabulary (BpeTokenizer::clone:
// its own cache); the ids of document d in out[d], the same at any thread
// count. A thread's failure is rethrown here.
std::vector<std::vector<int32_t>> encode_documents(const BpeTokenizer& tok, std::span<const std::string_view> docs,
                                                   int threads);

struct Corpus {
  Tokenizer tok;
  std::vector<int32_t> tokens;  // encode(text) then [EOS]
};

// Rank 0 reads `path` and tokenizes it with `vocabulary` (a checkpoint's) or,
// when that is null, with a vocabulary built from the text; every rank gets
// the tokenizer and the token stream.
Corpus load_corpus(const std::string& path, TokenizerKind kind, const Tokenizer* vocabulary, Communicator& comm);

}  // namespace gpt2
