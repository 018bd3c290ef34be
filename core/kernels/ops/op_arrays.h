// The op table's inputs and outputs: the one random scheme for kernel inputs
// (splitmix64, seeded per array, each element a function of (seed, index)),
// and the arrays a case owns in the memory of the backend it runs on.
// Inputs are drawn on the host and uploaded; an output's starting values stay
// on the host and reset() uploads them again. Not here: what the cases do
// with them (op_cases.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/tensor.h"

namespace gpt2::ops {

// U(lo, hi) floats; element i depends only on (seed, i), so an array with
// fewer leading rows is a prefix of one with more. Fast enough to fill the
// larger benchmark shape's hundred-million-element buffers in a fraction of
// a second.
std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// Token ids uniform in [0, V).
std::vector<int32_t> random_tokens(size_t n, int64_t V, uint64_t seed);

// An array with its shape and element type, in one memory: the storage of
// one argument. A bf16 array's values go in rounded to nearest even and come
// out widened (exactly), so a case sees floats either way.
class Array {
 public:
  Array() = default;
  Array(std::vector<int64_t> dims, Memory& m, Dtype dtype = Dtype::f32);
  Tensor t() const;  // empty (null data) for a default-constructed Array
  size_t size() const { return count_; }  // elements
  Dtype dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<float> host() const;
  void upload(const std::vector<float>& values);

 private:
  Buffer buf_;  // count_ floats, or (bf16) their bytes' worth
  std::vector<int64_t> dims_;
  size_t count_ = 0;
  Dtype dtype_ = Dtype::f32;
};

// U(lo, hi) values drawn on the host and uploaded to `m` (as `dtype`: a bf16
// array holds their roundings).
Array random_array(std::vector<int64_t> dims, uint64_t seed, Memory& m, float lo = -1.0f, float hi = 1.0f,
                   Dtype dtype = Dtype::f32);
// `values` (host) uploaded to `m`.
Array array_of(std::vector<int64_t> dims, const std::vector<float>& values, Memory& m, Dtype dtype = Dtype::f32);

// An array the kernel writes: an '=' output (started at a value the kernel
// must overwrite), a '+=' output or an optimizer's state (started at random
// values). reset() uploads the start again, so every run starts from the
// same state (a memcpy when `m` is the host's).
class Output {
 public:
  Output() = default;
  Output(std::vector<int64_t> dims, std::vector<float> start, Memory& m, Dtype dtype = Dtype::f32);
  void reset() { arr_.upload(start_); }
  Tensor t() const { return arr_.t(); }
  std::vector<float> host() const { return arr_.host(); }
  const std::vector<float>& start() const { return start_; }

 private:
  std::vector<float> start_;
  Array arr_;
};

// An '=' output: starts at 7 everywhere, so a kernel that keeps or adds to
// a stale value is seen.
Output overwritten(std::vector<int64_t> dims, Memory& m, Dtype dtype = Dtype::f32);
// A '+=' output or state: starts at U(lo, hi), so accumulation is seen.
Output accumulated(std::vector<int64_t> dims, uint64_t seed, Memory& m, float lo = -1.0f, float hi = 1.0f);

}  // namespace gpt2::ops
