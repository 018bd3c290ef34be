#include "kernels/backend.h"

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

}  // namespace gpt2
