#include "kernels/tensor.h"

#include <fmt/format.h>

#include <stdexcept>

namespace gpt2 {

Tensor::Tensor(float* d, std::initializer_list<int64_t> dims) : data(d) {
  if (dims.size() > shape.size()) throw std::invalid_argument("Tensor: more than 4 dimensions");
  for (int64_t n : dims) shape[static_cast<size_t>(ndim++)] = n;
}

Tensor::Tensor(bf16* d, std::initializer_list<int64_t> dims) : Tensor(reinterpret_cast<float*>(d), dims) {
  dtype = Dtype::bf16;
}

const char* to_string(Dtype d) { return d == Dtype::bf16 ? "bf16" : "f32"; }

size_t dtype_bytes(Dtype d) { return d == Dtype::bf16 ? 2 : 4; }

void throw_dtype_mismatch(Dtype have, Dtype want) {
  throw std::logic_error(fmt::format("Tensor: read as {} but it holds {}", to_string(want), to_string(have)));
}

void expect_f32(const Tensor& t, const char* what) {
  if (t.dtype != Dtype::f32) {
    throw std::invalid_argument(fmt::format("{}: expected an f32 tensor, got {} {}", what, to_string(t.dtype),
                                            t.shape_str()));
  }
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
  Tensor want(static_cast<float*>(nullptr), dims);
  bool ok = want.ndim == t.ndim;
  for (int i = 0; ok && i < t.ndim; ++i) ok = want.dim(i) == t.dim(i);
  if (!ok) {
    throw std::invalid_argument(
        fmt::format("{}: expected shape {}, got {}", what, want.shape_str(), t.shape_str()));
  }
}

}  // namespace gpt2
