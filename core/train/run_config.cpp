#include "train/run_config.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gpt2 {

Fields run_fields(RunConfig& c) {
  Fields f;
  f.add_section("model", c.model);
  f.add_section("data", c.data);
  f.add_section("train", c.train);
  f.add_section("optimizer", c.optimizer);
  f.add_section("generate", c.generate);
  f.add_section("debug", c.debug);
  return f;
}

void validate(const RunConfig& c) {
  auto fail = [](const char* key, const std::string& what) {
    throw std::invalid_argument(fmt::format("{}: {}", key, what));
  };
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) fail(key, fmt::format("must be positive, got {}", v));
  };
  const Gpt2Config& m = c.model;
  if (m.V < 0) fail("model.vocab_size", fmt::format("must be >= 0 (0 = from the tokenizer), got {}", m.V));
  positive("model.block_size", m.T);
  positive("model.n_layer", m.L);
  positive("model.n_head", m.NH);
  positive("model.n_embd", m.C);
  if (m.C % m.NH != 0) fail("model.n_embd", fmt::format("{} is not divisible by model.n_head {}", m.C, m.NH));
  c.data.validate();
  const TrainConfig& t = c.train;
  positive("train.batch_size", t.batch_size);
  positive("train.seq_len", t.seq_len);
  if (t.seq_len > m.T) fail("train.seq_len", fmt::format("{} exceeds model.block_size {}", t.seq_len, m.T));
  positive("train.steps", t.steps);
  if (t.threads < 0) fail("train.threads", fmt::format("must be >= 0 (0 = every core), got {}", t.threads));
  if (t.eval_every < 0) fail("train.eval_every", fmt::format("must be >= 0, got {}", t.eval_every));
  positive("train.eval_batches", t.eval_batches);
  if (t.eval_every > 0 && c.data.val_fraction == 0) {
    fail("train.eval_every", "needs a validation split: set data.val_fraction > 0");
  }
  if (t.checkpoint_every < 0) fail("train.checkpoint_every", fmt::format("must be >= 0, got {}", t.checkpoint_every));
  if (t.peak_gflops < 0) fail("train.peak_gflops", fmt::format("must be >= 0, got {}", t.peak_gflops));
  if (t.grad_bucket_mb < 0) fail("train.grad_bucket_mb", fmt::format("must be >= 0, got {}", t.grad_bucket_mb));
  c.optimizer.validate();
  c.generate.validate();
}

std::string to_yaml(RunConfig c) { return run_fields(c).to_yaml(); }

}  // namespace gpt2
