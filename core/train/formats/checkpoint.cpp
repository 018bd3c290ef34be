#include "train/formats/checkpoint.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <stdexcept>

#include "train/formats/checkpoint_store.h"
#include "util/fields.h"
#include "util/files.h"
#include "util/hash.h"

namespace gpt2 {

namespace {

constexpr char kMagic[8] = {'G', 'P', 'T', '2', 'C', 'K', 'P', 'T'};

class Out {
 public:
  template <typename X>
  void put(X x) {
    bytes(&x, sizeof x);
  }
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    buf_.insert(buf_.end(), c, c + n);
  }
  void text(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  void floats(std::span<const float> v) { bytes(v.data(), v.size() * sizeof(float)); }
  std::vector<unsigned char>& data() { return buf_; }

 private:
  std::vector<unsigned char> buf_;
};

class In {
 public:
  In(const std::vector<unsigned char>& b, size_t begin, size_t end, const std::string& path)
      : b_(b), end_(end), pos_(begin), path_(path) {}
  template <typename X>
  X get(const char* what) {
    X x;
    bytes(&x, sizeof x, what);
    return x;
  }
  void bytes(void* p, size_t n, const char* what) {
    if (n > end_ - pos_) {
      throw std::runtime_error(fmt::format("{}: truncated checkpoint: {} runs past the end of the data", path_, what));
    }
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
  }
  std::string text(const char* what) {
    const uint32_t len = get<uint32_t>(what);
    if (len > remaining()) {
      throw std::runtime_error(fmt::format("{}: truncated checkpoint: {} runs past the end of the data", path_, what));
    }
    std::string s(len, '\0');
    bytes(s.data(), len, what);
    return s;
  }
  std::vector<float> floats(uint64_t n, const char* what) {
    if (n > (end_ - pos_) / sizeof(float)) {
      throw std::runtime_error(fmt::format("{}: truncated checkpoint: {} runs past the end of the data", path_, what));
    }
    std::vector<float> v(n);
    bytes(v.data(), n * sizeof(float), what);
    return v;
  }
  size_t remaining() const { return end_ - pos_; }

 private:
  const std::vector<unsigned char>& b_;
  size_t end_;
  size_t pos_;
  const std::string& path_;
};

// The model keys of the architecture variants (model/config.h).
bool is_variant_key(const std::string& key) {
  const auto& names = Gpt2Config::variant_keys();
  return key.starts_with("model.") && std::find(names.begin(), names.end(), key.substr(6)) != names.end();
}

// The key/value text of a section (util/fields.h), e.g. "model.n_embd" = "384".
template <typename Section>
KeyValues section_values(const char* name, Section s) {
  Fields f;
  f.add_section(name, s);
  return f.values();
}

// Sets every field of section `name` from the header; each must be present.
template <typename Section>
void read_section(const char* name, Section& s, const Checkpoint& ck, const std::string& path) {
  Fields f;
  f.add_section(name, s);
  for (const Field& field : f.list()) {
    const std::string* v = ck.find(field.key);
    // model.init and the architecture keys came later: a checkpoint without
    // them holds the default GPT-2 (the fields' defaults), initialised by Philox.
    if (v == nullptr && (field.key == "model.init" || is_variant_key(field.key))) continue;
    if (v == nullptr) throw std::runtime_error(fmt::format("{}: invalid checkpoint: the header has no {}", path, field.key));
    try {
      field.set(*v);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(fmt::format("{}: invalid checkpoint: header entry {}", path, e.what()));
    }
  }
}

template <typename Int>
Int header_int(const Checkpoint& ck, const char* key, const std::string& path) {
  const std::string* v = ck.find(key);
  if (v == nullptr) throw std::runtime_error(fmt::format("{}: invalid checkpoint: the header has no {}", path, key));
  try {
    if constexpr (std::is_signed_v<Int>) return static_cast<Int>(parse_int64(key, *v));
    else return static_cast<Int>(parse_uint64(key, *v));
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: header entry {}", path, e.what()));
  }
}

std::vector<std::string> read_vocab(In& in, const std::string& path) {
  const uint32_t count = in.get<uint32_t>("vocabulary size");
  if (count > in.remaining()) throw std::runtime_error(fmt::format("{}: truncated checkpoint: vocabulary", path));
  std::vector<std::string> vocab(count);
  for (std::string& t : vocab) t = in.text("vocabulary entry");
  return vocab;
}

// Version 1: the model sizes, the tokenizer kind and the optimizer's settings
// at fixed offsets; its values are given back under the version 2 names.
void read_v1_body(In& in, uint32_t flags, Checkpoint& ck, TokenizerKind& kind, std::vector<std::string>& vocab,
                  const std::string& path) {
  ck.config.V = in.get<int32_t>("vocab_size");
  ck.config.T = in.get<int32_t>("block_size");
  ck.config.L = in.get<int32_t>("n_layer");
  ck.config.NH = in.get<int32_t>("n_head");
  ck.config.C = in.get<int32_t>("n_embd");
  kind = static_cast<TokenizerKind>(in.get<uint8_t>("tokenizer kind"));
  if (kind != TokenizerKind::kWord && kind != TokenizerKind::kChar) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: unknown tokenizer kind", path));
  }
  vocab = read_vocab(in, path);
  const uint64_t n = in.get<uint64_t>("parameter count");
  ck.params = in.floats(n, "parameters");
  ck.header = section_values("model", ck.config);
  ck.header.emplace_back("data.tokenizer", to_string(kind));
  if (flags & 1u) {
    TrainingState s;
    OptimizerConfig& o = s.optimizer;
    const uint32_t k = in.get<uint32_t>("optimizer kind");
    if (k > static_cast<uint32_t>(OptimizerKind::kAdamW)) {
      throw std::runtime_error(fmt::format("{}: invalid checkpoint: unknown optimizer kind {}", path, k));
    }
    o.kind = static_cast<OptimizerKind>(k);
    o.lr = in.get<float>("lr");
    o.min_lr = in.get<float>("min_lr");
    o.warmup_steps = in.get<int64_t>("warmup_steps");
    o.decay_steps = in.get<int64_t>("decay_steps");
    for (float* f : {&o.beta1, &o.beta2, &o.eps, &o.weight_decay, &o.grad_clip}) *f = in.get<float>("optimizer");
    s.steps_done = in.get<int64_t>("step");
    s.loader_position = in.get<int64_t>("loader position");
    s.loader_batches = in.get<int64_t>("loader batches");
    s.seed = in.get<uint64_t>("seed");
    s.m = in.floats(n, "Adam m");
    s.v = in.floats(n, "Adam v");
    for (auto& kv : section_values("optimizer", o)) ck.header.push_back(std::move(kv));
    ck.header.emplace_back("train.seed", std::to_string(s.seed));
    ck.header.emplace_back("state.steps_done", std::to_string(s.steps_done));
    ck.header.emplace_back("state.loader_position", std::to_string(s.loader_position));
    ck.header.emplace_back("state.loader_batches", std::to_string(s.loader_batches));
    ck.training = std::move(s);
  }
}

// A version-2/3 header's fields into `ck` (its header already filled): the
// model configuration, the tokenizer kind and, with `training`, the
// optimizer, seed and counters (no arrays).
void read_header_fields(Checkpoint& ck, bool training, TokenizerKind& kind, const std::string& path) {
  read_section("model", ck.config, ck, path);
  const std::string* tok = ck.find("data.tokenizer");
  if (tok == nullptr) throw std::runtime_error(fmt::format("{}: invalid checkpoint: the header has no data.tokenizer", path));
  try {
    kind = parse_tokenizer_kind(*tok);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: header entry {}", path, e.what()));
  }
  if (!training) return;
  TrainingState s;
  read_section("optimizer", s.optimizer, ck, path);
  s.seed = header_int<uint64_t>(ck, "train.seed", path);
  s.steps_done = header_int<int64_t>(ck, "state.steps_done", path);
  s.loader_position = header_int<int64_t>(ck, "state.loader_position", path);
  s.loader_batches = header_int<int64_t>(ck, "state.loader_batches", path);
  for (auto [key, v] : {std::pair("state.steps_done", s.steps_done), {"state.loader_position", s.loader_position},
                        {"state.loader_batches", s.loader_batches}}) {
    if (v < 0) throw std::runtime_error(fmt::format("{}: invalid checkpoint: header entry {} is {} (negative)", path, key, v));
  }
  ck.training = std::move(s);
}

void read_v2_body(In& in, uint32_t flags, Checkpoint& ck, TokenizerKind& kind, std::vector<std::string>& vocab,
                  const std::string& path) {
  const uint32_t pairs = in.get<uint32_t>("header size");
  if (pairs > in.remaining()) throw std::runtime_error(fmt::format("{}: truncated checkpoint: header", path));
  for (uint32_t i = 0; i < pairs; ++i) {
    std::string key = in.text("header key");
    std::string value = in.text("header value");
    ck.header.emplace_back(std::move(key), std::move(value));
  }
  read_header_fields(ck, (flags & 1u) != 0, kind, path);
  vocab = read_vocab(in, path);
  const uint64_t n = in.get<uint64_t>("parameter count");
  ck.params = in.floats(n, "parameters");
  if (ck.training) {
    ck.training->m = in.floats(n, "Adam m");
    ck.training->v = in.floats(n, "Adam v");
  }
}

void write_atomically(const std::string& path, const std::vector<unsigned char>& data) {
  // A fresh temporary, created exclusively and not through a link, renamed over `path`.
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  std::error_code ec;
  if (std::filesystem::is_regular_file(std::filesystem::symlink_status(tmp, ec))) std::filesystem::remove(tmp, ec);
  std::FILE* f = ::fdopen(create_new_file(tmp), "wb");
  if (!f) throw std::runtime_error(fmt::format("{}: cannot write checkpoint: {}", tmp, std::strerror(errno)));
  bool ok = std::fwrite(data.data(), 1, data.size(), f) == data.size();
  ok = std::fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: writing checkpoint failed: {}", path, why));
  }
  // The rename is durable once the folder is synced too (a crash after the
  // return cannot bring back the old name's file).
  try {
    sync_directory(std::filesystem::path(path).parent_path());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
  }
}

}  // namespace

const std::string* Checkpoint::find(const std::string& key) const {
  for (const auto& [k, v] : header) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {
void put_vocab(Out& out, const Tokenizer& tokenizer) {
  out.put<uint32_t>(static_cast<uint32_t>(tokenizer.vocab().size()));
  for (const std::string& t : tokenizer.vocab()) out.text(t);
}
}  // namespace

KeyValues checkpoint_header(const Gpt2Config& config, const Tokenizer& tokenizer, const TrainingState* training,
                            const KeyValues& extra) {
  KeyValues header = section_values("model", config.resolved());
  header.emplace_back("data.tokenizer", to_string(tokenizer.kind()));
  if (training) {
    for (auto& kv : section_values("optimizer", training->optimizer)) header.push_back(std::move(kv));
    header.emplace_back("train.seed", std::to_string(training->seed));
    header.emplace_back("state.steps_done", std::to_string(training->steps_done));
    header.emplace_back("state.loader_position", std::to_string(training->loader_position));
    header.emplace_back("state.loader_batches", std::to_string(training->loader_batches));
  }
  for (const auto& kv : extra) header.push_back(kv);
  return header;
}

std::string vocabulary_bytes(const Tokenizer& tokenizer) {
  Out out;
  put_vocab(out, tokenizer);
  return std::string(out.data().begin(), out.data().end());
}

Checkpoint checkpoint_from_header(KeyValues header, bool training, const std::string& vocabulary,
                                  const std::string& path) {
  Checkpoint ck;
  ck.header = std::move(header);
  TokenizerKind kind = TokenizerKind::kWord;
  read_header_fields(ck, training, kind, path);
  const std::vector<unsigned char> bytes(vocabulary.begin(), vocabulary.end());
  In in(bytes, 0, bytes.size(), path);
  std::vector<std::string> vocab = read_vocab(in, path);
  if (in.remaining() != 0) throw std::runtime_error(fmt::format("{}: invalid checkpoint: bytes after the vocabulary", path));
  try {
    ck.config.validate();
    ck.tokenizer = Tokenizer::from_vocab(kind, std::move(vocab));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: {}", path, e.what()));
  }
  if (ck.tokenizer.size() > ck.config.V) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: vocabulary of {} exceeds vocab_size {}", path,
                                         ck.tokenizer.size(), ck.config.V));
  }
  return ck;
}

void save_checkpoint(const std::string& path, const Gpt2& model, const Tokenizer& tokenizer,
                     const Optimizer* optimizer, const TrainingState* training, const KeyValues& extra) {
  if ((optimizer == nullptr) != (training == nullptr)) {
    throw std::invalid_argument("save_checkpoint: optimizer and training state go together");
  }
  if (model.tp().size > 1) throw std::invalid_argument("save_checkpoint: a tensor-parallel shard is not a model");
  std::optional<TrainingState> ts;
  if (training) {
    ts = *training;
    ts->optimizer = optimizer->config();
    ts->steps_done = optimizer->steps_done();
    ts->m = optimizer->m_to_host();
    ts->v = optimizer->v_to_host();
  }
  save_checkpoint(path, model.config(), model.params_to_host(), tokenizer, ts ? &*ts : nullptr, extra);
}

void save_checkpoint(const std::string& path, const Gpt2Config& config, std::span<const float> params,
                     const Tokenizer& tokenizer, const TrainingState* training, const KeyValues& extra) {
  const size_t n = params.size();
  if (n != param_count(config) || (training && (training->m.size() != n || training->v.size() != n))) {
    throw std::invalid_argument("save_checkpoint: the arrays do not match the model configuration");
  }
  const KeyValues header = checkpoint_header(config, tokenizer, training, extra);

  Out out;
  out.bytes(kMagic, sizeof kMagic);
  out.put<uint32_t>(kCheckpointVersion);
  out.put<uint32_t>(training ? 1u : 0u);
  out.put<uint64_t>(0);  // the file size, filled in below
  out.put<uint32_t>(static_cast<uint32_t>(header.size()));
  for (const auto& [k, v] : header) {
    out.text(k);
    out.text(v);
  }
  put_vocab(out, tokenizer);
  out.put<uint64_t>(n);
  out.floats(params);
  if (training) {
    out.floats(training->m);
    out.floats(training->v);
  }
  const uint64_t size = out.data().size() + sizeof(uint64_t);
  std::memcpy(out.data().data() + 16, &size, sizeof size);
  out.put<uint64_t>(fnv1a64(out.data().data(), out.data().size()));
  write_atomically(path, out.data());
}

namespace {

// The bytes of a checkpoint file, read with its kind, size and header checked
// before the body: a device or FIFO is refused by its type (util/files.h),
// the magic is read first, and a version-2/3 file's recorded size must equal
// the file's before the rest is read (a huge sparse file, or a truncated
// one, costs nothing). Fills version and flags.
// The first bytes `b` (up to 24) of a checkpoint file of `file_size` bytes:
// its magic, its version and (versions 2 and 3) its recorded size, checked;
// throws std::runtime_error naming `path`.
void check_head(const std::vector<unsigned char>& b, uint64_t file_size, const std::string& path, uint32_t& version,
                uint32_t& flags) {
  if (b.size() < sizeof kMagic || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) {
    throw std::runtime_error(fmt::format("{}: not a checkpoint (no GPT2CKPT magic)", path));
  }
  if (b.size() < sizeof kMagic + 8 + 8) throw std::runtime_error(fmt::format("{}: truncated checkpoint", path));
  std::memcpy(&version, b.data() + 8, 4);
  std::memcpy(&flags, b.data() + 12, 4);
  if (version < 1 || version > 3) {
    throw std::runtime_error(fmt::format("{}: checkpoint format version {}, this program reads versions 1 to 3",
                                         path, version));
  }
  if (version >= 2) {
    uint64_t size = 0;
    std::memcpy(&size, b.data() + 16, sizeof size);
    if (file_size < size) {
      throw std::runtime_error(
          fmt::format("{}: truncated checkpoint: {} bytes of the {} it was written with", path, file_size, size));
    }
    if (file_size != size || size < 32) {  // 32: the 24 header bytes and the checksum
      throw std::runtime_error(
          fmt::format("{}: corrupted checkpoint: {} bytes, but it records {}", path, file_size, size));
    }
  }
}

std::vector<unsigned char> read_checkpoint_bytes(const std::string& path, uint32_t& version, uint32_t& flags) {
  InputFile f(path, kMaxCheckpointBytes, "", "a checkpoint file");
  std::vector<unsigned char> b(static_cast<size_t>(std::min<uint64_t>(f.size(), 24)));
  f.read(b.data(), b.size());
  check_head(b, f.size(), path, version, flags);
  const std::string rest = f.read_rest();
  b.insert(b.end(), rest.begin(), rest.end());
  return b;
}

}  // namespace

std::string checkpoint_bytes_problem(const std::string& path) {
  try {
    InputFile f(path, kMaxCheckpointBytes, "", "a checkpoint file");
    std::vector<unsigned char> head(static_cast<size_t>(std::min<uint64_t>(f.size(), 24)));
    f.read(head.data(), head.size());
    uint32_t version = 0, flags = 0;
    check_head(head, f.size(), path, version, flags);  // as load_checkpoint checks it
    if (f.size() < head.size() + sizeof(uint64_t)) return fmt::format("{}: truncated checkpoint", path);
    uint64_t h = fnv1a64(head.data(), head.size());
    std::vector<unsigned char> block(size_t{1} << 20);
    const uint64_t body = f.size() - sizeof(uint64_t);
    for (uint64_t at = head.size(); at < body;) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(block.size(), body - at));
      f.read(block.data(), take);
      h = fnv1a64(block.data(), take, h);
      at += take;
    }
    uint64_t stored = 0;
    f.read(&stored, sizeof stored);
    return stored == h ? "" : fmt::format("{}: corrupted checkpoint: checksum mismatch", path);
  } catch (const std::exception& e) {
    return e.what();
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  uint32_t version = 0, flags = 0;
  std::vector<unsigned char> b;
  try {
    b = read_checkpoint_bytes(path, version, flags);
  } catch (const std::invalid_argument& e) {  // the file's kind or size: the caller's error type
    throw std::runtime_error(e.what());
  }
  const size_t begin = version >= 2 ? 24 : 16;
  const size_t body = b.size() - sizeof(uint64_t);
  uint64_t stored;
  std::memcpy(&stored, b.data() + body, sizeof stored);
  const bool checksum_ok = fnv1a64(b.data(), body) == stored;
  // Versions 2 and 3 know their size, so the checksum is checked before anything is
  // parsed; version 1 is parsed first (a short file reads as truncated).
  if (version >= 2 && !checksum_ok) {
    throw std::runtime_error(fmt::format("{}: corrupted checkpoint: checksum mismatch", path));
  }

  In in(b, begin, body, path);
  Checkpoint ck;
  ck.version = version;
  TokenizerKind kind = TokenizerKind::kWord;
  std::vector<std::string> vocab;
  if (version == 1) {
    read_v1_body(in, flags, ck, kind, vocab, path);
  } else {
    read_v2_body(in, flags, ck, kind, vocab, path);
  }
  if (in.remaining() != 0) {
    throw std::runtime_error(fmt::format("{}: corrupted checkpoint: {} unexpected bytes before the checksum", path,
                                         in.remaining()));
  }
  if (!checksum_ok) throw std::runtime_error(fmt::format("{}: corrupted checkpoint: checksum mismatch", path));
  try {
    ck.config.validate();
    ck.tokenizer = Tokenizer::from_vocab(kind, std::move(vocab));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: {}", path, e.what()));
  }
  if (ck.params.size() != param_count(ck.config)) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: {} parameters, but its configuration needs {}",
                                         path, ck.params.size(), param_count(ck.config)));
  }
  if (ck.tokenizer.size() > ck.config.V) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: vocabulary of {} exceeds vocab_size {}", path,
                                         ck.tokenizer.size(), ck.config.V));
  }
  return ck;
}

void expect_same_config(const Checkpoint& ck, const Gpt2Config& e, const std::string& path) {
  // Resolved: a checkpoint older than the variants holds "auto" for what is the default GPT-2's choice.
  const KeyValues have = section_values("model", ck.config.resolved()), want = section_values("model", e.resolved());
  for (size_t i = 0; i < have.size(); ++i) {
    if (have[i].second != want[i].second) {
      throw std::invalid_argument(fmt::format("{}: checkpoint has {} = {}, but the configuration says {}", path,
                                              have[i].first, have[i].second, want[i].second));
    }
  }
}

void load_params(const Checkpoint& ck, Gpt2& model) {
  if (!(ck.config == model.config()) || ck.params.size() != param_count(ck.config)) {
    throw std::invalid_argument("load_params: checkpoint and model configurations differ");
  }
  const TpPlace& tp = model.tp();
  model.params_from_host(tp.size > 1 ? shard_of(ck.config, tp.shape(), tp.rank, ck.params) : ck.params);
}

}  // namespace gpt2
