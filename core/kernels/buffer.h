// Memory and Buffer. A Memory is where a backend keeps its tensors: the host
// (every CPU backend) or a device (the CUDA backend). A Buffer is one owning,
// zero-initialised allocation of floats in some Memory. Parameters,
// gradients, Adam moments and activations each live in one Buffer; every
// Tensor in the model is a view into one of them, so a Tensor's data pointer
// is only dereferenceable on the host when its Buffer's memory is the host's.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gpt2 {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual std::string name() const = 0;  // "host", "cuda:0", ...
  virtual bool is_host() const = 0;
  // Zero-initialised; throws std::runtime_error when out of memory.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  // Host -> this memory and back; complete when they return (the host side
  // may be reused at once).
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
};

// Plain 64-byte aligned host memory (one cache line; the AVX-512 width).
Memory& host_memory();

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t count, Memory& memory = host_memory());
  // Moving leaves an empty buffer behind (size 0), never a size without data.
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }
  Memory& memory() const { return *memory_; }
  void zero();
  // The whole buffer from / to the host; sizes must match.
  void upload(std::span<const float> host);
  std::vector<float> download() const;

 private:
  struct Free {
    Memory* memory;  // value-initialised to nullptr for an empty Buffer
    void operator()(float* p) const { memory->release(p); }
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
  Memory* memory_ = &host_memory();
};

}  // namespace gpt2
