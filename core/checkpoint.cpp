#include "checkpoint.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <unistd.h>

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
  void floats(const float* p, size_t n) { bytes(p, n * sizeof(float)); }
  std::vector<unsigned char>& data() { return buf_; }

 private:
  std::vector<unsigned char> buf_;
};

class In {
 public:
  In(const std::vector<unsigned char>& b, size_t end, const std::string& path) : b_(b), end_(end), path_(path) {}
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
  size_t pos_ = 0;
  const std::string& path_;
};

}  // namespace

void save_checkpoint(const std::string& path, const Gpt2& model, const Tokenizer& tokenizer,
                     const Optimizer* optimizer, const TrainingState* training) {
  const Gpt2Config& c = model.config();
  if ((optimizer == nullptr) != (training == nullptr)) {
    throw std::invalid_argument("save_checkpoint: optimizer and training state go together");
  }
  Out out;
  out.bytes(kMagic, sizeof kMagic);
  out.put<uint32_t>(kCheckpointVersion);
  out.put<uint32_t>(training ? 1u : 0u);
  for (int32_t v : {c.V, c.T, c.L, c.NH, c.C}) out.put<int32_t>(v);
  out.put<uint8_t>(static_cast<uint8_t>(tokenizer.kind()));
  out.put<uint32_t>(static_cast<uint32_t>(tokenizer.vocab().size()));
  for (const std::string& t : tokenizer.vocab()) {
    out.put<uint32_t>(static_cast<uint32_t>(t.size()));
    out.bytes(t.data(), t.size());
  }
  const uint64_t n = model.num_params();
  out.put<uint64_t>(n);
  out.floats(model.params_to_host().data(), n);
  if (training) {
    const OptimizerConfig& o = optimizer->config();
    out.put<uint32_t>(static_cast<uint32_t>(o.kind));
    out.put<float>(o.lr);
    out.put<float>(o.min_lr);
    out.put<int64_t>(o.warmup_steps);
    out.put<int64_t>(o.decay_steps);
    for (float f : {o.beta1, o.beta2, o.eps, o.weight_decay, o.grad_clip}) out.put<float>(f);
    out.put<int64_t>(optimizer->steps_done());
    out.put<int64_t>(training->loader_position);
    out.put<int64_t>(training->loader_batches);
    out.put<uint64_t>(training->seed);
    out.floats(optimizer->m_to_host().data(), n);
    out.floats(optimizer->v_to_host().data(), n);
  }
  out.put<uint64_t>(fnv1a64(out.data().data(), out.data().size()));

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw std::runtime_error(fmt::format("{}: cannot write checkpoint: {}", tmp, std::strerror(errno)));
  bool ok = std::fwrite(out.data().data(), 1, out.data().size(), f) == out.data().size();
  ok = std::fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error(fmt::format("{}: writing checkpoint failed: {}", path, why));
  }
}

Checkpoint load_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(fmt::format("{}: cannot open checkpoint: {}", path, std::strerror(errno)));
  std::vector<unsigned char> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (b.size() < sizeof kMagic || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) {
    throw std::runtime_error(fmt::format("{}: not a checkpoint (no GPT2CKPT magic)", path));
  }
  if (b.size() < sizeof kMagic + 4) throw std::runtime_error(fmt::format("{}: truncated checkpoint", path));
  uint32_t version;
  std::memcpy(&version, b.data() + sizeof kMagic, 4);
  if (version != kCheckpointVersion) {
    throw std::runtime_error(fmt::format("{}: checkpoint format version {}, this program reads version {}", path,
                                         version, kCheckpointVersion));
  }
  if (b.size() < sizeof kMagic + 8 + 8) throw std::runtime_error(fmt::format("{}: truncated checkpoint", path));
  const size_t body = b.size() - sizeof(uint64_t);
  uint64_t stored;
  std::memcpy(&stored, b.data() + body, sizeof stored);

  In in(b, body, path);
  Checkpoint ck;
  char magic[8];
  in.bytes(magic, sizeof magic, "magic");
  in.get<uint32_t>("version");
  const uint32_t flags = in.get<uint32_t>("flags");
  ck.config.V = in.get<int32_t>("vocab_size");
  ck.config.T = in.get<int32_t>("block_size");
  ck.config.L = in.get<int32_t>("n_layer");
  ck.config.NH = in.get<int32_t>("n_head");
  ck.config.C = in.get<int32_t>("n_embd");
  const auto kind = static_cast<TokenizerKind>(in.get<uint8_t>("tokenizer kind"));
  const uint32_t count = in.get<uint32_t>("vocabulary size");
  if (count > in.remaining()) throw std::runtime_error(fmt::format("{}: truncated checkpoint: vocabulary", path));
  std::vector<std::string> vocab(count);
  for (std::string& t : vocab) {
    const uint32_t len = in.get<uint32_t>("vocabulary entry");
    if (len > in.remaining()) throw std::runtime_error(fmt::format("{}: truncated checkpoint: vocabulary", path));
    t.resize(len);
    in.bytes(t.data(), len, "vocabulary entry");
  }
  const uint64_t n = in.get<uint64_t>("parameter count");
  ck.params = in.floats(n, "parameters");
  if (flags & 1u) {
    TrainingState s;
    OptimizerConfig& o = s.optimizer;
    o.kind = static_cast<OptimizerKind>(in.get<uint32_t>("optimizer kind"));
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
    ck.training = std::move(s);
  }
  if (in.remaining() != 0) {
    throw std::runtime_error(fmt::format("{}: corrupted checkpoint: {} unexpected bytes before the checksum", path,
                                         in.remaining()));
  }
  if (fnv1a64(b.data(), body) != stored) {
    throw std::runtime_error(fmt::format("{}: corrupted checkpoint: checksum mismatch", path));
  }
  try {
    ck.config.validate();
    ck.tokenizer = Tokenizer::from_vocab(kind, std::move(vocab));
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: {}", path, e.what()));
  }
  if (n != param_count(ck.config)) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: {} parameters, but its configuration needs {}",
                                         path, n, param_count(ck.config)));
  }
  if (ck.tokenizer.size() > ck.config.V) {
    throw std::runtime_error(fmt::format("{}: invalid checkpoint: vocabulary of {} exceeds vocab_size {}", path,
                                         ck.tokenizer.size(), ck.config.V));
  }
  return ck;
}

void expect_same_config(const Checkpoint& ck, const Gpt2Config& e, const std::string& path) {
  const Gpt2Config& c = ck.config;
  auto check = [&](const char* key, int have, int want) {
    if (have != want) {
      throw std::invalid_argument(
          fmt::format("{}: checkpoint has model.{} = {}, but the configuration says {}", path, key, have, want));
    }
  };
  check("vocab_size", c.V, e.V);
  check("block_size", c.T, e.T);
  check("n_layer", c.L, e.L);
  check("n_head", c.NH, e.NH);
  check("n_embd", c.C, e.C);
}

void load_params(const Checkpoint& ck, Gpt2& model) {
  if (!(ck.config == model.config()) || ck.params.size() != model.num_params()) {
    throw std::invalid_argument("load_params: checkpoint and model configurations differ");
  }
  model.params_from_host(ck.params);
}

}  // namespace gpt2
