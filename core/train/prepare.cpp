#include "train/prepare.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string_view>

#include "model/dataloader.h"
#include "train/corpus.h"
#include "train/shards.h"
#include "util/files.h"

namespace gpt2 {

PrepareSummary prepare_shards(const PrepareRequest& req) {
  if (req.inputs.empty()) throw std::invalid_argument("--input: give at least one text file (comma-separated)");
  if (req.encoder_json.empty() || req.vocab_bpe.empty()) {
    throw std::invalid_argument("--encoder_json and --vocab_bpe: GPT-2's tokenizer files are required (docs/tokenizer.md)");
  }
  if (req.out_dir.empty()) throw std::invalid_argument("--out: the folder for the shards is required");
  if (!(req.val_fraction >= 0 && req.val_fraction < 1)) {
    throw std::invalid_argument(fmt::format("data.val_fraction: {} is not in [0, 1)", req.val_fraction));
  }
  if (req.shard_tokens < 1 || req.shard_tokens > 0x7FFFFFFFu) {
    throw std::invalid_argument(fmt::format("--shard_tokens: {} is not in [1, 2^31)", req.shard_tokens));
  }
  BpeTokenizer tok = load_bpe_tokenizer(req.encoder_json, req.vocab_bpe);
  if (tok.eot_id() < 0) {
    throw std::invalid_argument(fmt::format("encoder.json '{}': no <|endoftext|> token to separate documents",
                                            req.encoder_json));
  }
  PrepareSummary sum;
  sum.vocab = tok.size();
  std::vector<std::string> texts;
  for (const std::string& path : req.inputs) {
    texts.push_back(read_input_file(path, uint64_t{1} << 34, "--input", "a text file"));
    sum.bytes += texts.back().size();
  }
  sum.documents = texts.size();
  // Encode in batches of documents, so that the progress line moves.
  std::vector<int32_t> stream;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t batch = std::max<size_t>(1, static_cast<size_t>(req.threads) * 4);
  uint64_t done_bytes = 0;
  for (size_t b = 0; b < texts.size(); b += batch) {
    std::vector<std::string_view> docs;
    for (size_t d = b; d < std::min(texts.size(), b + batch); ++d) docs.emplace_back(texts[d]);
    for (size_t i = 0; i < docs.size(); ++i) done_bytes += docs[i].size();
    for (const std::vector<int32_t>& ids : encode_documents(tok, docs, req.threads)) {
      stream.push_back(tok.eot_id());
      stream.insert(stream.end(), ids.begin(), ids.end());
    }
    if (req.progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "\r[prepare] {}/{} documents, {:.1f} of {:.1f} MB, {} tokens, {:.1f} MB/s", b + docs.size(),
                 texts.size(), static_cast<double>(done_bytes) / 1e6, static_cast<double>(sum.bytes) / 1e6,
                 stream.size(), s > 0 ? static_cast<double>(done_bytes) / 1e6 / s : 0.0);
      std::fflush(stderr);
    }
  }
  if (req.progress) fmt::print(stderr, "\n");
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::span<const int32_t> all(stream);
  const Split split = split_tokens(all, req.val_fraction);
  sum.train_tokens = static_cast<uint64_t>(split.train.size());
  sum.val_tokens = static_cast<uint64_t>(split.val.size());
  std::filesystem::create_directories(req.out_dir);
  const auto write_part = [&](std::span<const int32_t> tokens, const char* name) {
    for (uint64_t at = 0, k = 0; at < tokens.size(); at += req.shard_tokens, ++k) {
      const uint64_t n = std::min<uint64_t>(req.shard_tokens, tokens.size() - at);
      const std::string path = (std::filesystem::path(req.out_dir) / fmt::format("{}_{:06d}.bin", name, k)).string();
      write_shard(path, tokens.subspan(at, n), tok.size());
      sum.shards.push_back(path);
    }
  };
  write_part(all.first(sum.train_tokens), "train");
  write_part(all.last(sum.val_tokens), "val");
  return sum;
}

}  // namespace gpt2
