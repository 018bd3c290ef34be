#include "buffer.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace gpt2 {

void Buffer::Free::operator()(float* p) const { std::free(p); }

Buffer::Buffer(size_t count) : size_(count) {
  if (count == 0) return;
  constexpr size_t kAlign = 64;  // one cache line; also the AVX-512 vector width
  size_t bytes = (count * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) {
    throw std::runtime_error(fmt::format("out of memory allocating {} MiB", bytes >> 20));
  }
  data_.reset(static_cast<float*>(p));
  zero();
}

void Buffer::zero() {
  if (size_ != 0) std::memset(data_.get(), 0, size_ * sizeof(float));
}

}  // namespace gpt2
