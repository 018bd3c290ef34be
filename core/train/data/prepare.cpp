#include "train/data/prepare.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string_view>

#include "model/dataloader.h"
#include "train/data/corpus.h"
#include "train/data/shards.h"
#include "train/config/threads.h"
#include "util/console.h"
#include "util/files.h"
#include "util/json.h"

namespace gpt2 {

namespace {

namespace fs = std::filesystem;

// The previous prepare's files in `dir` (links included, never followed).
std::vector<fs::path> prepare_files_in(const fs::path& dir) {
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (is_prepare_file(e.path().filename().string())) found.push_back(e.path());
  }
  return found;
}

// The folder, before anything is read: absent or empty (or a previous
// prepare's, with --overwrite), none of the inputs, not a run's, not held.
void check_prepare_out(const fs::path& out, const std::vector<fs::path>& inputs, bool overwrite) {
  struct stat out_st {};
  if (::lstat(out.c_str(), &out_st) == 0 && S_ISDIR(out_st.st_mode)) {
    try {  // another prepare there: refused naming it (its holder record)
      const DirectoryLock probe(out, "--out", kPrepareHolderName);
    } catch (const std::runtime_error&) {  // unreadable: check_output or the lock below says so
    }
  }
  check_output(out, OutputRules{"--out", inputs, overwrite, true});
  if (overwrite) {  // an input among the files --overwrite replaces would be lost
    std::error_code ec;
    for (const fs::path& in : inputs) {
      if (is_prepare_file(in.filename().string()) && fs::equivalent(fs::absolute(in).parent_path(), out, ec)) {
        throw std::invalid_argument(fmt::format("--out: '{}' holds the input '{}', which --overwrite would remove; "
                                                "move it, or write elsewhere", out.string(), in.string()));
      }
    }
  }
}

// The documents' tokens, <|endoftext|> before each, encoded in batches of
// documents (so that the progress line moves), at most one thread a
// document; sets sum.seconds.
std::vector<int32_t> encode_stream(const BpeTokenizer& tok, const std::vector<std::string>& texts, PrepareSummary& sum,
                                   bool progress) {
  std::vector<int32_t> stream;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t batch = std::max<size_t>(1, static_cast<size_t>(sum.threads) * 4);
  uint64_t done_bytes = 0;
  for (size_t b = 0; b < texts.size(); b += batch) {
    std::vector<std::string_view> docs;
    for (size_t d = b; d < std::min(texts.size(), b + batch); ++d) docs.emplace_back(texts[d]);
    for (size_t i = 0; i < docs.size(); ++i) done_bytes += docs[i].size();
    const int threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(sum.threads), docs.size()));
    for (const std::vector<int32_t>& ids : encode_documents(tok, docs, threads)) {
      stream.push_back(tok.eot_id());
      stream.insert(stream.end(), ids.begin(), ids.end());
    }
    if (progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      console::err(fmt::format("\r[prepare] {}/{} documents, {:.1f} of {:.1f} MB, {} tokens, {:.1f} MB/s",
                               b + docs.size(), texts.size(), static_cast<double>(done_bytes) / 1e6,
                               static_cast<double>(sum.bytes) / 1e6, stream.size(),
                               s > 0 ? static_cast<double>(done_bytes) / 1e6 / s : 0.0));
    }
  }
  if (progress) console::err("\n");
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stream;
}

// Checked again once `out` is locked (another process may have written there since).
void check_locked_prepare_out(const fs::path& out, bool overwrite) {
  if (::access(out.c_str(), W_OK | X_OK) != 0) {
    throw std::invalid_argument(fmt::format("--out: '{}' is not writable: {}", out.string(), std::strerror(errno)));
  }
  std::error_code ec;
  if (!overwrite && !(fs::is_empty(out, ec) && !ec)) {
    throw std::invalid_argument(fmt::format("--out: '{}' exists and is not empty; choose another path, or give "
                                            "--overwrite to replace it", out.string()));
  }
}

// One part (train or val) as shards of at most `shard_tokens` tokens, each
// recorded in `written` before it is written (a failure removes them),
// in `sum` and in `manifest`.
void write_part(const fs::path& out, std::span<const int32_t> tokens, bool train, uint64_t shard_tokens, int vocab,
                PrepareSummary& sum, ShardManifest& manifest, std::vector<fs::path>& written) {
  for (uint64_t at = 0, k = 0; at < tokens.size(); at += shard_tokens, ++k) {
    const uint64_t n = std::min<uint64_t>(shard_tokens, tokens.size() - at);
    const std::string name = fmt::format("{}_{:06d}.bin", train ? "train" : "val", k);
    const fs::path path = out / name;
    written.push_back(path);
    write_shard(path, tokens.subspan(at, n), vocab);
    sum.shards.push_back(path.string());
    const uint64_t width = vocab <= 65536 ? 2 : 4;  // as write_shard picks it
    manifest.shards.push_back(ManifestShard{name, train, n, kShardHeaderInts * 4 + n * width});
  }
}

// The options, before anything is read (std::invalid_argument naming the option).
void check_request(const PrepareRequest& req) {
  if (req.inputs.empty()) throw std::invalid_argument("--input: give at least one text file (comma-separated)");
  if (req.encoder_json.empty() || req.vocab_bpe.empty()) {
    throw std::invalid_argument("--encoder_json and --vocab_bpe: GPT-2's tokenizer files are required (docs/tokenizer.md)");
  }
  if (req.out_dir.empty()) throw std::invalid_argument("--out: the folder for the shards is required");
  if (!(req.val_fraction >= 0 && req.val_fraction < 1)) {
    throw std::invalid_argument(fmt::format("data.val_fraction: {} is not in [0, 1)", req.val_fraction));
  }
  if (req.shard_tokens < 1 || req.shard_tokens > kMaxShardTokens) {
    throw std::invalid_argument(fmt::format("--shard_tokens: {} is not in [1, 2^31)", req.shard_tokens));
  }
  if (req.threads < 1) throw std::invalid_argument(fmt::format("train.threads: {} threads", req.threads));
  check_threads(req.threads, "train.threads");
}

}  // namespace

PrepareSummary prepare_shards(const PrepareRequest& req) {
  check_request(req);
  std::vector<fs::path> inputs(req.inputs.begin(), req.inputs.end());
  inputs.emplace_back(req.encoder_json);
  inputs.emplace_back(req.vocab_bpe);
  const fs::path out = req.out_dir;
  check_prepare_out(out, inputs, req.overwrite);
  TokenizerFiles files;  // the manifest records them
  BpeTokenizer tok = load_bpe_tokenizer(req.encoder_json, req.vocab_bpe, &files);
  if (tok.eot_id() < 0) {
    throw std::invalid_argument(fmt::format("encoder.json '{}': no <|endoftext|> token to separate documents",
                                            req.encoder_json));
  }
  ShardManifest manifest;
  manifest.encoder_json_fnv1a64 = files.encoder_json_fnv1a64;
  manifest.vocab_bpe_fnv1a64 = files.vocab_bpe_fnv1a64;
  PrepareSummary sum;
  sum.vocab = tok.size();
  manifest.vocab = tok.size();
  std::vector<std::string> texts;
  for (const std::string& path : req.inputs) {
    texts.push_back(read_input_file(path, uint64_t{1} << 34, "--input", "a text file"));
    sum.bytes += texts.back().size();
  }
  sum.documents = texts.size();
  sum.threads = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(req.threads), sum.documents));

  // The folder, made and locked for the rest of the prepare.
  {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec) throw std::invalid_argument(fmt::format("--out: cannot create '{}': {}", out.string(), ec.message()));
  }
  const DirectoryLock lock(out, "--out", kPrepareHolderName);
  check_locked_prepare_out(out, req.overwrite);
  const fs::path holder = out / kPrepareHolderName;
  write_file_atomically(holder, json_text(holder_info()) + "\n");
  std::vector<fs::path> written;
  const auto remove_quietly = [](const fs::path& p) {
    std::error_code ec;
    fs::remove(p, ec);
  };
  try {
    const std::vector<int32_t> stream = encode_stream(tok, texts, sum, req.progress);
    const std::span<const int32_t> all(stream);
    const Split split = split_tokens(all, req.val_fraction);
    sum.train_tokens = static_cast<uint64_t>(split.train.size());
    sum.val_tokens = static_cast<uint64_t>(split.val.size());
    // --overwrite: the previous prepare's files go now that the input is read
    // and encoded; its manifest first, so that no manifest ever lists a mix.
    if (req.overwrite) {
      remove_quietly(out / kManifestName);
      for (const fs::path& p : prepare_files_in(out)) {
        if (p.filename() != kPrepareHolderName) remove_quietly(p);
      }
    }
    for (const bool train : {true, false}) {
      write_part(out, train ? all.first(sum.train_tokens) : all.last(sum.val_tokens), train, req.shard_tokens,
                 tok.size(), sum, manifest, written);
    }
    manifest.train_tokens = sum.train_tokens;
    manifest.val_tokens = sum.val_tokens;
    // Last: a folder with a manifest is a finished prepare.
    sum.manifest = (out / kManifestName).string();
    write_file_atomically(out / kManifestName, manifest_text(manifest));
  } catch (...) {
    for (const fs::path& p : written) remove_quietly(p);
    remove_quietly(holder);
    throw;
  }
  remove_quietly(holder);
  return sum;
}

}  // namespace gpt2
