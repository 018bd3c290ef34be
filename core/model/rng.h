// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
// A value depends only on (seed, stream, index): any rank or device that asks
// for element i of parameter p gets the same bits, with no shared state and no
// communication. Used for weight initialisation and seeded sampling.
#pragma once

#include <array>
#include <cstdint>

namespace gpt2 {

// Philox4x32 with 10 rounds: counter (4 x 32 bits) and key (2 x 32 bits) in,
// 4 x 32 random bits out.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Uniform in (0, 1) for (seed, stream, index); never exactly 0 or 1.
double uniform01(uint64_t seed, uint32_t stream, uint64_t index);

// Standard normal for (seed, stream, index), by Box-Muller on two uniforms
// drawn from the same Philox block.
float normal(uint64_t seed, uint32_t stream, uint64_t index);

}  // namespace gpt2
