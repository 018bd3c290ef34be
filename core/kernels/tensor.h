// Tensor: a non-owning view of float data with its shape (row-major).
// It is not a container and never allocates; storage belongs to a Buffer
// (buffer.h) or to the caller. Backends receive views and read sizes from them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace gpt2 {

struct Tensor {
  float* data = nullptr;
  std::array<int64_t, 4> shape{};
  int ndim = 0;

  Tensor() = default;
  Tensor(float* d, std::initializer_list<int64_t> dims);

  int64_t numel() const;
  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  // Rows/cols view of the tensor as a matrix: (product of leading dims, last dim).
  int64_t cols() const { return ndim == 0 ? 1 : dim(-1); }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / cols(); }
  bool empty() const { return data == nullptr; }
  float* begin() const { return data; }
  float* end() const { return data + numel(); }
  std::string shape_str() const;
};

// Throws std::invalid_argument naming `what` unless t has exactly `dims`.
void expect_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* what);

}  // namespace gpt2
