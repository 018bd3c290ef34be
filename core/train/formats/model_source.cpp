#include "train/formats/model_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "model/params.h"
#include "train/formats/checkpoint.h"
#include "train/data/corpus.h"
#include "train/formats/llmc_hf.h"
#include "train/formats/sharded_checkpoint.h"
#include "util/fields.h"
#include "util/files.h"

namespace gpt2 {

Checkpoint load_given_checkpoint(const std::string& path) {
  const std::string file = given_checkpoint_file(path);
  if (is_sharded_checkpoint(file)) return merge_sharded(ShardedCheckpoint(file));  // the whole model: serial commands
  try {
    return load_checkpoint(file);
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(e.what());
  }
}

CheckpointBytes checkpoint_bytes(CheckpointFormat format, const Gpt2Config& cfg, const RankHolding& holding) {
  CheckpointBytes b;
  if (format == CheckpointFormat::kFile) {
    if (holding.root) b.write = b.read = 3 * param_count(cfg) * sizeof(float);
    return b;
  }
  b.write = rank_file_bytes(cfg, holding.written, std::string(16, '0'));  // run ids are 16 hex digits (run/run_dir.h)
  RankPart part = holding.written;
  part.ranges = holding.moments_read;
  b.read = 2 * ShardedCheckpoint::part_bytes(cfg, part);
  part.ranges = holding.params_read;
  b.read += ShardedCheckpoint::part_bytes(cfg, part);
  return b;
}

std::string stored_checkpoint_problem(const std::filesystem::path& file) {
  if (!is_sharded_checkpoint(file)) return checkpoint_bytes_problem(file.string());
  try {
    const ShardedCheckpoint ck(file);
    for (size_t i = 0; i < ck.files().size(); ++i) {
      if (std::string why = ck.verify(i); !why.empty()) return why;
    }
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string t = "(";
  for (size_t i = 0; i < shape.size(); ++i) t += fmt::format("{}{}", i ? ", " : "", shape[i]);
  return t + ")";
}

// The model section's settings other than the vocabulary's rows and the
// initialisation, as key/value text (Fields, util/fields.h).
KeyValues function_settings(const Gpt2Config& c) {
  Gpt2Config copy = c.resolved();
  Fields f;
  f.add_section("model", copy);
  KeyValues out;
  for (auto& [k, v] : f.values()) {
    if (k != "model.vocab_size" && k != "model.vocab_valid" && k != "model.init") out.emplace_back(k, v);
  }
  return out;
}

}  // namespace

namespace {

class HfFolder final : public ModelFormat {
 public:
  const char* name() const override { return "hf"; }
  bool recognises(const std::filesystem::path& path, bool folder, const char (&)[8]) const override {
    return folder && std::filesystem::exists(path / "config.json");
  }
  ModelWeights read(const std::string& path) const override {
    HfModel m = read_hf_gpt2(path);
    ModelWeights w{m.config, std::move(m.params), name(), std::nullopt};
    if (const auto files = hf_tokenizer_files(path)) {
      w.tokenizer = Tokenizer::gpt2(load_bpe_tokenizer(files->first, files->second));
    }
    return w;
  }
  void write(const std::string& out, const Gpt2Config& cfg, std::span<const float> params,
             const Tokenizer& tok) const override {
    write_hf_gpt2(out, cfg, params, tok);
  }
};

class LlmcFile final : public ModelFormat {
 public:
  const char* name() const override { return "llm.c"; }
  bool recognises(const std::filesystem::path&, bool folder, const char (&magic)[8]) const override {
    int32_t word = 0;
    std::memcpy(&word, magic, sizeof word);
    return !folder && word == kLlmcModelMagic;
  }
  ModelWeights read(const std::string& path) const override {
    LlmcModel m = read_llmc_model(path);
    return {m.config, std::move(m.params), name(), std::nullopt};
  }
  void write(const std::string& out, const Gpt2Config& cfg, std::span<const float> params,
             const Tokenizer&) const override {
    write_llmc_model(out, cfg, params);
  }
};

// Ours: a checkpoint file, or a folder standing for one (a run's step folder, a sharded checkpoint).
class OurCheckpoint final : public ModelFormat {
 public:
  const char* name() const override { return "checkpoint"; }
  bool recognises(const std::filesystem::path&, bool folder, const char (&magic)[8]) const override {
    return folder || std::memcmp(magic, "GPT2CKPT", 8) == 0;
  }
  ModelWeights read(const std::string& path) const override {
    Checkpoint ck = load_given_checkpoint(path);
    if (const std::string bad = non_finite_tensor(ck.config, ck.params); !bad.empty()) {
      throw std::invalid_argument(fmt::format("checkpoint '{}': {}", path, bad));
    }
    return {ck.config.resolved(), std::move(ck.params), name(), std::move(ck.tokenizer)};
  }
  void write(const std::string& out, const Gpt2Config& cfg, std::span<const float> params,
             const Tokenizer& tok) const override {
    save_checkpoint(out, cfg, params, tok, nullptr, {});
  }
};

}  // namespace

const std::vector<const ModelFormat*>& model_formats() {
  static const HfFolder hf;
  static const LlmcFile llmc;
  static const OurCheckpoint ours;
  static const std::vector<const ModelFormat*> all = {&hf, &llmc, &ours};
  return all;
}

const ModelFormat* model_format(const std::string& name) {
  for (const ModelFormat* f : model_formats()) {
    if (name == f->name() || (name == "llmc" && std::string(f->name()) == "llm.c")) return f;
  }
  return nullptr;
}

ModelWeights read_model_weights(const std::string& path, const std::string& key) {
  namespace fs = std::filesystem;
  const auto wrap = [&](const std::exception& e) {
    return std::invalid_argument(fmt::format("{}: {}", key, e.what()));
  };
  std::error_code ec;
  if (!fs::exists(path, ec)) throw std::invalid_argument(fmt::format("{}: '{}' does not exist", key, path));
  try {
    const bool folder = fs::is_directory(path);
    char magic[8] = {};
    if (!folder) {  // through the bounded reader: a FIFO or a device is refused by its type, never opened to read
      InputFile in(path, std::numeric_limits<uint64_t>::max(), "", "a model file");
      in.read(magic, static_cast<size_t>(std::min<uint64_t>(in.size(), sizeof magic)));
    }
    for (const ModelFormat* f : model_formats()) {
      if (f->recognises(path, folder, magic)) return f->read(path);
    }
    throw std::invalid_argument(fmt::format("'{}' is none of the model files it reads: our checkpoint, llm.c's "
                                            "model file, a Hugging Face folder (config.json and safetensors)",
                                            path));
  } catch (const std::invalid_argument& e) {
    throw wrap(e);
  } catch (const std::runtime_error& e) {
    throw wrap(e);
  }
}

std::vector<float> fit_weights(const ModelWeights& w, const Gpt2Config& want_cfg, const std::string& key,
                               const std::string& path) {
  const Gpt2Config have = w.config.resolved(), want = want_cfg.resolved();
  ParamTensors ph, pw;
  const std::vector<ParamInfo> lh = layout(have, ph), lw = layout(want, pw);
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument(fmt::format("{}: '{}': {}", key, path, why));
  };
  // Tensor by tensor first, so that a model of other sizes is named by its first tensor that differs.
  for (size_t i = 0; i < std::max(lh.size(), lw.size()); ++i) {
    if (i >= lh.size() || i >= lw.size() || lh[i].name != lw[i].name) {
      refuse(i >= lh.size()   ? fmt::format("tensor {}: the file has none{}", lw[i].name,
                                            lw[i].name == "lm_head" ? " (its head is tied to wte: model.tie_embeddings true)" : "")
             : i >= lw.size() ? fmt::format("tensor {}: this run's model has none", lh[i].name)
                              : fmt::format("tensor {} where this run's model has {}", lh[i].name, lw[i].name));
    }
    const bool rows = lh[i].name == "wte" || lh[i].name == "lm_head";
    if (lh[i].shape == lw[i].shape || (rows && lh[i].shape[1] == lw[i].shape[1])) continue;
    refuse(fmt::format("tensor {} is {} in the file but {} in this run's model", lh[i].name, shape_text(lh[i].shape),
                       shape_text(lw[i].shape)));
  }
  if (have.valid_vocab() != want.valid_vocab()) {
    refuse(fmt::format("the file's model has {} token ids, this run's {} (model.vocab_size, model.vocab_valid)",
                       have.valid_vocab(), want.valid_vocab()));
  }
  const KeyValues a = function_settings(have), b = function_settings(want);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second != b[i].second) {
      refuse(fmt::format("the file's model has {} = {}, this run's {}", a[i].first, a[i].second, b[i].second));
    }
  }
  std::vector<float> out(param_count(want), 0.0f);
  for (size_t i = 0; i < lh.size(); ++i) {
    const size_t n = std::min(lh[i].count(), lw[i].count());  // the embedding rows both have; the rest are zeros
    std::copy_n(w.params.begin() + static_cast<std::ptrdiff_t>(lh[i].offset), n,
                out.begin() + static_cast<std::ptrdiff_t>(lw[i].offset));
  }
  return out;
}

}  // namespace gpt2
