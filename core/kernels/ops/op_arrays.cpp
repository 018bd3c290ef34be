// The random scheme and the arrays of op_arrays.h.
#include "kernels/ops/op_arrays.h"

#include <utility>

namespace gpt2::ops {

namespace {

// splitmix64's finaliser: a fast, well-mixed function of a counter.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The counter of element i of the stream `seed`.
uint64_t draw(uint64_t seed, size_t i) { return mix(seed * 0x100000001b3ull + i); }

size_t count(const std::vector<int64_t>& dims) {
  size_t n = 1;
  for (int64_t x : dims) n *= static_cast<size_t>(x);
  return n;
}

}  // namespace

std::vector<float> random_values(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(draw(seed, i) >> 11) * 0x1.0p-53;  // [0, 1)
    v[i] = lo + static_cast<float>(u) * (hi - lo);
  }
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int64_t V, uint64_t seed) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(draw(seed, i) % static_cast<uint64_t>(V));
  return v;
}

Array::Array(std::vector<int64_t> dims, Memory& m, Dtype dtype)
    : buf_(dtype == Dtype::bf16 ? (count(dims) + 1) / 2 : count(dims), m),
      dims_(std::move(dims)),
      count_(count(dims_)),
      dtype_(dtype) {}

std::vector<float> Array::host() const {
  std::vector<float> raw = buf_.download();
  if (dtype_ == Dtype::f32) return raw;
  std::vector<float> out(count_);
  const auto* b = reinterpret_cast<const bf16*>(raw.data());
  for (size_t i = 0; i < count_; ++i) out[i] = to_float(b[i]);
  return out;
}

void Array::upload(const std::vector<float>& values) {
  if (dtype_ == Dtype::f32) {
    buf_.upload(values);
    return;
  }
  std::vector<float> raw(buf_.size(), 0.0f);
  auto* b = reinterpret_cast<bf16*>(raw.data());
  for (size_t i = 0; i < count_; ++i) b[i] = to_bf16(values.at(i));
  buf_.upload(raw);
}

Tensor Array::t() const {
  Tensor v;
  v.data = buf_.data();
  v.dtype = dtype_;
  v.ndim = static_cast<int>(dims_.size());
  for (size_t i = 0; i < dims_.size(); ++i) v.shape[i] = dims_[i];
  return v;
}

Array random_array(std::vector<int64_t> dims, uint64_t seed, Memory& m, float lo, float hi, Dtype dtype) {
  Array a(std::move(dims), m, dtype);
  a.upload(random_values(a.size(), seed, lo, hi));
  return a;
}

Array array_of(std::vector<int64_t> dims, const std::vector<float>& values, Memory& m, Dtype dtype) {
  Array a(std::move(dims), m, dtype);
  a.upload(values);
  return a;
}

Output::Output(std::vector<int64_t> dims, std::vector<float> start, Memory& m, Dtype dtype)
    : start_(std::move(start)), arr_(std::move(dims), m, dtype) {
  reset();
}

Output overwritten(std::vector<int64_t> dims, Memory& m, Dtype dtype) {
  const size_t n = count(dims);
  return Output(std::move(dims), std::vector<float>(n, 7.0f), m, dtype);
}

Output accumulated(std::vector<int64_t> dims, uint64_t seed, Memory& m, float lo, float hi) {
  std::vector<float> start = random_values(count(dims), seed, lo, hi);
  return Output(std::move(dims), std::move(start), m);
}

}  // namespace gpt2::ops
