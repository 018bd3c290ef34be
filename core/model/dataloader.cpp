// DataLoader and split_tokens: batch windows over a token stream, sequential
// (the reproduced project's order) or seeded random, sharded by rows.
#include "model/dataloader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/rng.h"

namespace gpt2 {

std::string to_string(LoaderKind kind) {
  return kind == LoaderKind::kSequential ? "sequential" : "random";
}

LoaderKind parse_loader_kind(const std::string& name) {
  if (name == "sequential") return LoaderKind::kSequential;
  if (name == "random") return LoaderKind::kRandom;
  throw std::invalid_argument(
      fmt::format("data.loader: expected 'sequential' or 'random', got '{}'", name));
}

Split split_tokens(std::span<const int32_t> tokens, double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw std::invalid_argument(
        fmt::format("data.val_fraction: must be in [0, 1), got {}", val_fraction));
  }
  const size_t n = tokens.size();
  const auto n_val = static_cast<size_t>(std::floor(static_cast<double>(n) * val_fraction));
  return Split{tokens.first(n - n_val), tokens.last(n_val)};
}

DataLoader::DataLoader(std::span<const int32_t> tokens, int B, int T, LoaderKind kind,
                       uint64_t seed, int row_begin, int rows)
    : tokens_(tokens),
      n_(static_cast<int64_t>(tokens.size())),
      B_(B),
      T_(T),
      kind_(kind),
      seed_(seed),
      row_begin_(row_begin),
      rows_(rows) {
  if (B <= 0) {
    throw std::invalid_argument(
        fmt::format("data loader: B (batch rows) must be positive, got {}", B));
  }
  if (T <= 0) {
    throw std::invalid_argument(
        fmt::format("data loader: T (sequence length) must be positive, got {}", T));
  }
  if (row_begin < 0 || row_begin >= B) {
    throw std::invalid_argument(
        fmt::format("data loader: row_begin must be in [0, {}), got {}", B, row_begin));
  }
  if (rows_ == -1) rows_ = B - row_begin;
  if (rows_ <= 0 || row_begin + rows_ > B) {
    throw std::invalid_argument(
        fmt::format("data loader: rows must be in [1, {}] for row_begin {} of B = {}, got {}",
                    B - row_begin, row_begin, B, rows));
  }
  const int64_t bt = static_cast<int64_t>(B) * T;
  if (kind == LoaderKind::kSequential && n_ < bt + 1) {
    throw std::invalid_argument(fmt::format(
        "corpus too short: {} tokens, but one batch of {} x {} needs {}", n_, B, T, bt + 1));
  }
  if (kind == LoaderKind::kRandom && n_ < static_cast<int64_t>(T) + 1) {
    throw std::invalid_argument(
        fmt::format("corpus too short: {} tokens, but one random window of T = {} needs {}", n_, T,
                    static_cast<int64_t>(T) + 1));
  }
}

void DataLoader::next(int32_t* inputs, int32_t* targets) {
  const int64_t T = T_;
  for (int r = 0; r < rows_; ++r) {
    const int64_t b = row_begin_ + r;
    int64_t start;
    if (kind_ == LoaderKind::kSequential) {
      start = pos_ + b * T;
    } else {
      const uint64_t index =
          static_cast<uint64_t>(served_) * static_cast<uint64_t>(B_) + static_cast<uint64_t>(b);
      // u is in (0, 1), so start is in [0, n - T - 1]; min() guards the
      // rounding of u * (n - T) up to n - T.
      const double u = uniform01(seed_, kDataStream, index);
      start =
          std::min(static_cast<int64_t>(std::floor(u * static_cast<double>(n_ - T))), n_ - T - 1);
    }
    const int32_t* src = tokens_.data() + start;
    std::copy(src, src + T, inputs + r * T);
    std::copy(src + 1, src + T + 1, targets + r * T);
  }
  ++served_;
  if (kind_ == LoaderKind::kSequential) {
    const int64_t bt = static_cast<int64_t>(B_) * T_;
    pos_ += bt;
    if (pos_ + bt + 1 > n_) pos_ = 0;
  }
}

void DataLoader::restore(int64_t position, int64_t batches_served) {
  if (batches_served < 0) {
    throw std::invalid_argument(
        fmt::format("data loader: batches_served must be >= 0, got {}", batches_served));
  }
  const int64_t bt = static_cast<int64_t>(B_) * T_;
  if (kind_ == LoaderKind::kSequential && (position < 0 || position + bt + 1 > n_)) {
    throw std::invalid_argument(fmt::format(
        "data loader: position must be in [0, {}] for {} tokens and a {} x {} batch, got {}",
        n_ - bt - 1, n_, B_, T_, position));
  }
  if (kind_ == LoaderKind::kRandom && (position < 0 || position > n_)) {
    throw std::invalid_argument(fmt::format(
        "data loader: position must be in [0, {}] for {} tokens, got {}", n_, n_, position));
  }
  pos_ = kind_ == LoaderKind::kSequential ? position : 0;
  served_ = batches_served;
}

}  // namespace gpt2
