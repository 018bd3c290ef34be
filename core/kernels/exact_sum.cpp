#include "kernels/exact_sum.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace gpt2 {

void ExactSquares::add(std::span<const float> x) {
  // Four partial bucket arrays in 64 bits, the terms dealt out in turn, so
  // that neighbouring terms of one exponent do not wait on each other's add
  // (a train.deterministic step spent 3 ns a term on that chain). Each block
  // gives a lane at most 65,535 squares below 2^48, so its 64-bit sums cannot
  // overflow, and they are added into the 128-bit buckets after the block.
  // Integer sums: the same value however they are grouped.
  constexpr size_t kLanes = 4, kBlock = kLanes * 65532;
  std::array<std::array<uint64_t, 256>, kLanes> part;
  const auto term = [&](float f, std::array<uint64_t, 256>& bucket) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t e = (u >> 23) & 0xffu;
    const uint64_t frac = u & 0x7fffffu;
    if (e == 0xffu) {
      (frac != 0 ? nans_ : infs_) += 1;
      return;
    }
    // Normal: (2^23 + frac) 2^(e - 150); subnormal: frac 2^-149, which is bucket 1's scale.
    const uint64_t m = e != 0 ? frac | 0x800000u : frac;
    bucket[e != 0 ? e : 1] += m * m;
  };
  for (size_t at = 0; at < x.size(); at += kBlock) {
    for (auto& lane : part) lane.fill(0);
    const size_t end = std::min(x.size(), at + kBlock);
    size_t i = at;
    for (; i + kLanes <= end; i += kLanes) {
      for (size_t l = 0; l < kLanes; ++l) term(x[i + l], part[l]);
    }
    for (; i < end; ++i) term(x[i], part[0]);  // at most 3 more: lane 0 stays below 65,536 terms
    for (const auto& lane : part) {
      for (size_t e = 1; e < by_exponent_.size(); ++e) by_exponent_[e] += lane[e];
    }
  }
}

std::array<uint64_t, ExactSquares::kDigits> ExactSquares::digits() const {
  std::array<uint64_t, kDigits> d = extra_;
  // Bucket E holds sums of M^2 2^(2E - 300) = M^2 2^(2(E - 1)) units of 2^-298.
  for (uint32_t e = 1; e < by_exponent_.size(); ++e) {
    uint128 v = by_exponent_[e];
    if (v == 0) continue;
    const uint32_t shift = 2 * (e - 1);
    size_t k = shift / 16;
    const uint32_t off = shift % 16;
    // v << off spans at most 128 + 15 bits: split it into 16-bit digits from k on.
    d[k] += static_cast<uint64_t>(v << off) & 0xffffu;
    v >>= (16 - off);
    for (++k; v != 0; ++k) {
      if (k >= kDigits) throw std::overflow_error("ExactSquares: the sum exceeds its range");
      d[k] += static_cast<uint64_t>(v & 0xffffu);
      v >>= 16;
    }
  }
  uint64_t carry = 0;
  for (uint64_t& digit : d) {
    digit += carry;
    carry = digit >> 16;
    digit &= 0xffffu;
  }
  if (carry != 0) throw std::overflow_error("ExactSquares: the sum exceeds its range");
  return d;
}

std::array<float, ExactSquares::kFloats> ExactSquares::to_floats() const {
  std::array<float, kFloats> f{};
  const std::array<uint64_t, kDigits> d = digits();
  for (size_t i = 0; i < kDigits; ++i) f[i] = static_cast<float>(d[i]);
  f[kDigits] = static_cast<float>(nans_ != 0);
  f[kDigits + 1] = static_cast<float>(infs_ != 0);
  return f;
}

void ExactSquares::add_floats(std::span<const float> f) {
  if (f.size() != kFloats) throw std::invalid_argument("ExactSquares::add_floats: a list of the wrong length");
  for (size_t i = 0; i < kDigits; ++i) {
    // A sum of at most kMaxRanks digits: an integer below 2^24, exact in float.
    if (!(f[i] >= 0 && f[i] < 16777216.0f) || f[i] != std::floor(f[i])) {
      throw std::invalid_argument("ExactSquares::add_floats: a digit that is not a sum of digits");
    }
    extra_[i] += static_cast<uint64_t>(f[i]);
  }
  nans_ += f[kDigits] != 0;
  infs_ += f[kDigits + 1] != 0;
}

double ExactSquares::value() const {
  if (nans_ != 0) return std::numeric_limits<double>::quiet_NaN();
  if (infs_ != 0) return std::numeric_limits<double>::infinity();
  const std::array<uint64_t, kDigits> d = digits();
  // Highest digits first, four (64 bits) at a time: every conversion and
  // addition rounds a function of the digits alone, and the digits are the
  // exact sum's (normalised: one representation per value).
  double r = 0;
  for (size_t i = kDigits; i >= 4; i -= 4) {
    const uint64_t word = d[i - 1] << 48 | d[i - 2] << 32 | d[i - 3] << 16 | d[i - 4];
    r += std::ldexp(static_cast<double>(word), static_cast<int>(16 * (i - 4)) - 298);
  }
  return r;
}

}  // namespace gpt2
