// Tensor: a non-owning view of data with its shape (row-major) and its
// element type. It is not a container and never allocates; storage belongs
// to a Buffer (buffer.h) or to the caller. Backends receive views and read
// sizes and the element type from them.
//
// The element type (Dtype) is float32 unless a tensor says bf16: with
// train.precision bf16 the activation arena keeps the matrix products'
// stored inputs in bf16 (model/activations.h, docs/precision.md). `data`
// is the float view of an f32 tensor; a bf16 tensor's elements are read
// through as<bf16>() (the address is the same, the type is not), and a
// kernel that takes either dispatches once on the dtype (dispatch_dtype).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/bf16.h"

namespace gpt2 {

// The element types a tensor may hold. A kernel that accepts both names
// them in the Backend contract (kernels/backend.h); every other argument is f32.
enum class Dtype : uint8_t { f32, bf16 };
const char* to_string(Dtype d);
// Bytes of one element: 4 or 2.
size_t dtype_bytes(Dtype d);

struct Tensor {
  float* data = nullptr;  // f32 elements; for a bf16 tensor, only its address (read it through as<bf16>())
  std::array<int64_t, 4> shape{};
  int ndim = 0;
  Dtype dtype = Dtype::f32;

  Tensor() = default;
  Tensor(float* d, std::initializer_list<int64_t> dims);
  // A bf16 view of `d` (at least numel bf16 elements).
  Tensor(bf16* d, std::initializer_list<int64_t> dims);

  // The elements as T (float or bf16); throws std::logic_error naming both
  // types when T is not the tensor's dtype: a kernel never reads one type as the other.
  template <typename T>
  T* as() const;
  bool is_bf16() const { return dtype == Dtype::bf16; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_bytes(dtype); }

  int64_t numel() const;
  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  // Rows/cols view of the tensor as a matrix: (product of leading dims, last dim).
  int64_t cols() const { return ndim == 0 ? 1 : dim(-1); }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / cols(); }
  bool empty() const { return data == nullptr; }
  // An f32 tensor's elements (as<float>(): a bf16 tensor throws).
  float* begin() const { return as<float>(); }
  float* end() const { return as<float>() + numel(); }
  std::string shape_str() const;
};

// Throws std::invalid_argument naming `what` unless t has exactly `dims`.
void expect_shape(const Tensor& t, std::initializer_list<int64_t> dims, const char* what);

// Throws std::invalid_argument naming `what` unless t is f32: the guard of
// the kernels that take only f32 where a caller could pass a bf16 view.
void expect_f32(const Tensor& t, const char* what);

[[noreturn]] void throw_dtype_mismatch(Dtype have, Dtype want);

template <typename T>
T* Tensor::as() const {
  constexpr Dtype want = std::is_same_v<T, float> ? Dtype::f32 : Dtype::bf16;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bf16>, "Tensor::as: float or bf16");
  if (dtype != want) throw_dtype_mismatch(dtype, want);
  return reinterpret_cast<T*>(data);
}

// Calls f(float{}) or f(bf16{}) for the tensor's dtype: a kernel written once
// over its element type `using T = decltype(tag)`, chosen once per call
// (MLX's dispatch_float_types), never a second copy by hand.
template <typename F>
decltype(auto) dispatch_dtype(Dtype d, F&& f) {
  if (d == Dtype::bf16) return f(bf16{});
  return f(float{});
}

// Element access over either type, the math in float: a kernel templated on
// its element type loads and stores through these (a bf16 store rounds to
// nearest even, kernels/bf16.h).
inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const bf16* p, int64_t i) { return to_float(p[i]); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(bf16* p, int64_t i, float v) { p[i] = to_bf16(v); }

}  // namespace gpt2
