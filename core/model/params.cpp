#include "model/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "model/rng.h"

namespace gpt2 {

StageLayers StageLayers::of(int n_layer, int stages, int stage) {
  if (stages < 1 || stages > n_layer) {
    throw std::invalid_argument(fmt::format(
        "parallel.pp {}: a pipeline needs 1 to model.n_layer ({}) stages, each of at least one layer", stages, n_layer));
  }
  if (stage < 0 || stage >= stages) {
    throw std::invalid_argument(fmt::format("pipeline stage {} of {} does not exist", stage, stages));
  }
  const int q = n_layer / stages, r = n_layer % stages;
  StageLayers s;
  s.first = stage * q + std::min(stage, r);
  s.last = s.first + q + (stage < r ? 1 : 0);
  s.embed = stage == 0;
  s.head = stage == stages - 1;
  return s;
}

StageLayers StageLayers::at(const std::vector<int>& counts, int stage) {
  const int stages = static_cast<int>(counts.size());
  if (stage < 0 || stage >= stages) {
    throw std::invalid_argument(fmt::format("pipeline stage {} of {} does not exist", stage, stages));
  }
  StageLayers s;
  s.first = 0;
  for (int i = 0; i < stage; ++i) s.first += counts[static_cast<size_t>(i)];
  s.last = s.first + counts[static_cast<size_t>(stage)];
  if (counts[static_cast<size_t>(stage)] < 1) {
    throw std::invalid_argument(fmt::format("pipeline stage {} of {} holds {} layers", stage, stages,
                                            counts[static_cast<size_t>(stage)]));
  }
  s.embed = stage == 0;
  s.head = stage == stages - 1;
  return s;
}

StageLayers StageLayers::of_stages(const std::vector<int>& counts, const std::vector<int>& stages) {
  if (stages.empty()) throw std::invalid_argument("a pipeline rank holds at least one stage");
  StageLayers out = at(counts, stages.front());
  const int n = static_cast<int>(counts.size());
  for (size_t i = 1; i < stages.size(); ++i) {
    if (stages[i] <= stages[i - 1]) {
      throw std::invalid_argument(fmt::format("virtual stages {} and {} are not ascending", stages[i - 1], stages[i]));
    }
    const StageLayers s = at(counts, stages[i]);
    out.more.push_back({s.first, s.last});  // one chunk per virtual stage, adjacent ones too (ZB-V's turn)
    out.head = stages[i] == n - 1;
  }
  return out;
}

StageLayers StageLayers::chunk(int i, int n_layer) const {
  if (i < 0 || i >= chunks()) throw std::invalid_argument(fmt::format("chunk {} of {}", i, chunks()));
  StageLayers c;
  if (i == 0) {
    c.first = first;
    c.last = end(n_layer);
  } else {
    c.first = more[static_cast<size_t>(i - 1)].first;
    c.last = more[static_cast<size_t>(i - 1)].last;
  }
  c.embed = embed && c.first == 0;
  c.head = head && c.last == n_layer;
  return c;
}

bool StageLayers::holds(int l, int n_layer) const {
  if (l >= first && l < end(n_layer)) return true;
  return std::any_of(more.begin(), more.end(), [l](const LayerSpan& s) { return l >= s.first && l < s.last; });
}

std::vector<int> StageLayers::even_counts(int n_layer, int stages) {
  std::vector<int> counts;
  for (int s = 0; s < stages; ++s) {
    const StageLayers l = of(n_layer, stages, s);
    counts.push_back(l.last - l.first);
  }
  return counts;
}

std::vector<ParamInfo> layout(const Gpt2Config& cfg, ParamTensors& p, TpShape tp, StageLayers stage) {
  // The variant decides which tensors exist and their widths: no wpe with
  // RoPE, no norm biases with RMSNorm, (NH + 2 KVH) heads of q, k, v, an fc
  // of 2H rows (gate, up) for SwiGLU, no lm_head when tied, the linear
  // biases model.bias names.
  const int64_t V = cfg.V, T = cfg.T, C = cfg.C, P = tp.size, HS = cfg.head_size();
  const int64_t Vr = tp.vocab_rows(V);  // wte's and lm_head's rows here
  const TpSplit vocab_split = tp.vocab ? TpSplit::kVocabRows : TpSplit::kNone;
  const int64_t QW = cfg.NH * HS, KW = cfg.kv_heads() * HS, H = cfg.mlp_width();
  const bool rms = cfg.rms();
  std::vector<ParamInfo> out;
  auto add = [&out, V](std::string name, Tensor& view, std::vector<int64_t> shape, ParamInit init,
                       TpSplit split = TpSplit::kNone, std::vector<int64_t> groups = {}) {
    bool decay = shape.size() >= 2;
    const int64_t full_rows = split == TpSplit::kVocabRows ? V : 0;
    out.push_back({std::move(name), &view, std::move(shape), init, decay, 0, split, std::move(groups), full_rows});
  };
  p.layers.resize(static_cast<size_t>(cfg.L));
  if (stage.embed) {
    add("wte", p.wte, {Vr, C}, ParamInit::kNormal, vocab_split);
    if (!cfg.rope()) add("wpe", p.wpe, {T, C}, ParamInit::kNormal);
  }
  const std::vector<int64_t> fc_groups = cfg.swiglu() ? std::vector<int64_t>{H / P, H / P} : std::vector<int64_t>{};
  for (int l = stage.first; l < cfg.L; ++l) {
    if (!stage.holds(l, cfg.L)) continue;  // a chunk's layers, in buffer (layer) order
    LayerParams& h = p.layers[static_cast<size_t>(l)];
    auto name = [l](const char* s) { return fmt::format("h.{}.{}", l, s); };
    add(name("ln1_w"), h.ln1_w, {C}, ParamInit::kOne);
    if (!rms) add(name("ln1_b"), h.ln1_b, {C}, ParamInit::kZero);
    add(name("qkv_w"), h.qkv_w, {(QW + 2 * KW) / P, C}, ParamInit::kNormal, TpSplit::kRows,
        {QW / P, KW / P, KW / P});
    if (cfg.qkv_bias()) {
      add(name("qkv_b"), h.qkv_b, {(QW + 2 * KW) / P}, ParamInit::kZero, TpSplit::kRows, {QW / P, KW / P, KW / P});
    }
    add(name("attn_proj_w"), h.attn_proj_w, {C, C / P}, ParamInit::kNormal, TpSplit::kCols);
    if (cfg.proj_bias()) add(name("attn_proj_b"), h.attn_proj_b, {C}, ParamInit::kZero);
    add(name("ln2_w"), h.ln2_w, {C}, ParamInit::kOne);
    if (!rms) add(name("ln2_b"), h.ln2_b, {C}, ParamInit::kZero);
    add(name("fc_w"), h.fc_w, {cfg.fc_width() / P, C}, ParamInit::kNormal, TpSplit::kRows, fc_groups);
    if (cfg.proj_bias()) add(name("fc_b"), h.fc_b, {cfg.fc_width() / P}, ParamInit::kZero, TpSplit::kRows, fc_groups);
    add(name("fc_proj_w"), h.fc_proj_w, {C, H / P}, ParamInit::kNormal, TpSplit::kCols);
    if (cfg.proj_bias()) add(name("fc_proj_b"), h.fc_proj_b, {C}, ParamInit::kZero);
  }
  if (stage.head) {
    add("lnf_w", p.lnf_w, {C}, ParamInit::kOne);
    if (!rms) add("lnf_b", p.lnf_b, {C}, ParamInit::kZero);
    if (!cfg.tie_embeddings) add("lm_head", p.lm_head, {Vr, C}, ParamInit::kNormal, vocab_split);
  }

  size_t offset = 0;
  for (ParamInfo& info : out) {
    info.offset = offset;
    const size_t n = info.count();
    offset += n;
  }
  return out;
}

std::string non_finite(std::span<const float> x) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return fmt::format("element {} is {}", i, std::isnan(x[i]) ? "nan" : x[i] > 0 ? "inf" : "-inf");
  }
  return "";
}

std::string non_finite_tensor(const Gpt2Config& cfg, std::span<const float> params) {
  ParamTensors scratch;
  for (const ParamInfo& info : layout(cfg, scratch)) {
    const size_t n = info.count();
    if (info.offset + n > params.size()) break;
    if (const std::string bad = non_finite(params.subspan(info.offset, n)); !bad.empty()) {
      return fmt::format("tensor {}: {}", info.name, bad);
    }
  }
  return "";
}

size_t param_count(const Gpt2Config& cfg, TpShape tp, StageLayers stage) {
  ParamTensors scratch;
  auto infos = layout(cfg, scratch, tp, stage);
  if (infos.empty()) return 0;
  return infos.back().offset + infos.back().count();
}

namespace {
void bind(std::vector<ParamInfo>& infos, float* base) {
  for (ParamInfo& info : infos) {
    Tensor& t = *info.view;
    t = Tensor(base ? base + info.offset : nullptr, {});  // null: shaped but not bound (model/params.h, Residency)
    for (int64_t d : info.shape) t.shape[static_cast<size_t>(t.ndim++)] = d;
  }
}
}  // namespace

namespace {
// Calls f(full_offset, shard_offset, count) for each contiguous piece of one
// tensor's shard: offsets within the tensor in the full buffer and in the
// shard. A tensor is seen as (rows, cols); a 1-D tensor is one column wide.
template <typename F>
void for_each_piece(const ParamInfo& local, int tp, int rank, F&& f) {  // tp: the group's size
  const size_t rows = static_cast<size_t>(local.shape[0]);
  const size_t cols = local.shape.size() > 1 ? static_cast<size_t>(local.shape[1]) : 1;
  const size_t P = static_cast<size_t>(tp), r = static_cast<size_t>(rank);
  switch (local.split) {
    case TpSplit::kNone:
      f(size_t{0}, size_t{0}, rows * cols);
      break;
    case TpSplit::kRows: {  // each row group holds rank's slice of its rows
      const std::vector<int64_t> groups = local.groups.empty() ? std::vector<int64_t>{static_cast<int64_t>(rows)}
                                                               : local.groups;
      size_t full_start = 0, shard_start = 0;  // the group's first row in the full tensor and in the shard
      for (int64_t g : groups) {
        const size_t part = static_cast<size_t>(g);  // shard rows of this group
        f((full_start + r * part) * cols, shard_start * cols, part * cols);
        full_start += part * P;
        shard_start += part;
      }
      break;
    }
    case TpSplit::kCols:  // every row holds rank's slice of the columns
      for (size_t i = 0; i < rows; ++i) f(i * cols * P + r * cols, i * cols, cols);
      break;
    case TpSplit::kVocabRows: {  // rows [r rows, (r + 1) rows) of the full tensor's, those before its end
      const size_t full = static_cast<size_t>(local.full_rows), first = r * rows;
      const size_t here = first >= full ? 0 : std::min(rows, full - first);
      if (here > 0) f(first * cols, size_t{0}, here * cols);
      break;
    }
  }
}

void check_sizes(const Gpt2Config& cfg, TpShape tp, StageLayers stage, size_t full, size_t shard) {
  if (full != param_count(cfg) || shard != param_count(cfg, tp, stage)) {
    throw std::invalid_argument(fmt::format("model part of {} floats from {} (expected {} and {})", shard, full,
                                            param_count(cfg, tp, stage), param_count(cfg)));
  }
}
}  // namespace

namespace {
// Copies each tensor's shard pieces from `from` to `to`: full buffer to
// shard (to_shard), or shard to full buffer.
void copy_shards(const Gpt2Config& cfg, TpShape tp, int rank, StageLayers stage, std::span<const float> from,
                 std::span<float> to, bool to_shard) {
  for (const ShardPiece& p : shard_pieces(cfg, tp, rank, stage)) {
    if (to_shard) std::copy_n(from.data() + p.full, p.count, to.data() + p.local);
    else std::copy_n(from.data() + p.local, p.count, to.data() + p.full);
  }
}
}  // namespace

std::vector<float> shard_of(const Gpt2Config& cfg, TpShape tp, int rank, std::span<const float> full,
                            StageLayers stage) {
  std::vector<float> shard(param_count(cfg, tp, stage));
  check_sizes(cfg, tp, stage, full.size(), shard.size());
  copy_shards(cfg, tp, rank, stage, full, shard, true);
  return shard;
}

void place_shard(const Gpt2Config& cfg, TpShape tp, int rank, std::span<const float> shard, std::span<float> full,
                 StageLayers stage) {
  check_sizes(cfg, tp, stage, full.size(), shard.size());
  copy_shards(cfg, tp, rank, stage, shard, full, false);
}

std::vector<ShardPiece> shard_pieces(const Gpt2Config& cfg, TpShape tp, int rank, StageLayers stage) {
  ParamTensors sp, fp;
  const auto local = layout(cfg, sp, tp, stage), whole = layout(cfg, fp);
  std::vector<ShardPiece> pieces;
  size_t w = 0;  // each local tensor's place in the whole list (in its order; a rank's chunks are runs of it)
  for (size_t k = 0; k < local.size(); ++k) {
    while (w < whole.size() && whole[w].name != local[k].name) ++w;
    if (w == whole.size()) throw std::logic_error(fmt::format("shard_pieces: tensor {} not in the model", local[k].name));
    const bool replicated = local[k].split == TpSplit::kNone;
    for_each_piece(local[k], tp.size, rank, [&](size_t fo, size_t so, size_t n) {
      if (n > 0) pieces.push_back({whole[w].offset + fo, local[k].offset + so, n, replicated});
    });
  }
  return pieces;
}

int unit_id(const std::string& name, int n_layer) {
  if (name == "wte" || name == "wpe") return 0;
  if (name.rfind("h.", 0) == 0) return 1 + std::stoi(name.substr(2));
  return n_layer + 1;  // lnf_*, lm_head
}

std::vector<ParamUnit> param_units(const Gpt2Config& cfg, const std::vector<ParamInfo>& infos) {
  std::vector<ParamUnit> units;
  for (const ParamInfo& info : infos) {
    const int id = unit_id(info.name, cfg.L);
    const size_t n = info.count();
    if (units.empty() || units.back().id != id) units.push_back({id, info.offset, 0});
    units.back().count = info.offset + n - units.back().offset;
  }
  return units;
}

Gpt2::Gpt2(const Gpt2Config& cfg, Memory& memory, TpPlace tp, StageLayers stage, size_t pad_to, Residency residency)
    : cfg_(cfg), tp_(std::move(tp)), stage_(stage), memory_(&memory), residency_(residency) {
  cfg_.validate();
  tp_.validate(cfg_);
  tp_.check_group();
  stage_.last = stage_.end(cfg_.L);
  if (stage_.first < 0 || stage_.first >= stage_.last || stage_.last > cfg_.L) {
    throw std::invalid_argument(fmt::format("pipeline stage of layers [{}, {}) in a model of {} layers",
                                            stage_.first, stage_.last, cfg_.L));
  }
  for (size_t i = 0; i < stage_.more.size(); ++i) {
    const LayerSpan& s = stage_.more[i];
    const int below = i == 0 ? stage_.last : stage_.more[i - 1].last;
    if (s.first < below || s.first >= s.last || s.last > cfg_.L) {
      throw std::invalid_argument(fmt::format("pipeline chunk of layers [{}, {}) above layer {} in a model of {} layers",
                                              s.first, s.last, below, cfg_.L));
    }
  }
  n_ = param_count(cfg_, tp_.shape(), stage_);
  pad_to = std::max<size_t>(pad_to, 1);
  padded_ = (n_ + pad_to - 1) / pad_to * pad_to;
  if (residency_ != Residency::kNone) params_buf_ = Buffer(padded_, memory);
  if (residency_ == Residency::kWhole) grads_buf_ = Buffer(padded_, memory);
  if (padded_ > n_ && params_buf_.size() > 0) params_buf_.zero();
  grad_infos_ = layout(cfg_, grads, tp_.shape(), stage_);
  infos_ = layout(cfg_, params, tp_.shape(), stage_);
  bind(grad_infos_, grads_buf_.size() > 0 ? grads_buf_.data() : nullptr);
  bind(infos_, params_buf_.size() > 0 ? params_buf_.data() : nullptr);
  units_ = param_units(cfg_, infos_);  // from the shaped views
}

void Gpt2::bind_unit(const ParamUnit& u, float* params_at, float* grads_at) {
  auto rebind = [&](std::vector<ParamInfo>& infos, float* base) {
    for (ParamInfo& info : infos) {
      if (info.offset < u.offset || info.offset >= u.offset + u.count) continue;
      info.view->data = base ? base + (info.offset - u.offset) : nullptr;
    }
  };
  if (residency_ == Residency::kNone) rebind(infos_, params_at);
  if (residency_ != Residency::kWhole) rebind(grad_infos_, grads_at);
}

void Gpt2::bind_grads(float* grads) {
  if (residency_ != Residency::kWhole) {
    throw std::logic_error("Gpt2::bind_grads: the gradient is not resident (ZeRO-2/3 bind it by unit)");
  }
  bind(grad_infos_, grads != nullptr ? grads : grads_buf_.data());
  bound_grads_ = grads;
}

std::vector<float> Gpt2::params_to_host() const {
  if (residency_ == Residency::kNone) {
    throw std::logic_error("Gpt2::params_to_host: the parameters are sharded (ZeRO-3); gather them first");
  }
  std::vector<float> host = params_buf_.download();
  host.resize(n_);
  return host;
}

void Gpt2::params_from_host(std::span<const float> host) {
  if (residency_ == Residency::kNone) {
    throw std::logic_error("Gpt2::params_from_host: the parameters are sharded (ZeRO-3); load the shards");
  }
  if (host.size() != n_) {
    throw std::invalid_argument(fmt::format("Gpt2::params_from_host: {} floats for a model of {}", host.size(), n_));
  }
  if (params_buf_.size() == n_) {
    params_buf_.upload(host);
    return;
  }
  std::vector<float> padded(host.begin(), host.end());
  padded.resize(params_buf_.size(), 0.0f);
  params_buf_.upload(padded);
}

void Gpt2::init_weights(uint64_t seed) {
  // Filled on the host (this rank's part only, with Philox), then copied to
  // the model's memory in one piece.
  std::vector<float> host;
  if (cfg_.init == InitKind::kOriginal) {
    host = initial_weights(cfg_, seed);
    if (tp_.size > 1 || !stage_.whole(cfg_.L)) host = shard_of(cfg_, tp_.shape(), tp_.rank, host, stage_);
  } else if (memory_->is_host() && params_buf_.size() > 0) {  // computed in place: no second copy of the model
    initial_values(cfg_, seed, tp_.shape(), tp_.rank, stage_, 0, {params_buf_.data(), n_});
    return;
  } else {
    host.resize(n_);
    initial_values(cfg_, seed, tp_.shape(), tp_.rank, stage_, 0, host);
  }
  params_from_host(host);
}

namespace {

// glibc's rand() (the TYPE_3 additive feedback generator of random_r, degree
// 31, separation 3) after srand(seed), without its global state: the same
// sequence as the C library's, which the tests check through ctypes.
class GlibcRand {
 public:
  explicit GlibcRand(uint32_t seed) {
    int32_t word = static_cast<int32_t>(seed == 0 ? 1 : seed);
    r_[0] = word;
    for (int i = 1; i < 31; ++i) {
      // word = 16807 * word mod (2^31 - 1), by Schrage's method as glibc does.
      const int32_t hi = word / 127773, lo = word % 127773;
      word = 16807 * lo - 2836 * hi;
      if (word < 0) word += 2147483647;
      r_[i] = word;
    }
    for (int i = 31; i < 34; ++i) r_[i] = r_[i - 31];
    n_ = 34;
    for (int i = 34; i < 344; ++i) next_raw();
  }
  int32_t operator()() { return static_cast<int32_t>(next_raw() >> 1); }
  static constexpr int32_t kRandMax = 2147483647;

 private:
  uint32_t next_raw() {
    const uint32_t v = static_cast<uint32_t>(r_[(n_ - 31) % 34]) + static_cast<uint32_t>(r_[(n_ - 3) % 34]);
    r_[n_ % 34] = static_cast<int32_t>(v);
    ++n_;
    return v;
  }
  int32_t r_[34] = {};
  uint64_t n_ = 0;
};

// The reproduced project's initialisation (DESIGN.md, "Initialisation,
// exactly"), into our layout: their Linear weights are (in, out), ours
// (out, in); their per-head key, query and value (C, HS) are our qkv_w rows
// C + h*HS.., h*HS.. and 2C + h*HS.. .
std::vector<float> original_weights(const Gpt2Config& cfg, uint64_t seed) {
  ParamTensors p;
  const std::vector<ParamInfo> infos = layout(cfg, p);
  std::vector<float> host(param_count(cfg), 0.0f);
  for (const ParamInfo& info : infos) {
    const size_t n = info.count();
    if (info.init == ParamInit::kOne) std::fill_n(host.data() + info.offset, n, 1.0f);
  }
  std::map<const Tensor*, size_t> offset_of;  // each slot of `p` (unbound) and its offset in the buffer
  for (const ParamInfo& info : infos) offset_of[info.view] = info.offset;
  GlibcRand rng(static_cast<uint32_t>(seed));
  const float pi = static_cast<float>(3.14159265358979323846);
  auto draw = [&] {
    const float u1 = (static_cast<float>(rng()) + 1.0f) / (static_cast<float>(GlibcRand::kRandMax) + 2.0f);
    const float u2 = (static_cast<float>(rng()) + 1.0f) / (static_cast<float>(GlibcRand::kRandMax) + 2.0f);
    const float z = std::sqrt(-2.0f * std::log(u1)) * std::cos(2.0f * pi * u2);
    return 0.0f + 0.02f * z;
  };
  const int64_t V = cfg.V, T = cfg.T, C = cfg.C, HS = cfg.head_size();
  auto base = [&](const Tensor& t) { return host.data() + offset_of.at(&t); };
  // An (in, out) weight drawn row by row into our (out, in) tensor at row offset `row0`.
  auto linear = [&](float* w, int64_t in, int64_t out, int64_t row0) {
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t j = 0; j < out; ++j) w[(row0 + j) * in + i] = draw();
    }
  };
  for (int64_t k = 0; k < V * C; ++k) base(p.wte)[k] = draw();
  for (int64_t k = 0; k < T * C; ++k) base(p.wpe)[k] = draw();
  for (const LayerParams& h : p.layers) {
    float* qkv = base(h.qkv_w);
    for (int64_t head = 0; head < cfg.NH; ++head) {
      linear(qkv, C, HS, C + head * HS);      // key
      linear(qkv, C, HS, head * HS);          // query
      linear(qkv, C, HS, 2 * C + head * HS);  // value
    }
    linear(base(h.attn_proj_w), C, C, 0);
    linear(base(h.fc_w), C, 4 * C, 0);
    linear(base(h.fc_proj_w), 4 * C, C, 0);
  }
  linear(base(p.lm_head), C, V, 0);
  return host;
}

}  // namespace

namespace {
// Element i of the full tensor of parameter index k (its place in the full
// layout: Philox's stream), as initial_weights computes it.
float initial_value(ParamInit init, uint64_t seed, size_t k, size_t i) {
  switch (init) {
    case ParamInit::kNormal: return 0.02f * normal(seed, static_cast<uint32_t>(k), static_cast<uint64_t>(i));
    case ParamInit::kZero: return 0.0f;
    case ParamInit::kOne: return 1.0f;
  }
  return 0.0f;
}
}  // namespace

void initial_values(const Gpt2Config& cfg, uint64_t seed, TpShape tp, int rank, StageLayers stage, size_t begin,
                    std::span<float> out) {
  if (cfg.init == InitKind::kOriginal) {
    throw std::invalid_argument("initial_values: model.init original draws one sequence over the whole model");
  }
  ParamTensors sp, fp;
  const auto local = layout(cfg, sp, tp, stage), whole = layout(cfg, fp);
  // Each tensor's draws are keyed by its index in the whole model's list: the stage's tensors (a rank's
  // chunks: runs of it) come in that list's order, so one walk along it finds each.
  size_t w = 0;
  const size_t end = begin + out.size();
  std::fill(out.begin(), out.end(), 0.0f);  // what no piece covers is padding
  // model.init gpt2: GPT-2's residual projections drawn with std 0.02 / sqrt(2 L) (philox's draws, scaled).
  const float residual = cfg.init == InitKind::kGpt2 ? static_cast<float>(1.0 / std::sqrt(2.0 * cfg.L)) : 1.0f;
  for (size_t k = 0; k < local.size(); ++k) {
    const ParamInfo& info = local[k];
    while (w < whole.size() && whole[w].name != info.name) ++w;
    if (w == whole.size()) throw std::logic_error(fmt::format("initial_values: tensor {} not in the model", info.name));
    const size_t n = info.count();
    if (info.offset + n <= begin || info.offset >= end) continue;
    const float scale = info.name.ends_with("attn_proj_w") || info.name.ends_with("fc_proj_w") ? residual : 1.0f;
    // Shard elements [so, so + count) of this tensor are its full tensor's [fo, fo + count).
    for_each_piece(info, tp.size, rank, [&](size_t fo, size_t so, size_t count) {
      const size_t lo = std::max(info.offset + so, begin), hi = std::min(info.offset + so + count, end);
      for (size_t x = lo; x < hi; ++x) {
        out[x - begin] = scale * initial_value(info.init, seed, w, fo + (x - info.offset - so));
      }
    });
  }
}

std::vector<float> initial_weights(const Gpt2Config& cfg, uint64_t seed) {
  if (cfg.init == InitKind::kOriginal) {
    if (!cfg.is_gpt2()) {
      throw std::invalid_argument(
          "model.init: original is the reproduced project's scheme for its GPT-2 only; use philox with another "
          "architecture");
    }
    return original_weights(cfg, seed);
  }
  std::vector<float> host(param_count(cfg));
  initial_values(cfg, seed, {}, 0, {}, 0, host);  // the whole model is one rank's part of itself
  return host;
}

}  // namespace gpt2
