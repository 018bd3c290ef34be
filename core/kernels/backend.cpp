#include "kernels/backend.h"

namespace gpt2 {

double sum_in_order(Tensor x) {
  double s = 0.0;  // B*T terms of similar size
  for (float v : x) s += v;
  return s;
}

}  // namespace gpt2
