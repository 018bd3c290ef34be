#include "parallel/zero.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "parallel/gradient_sync.h"

namespace gpt2 {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

UnitShards UnitShards::of(const std::vector<ParamUnit>& units, int ranks, int rank) {
  UnitShards s;
  const size_t N = static_cast<size_t>(ranks), r = static_cast<size_t>(rank);
  for (const ParamUnit& u : units) {
    const size_t chunk = (u.count + N - 1) / N;
    const size_t end = u.offset + u.count;
    const size_t lo = std::min(u.offset + r * chunk, end), hi = std::min(u.offset + (r + 1) * chunk, end);
    s.pieces.push_back({u, chunk, s.shard_floats});
    s.ranges.push_back({lo, hi, s.shard_floats});
    s.shard_floats += chunk;
    s.max_padded = std::max(s.max_padded, N * chunk);
  }
  return s;
}

std::vector<float> UnitShards::pack(std::span<const float> flat) const {
  std::vector<float> packed(shard_floats, 0.0f);
  for (const ShardRange& r : ranges) std::copy(flat.begin() + r.lo, flat.begin() + r.hi, packed.begin() + r.pos);
  return packed;
}

ZeroShards::ZeroShards(Gpt2& model, Communicator& dp, int zero_stage)
    : model_(model), dp_(dp), zero_stage_(zero_stage), shards_(UnitShards::of(model.units(), dp.size(), dp.rank())) {
  if (zero_stage != 2 && zero_stage != 3)
    throw std::invalid_argument(fmt::format("ZeroShards: stage {} (2 or 3)", zero_stage));
  if (!model.memory().is_host()) {
    throw std::invalid_argument(fmt::format(
        "parallel.zero {}: the sharded stages keep their working memory on the host for now; the model is in {} "
        "(run ZeRO-2/3 on the mpi stage, or parallel.zero 1)",
        zero_stage, model.memory().name()));
  }
  const Residency want = zero_stage == 2 ? Residency::kParams : Residency::kNone;
  if (model.residency() != want) throw std::logic_error("ZeroShards: the model's residency does not fit the stage");
  Memory& mem = model.memory();
  grad_shard_ = Buffer(shards_.shard_floats, mem);
  for (Buffer& b : grad_slots_) b = Buffer(shards_.max_padded, mem);
  if (zero_stage == 3) {
    param_shard_ = Buffer(shards_.shard_floats, mem);
    for (Buffer& b : param_slots_) b = Buffer(shards_.max_padded, mem);
  }
}

StateAt ZeroShards::params() const {
  return zero_stage_ == 3 ? StateAt{param_shard_.data(), true} : StateAt{model_.param_data(), false};
}

const UnitShards::Piece& ZeroShards::piece(const ParamUnit& unit) const {
  return shards_.pieces[static_cast<size_t>(unit.id - shards_.pieces.front().unit.id)];
}

void ZeroShards::wait() {
  if (!in_flight_) return;
  const auto t0 = Clock::now();
  dp_.wait_all();
  in_flight_ = false;
  seconds_ += since(t0);
}

void ZeroShards::start_gather(const UnitShards::Piece& p, int slot) {
  const auto t0 = Clock::now();
  dp_.start_all_gather(param_shard_.data() + p.pos, param_slots_[slot].data(), p.chunk);
  slot_unit_[slot] = p.unit.id;
  in_flight_ = true;
  seconds_ += since(t0);
}

float* ZeroShards::gathered(const ParamUnit& unit, Pass pass) {
  int s = slot_unit_[0] == unit.id ? 0 : slot_unit_[1] == unit.id ? 1 : -1;
  if (s < 0) {  // not prefetched: gather it now, into a free slot
    s = slot_unit_[0] == -1 ? 0 : 1;
    start_gather(piece(unit), s);
  }
  wait();
  // Prefetch the next unit of this pass into the other slot; it arrives while this one computes.
  const int next = unit.id + (pass == Pass::kForward ? 1 : -1);
  const int first = shards_.pieces.front().unit.id, last = shards_.pieces.back().unit.id;
  if (next >= first && next <= last && slot_unit_[1 - s] == -1) {
    start_gather(shards_.pieces[static_cast<size_t>(next - first)], 1 - s);
  }
  return param_slots_[s].data();
}

void ZeroShards::acquire(const ParamUnit& unit, Pass pass) {
  if (before_unit_) {
    try {
      before_unit_();
    } catch (...) {  // the step ends here: nothing in flight, no slot taken for a unit
      wait();
      slot_unit_[0] = slot_unit_[1] = -1;
      throw;
    }
  }
  float* w = zero_stage_ == 3 ? gathered(unit, pass) : nullptr;
  float* g = nullptr;
  if (pass == Pass::kBackward && whole_grads_ != nullptr) {
    g = whole_grads_ + unit.offset;
  } else if (pass == Pass::kBackward) {
    Buffer& slot = grad_slots_[grad_slot_];
    g = slot.data();
    // The backward accumulates into its gradient, and the padding past the
    // unit is summed by the reduce-scatter: all of it starts at zero.
    slot.memory().zero(g, dp_.size() * piece(unit).chunk * sizeof(float));
  }
  model_.bind_unit(unit, w, g);
}

void ZeroShards::release(const ParamUnit& unit, Pass pass) {
  if (pass == Pass::kBackward && whole_grads_ == nullptr) {
    wait();  // the previous unit's pieces: its slot is the one the next acquire takes
    const UnitShards::Piece& p = piece(unit);
    const auto t0 = Clock::now();
    dp_.start_reduce_scatter_sum(grad_slots_[grad_slot_].data(), grad_shard_.data() + p.pos, p.chunk);
    in_flight_ = true;
    seconds_ += since(t0);
    grad_slot_ ^= 1;
  }
  model_.bind_unit(unit, nullptr, nullptr);
  for (int& u : slot_unit_) {
    if (u == unit.id) u = -1;
  }
}

void ZeroShards::finish_grads() { wait(); }

void ZeroShards::scatter_sum(float* whole) {
  const auto t0 = Clock::now();
  float* scratch = grad_slots_[0].data();  // free outside the passes; holds a padded unit
  for (const UnitShards::Piece& p : shards_.pieces) {
    // The unit's pieces of p.chunk floats (the last cut at its end; the shard's padding is zeros).
    const auto [lo, len] = canonical_reduce_scatter(dp_, whole + p.unit.offset, p.unit.count, p.chunk, scratch);
    float* dst = grad_shard_.data() + p.pos;
    std::copy_n(whole + p.unit.offset + lo, len, dst);
    std::fill(dst + len, dst + p.chunk, 0.0f);
  }
  seconds_ += since(t0);
}

void ZeroShards::gather_unit(const UnitShards::Piece& p, const float* mine, float* whole, float* flat) {
  dp_.all_gather(mine, whole, p.chunk);
  std::copy_n(whole, p.unit.count, flat + p.unit.offset);
}

void ZeroShards::finish_update() {
  if (zero_stage_ != 2) return;
  const auto t0 = Clock::now();
  float* send = grad_slots_[1].data();  // the gradient slots are free after the update
  float* recv = grad_slots_[0].data();
  for (size_t k = 0; k < shards_.pieces.size(); ++k) {
    const UnitShards::Piece& p = shards_.pieces[k];
    const ShardRange& r = shards_.ranges[k];
    std::fill_n(send, p.chunk, 0.0f);
    std::copy(model_.param_data() + r.lo, model_.param_data() + r.hi, send);
    gather_unit(p, send, recv, model_.param_data());
  }
  seconds_ += since(t0);
}

void ZeroShards::load_params(const std::function<void(size_t, std::span<float>)>& values) {
  if (zero_stage_ != 3) throw std::logic_error("ZeroShards::load_params: stage 3 only");
  // The shard is host memory (the constructor checked): filled where it is, no second copy.
  float* shard = param_shard_.data();
  std::fill(shard, shard + shards_.shard_floats, 0.0f);
  for (const ShardRange& r : shards_.ranges) values(r.lo, {shard + r.pos, r.hi - r.lo});
}

void ZeroShards::load_params(std::span<const float> flat) {
  load_params([&](size_t begin, std::span<float> out) {
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(begin), out.size(), out.begin());
  });
}

std::vector<float> ZeroShards::gather(std::span<const float> packed) {
  if (packed.size() != shards_.shard_floats) {
    throw std::invalid_argument(fmt::format("ZeroShards::gather: {} floats for a shard of {}", packed.size(),
                                            shards_.shard_floats));
  }
  std::vector<float> flat(model_.num_params());
  std::vector<float> whole(shards_.max_padded);
  for (const UnitShards::Piece& p : shards_.pieces) gather_unit(p, packed.data() + p.pos, whole.data(), flat.data());
  return flat;
}

ContiguousShard contiguous_shard(size_t num_params, size_t padded, int dp, int dp_rank) {
  const size_t chunk = padded / static_cast<size_t>(dp);
  const size_t begin = std::min(static_cast<size_t>(dp_rank) * chunk, num_params);
  return {begin, std::min(begin + chunk, num_params), chunk};
}

ContiguousShard contiguous_shard(const Gpt2& model, int dp, int dp_rank) {
  return contiguous_shard(model.num_params(), model.padded_params(), dp, dp_rank);
}

}  // namespace gpt2
