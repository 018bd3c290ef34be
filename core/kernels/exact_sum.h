// The exact sum of squares of floats (train.deterministic's gradient norm,
// docs/determinism.md): the same bits however the terms are split between
// tensors, threads and ranks, and in whatever order the parts are added.
//
// A float x is M 2^(e) with an integer M < 2^24, so x^2 = M^2 2^(2e) is an
// integer M^2 < 2^48 times a power of two: exact. The squares are added as
// integers, by exponent, and the whole sum is one fixed-point integer in units
// of 2^-298 (the smallest square of a subnormal float). Integer addition is
// associative, so the sum does not depend on the order of its terms; value()
// rounds it to a double by one fixed procedure.
//
// Across ranks the sum travels as 16-bit digits held in floats: each rank's
// digit is below 2^16, so the digits of up to 256 ranks add to below 2^24,
// exactly in float, in any order (an ordinary float allreduce).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace gpt2 {

__extension__ using uint128 = unsigned __int128;  // GCC's and Clang's; __extension__: no -Wpedantic

class ExactSquares {
 public:
  // Digits of 16 bits: 2^-298 .. 2^(640 - 298) covers every sum of up to
  // 2^80 squares of finite floats; then the count of NaNs and infinities.
  static constexpr size_t kDigits = 40;
  static constexpr size_t kFloats = kDigits + 2;
  static constexpr int kMaxRanks = 256;

  // Adds x[i]^2 for every i, exactly.
  void add(std::span<const float> x);
  // This sum as kFloats floats (normalised digits, then the NaN and infinity
  // counts); add_floats() adds such a list (the sum of several ranks' lists).
  std::array<float, kFloats> to_floats() const;
  void add_floats(std::span<const float> f);
  // The sum rounded to a double (NaN if any term was NaN, else infinity if
  // any was infinite). A function of the exact sum alone.
  double value() const;

 private:
  // The digits of the sum of everything added so far (buckets carried out).
  std::array<uint64_t, kDigits> digits() const;

  std::array<uint128, 255> by_exponent_{};  // [E]: the sum of M^2 of every x with exponent field E
  std::array<uint64_t, kDigits> extra_{};             // digits added through add_floats (not carried)
  uint64_t nans_ = 0, infs_ = 0;
};

}  // namespace gpt2
