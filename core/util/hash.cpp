#include "util/hash.h"

namespace gpt2 {

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;  // the 64-bit FNV prime
  }
  return h;
}

}  // namespace gpt2
