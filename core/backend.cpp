#include "backend.h"

#include "provenance.h"

namespace gpt2 {

double Backend::ceiling_gflops(int ranks, int /*ranks_per_machine*/, int threads) {
  return sgemm_ceiling_gflops(ranks * threads, 1024, 3);
}

double sum_in_order(Tensor x) {
  double s = 0.0;  // B*T terms of similar size
  for (float v : x) s += v;
  return s;
}

}  // namespace gpt2
