// The data section of a run's configuration: which text, how it becomes
// tokens (tokenizer.h) and in which order batches are drawn (dataloader.h).
#pragma once

#include <string>

#include "model/dataloader.h"
#include "model/tokenizer.h"

namespace gpt2 {

struct DataConfig {
  std::string corpus;  // a path; relative paths in a YAML file are relative to that file
  std::string shards;  // a folder of prepare's train_*.bin and val_*.bin; when set, replaces corpus
  TokenizerKind tokenizer = TokenizerKind::kWord;
  std::string encoder_json, vocab_bpe;  // tokenizer gpt2: its two files
  LoaderKind loader = LoaderKind::kSequential;
  double val_fraction = 0.0;

  // Throws std::invalid_argument naming the key: val_fraction outside
  // [0, 1); shards with another tokenizer than gpt2 or with a val_fraction
  // (the shards hold their own split).
  void validate() const;

  // The one list of this section's fields (util/fields.h).
  template <typename F>
  void visit_fields(F&& f) {
    f("corpus", corpus, "training text file (relative paths in a YAML file: relative to that file)", "path");
    f("shards", shards,
      "folder of token shards made by `prepare` (train_*.bin, val_*.bin, llm.c's format); when set it replaces "
      "corpus, and its val_*.bin files are the validation split",
      "path");
    f("tokenizer", tokenizer, "word (the original's word-level rule), char, or gpt2 (GPT-2's byte-level BPE)");
    f("encoder_json", encoder_json, "tokenizer gpt2: GPT-2's encoder.json (docs/tokenizer.md)", "path");
    f("vocab_bpe", vocab_bpe, "tokenizer gpt2: GPT-2's vocab.bpe (docs/tokenizer.md)", "path");
    f("loader", loader, "sequential (the original's window order) or random windows");
    f("val_fraction", val_fraction, "fraction of tokens held out at the end for validation, in [0, 1)");
  }
};

}  // namespace gpt2
