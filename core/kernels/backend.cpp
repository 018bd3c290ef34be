#include "kernels/backend.h"

#include <algorithm>
#include <stdexcept>

#include "util/enum_names.h"

namespace gpt2 {

template <>
struct EnumNames<GemmChoice> {
  static constexpr const char* names[] = {"auto", "openblas", "onednn"};
  static constexpr const char* key = "train.gemm";
};

std::string to_string(GemmChoice g) { return enum_name(g); }
void from_string(const std::string& text, GemmChoice& g) { parse_enum(text, g); }

double sum_in_order(Tensor x) {
  double s = 0.0;  // B*T terms of similar size
  for (float v : x) s += v;
  return s;
}

void host_kv_columns(Tensor packed, Tensor full, int NH, int KVH, bool unpack) {
  const int64_t width = full.dim(full.ndim - 1), HS = width / (NH + 2 * KVH), kv = 2 * KVH * HS;
  const int64_t rows = full.numel() / width;
  for (int64_t r = 0; r < rows; ++r) {
    float* f = full.data + r * width + NH * HS;
    float* p = packed.data + r * kv;
    if (unpack) std::copy(p, p + kv, f);
    else std::copy(f, f + kv, p);
  }
}

// The ring attention's ops exist on the host backends (reference, cpu); a
// run lays context parallelism out only there (train/resolve/layout.cpp), so a
// device backend is never asked.
namespace {
[[noreturn]] void no_ring_attention(const Backend& be, const char* op) {
  throw std::logic_error(be.name() + " backend: no " + op + " (context parallelism runs on the CPU stages)");
}
}  // namespace

void Backend::attention_block_forward(Tensor, Tensor, Tensor, Tensor, int, int, bool, bool) {
  no_ring_attention(*this, "attention_block_forward");
}
void Backend::attention_block_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, int, int, bool) {
  no_ring_attention(*this, "attention_block_backward");
}
void Backend::attention_kv_pack(Tensor, Tensor, int, int) { no_ring_attention(*this, "attention_kv_pack"); }
void Backend::attention_kv_unpack(Tensor, Tensor, int, int) { no_ring_attention(*this, "attention_kv_unpack"); }

}  // namespace gpt2
