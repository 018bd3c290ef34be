// DataLoader and split_tokens: batch windows over a token stream, sequential
// (the reproduced project's order) or seeded random, sharded by rows.
#include "model/dataloader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

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

void TokenStream::add(const void* data, int width, size_t count) {
  if (count == 0) return;
  parts_.push_back({data, width, n_, static_cast<int64_t>(count)});
  n_ += static_cast<int64_t>(count);
}

void TokenStream::read(int64_t begin, std::span<int32_t> out) const {
  const auto len = static_cast<int64_t>(out.size());
  if (begin < 0 || len > n_ - begin) {
    throw std::out_of_range(fmt::format("token stream: tokens [{}, {}) of {}", begin, begin + len, n_));
  }
  // The part holding `begin`: the last whose start is at or before it.
  auto it = std::upper_bound(parts_.begin(), parts_.end(), begin,
                             [](int64_t at, const Part& p) { return at < p.begin; });
  size_t k = static_cast<size_t>(it - parts_.begin()) - 1;
  int64_t done = 0;
  while (done < len) {
    const Part& p = parts_[k++];
    const int64_t from = begin + done - p.begin, take = std::min(p.count - from, len - done);
    int32_t* dst = out.data() + done;
    if (p.width == 2) {
      const uint16_t* src = static_cast<const uint16_t*>(p.data) + from;
      for (int64_t i = 0; i < take; ++i) dst[i] = static_cast<int32_t>(src[i]);
    } else {
      const int32_t* src = static_cast<const int32_t*>(p.data) + from;
      std::copy(src, src + take, dst);
    }
    done += take;
  }
}

TokenStream TokenStream::slice(int64_t begin, int64_t end) const {
  if (begin < 0 || end < begin || end > n_) {
    throw std::out_of_range(fmt::format("token stream: slice [{}, {}) of {}", begin, end, n_));
  }
  TokenStream out;
  for (const Part& p : parts_) {
    const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.begin + p.count);
    if (lo >= hi) continue;
    const char* base = static_cast<const char*>(p.data) + (lo - p.begin) * p.width;
    out.add(base, p.width, static_cast<size_t>(hi - lo));
  }
  return out;
}

std::vector<int32_t> TokenStream::to_vector() const {
  std::vector<int32_t> out(static_cast<size_t>(n_));
  read(0, out);
  return out;
}

uint64_t TokenStream::hash(uint64_t h) const {
  constexpr int64_t kBlock = 4096;
  std::vector<int32_t> buf(static_cast<size_t>(std::min(kBlock, std::max<int64_t>(n_, 1))));
  for (int64_t at = 0; at < n_; at += kBlock) {
    const int64_t take = std::min(kBlock, n_ - at);
    read(at, {buf.data(), static_cast<size_t>(take)});
    h = fnv1a64(buf.data(), static_cast<size_t>(take) * sizeof(int32_t), h);
  }
  return h;
}

Split split_tokens(const TokenStream& tokens, double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw std::invalid_argument(
        fmt::format("data.val_fraction: must be in [0, 1), got {}", val_fraction));
  }
  const int64_t n = tokens.size();
  const auto n_val = static_cast<int64_t>(std::floor(static_cast<double>(n) * val_fraction));
  return Split{tokens.slice(0, n - n_val), tokens.slice(n - n_val, n)};
}

DataLoader::DataLoader(TokenStream tokens, int B, int T, LoaderKind kind, uint64_t seed, int row_begin, int rows)
    : tokens_(std::move(tokens)),
      n_(tokens_.size()),
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
    // The window's T + 1 tokens: inputs, then targets as the same tokens shifted by one.
    int32_t* in = inputs + r * T;
    tokens_.read(start, {in, static_cast<size_t>(T)});
    std::copy(in + 1, in + T, targets + r * T);
    tokens_.read(start + T, {targets + r * T + T - 1, 1});
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
