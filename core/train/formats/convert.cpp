#include "train/formats/convert.h"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

#include "model/bpe.h"
#include "train/data/corpus.h"
#include "train/formats/checkpoint.h"
#include "train/formats/checkpoint_store.h"
#include "train/formats/llmc_hf.h"
#include "train/formats/model_source.h"
#include "train/formats/sharded_checkpoint.h"
#include "util/files.h"
#include "util/text.h"

namespace gpt2 {

namespace fs = std::filesystem;

std::string import_hf(const std::string& dir, const std::string& encoder_json, const std::string& vocab_bpe,
                      const std::string& out, bool overwrite) {
  if (dir.empty()) throw std::invalid_argument("--hf: the Hugging Face model folder to import is required");
  if (out.empty()) throw std::invalid_argument("--out: the checkpoint to write is required");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {  // before the tokenizer: the folder itself is what is wrong
    throw std::invalid_argument(fmt::format("--hf: '{}' {}", excerpt(dir, 200),
                                            fs::exists(dir, ec) ? "is not a folder (the Hugging Face model folder: "
                                                                  "model.safetensors and config.json)"
                                                                : "does not exist"));
  }
  // The folder's own tokenizer files when it has them.
  const auto own = hf_tokenizer_files(dir);
  const std::string enc = own ? own->first : encoder_json, bpe = own ? own->second : vocab_bpe;
  if (enc.empty() || bpe.empty()) {
    throw std::invalid_argument(fmt::format("--hf: '{}' has no vocab.json and merges.txt: name GPT-2's tokenizer "
                                            "with data.encoder_json and data.vocab_bpe", dir));
  }
  check_output(out, OutputRules{"--out", {dir, enc, bpe}, overwrite, false});  // before any reading
  const Tokenizer tok = Tokenizer::gpt2(load_bpe_tokenizer(enc, bpe));
  const HfModel m = read_hf_gpt2(dir);
  if (tok.size() > m.config.valid_vocab()) {
    throw std::invalid_argument(fmt::format("--hf: '{}': its {} ids cannot hold the tokenizer's {} tokens", dir,
                                            m.config.valid_vocab(), tok.size()));
  }
  save_checkpoint(out, m.config, m.params, tok, nullptr, {{"import.hf", dir}});
  return fmt::format("imported {} ({}, {} parameters) into {}", dir, m.config.describe(), m.params.size(), out);
}

std::string export_checkpoint(const std::string& ckpt, const std::string& format, const std::string& out,
                              bool overwrite) {
  if (ckpt.empty()) throw std::invalid_argument("--checkpoint: the checkpoint to export is required");
  if (out.empty()) throw std::invalid_argument("--out: where to write the export is required");
  if (format != "llmc" && format != "hf") {
    throw std::invalid_argument(fmt::format("--format: '{}' (expected llmc or hf)", format));
  }
  check_output(out, OutputRules{"--out", {ckpt}, overwrite, format == "hf"});
  const Checkpoint ck = load_given_checkpoint(ckpt);
  model_format(format)->write(out, ck.config, ck.params, ck.tokenizer);  // the format's writer (model_source.h)
  if (format == "llmc") {
    return fmt::format("wrote {} as llm.c's model file {} ({}, {} parameters)", ckpt, out, ck.config.describe(),
                       ck.params.size());
  }
  return fmt::format("wrote {} as {}/model.safetensors and {}/config.json (GPT2LMHeadModel, {})", ckpt, out, out,
                     ck.config.describe());
}

std::string import_llmc(const std::string& file, const std::string& encoder_json, const std::string& vocab_bpe,
                        const std::string& out, bool overwrite) {
  if (file.empty()) throw std::invalid_argument("--llmc: the llm.c model file to import is required");
  if (out.empty()) throw std::invalid_argument("--out: the checkpoint to write is required");
  check_output(out, OutputRules{"--out", {file, encoder_json, vocab_bpe}, overwrite, false});  // before any reading
  const Tokenizer tok = Tokenizer::gpt2(load_bpe_tokenizer(encoder_json, vocab_bpe));
  const LlmcModel m = read_llmc_model(file);
  if (tok.size() > m.config.valid_vocab()) {
    throw std::invalid_argument(fmt::format("llm.c model '{}': its {} ids cannot hold the tokenizer's {} tokens", file,
                                            m.config.valid_vocab(), tok.size()));
  }
  save_checkpoint(out, m.config, m.params, tok, nullptr, {{"import.llmc", file}});
  return fmt::format("imported {} ({}, {} parameters) into {}", file, m.config.describe(), m.params.size(), out);
}

std::string merge_checkpoint(const std::string& dir, const std::string& out, bool overwrite) {
  if (dir.empty()) throw std::invalid_argument("--merge: the sharded checkpoint folder to read is required");
  if (out.empty()) throw std::invalid_argument("--out: the checkpoint file to write is required");
  const std::string given = given_checkpoint_file(dir);
  if (!is_sharded_checkpoint(given)) {
    throw std::invalid_argument(fmt::format("--merge: '{}' is not a sharded checkpoint folder (no {})", dir, kManifestFile));
  }
  check_output(out, OutputRules{"--out", {dir, given}, overwrite, false});  // nothing inside the folder read
  const ShardedCheckpoint sharded(given);
  Checkpoint ck = merge_sharded(sharded);
  // The header's entries past the standard ones (the curve's, the run id) go back as they were.
  const KeyValues standard = checkpoint_header(ck.config, ck.tokenizer, &*ck.training, {});
  KeyValues extra;
  for (const auto& kv : ck.header) {
    if (std::none_of(standard.begin(), standard.end(), [&](const auto& s) { return s.first == kv.first; })) extra.push_back(kv);
  }
  save_checkpoint(out, ck.config, ck.params, ck.tokenizer, &*ck.training, extra);
  return fmt::format("merged {} rank files of step {} ({} parameters) into {}", sharded.files().size(), sharded.step(),
                     ck.params.size(), out);
}

std::string split_checkpoint(const std::string& file, int ranks, const std::string& out, bool overwrite) {
  if (file.empty()) throw std::invalid_argument("--split: the checkpoint file to read is required");
  if (out.empty()) throw std::invalid_argument("--out: the folder to write is required");
  if (ranks < 1 || ranks > 65536) throw std::invalid_argument(fmt::format("--ranks: {} is not a rank count (1 to 65536)", ranks));
  check_output(out, OutputRules{"--out", {file}, overwrite, true});
  const Checkpoint ck = load_given_checkpoint(file);
  if (!ck.training) {
    throw std::invalid_argument(fmt::format("--split: '{}' is a model checkpoint: a sharded checkpoint holds a "
                                            "training state (parameters and Adam moments)", file));
  }
  KeyValues header = ck.header;
  const std::string* id = ck.find("run.id");
  const std::string run_id = id ? *id : "";
  if (!id) header.emplace_back("run.id", run_id);  // a version-2 file: no run recorded
  const fs::path dir(out);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(fmt::format("{}: cannot create: {}", out, ec.message()));
  // --overwrite: the manifest first (the folder is no checkpoint from here
  // until the new one is written), then every rank file of an earlier split,
  // of any count.
  for (const char* stale : {kManifestFile, kVocabularyFile}) fs::remove(dir / stale, ec);
  std::vector<fs::path> stale_ranks;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (is_rank_file_name(e.path().filename().string())) stale_ranks.push_back(e.path());
  }
  for (const fs::path& f : stale_ranks) fs::remove(f, ec);
  const size_t n = ck.params.size();
  std::vector<RankFile> files;
  const RankArrays at{{const_cast<float*>(ck.params.data()), false},
                      {const_cast<float*>(ck.training->m.data()), false},
                      {const_cast<float*>(ck.training->v.data()), false}};
  for (int r = 0; r < ranks; ++r) {
    RankPart part;
    const size_t lo = n * static_cast<size_t>(r) / static_cast<size_t>(ranks);
    const size_t hi = n * static_cast<size_t>(r + 1) / static_cast<size_t>(ranks);
    if (hi > lo) part.ranges = {{lo, hi, lo}};
    files.push_back(write_rank_file(dir, r, ck.training->steps_done, run_id, ck.config, part, at, false));
  }
  sync_filesystem(dir);  // the rank files at once, not an fsync each (--ranks 65536 of a tiny model)
  sync_directory(dir);
  write_manifest(dir, ck.training->steps_done, run_id, ck.config, header, vocabulary_bytes(ck.tokenizer), files);
  return fmt::format("split {} (step {}, {} parameters) into {} rank files in {}", file, ck.training->steps_done, n,
                     ranks, out);
}

}  // namespace gpt2
