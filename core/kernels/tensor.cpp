#include "kernels/tensor.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gpt2 {

Tensor::Tensor(float* d, std::initializer_list<int64_t> dims) : data(d) {
  if (dims.size() > shape.size()) throw std::invalid_argument("Tensor: more than 4 dimensions");
  for (int64_t n : dims) shape[static_cast<size_t>(ndim++)] = n;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

std::string Tensor::shape_str() const {
  std::string s = "(";
  for (int i = 0; i < ndim; ++i) s += fmt::format("{}{}", i ? "," : "", shape[static_cast<size_t>(i)]);
  return s + ")";
}

void expect_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* what) {
  Tensor want(nullptr, dims);
  bool ok = want.ndim == t.ndim;
  for (int i = 0; ok && i < t.ndim; ++i) ok = want.dim(i) == t.dim(i);
  if (!ok) {
    throw std::invalid_argument(
        fmt::format("{}: expected shape {}, got {}", what, want.shape_str(), t.shape_str()));
  }
}

}  // namespace gpt2
