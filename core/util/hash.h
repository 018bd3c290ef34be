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

// The checksum of large arrays (sharded checkpoints' rank files): four
// FNV-1a 64 lanes over little-endian 64-bit words, word i of each 32-byte
// block into lane i, so the four multiplications of a block run side by
// side (fnv1a64 does one a byte: 0.76 GB/s on this project's VM); the bytes
// of a last short block go into lane 0 one by one, and the digest is
// fnv1a64 of the four lanes' 32 bytes. The same digest however the input
// is cut into update() calls.
class Fnv1a64x4 {
 public:
  Fnv1a64x4();
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  uint64_t lane_[4];
  unsigned char pending_[32];
  size_t pending_n_ = 0;
  void block(const unsigned char* p);
};

}  // namespace gpt2
