#include "run_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "dataloader.h"
#include "tokenizer.h"

namespace gpt2 {

namespace {

template <typename Int>
Int parse_int(const std::string& key, const std::string& text) {
  Int v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument(fmt::format("{}: expected an integer, got '{}'", key, text));
  }
  return v;
}

double parse_float(const std::string& key, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) {
    throw std::invalid_argument(fmt::format("{}: expected a number, got '{}'", key, text));
  }
  return v;
}

bool parse_bool(const std::string& key, const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw std::invalid_argument(fmt::format("{}: expected true or false, got '{}'", key, text));
}

class FieldList {
 public:
  template <typename X>
  void add(std::string key, X& ref, std::string help, std::string type = "") {
    FieldInfo f;
    f.key = key;
    f.help = std::move(help);
    if constexpr (std::is_same_v<X, bool>) {
      f.type = "bool";
      f.get = [&ref] { return std::string(ref ? "true" : "false"); };
      f.set = [&ref, key](const std::string& t) { ref = parse_bool(key, t); };
    } else if constexpr (std::is_integral_v<X>) {
      f.type = "int";
      f.get = [&ref] { return fmt::format("{}", ref); };
      f.set = [&ref, key](const std::string& t) { ref = parse_int<X>(key, t); };
    } else if constexpr (std::is_floating_point_v<X>) {
      f.type = "float";
      f.get = [&ref] { return fmt::format("{}", ref); };
      f.set = [&ref, key](const std::string& t) { ref = parse_float(key, t); };
    } else {
      f.type = type.empty() ? "string" : type;
      f.get = [&ref] { return ref; };
      f.set = [&ref](const std::string& t) { ref = t; };
    }
    list_.push_back(std::move(f));
  }
  std::vector<FieldInfo> take() { return std::move(list_); }

 private:
  std::vector<FieldInfo> list_;
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string section_of(const std::string& key) { return key.substr(0, key.find('.')); }

}  // namespace

std::vector<FieldInfo> fields(RunConfig& c) {
  FieldList f;
  f.add("model.vocab_size", c.vocab_size, "vocabulary rows of wte and lm_head; 0 = the tokenizer's vocabulary size");
  f.add("model.block_size", c.block_size, "longest sequence (rows of the position embedding)");
  f.add("model.n_layer", c.n_layer, "transformer blocks");
  f.add("model.n_head", c.n_head, "attention heads; must divide n_embd");
  f.add("model.n_embd", c.n_embd, "channels");
  f.add("data.corpus", c.corpus, "training text file (relative paths in a YAML file: relative to that file)", "path");
  f.add("data.tokenizer", c.tokenizer, "word (the original's word-level rule) or char");
  f.add("data.loader", c.loader, "sequential (the original's window order) or random windows");
  f.add("data.val_fraction", c.val_fraction, "fraction of tokens held out at the end for validation, in [0, 1)");
  f.add("train.batch_size", c.batch_size, "global batch rows per step");
  f.add("train.seq_len", c.seq_len, "tokens per row, <= model.block_size");
  f.add("train.steps", c.steps, "optimizer steps (the original's 'epochs': one global batch each)");
  f.add("train.seed", c.seed, "seed of the weights (Philox) and of random windows");
  f.add("train.threads", c.threads, "CPU threads; 0 = every core");
  f.add("train.eval_every", c.eval_every, "validation loss every N steps; 0 = never");
  f.add("train.eval_batches", c.eval_batches, "batches per validation evaluation");
  f.add("train.checkpoint_every", c.checkpoint_every, "training checkpoint every N steps; 0 = at the end only");
  f.add("train.save_checkpoint", c.save_checkpoint, "write training checkpoints (false: none, e.g. for benchmarks)");
  f.add("train.tf32", c.tf32,
        "CUDA stages: let cuBLAS use TF32 tensor cores for the matrix products (faster, ~1e-3 relative "
        "error; changes results); ignored on the CPU");
  f.add("train.peak_gflops", c.peak_gflops, "peak GFLOP/s for MFU; 0 = measure an SGEMM at start-up");
  f.add("train.grad_bucket_mb", c.grad_bucket_mb,
        "data parallel: gradient allreduce in buckets of this many MiB, started during backward; 0 = one "
        "allreduce after backward");
  f.add("optimizer.kind", c.optimizer, "adam_original (the reproduced project's Adam) or adamw");
  f.add("optimizer.lr", c.lr, "peak learning rate");
  f.add("optimizer.min_lr", c.min_lr, "final learning rate of the decay");
  f.add("optimizer.warmup_steps", c.warmup_steps, "linear warm-up steps (adamw)");
  f.add("optimizer.decay_steps", c.decay_steps, "steps over which the rate decays to min_lr");
  f.add("optimizer.beta1", c.beta1, "Adam beta1");
  f.add("optimizer.beta2", c.beta2, "Adam beta2");
  f.add("optimizer.eps", c.eps, "Adam epsilon");
  f.add("optimizer.weight_decay", c.weight_decay, "decoupled weight decay on matrices");
  f.add("optimizer.grad_clip", c.grad_clip, "global gradient-norm clip; 0 = off");
  f.add("generate.prompt_tokens", c.prompt_tokens, "prompt = the first N tokens of the corpus");
  f.add("generate.max_new_tokens", c.max_new_tokens, "tokens to generate (stops early at [EOS])");
  f.add("generate.temperature", c.temperature, "0 = greedy; > 0 samples softmax(logits / temperature)");
  f.add("generate.top_k", c.top_k, "sample among the k most likely tokens; 0 = all");
  f.add("generate.kv_cache", c.kv_cache, "use a key/value cache (same tokens as full recomputation)");
  f.add("generate.seed", c.sample_seed, "seed of the sampling draws");
  f.add("debug.fail_rank", c.fail_rank, "test-only: this rank throws at step debug.fail_step; -1 = never");
  f.add("debug.fail_step", c.fail_step, "test-only: the step at which debug.fail_rank throws");
  return f.take();
}

std::string closest_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = std::max<size_t>(3, key.size() / 3) + 1;
  for (const std::string& k : known) {
    size_t d = edit_distance(key, k);
    // A key given without its section, or in the wrong section, still matches its name.
    const std::string name = k.substr(k.find('.') + 1);
    if (key == name || key.substr(key.find('.') + 1) == name) d = std::min<size_t>(d, 1);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best;
}

void set_field(RunConfig& c, const std::string& key, const std::string& text, const std::string& where) {
  std::vector<FieldInfo> fs = fields(c);
  for (FieldInfo& f : fs) {
    if (f.key != key) continue;
    try {
      f.set(text);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: {}", where, e.what()));
    }
    return;
  }
  std::vector<std::string> known;
  for (const FieldInfo& f : fs) known.push_back(f.key);
  const std::string hint = closest_key(key, known);
  throw std::invalid_argument(fmt::format("{}: unknown key '{}'{}", where, key,
                                          hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
}

void load_yaml(RunConfig& c, const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(fmt::format("{}: cannot read the configuration file", path));
  } catch (const YAML::ParserException& e) {
    throw std::invalid_argument(
        fmt::format("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap()) {
    throw std::invalid_argument(fmt::format("{}:{}: expected a mapping of sections (model, data, train, "
                                            "optimizer, generate)", path, root.Mark().line + 1));
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::vector<std::string> sections;
  for (const FieldInfo& f : fields(c)) {
    if (std::find(sections.begin(), sections.end(), section_of(f.key)) == sections.end()) {
      sections.push_back(section_of(f.key));
    }
  }
  for (const auto& sec : root) {
    const std::string name = sec.first.as<std::string>();
    const std::string at = fmt::format("{}:{}", path, sec.first.Mark().line + 1);
    if (std::find(sections.begin(), sections.end(), name) == sections.end()) {
      const std::string hint = closest_key(name, sections);
      throw std::invalid_argument(fmt::format("{}: unknown section '{}'{}", at, name,
                                              hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
    }
    if (sec.second.IsNull()) continue;
    if (!sec.second.IsMap()) {
      throw std::invalid_argument(fmt::format("{}: section '{}' must be a mapping of keys", at, name));
    }
    for (const auto& kv : sec.second) {
      const std::string key = name + "." + kv.first.as<std::string>();
      const std::string where = fmt::format("{}:{}", path, kv.first.Mark().line + 1);
      if (!kv.second.IsScalar()) {
        throw std::invalid_argument(fmt::format("{}: {}: expected a single value", where, key));
      }
      std::string value = kv.second.as<std::string>();
      set_field(c, key, value, where);
      if (key == "data.corpus" && !value.empty() && std::filesystem::path(value).is_relative() && !dir.empty()) {
        c.corpus = (std::filesystem::path(dir) / value).lexically_normal().string();
      }
    }
  }
}

void validate(const RunConfig& c) {
  auto fail = [](const char* key, const std::string& what) {
    throw std::invalid_argument(fmt::format("{}: {}", key, what));
  };
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) fail(key, fmt::format("must be positive, got {}", v));
  };
  if (c.vocab_size < 0) fail("model.vocab_size", fmt::format("must be >= 0 (0 = from the tokenizer), got {}", c.vocab_size));
  positive("model.block_size", c.block_size);
  positive("model.n_layer", c.n_layer);
  positive("model.n_head", c.n_head);
  positive("model.n_embd", c.n_embd);
  if (c.n_embd % c.n_head != 0) {
    fail("model.n_embd", fmt::format("{} is not divisible by model.n_head {}", c.n_embd, c.n_head));
  }
  parse_tokenizer_kind(c.tokenizer);
  parse_loader_kind(c.loader);
  if (!(c.val_fraction >= 0 && c.val_fraction < 1)) {
    fail("data.val_fraction", fmt::format("must be in [0, 1), got {}", c.val_fraction));
  }
  positive("train.batch_size", c.batch_size);
  positive("train.seq_len", c.seq_len);
  if (c.seq_len > c.block_size) {
    fail("train.seq_len", fmt::format("{} exceeds model.block_size {}", c.seq_len, c.block_size));
  }
  positive("train.steps", c.steps);
  if (c.threads < 0) fail("train.threads", fmt::format("must be >= 0 (0 = every core), got {}", c.threads));
  if (c.eval_every < 0) fail("train.eval_every", fmt::format("must be >= 0, got {}", c.eval_every));
  positive("train.eval_batches", c.eval_batches);
  if (c.eval_every > 0 && c.val_fraction == 0) {
    fail("train.eval_every", "needs a validation split: set data.val_fraction > 0");
  }
  if (c.checkpoint_every < 0) fail("train.checkpoint_every", fmt::format("must be >= 0, got {}", c.checkpoint_every));
  if (c.peak_gflops < 0) fail("train.peak_gflops", fmt::format("must be >= 0, got {}", c.peak_gflops));
  if (c.grad_bucket_mb < 0) fail("train.grad_bucket_mb", fmt::format("must be >= 0, got {}", c.grad_bucket_mb));
  c.optimizer_config().validate();
  positive("generate.prompt_tokens", c.prompt_tokens);
  if (c.max_new_tokens < 0) fail("generate.max_new_tokens", fmt::format("must be >= 0, got {}", c.max_new_tokens));
  if (c.temperature < 0) fail("generate.temperature", fmt::format("must be >= 0, got {}", c.temperature));
  if (c.top_k < 0) fail("generate.top_k", fmt::format("must be >= 0, got {}", c.top_k));
}

Gpt2Config RunConfig::model_config(int tokenizer_vocab) const {
  Gpt2Config m{vocab_size > 0 ? vocab_size : tokenizer_vocab, block_size, n_layer, n_head, n_embd};
  if (tokenizer_vocab > m.V) {
    throw std::invalid_argument(fmt::format(
        "model.vocab_size: the tokenizer's vocabulary has {} tokens, more than vocab_size {}", tokenizer_vocab, m.V));
  }
  m.validate();
  return m;
}

OptimizerConfig RunConfig::optimizer_config() const {
  OptimizerConfig o;
  o.kind = parse_optimizer_kind(optimizer);
  o.lr = static_cast<float>(lr);
  o.min_lr = static_cast<float>(min_lr);
  o.warmup_steps = warmup_steps;
  o.decay_steps = decay_steps;
  o.beta1 = static_cast<float>(beta1);
  o.beta2 = static_cast<float>(beta2);
  o.eps = static_cast<float>(eps);
  o.weight_decay = static_cast<float>(weight_decay);
  o.grad_clip = static_cast<float>(grad_clip);
  return o;
}

std::string to_yaml(RunConfig c) {
  std::string out, section;
  for (const FieldInfo& f : fields(c)) {
    if (section_of(f.key) != section) {
      section = section_of(f.key);
      out += section + ":\n";
    }
    std::string v = f.get();
    if (f.type == "string" || f.type == "path") v = YAML::Dump(YAML::Node(v));
    out += fmt::format("  {}: {}\n", f.key.substr(f.key.find('.') + 1), v);
  }
  return out;
}

std::string fields_help(const std::vector<std::string>& sections) {
  RunConfig defaults;
  std::string out;
  for (const FieldInfo& f : fields(defaults)) {
    if (std::find(sections.begin(), sections.end(), section_of(f.key)) == sections.end()) continue;
    std::string def = f.get();
    if (def.empty()) def = "(none)";
    out += fmt::format("  --{:<24} {} [{}: {}]\n", f.key + " V", f.help, f.type, def);
  }
  return out;
}

}  // namespace gpt2
