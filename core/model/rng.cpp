#include "model/rng.h"

#include <cmath>
#include <numbers>

namespace gpt2 {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  // Constants from the Random123 reference (multipliers and Weyl key increments).
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{kMul0} * ctr[0];
    uint64_t p1 = uint64_t{kMul1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return ctr;
}

namespace {
std::array<uint32_t, 4> block(uint64_t seed, uint32_t stream, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), stream, 0u},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
// 53 random bits -> (0, 1): offset by half an ulp so 0 cannot occur.
double to_unit(uint32_t hi, uint32_t lo) {
  uint64_t bits = (uint64_t{hi} << 21) ^ (lo >> 11);
  return (static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) + 0.5) * 0x1p-53;
}
}  // namespace

double uniform01(uint64_t seed, uint32_t stream, uint64_t index) {
  auto r = block(seed, stream, index);
  return to_unit(r[0], r[1]);
}

float normal(uint64_t seed, uint32_t stream, uint64_t index) {
  auto r = block(seed, stream, index);
  double u1 = to_unit(r[0], r[1]);
  double u2 = to_unit(r[2], r[3]);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

}  // namespace gpt2
