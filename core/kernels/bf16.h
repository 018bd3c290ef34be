// bfloat16: the upper 16 bits of an IEEE float32 (sign, the 8 exponent bits,
// 7 stored mantissa bits), the 16-bit type of mixed-precision training
// (DESIGN.md "Precision"). A bf16 holds every float's range and 8 bits of
// its significand (7 stored and the implicit one): one rounding costs at
// most 2^-8 relative (the unit roundoff, half a unit in the last place).
#pragma once

#include <bit>
#include <cstdint>
#include <span>

namespace gpt2 {

struct bf16 {
  uint16_t bits = 0;
  bool operator==(const bf16&) const = default;
};

// Round to nearest, ties to even (what oneDNN, PyTorch and the CUDA
// intrinsic __float2bfloat16 do); a NaN stays a (quiet) NaN, infinities stay.
// Branch-free (a select, not a jump), so that loops of it vectorise.
inline bf16 to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return bf16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

// Exact: every bf16 is a float.
inline float to_float(bf16 b) { return std::bit_cast<float>(static_cast<uint32_t>(b.bits) << 16); }

// out[i] = to_bf16(in[i]) (sizes equal), on `threads` OpenMP threads.
void to_bf16(std::span<const float> in, std::span<bf16> out, int threads = 1);

}  // namespace gpt2
