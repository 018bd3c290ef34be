// The data section of a run's configuration: which text, how it becomes
// tokens (tokenizer.h) and in which order batches are drawn (dataloader.h).
#pragma once

#include <string>

#include "model/dataloader.h"
#include "model/tokenizer.h"

namespace gpt2 {

struct DataConfig {
  std::string corpus;  // a path; relative paths in a YAML file are relative to that file
  TokenizerKind tokenizer = TokenizerKind::kWord;
  LoaderKind loader = LoaderKind::kSequential;
  double val_fraction = 0.0;

  // Throws std::invalid_argument naming the key.
  void validate() const;

  // The one list of this section's fields (util/fields.h).
  template <typename F>
  void visit_fields(F&& f) {
    f("corpus", corpus, "training text file (relative paths in a YAML file: relative to that file)", "path");
    f("tokenizer", tokenizer, "word (the original's word-level rule) or char");
    f("loader", loader, "sequential (the original's window order) or random windows");
    f("val_fraction", val_fraction, "fraction of tokens held out at the end for validation, in [0, 1)");
  }
};

}  // namespace gpt2
