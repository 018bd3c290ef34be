#include "train/run/run_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "train/formats/checkpoint.h"
#include "train/formats/checkpoint_store.h"
#include "train/data/corpus.h"
#include "train/resolve/layout.h"
#include "train/formats/model_source.h"
#include "train/formats/sharded_checkpoint.h"
#include "train/schedule/stage_split.h"
#include "util/hash.h"

namespace gpt2 {

namespace {

// The checks of a training checkpoint that need nothing but the configuration.
void check_training_checkpoint(const Checkpoint& ck, const RunConfig& c, const std::string& path) {
  if (!ck.training) {
    throw std::invalid_argument(fmt::format("--resume: '{}' is a model checkpoint without training state", path));
  }
  if (ck.tokenizer.kind() != c.data.tokenizer) {
    throw std::invalid_argument(fmt::format("{}: checkpoint tokenizer is '{}', but data.tokenizer says '{}'", path,
                                            to_string(ck.tokenizer.kind()), to_string(c.data.tokenizer)));
  }
}

// What the curve depends on beyond the model, the optimizer, the tokenizer
// and the seed: recorded in every training checkpoint, compared on resume.
KeyValues curve_entries(const RunConfig& c, size_t corpus_tokens, uint64_t corpus_hash) {
  return {{"parallel.function", parallel_function(c.parallel)},
          {"train.batch_size", std::to_string(c.train.batch_size)},
          {"train.seq_len", std::to_string(c.train.seq_len)},
          {"data.loader", to_string(c.data.loader)},
          {"data.val_fraction", fmt::format("{}", c.data.val_fraction)},
          {"data.corpus_tokens", std::to_string(corpus_tokens)},
          {"data.corpus_hash", fmt::format("{:016x}", corpus_hash)}};
}

// The checks of the settings a checkpoint records that need no corpus: the
// resolved model, the optimizer, the seed, and the curve's settings but the
// corpus's.
void check_settings(const Checkpoint& ck, const Gpt2Config& model, const RunConfig& c, const std::string& path) {
  expect_same_config(ck, model, path);
  Fields have, want;
  OptimizerConfig ck_opt = ck.training->optimizer, run_opt = c.optimizer;
  have.add_section("optimizer", ck_opt);
  want.add_section("optimizer", run_opt);
  const auto a = have.values(), b = want.values();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].second != b[i].second) {
      throw std::invalid_argument(fmt::format("{}: checkpoint has {} = {}, but the configuration says {}", path,
                                              a[i].first, a[i].second, b[i].second));
    }
  }
  if (ck.training->seed != c.train.seed) {
    throw std::invalid_argument(fmt::format("{}: checkpoint was trained with train.seed = {}, but the "
                                            "configuration says {}", path, ck.training->seed, c.train.seed));
  }
  for (const auto& [key, value] : curve_entries(c, 0, 0)) {
    const std::string* had = ck.find(key);
    if (had && *had != value && key != "data.corpus_tokens" && key != "data.corpus_hash") {
      throw std::invalid_argument(
          fmt::format("{}: checkpoint has {} = {}, but the configuration says {}", path, key, *had, value));
    }
  }
}

// The checks against the resolved model and the run's optimizer, seed, batch,
// data and length. Returns the keys the checkpoint has no record of (an older
// format): those could not be checked.
std::vector<std::string> check_training_state(const Checkpoint& ck, const Gpt2Config& model, const RunConfig& c,
                                              const RunState& st, const std::string& path) {
  check_settings(ck, model, c, path);
  if (ck.training->steps_done >= c.train.steps) {
    throw std::invalid_argument(fmt::format("{}: checkpoint is already at step {}, train.steps is {}", path,
                                            ck.training->steps_done, c.train.steps));
  }
  std::vector<std::string> unchecked;
  const KeyValues now = curve_entries(c, static_cast<size_t>(st.data.size()), st.corpus_hash);
  const std::string* ck_tokens = ck.find("data.corpus_tokens");
  for (const auto& [key, value] : now) {
    const std::string* had = ck.find(key);
    if (had == nullptr) {
      unchecked.push_back(key);
    } else if (key == "data.corpus_hash" && *had != value) {
      throw std::invalid_argument(fmt::format(
          "{}: the corpus differs from the one the checkpoint was trained on ({} tokens, hash {}; '{}' "
          "now gives {} tokens, hash {})", path, ck_tokens ? *ck_tokens : "?", *had, c.data.shards.empty() ? c.data.corpus : c.data.shards, st.data.size(), value));
    } else if (*had != value && key != "data.corpus_tokens") {  // a token count that differs shows in the hash
      throw std::invalid_argument(fmt::format("{}: checkpoint has {} = {}, but the configuration says {}", path, key,
                                              *had, value));
    }
  }
  return unchecked;
}

// Every rank parsed its own configuration (two hosts may hold different files
// at the same path). Rank 0's resolved key/value text goes to every rank; each
// finds the first key where its own differs; the lowest such key and the
// first rank holding it are agreed on, and that rank's value is broadcast, so
// that every rank throws the same message (printed once, by rank 0).
}  // namespace

bool finished_checkpoint(const std::string& path, const RunConfig& c) {
  const std::string file = given_checkpoint_file(path);
  const Checkpoint ck = is_sharded_checkpoint(file) ? ShardedCheckpoint(file).header() : load_given_checkpoint(file);
  check_training_checkpoint(ck, c, path);
  check_settings(ck, resolve_vocab(c.model, ck.tokenizer.size()), c, path);
  return ck.training->steps_done >= c.train.steps;
}

void check_ranks_agree(const RunConfig& config, Communicator& comm) {
  if (comm.size() == 1) return;
  RunConfig c = config;
  const KeyValues mine = run_fields(c).values();
  std::string text;
  for (const auto& [k, v] : mine) text += k + '\n' + v + '\n';
  const std::optional<std::string> root_text = root_text_if_ranks_differ(comm, text);
  if (!root_text) return;
  KeyValues root;
  std::istringstream in(*root_text);
  for (std::string k, v; std::getline(in, k) && std::getline(in, v);) root.emplace_back(k, v);
  float first_diff = static_cast<float>(mine.size());  // none
  for (size_t i = 0; i < mine.size(); ++i) {
    if (i >= root.size() || root[i] != mine[i]) {
      first_diff = static_cast<float>(i);
      break;
    }
  }
  std::vector<float> diffs(static_cast<size_t>(comm.size()));
  comm.all_gather(&first_diff, diffs.data(), 1);
  const float key_index = *std::min_element(diffs.begin(), diffs.end());
  if (key_index >= static_cast<float>(mine.size())) return;  // equal texts after all (a hash collision)
  std::vector<int> ranks;
  for (int r = 0; r < comm.size(); ++r) {
    if (diffs[static_cast<size_t>(r)] == key_index) ranks.push_back(r);
  }
  const size_t k = static_cast<size_t>(key_index);
  std::array<char, 256> value{};
  const std::string& own = mine[k].second;
  std::memcpy(value.data(), own.data(), std::min(own.size(), value.size() - 1));
  comm.broadcast(value.data(), value.size(), ranks[0]);
  std::string ranks_text;
  for (size_t i = 0; i < ranks.size(); ++i) ranks_text += (i ? ", " : "") + std::to_string(ranks[i]);
  throw std::invalid_argument(fmt::format(
      "the ranks' configurations differ: {} is '{}' on rank 0 but '{}' on rank{} {}; give every rank the same "
      "configuration file and options", mine[k].first, root[k].second, value.data(), ranks.size() > 1 ? "s" : "",
      ranks_text));
}

namespace {

// Rank 0's checkpoint state (weights, Adam moments, counters) to every rank,
// through host copies (the model may live in device memory).
struct HostState {
  std::vector<float> params, m, v;
  std::array<int64_t, 3> counters{0, 0, 0};  // steps done, loader position, loader batches served
};

void broadcast_state(Communicator& comm, HostState& st, size_t n) {
  for (std::vector<float>* v : {&st.params, &st.m, &st.v}) {
    v->resize(n);
    comm.broadcast(v->data(), n * sizeof(float), 0);
  }
  comm.broadcast(st.counters.data(), sizeof st.counters, 0);
}

}  // namespace

std::string parallel_function(const ParallelConfig& p) {
  const TpPlace layout{p.tp, 0, p.blocks(), nullptr};
  return layout.has_private() ? fmt::format("tp={}:{}", p.tp, layout.describe()) : "standard";
}

std::vector<float> gather_full(const Gpt2Config& cfg, ProcessGrid& grid, const std::vector<float>& local,
                               const StageSplit& split, bool vocab) {
  const int P = grid.tp(), S = grid.pp();
  const StageLayers stage = split.held(grid.stage());
  if (P == 1 && S == 1) return local;
  std::vector<float> full(param_count(cfg));
  if (P == 1) {
    place_shard(cfg, 1, 0, local, full, stage);
  } else {
    std::vector<float> shards(local.size() * static_cast<size_t>(P));
    grid.tp_comm().all_gather(local.data(), shards.data(), local.size());
    for (int r = 0; r < P; ++r) {
      place_shard(cfg, TpShape(P, vocab), r, {shards.data() + static_cast<size_t>(r) * local.size(), local.size()}, full,
                  stage);
    }
  }
  if (S == 1) return full;
  // Each stage's tensors at full width, gathered over the pipeline group in
  // equal chunks (the longest stage's), then put in their places.
  size_t chunk = 0;
  for (int s = 0; s < S; ++s) chunk = std::max(chunk, param_count(cfg, 1, split.held(s)));
  std::vector<float> mine = shard_of(cfg, 1, 0, full, stage);
  mine.resize(chunk, 0.0f);
  std::vector<float> parts(chunk * static_cast<size_t>(S));
  grid.pp_comm().all_gather(mine.data(), parts.data(), chunk);
  for (int s = 0; s < S; ++s) {
    const StageLayers st = split.held(s);
    place_shard(cfg, 1, 0, {parts.data() + static_cast<size_t>(s) * chunk, param_count(cfg, 1, st)}, full, st);
  }
  return full;
}

namespace {

// The run's data (rank 0 reads the checkpoint and the corpus; every rank
// gets the tokens), its loaders and the resolved model configuration.
void load_run_data(const RunConfig& c, const std::string& resume, ProcessGrid& grid, RunState& st,
                   std::optional<Checkpoint>& ckpt, std::unique_ptr<ShardedCheckpoint>& sharded,
                   const Tokenizer* vocabulary) {
  Communicator& comm = grid.world();
  const int dp_rank = grid.replica();  // which rows of the batch this rank's replica reads
  if (!resume.empty()) {
    // Rank 0 finds what was named (a step folder stands for its checkpoint); a sharded one every rank opens.
    std::vector<std::string> given = {""};
    if (comm.rank() == 0) {
      given[0] = given_checkpoint_file(resume);
      if (!is_sharded_checkpoint(given[0])) ckpt = load_given_checkpoint(resume);
    }
    broadcast_strings(comm, given, 0);
    if (is_sharded_checkpoint(given[0])) {
      sharded = open_sharded_checkpoint(given[0], comm);
      if (comm.rank() == 0) ckpt = sharded->header();
    }
    if (comm.rank() == 0) check_training_checkpoint(*ckpt, c, resume);
  }
  st.data = load_corpus(c.data, ckpt ? &ckpt->tokenizer : vocabulary, comm);
  const Split& split = st.data.split;
  // Rank 0 read the corpus and sent its tokens (or every rank mapped the shards):
  // guard that every rank trains on the same. The hash is computed once: it is
  // also what checkpoints record and resume compares.
  st.corpus_hash = st.data.hash();
  if (!comm.all_equal(st.corpus_hash)) {
    throw std::runtime_error(c.data.shards.empty()
                                 ? "the corpus tokens differ across ranks after their broadcast (checksum mismatch)"
                                 : "the token shards differ across ranks (checksum mismatch): every rank must see the "
                                   "same data.shards files");
  }
  st.model_config = resolve_vocab(c.model, st.data.tok.size());
  const std::string source = c.data.shards.empty() ? fmt::format("data.corpus '{}'", c.data.corpus)
                                                   : fmt::format("data.shards '{}'", c.data.shards);
  try {
    st.loader.emplace(split.train, c.train.batch_size, c.train.seq_len, c.data.loader, c.train.seed,
                      dp_rank * st.rows, st.rows);
  } catch (const std::invalid_argument& e) {
    if (split.val.empty() || !c.data.shards.empty()) throw std::invalid_argument(fmt::format("{}: {}", source, e.what()));
    // The corpus may be long enough: the held-out share left too little for training.
    throw std::invalid_argument(fmt::format(
        "data.val_fraction {}: leaves {} of the corpus's {} tokens for training ({} held out for validation): {}",
        c.data.val_fraction, split.train.size(), st.data.size(), split.val.size(), e.what()));
  }
  st.eval_on = c.train.eval_every > 0 && !split.val.empty();
  if (st.eval_on) {  // the validation split must hold one batch: fail now, not at the first evaluation
    try {
      DataLoader probe(split.val, c.train.batch_size, c.train.seq_len, LoaderKind::kSequential, c.train.seed);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{}: the validation split is too small: {}",
                                              c.data.shards.empty() ? "data.val_fraction" : "data.shards", e.what()));
    }
  }
}

// The whole model's `full` arrays cut to this rank's part: its tp shard of its stage's tensors.
void cut_to_rank(std::vector<float>& full, const Gpt2Config& cfg, TpShape tp, int tp_rank, StageLayers stage) {
  if (tp.size > 1 || !stage.whole(cfg.L)) full = shard_of(cfg, tp, tp_rank, full, stage);
}

// ZeRO 0 to 2: the model's own buffer holds this rank's parameters.
class ModelHome final : public ParamHome {
 public:
  explicit ModelHome(Gpt2& model) : model_(model) {}
  void load(const std::vector<float>& local) override { model_.params_from_host(local); }
  void init(uint64_t seed) override { model_.init_weights(seed); }
  std::optional<uint64_t> start_hash() override {
    if (model_.memory().is_host()) return fnv1a64(model_.param_data(), model_.num_params() * sizeof(float));  // where it is
    const std::vector<float> w = model_.params_to_host();
    return fnv1a64(w.data(), w.size() * sizeof(float));
  }
  std::vector<float> gather(bool keep) override { return keep ? model_.params_to_host() : std::vector<float>{}; }
  bool in_model() const override { return true; }
  std::vector<ShardRange> held() const override { return {{0, model_.num_params(), 0}}; }
  StateAt host_at() const override { return {model_.memory().is_host() ? model_.param_data() : nullptr, false}; }
  void load(const std::function<void(size_t, std::span<float>)>& values) override {
    if (model_.memory().is_host()) {
      values(0, {model_.param_data(), model_.num_params()});
      return;
    }
    std::vector<float> w(model_.num_params());
    values(0, w);
    model_.params_from_host(w);
  }

 private:
  Gpt2& model_;
};

// ZeRO-3: only this rank's pieces of the unit shards (parallel/zero.h).
class ShardHome final : public ParamHome {
 public:
  ShardHome(ZeroShards& shards, const Gpt2Config& cfg, TpShape tp, int tp_rank, StageLayers stage)
      : shards_(shards), cfg_(cfg), tp_(tp), tp_rank_(tp_rank), stage_(stage) {}
  void load(const std::vector<float>& local) override {
    shards_.load_params(local);
    hash_ = fnv1a64(local.data(), local.size() * sizeof(float));
  }
  void init(uint64_t seed) override {
    if (cfg_.init == InitKind::kOriginal) {  // the original's scheme is one sequence of draws over the whole model
      std::vector<float> w = initial_weights(cfg_, seed);
      cut_to_rank(w, cfg_, tp_, tp_rank_, stage_);
      load(w);
      return;
    }
    // Only this rank's pieces, each computed where it lands: no rank holds the whole model (docs/memory.md).
    shards_.load_params([&](size_t begin, std::span<float> out) {
      initial_values(cfg_, seed, tp_, tp_rank_, stage_, begin, out);
    });
  }
  std::optional<uint64_t> start_hash() override { return hash_; }
  std::vector<float> gather(bool keep) override {
    std::vector<float> whole = shards_.gather(shards_.param_shard());
    return keep ? whole : std::vector<float>{};
  }
  bool in_model() const override { return false; }
  std::vector<ShardRange> held() const override { return nonempty(shards_.shards().ranges); }
  StateAt host_at() const override { return {const_cast<float*>(shards_.param_shard_data()), true}; }
  void load(const std::function<void(size_t, std::span<float>)>& values) override {
    shards_.load_params(values);
    hash_.reset();  // each rank read its own pieces from a checked checkpoint: nothing whole to compare
  }

 private:
  ZeroShards& shards_;
  Gpt2Config cfg_;
  TpShape tp_;
  int tp_rank_;
  StageLayers stage_;
  std::optional<uint64_t> hash_;
};

// ZeRO 0: every rank holds the whole moments.
class WholeMoments final : public MomentShard {
 public:
  explicit WholeMoments(size_t n) : n_(n) {}
  std::vector<float> cut(std::vector<float> whole) const override { return whole; }
  std::vector<float> gather(std::vector<float> part, Communicator&) const override { return part; }
  size_t updated() const override { return n_; }
  std::vector<ShardRange> held() const override { return {{0, n_, 0}}; }
  bool packed() const override { return false; }
  bool replicated() const override { return true; }

 private:
  size_t n_;
};

// A contiguous range of the padded buffer (ContiguousShard), all-gathered by chunks.
class ContiguousMoments final : public MomentShard {
 public:
  ContiguousMoments(ContiguousShard shard, size_t n) : s_(shard), n_(n) {}
  std::vector<float> cut(std::vector<float> whole) const override {
    return std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(s_.begin),
                              whole.begin() + static_cast<std::ptrdiff_t>(s_.end));
  }
  std::vector<float> gather(std::vector<float> part, Communicator& dp) const override {
    std::vector<float> whole(s_.chunk * static_cast<size_t>(dp.size()));
    part.resize(s_.chunk, 0.0f);
    dp.all_gather(part.data(), whole.data(), s_.chunk);
    whole.resize(n_);
    return whole;
  }
  size_t updated() const override { return s_.end - s_.begin; }
  std::vector<ShardRange> held() const override { return nonempty({{s_.begin, s_.end, 0}}); }

 private:
  ContiguousShard s_;
  size_t n_;
};

// ZeRO-2/3's unit pieces (parallel/zero.h).
class UnitMoments final : public MomentShard {
 public:
  explicit UnitMoments(ZeroShards& shards) : shards_(shards) {}
  std::vector<float> cut(std::vector<float> whole) const override { return shards_.shards().pack(whole); }
  std::vector<float> gather(std::vector<float> part, Communicator&) const override { return shards_.gather(part); }
  size_t updated() const override { return shards_.shards().shard_floats; }
  size_t units() const override { return shards_.shards().pieces.size(); }
  std::vector<ShardRange> held() const override { return nonempty(shards_.shards().ranges); }

 private:
  ZeroShards& shards_;
};

// The model and its optimizer in the backend's memory, laid out for this
// rank's place in the grid and ZeRO's sharding. Returns the rank's stage.
StageLayers make_model(const RunLayout& run, const BackendKind& kind, int threads, int device_hint, ProcessGrid& grid,
                       RunState& st) {
  const RunConfig& c = run.config;
  const int dp = grid.dp(), dp_rank = grid.dp_comm().rank();
  st.backend = kind.make(run.backend_for(threads, device_hint));
  Memory& mem = st.backend->memory();
  st.model_config.validate();
  TpPlace layout = grid.layout(c.parallel.blocks(), c.parallel.vocab_parallel);
  layout.validate(st.model_config);
  // Every layout the same cut (fp32: under bf16 tensor parallelism is refused).
  layout.pieces = deterministic_pieces(st.model_config, layout.size, *st.backend);
  st.stage_split = run.stage_split;  // parallel.stage_layers and parallel.virtual_stages, split once
  const StageLayers stage = st.stage_split.held(grid.stage());
  const ZeroSharding& zl = run.step.zero;
  st.homes.zero = zl;
  const bool contiguous = zl.contiguous;
  st.model = std::make_unique<Gpt2>(st.model_config, mem, std::move(layout), stage,
                                    contiguous ? static_cast<size_t>(dp) : 1, zl.residency);
  UpdateScope scope;
  scope.exact_norm = c.train.deterministic;  // the same norm however the gradient is split (docs/determinism.md)
  if (contiguous) {
    st.homes.contiguous = contiguous_shard(*st.model, dp, dp_rank);
    scope.ranges = {{st.homes.contiguous->begin, st.homes.contiguous->end, 0}};
    scope.shards = &grid.dp_group();
    st.homes.moments = std::make_unique<ContiguousMoments>(*st.homes.contiguous, st.model->num_params());
  } else if (zl.unit_shards()) {
    st.homes.units = std::make_unique<ZeroShards>(*st.model, grid.dp_comm(), st.homes.zero.zero_stage);
    scope.ranges = st.homes.units->shards().ranges;
    scope.shards = &grid.dp_group();
    st.homes.moments = std::make_unique<UnitMoments>(*st.homes.units);
  } else {
    st.homes.moments = std::make_unique<WholeMoments>(st.model->num_params());
  }
  if (zl.residency == Residency::kNone) {
    st.homes.params = std::make_unique<ShardHome>(*st.homes.units, st.model_config, st.model->tp().shape(),
                                                  st.model->tp().rank, stage);
  } else {
    st.homes.params = std::make_unique<ModelHome>(*st.model);
  }
  if (grid.pp() > 1) scope.stages = &grid.pp_group();
  st.opt = std::make_unique<Optimizer>(c.optimizer, st.model->num_params(), mem, scope);
  return stage;
}

// A sharded checkpoint's state into where this rank's lives: each rank
// reads only the floats it holds, straight into place (train/formats/sharded_checkpoint.h).
void read_sharded_state(const ShardedCheckpoint& ck, RunState& st, const StageLayers& stage) {
  const TpPlace& tp = st.model->tp();
  const RankPart whole{tp.shape(), tp.rank, stage, {}};
  st.homes.params->load([&](size_t begin, std::span<float> out) {
    RankPart part = whole;
    part.ranges = {{begin, begin + out.size(), 0}};
    ck.read_part(StateArray::kParams, part, {out.data(), true});
  });
  RankPart part = whole;
  part.ranges = st.homes.moments->held();
  const bool packed = st.homes.moments->packed();
  if (st.model->memory().is_host()) {
    ck.read_part(StateArray::kM, part, {st.opt->m_data(), packed});
    ck.read_part(StateArray::kV, part, {st.opt->v_data(), packed});
  } else {
    std::vector<float> m = st.opt->m_to_host(), v = st.opt->v_to_host();
    ck.read_part(StateArray::kM, part, {m.data(), packed});
    ck.read_part(StateArray::kV, part, {v.data(), packed});
    st.opt->moments_from_host(m, v);
  }
}

// The weights (and, resuming, the moments and counters) this rank starts
// from: the checkpoint's, broadcast from rank 0 and cut to this rank's
// shard (a sharded one's read by every rank), or model.init's from
// train.seed; into where they live (st.homes.params).
void set_initial_state(const RunConfig& c, const StateSource& source, ProcessGrid& grid, RunState& st,
                       std::optional<Checkpoint>& ckpt, const ShardedCheckpoint* sharded, const StageLayers& stage,
                       const GivenModel& given) {
  if (source.kind == StateSource::Kind::kModelFile) {
    // Rank 0 reads the file and fits it to the run's model; every rank takes its part. The optimizer starts fresh.
    HostState hs;
    std::vector<std::string> refusal = {""};  // rank 0's, so that every rank refuses alike (exit 2)
    if (grid.world().rank() == 0) {
      try {
        if (given.weights != nullptr) {
          hs.params = fit_weights(*given.weights, st.model_config, source.key, source.path);
        } else {
          const ModelWeights w = read_model_weights(source.path, source.key);
          hs.params = fit_weights(w, st.model_config, source.key, source.path);
        }
      } catch (const std::invalid_argument& e) {
        refusal[0] = e.what();
      }
    }
    broadcast_strings(grid.world(), refusal, 0);
    if (!refusal[0].empty()) throw std::invalid_argument(refusal[0]);
    hs.params.resize(param_count(st.model_config));
    grid.world().broadcast(hs.params.data(), hs.params.size() * sizeof(float), 0);
    cut_to_rank(hs.params, st.model_config, st.model->tp().shape(), st.model->tp().rank, stage);
    st.homes.params->load(hs.params);
    return;
  }
  if (source.kind == StateSource::Kind::kSeed) {
    st.homes.params->init(c.train.seed);
    return;
  }
  Communicator& comm = grid.world();
  const TpPlace& tp = st.model->tp();
  HostState hs;
  if (comm.rank() == 0) {
    st.unchecked = check_training_state(*ckpt, st.model_config, c, st, source.path);
    if (const std::string* id = ckpt->find("run.id")) st.checkpoint_run_id = *id;
    hs.params = std::move(ckpt->params);
    hs.m = std::move(ckpt->training->m);
    hs.v = std::move(ckpt->training->v);
    hs.counters = {ckpt->training->steps_done, ckpt->training->loader_position, ckpt->training->loader_batches};
    ckpt.reset();
  }
  if (sharded) {
    comm.broadcast(hs.counters.data(), sizeof hs.counters, 0);
    read_sharded_state(*sharded, st, stage);
  } else {
    broadcast_state(comm, hs, param_count(st.model_config));
    for (std::vector<float>* v : {&hs.params, &hs.m, &hs.v}) {  // this rank's shard of each
      cut_to_rank(*v, st.model_config, tp.shape(), tp.rank, stage);
    }
    hs.m = st.homes.moments->cut(std::move(hs.m));
    hs.v = st.homes.moments->cut(std::move(hs.v));
    st.homes.params->load(hs.params);
    st.opt->moments_from_host(hs.m, hs.v);
  }
  st.opt->set_steps_done(hs.counters[0]);
  st.loader->restore(hs.counters[1], hs.counters[2]);
}

// Every data-parallel replica holds the same weights (checked by hash, as
// loaded or initialised: ParamHome::start_hash).
void check_replicas_agree(ProcessGrid& grid, RunState& st) {
  const std::optional<uint64_t> h = st.homes.params->start_hash();
  if (h && !grid.dp_comm().all_equal(*h)) {
    throw std::runtime_error("the initial weights differ across ranks (checksum mismatch)");
  }
}

}  // namespace

std::unique_ptr<RunState> init_or_resume(const RunLayout& run, const StateSource& source, const BackendKind& kind,
                                         int threads, int device_hint, ProcessGrid& grid, const GivenModel& given) {
  const RunConfig& c = run.config;
  auto st = std::make_unique<RunState>();
  st->rows = run.rows;  // decided once (resolve_run), as the split and ZeRO's layout below
  std::optional<Checkpoint> ckpt;
  std::unique_ptr<ShardedCheckpoint> sharded;
  const std::string resume = source.kind == StateSource::Kind::kCheckpoint ? source.path : "";
  load_run_data(c, resume, grid, *st, ckpt, sharded, given.vocabulary);
  const StageLayers stage = make_model(run, kind, threads, device_hint, grid, *st);
  set_initial_state(c, source, grid, *st, ckpt, sharded.get(), stage, given);
  check_replicas_agree(grid, *st);
  st->first_step = st->opt->steps_done();
  return st;
}

namespace {
// The hash of the replicated tensors of a shard (equal on every rank of a
// tensor-parallel group, or the replicas have drifted apart).
uint64_t replicated_hash(const Gpt2& model, const std::vector<float>& local) {
  uint64_t h = 0;
  for (const ParamInfo& info : model.infos()) {
    if (info.split != TpSplit::kNone) continue;
    h ^= fnv1a64(local.data() + info.offset, static_cast<size_t>(info.view->numel()) * sizeof(float)) + info.offset;
  }
  return h;
}
}  // namespace

namespace {
// The optimizer's settings and the counters of `st` as they are now (no arrays).
TrainingState training_counters(const RunState& st, uint64_t seed) {
  TrainingState ts;
  ts.loader_position = st.loader->position();
  ts.loader_batches = st.loader->batches_served();
  ts.seed = seed;
  ts.optimizer = st.opt->config();
  ts.steps_done = st.opt->steps_done();
  return ts;
}
}  // namespace

CheckpointRecord checkpoint_record(const RunConfig& c, const RunState& st) {
  return {c.train.seed, curve_entries(c, static_cast<size_t>(st.data.size()), st.corpus_hash)};
}

KeyValues training_header(const RunState& st, const CheckpointRecord& record, const std::string& run_id) {
  const TrainingState ts = training_counters(st, record.seed);
  KeyValues extra = record.curve;
  extra.emplace_back("run.id", run_id);
  return checkpoint_header(st.model_config, st.data.tok, &ts, extra);
}

uint64_t save_training_checkpoint(const std::string& path, const RunState& st, const CheckpointRecord& record,
                                  const std::string& run_id, ProcessGrid& grid) {
  // ZeRO: the moments' shards first, then ZeRO-3's parameters, over the
  // data-parallel group (every rank).
  std::vector<float> m = st.homes.moments->gather(st.opt->m_to_host(), grid.dp_comm());
  std::vector<float> v = st.homes.moments->gather(st.opt->v_to_host(), grid.dp_comm());
  const std::vector<float> local = st.homes.params->gather(grid.dp_comm().rank() == 0);
  if (grid.dp_comm().rank() != 0) return 0;
  TrainingState ts = training_counters(st, record.seed);
  KeyValues extra = record.curve;
  extra.emplace_back("run.id", run_id);
  if (grid.tp() > 1 && !grid.tp_comm().all_equal(replicated_hash(*st.model, local))) {
    throw std::runtime_error("the replicated parameters differ across the tensor-parallel group");
  }
  const bool vocab = st.model->tp().shape().vocab;
  const std::vector<float> params = gather_full(st.model_config, grid, local, st.stage_split, vocab);
  ts.m = gather_full(st.model_config, grid, m, st.stage_split, vocab);
  ts.v = gather_full(st.model_config, grid, v, st.stage_split, vocab);
  if (grid.world().rank() != 0) return 0;
  if (!path.empty()) save_checkpoint(path, st.model_config, params, st.data.tok, &ts, extra);
  uint64_t h = fnv1a64(params.data(), params.size() * sizeof(float));
  h = fnv1a64(ts.m.data(), ts.m.size() * sizeof(float), h);
  return fnv1a64(ts.v.data(), ts.v.size() * sizeof(float), h);
}

std::string store_training_checkpoint(const std::string& out_dir, int64_t steps, const RunState& st,
                                      const CheckpointRecord& record, int keep, const std::string& run_id,
                                      ProcessGrid& grid, uint64_t* hash) {
  const bool writer = grid.world().rank() == 0;
  const std::filesystem::path dir = writer ? begin_checkpoint(out_dir, steps) : std::filesystem::path();
  uint64_t h = 0;
  try {
    h = save_training_checkpoint(writer ? (dir / kCheckpointFile).string() : "", st, record, run_id, grid);
  } catch (...) {
    if (writer) abandon_checkpoint(dir);
    throw;
  }
  if (hash) *hash = h;
  if (!writer) return "";
  return commit_checkpoint(out_dir, dir, steps, {kCheckpointFile}, keep).string();
}

}  // namespace gpt2
