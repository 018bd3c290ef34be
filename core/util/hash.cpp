#include "util/hash.h"

#include <algorithm>
#include <cstring>

namespace gpt2 {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;  // the 64-bit FNV prime
  }
  return h;
}

namespace {
constexpr uint64_t kFnvPrime = 0x100000001b3ull;
}  // namespace

Fnv1a64x4::Fnv1a64x4() {
  for (uint64_t i = 0; i < 4; ++i) lane_[i] = kFnvOffsetBasis ^ i;  // distinct lanes: swapped words change the digest
}

void Fnv1a64x4::block(const unsigned char* p) {
  for (int i = 0; i < 4; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);  // little-endian hosts only (the checkpoint formats are little-endian)
    lane_[i] = (lane_[i] ^ w) * kFnvPrime;
  }
}

void Fnv1a64x4::update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (pending_n_ > 0) {  // complete the block a previous call left short
    const size_t take = std::min(n, sizeof pending_ - pending_n_);
    std::memcpy(pending_ + pending_n_, p, take);
    pending_n_ += take;
    p += take;
    n -= take;
    if (pending_n_ < sizeof pending_) return;
    block(pending_);
    pending_n_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) block(p);
  std::memcpy(pending_, p, n);
  pending_n_ = n;
}

uint64_t Fnv1a64x4::digest() const {
  uint64_t lanes[4] = {lane_[0], lane_[1], lane_[2], lane_[3]};
  lanes[0] = fnv1a64(pending_, pending_n_, lanes[0]);
  return fnv1a64(lanes, sizeof lanes);
}

}  // namespace gpt2
