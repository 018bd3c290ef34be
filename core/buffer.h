// Buffer: one owning, 64-byte aligned, zero-initialised allocation of floats.
// Parameters, gradients, Adam moments and activations each live in one Buffer;
// every Tensor in the model is a view into one of them.
#pragma once

#include <cstddef>
#include <memory>

namespace gpt2 {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t count);
  float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }
  void zero();

 private:
  struct Free { void operator()(float* p) const; };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
};

}  // namespace gpt2
