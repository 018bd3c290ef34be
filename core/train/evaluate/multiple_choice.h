// Multiple-choice scoring in HellaSwag's format (issue 46): each line of a
// JSONL file holds "ctx" (the context), "endings" (the candidate
// continuations) and "label" (the index of the right one). Each ending is
// scored by the loss of its tokens given the context, as llm.c's
// evaluation and lm-eval's HellaSwag task do: the row is the context's
// tokens then " " + ending's tokens, and the ending's losses are those of
// the positions that predict its tokens. The prediction is the ending of
// least summed loss ("acc"); the normalised form takes the least mean loss
// per token ("acc_norm", what llm.c reports).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace gpt2 {

struct ChoiceExample {
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> endings;
  int label = 0;
};

// The most bytes a multiple-choice file may hold (HellaSwag's validation
// split is 11 MB).
inline constexpr uint64_t kMaxChoiceFileBytes = uint64_t{512} << 20;

// Reads and tokenizes `path` with `tok`. Every non-blank line must be an
// object with a string "ctx", an array "endings" of 2 to 16 non-empty
// strings and an integer "label" (a number, or a string of digits as some
// exports write it) indexing them; the context and the longest ending
// together must fit `max_tokens` + 1 tokens (the model's block size, plus
// the first token, which no position predicts). Throws
// std::invalid_argument naming the file and the line: unreadable, not
// JSON, a field missing or of another type, a label out of range, an
// ending with no tokens, too long; or a file with no examples.
std::vector<ChoiceExample> read_choice_examples(const std::string& path, const Tokenizer& tok, int max_tokens);

// The row an ending is scored on: inputs (context + ending, less the last
// token) and targets (the same shifted by one), and which positions predict
// the ending's tokens: [first, first + ending.size()).
struct ChoiceRow {
  std::vector<int32_t> inputs, targets;
  size_t first = 0;
};
ChoiceRow choice_row(const ChoiceExample& ex, size_t ending);

struct ChoiceScore {
  std::vector<double> sum_loss;   // per ending: the sum of its tokens' losses
  std::vector<double> mean_loss;  // per ending: that sum over its token count
  int pred = 0;                   // argmin sum_loss (the first on ties)
  int pred_norm = 0;              // argmin mean_loss (the first on ties)
};
// `losses[e]`: ending e's per-position losses over its row's positions.
ChoiceScore score_choices(const ChoiceExample& ex, const std::vector<std::vector<float>>& losses);

}  // namespace gpt2
