#include "kernels/buffer.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace gpt2 {

namespace {
class HostMemory final : public Memory {
 public:
  std::string name() const override { return "host"; }
  bool is_host() const override { return true; }
  void* allocate(size_t bytes) override {
    constexpr size_t kAlign = 64;
    void* p = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (p == nullptr) throw std::runtime_error(fmt::format("out of host memory allocating {} MiB", bytes >> 20));
    std::memset(p, 0, bytes);
    return p;
  }
  void release(void* p) override { std::free(p); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};
}  // namespace

Memory& host_memory() {
  static HostMemory host;
  return host;
}

Buffer::Buffer(size_t count, Memory& memory) : size_(count), memory_(&memory) {
  if (count == 0) return;
  data_ = std::unique_ptr<float, Free>(static_cast<float*>(memory.allocate(count * sizeof(float))), Free{&memory});
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::move(other.data_)), size_(std::exchange(other.size_, 0)), memory_(other.memory_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  data_ = std::move(other.data_);
  size_ = std::exchange(other.size_, 0);
  memory_ = other.memory_;
  return *this;
}

void Buffer::zero() {
  if (size_ != 0) memory_->zero(data_.get(), bytes());
}

void Buffer::upload(std::span<const float> host) {
  if (host.size() != size_) {
    throw std::invalid_argument(fmt::format("Buffer::upload: {} floats for a buffer of {}", host.size(), size_));
  }
  if (size_ != 0) memory_->upload(data_.get(), host.data(), bytes());
}

std::vector<float> Buffer::download() const {
  std::vector<float> out(size_);
  if (size_ != 0) memory_->download(out.data(), data_.get(), bytes());
  return out;
}

}  // namespace gpt2
