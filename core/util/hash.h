// FNV-1a, 64 bit: the one hash of the code base (checkpoint checksums,
// vocabulary hashes, start-up weight checks, harness run ids). Not
// cryptographic: it detects accidents, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpt2 {

inline constexpr uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;

// FNV-1a 64 of a byte range, continuing from `h` (chain calls to hash pieces).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = kFnvOffsetBasis);

}  // namespace gpt2
