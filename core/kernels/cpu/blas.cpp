#include "kernels/cpu/blas.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "kernels/backend.h"
#include "kernels/bf16.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/omp_wait.h"
#include "util/stats.h"

namespace gpt2 {

namespace cpu {

std::string blas_core() { return openblas_get_corename(); }
std::string blas_config() { return openblas_get_config(); }

namespace {
// The median GFLOP/s of `reps` runs of an (n,n,n) product, after one warm-up run.
template <typename Product>
double product_rate(int n, int reps, Product&& product) {
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    product();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * n * n * double(n) / s / 1e9);
  }
  return median(rates);
}
}  // namespace

double sgemm_ceiling_gflops(int threads, int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  openblas_set_num_threads(threads);
  const double rate = product_rate(n, reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
  });
  openblas_set_num_threads(1);
  return rate;
}

double bf16_ceiling_gflops(int threads, int n, int reps) {
  std::vector<bf16> a(static_cast<size_t>(n) * n, to_bf16(0.5f));
  std::vector<float> c(a.size());
  Bf16Matmul mm(threads);  // its primitive is made in the warm-up run
  return product_rate(n, reps, [&] { mm.forward(c.data(), a.data(), a.data(), nullptr, n, n, n); });
}

}  // namespace cpu

BackendKind cpu_backend_kind() {
  return BackendKind{"cpu",
                     [](const BackendOptions& o) {
                       return make_cpu_backend(o);
                     },
                     [](Backend& be, int ranks, int /*ranks_per_machine*/, int threads) {
                       // A backend with bf16 products is measured by its own products: the MFU of a
                       // bf16 run is against the bf16 ceiling, not fp32's.
                       if (be.products() == Dtype::bf16) {
                         return cpu::bf16_ceiling_gflops(ranks * threads, 1024, 3);
                       }
                       // fp32: the better of the two providers' ceilings (gemm.h), so that a run whose
                       // products oneDNN runs is not measured against OpenBLAS's slower peak.
                       return std::max(cpu::sgemm_ceiling_gflops(ranks * threads, 1024, 3),
                                       cpu::onednn_sgemm_ceiling_gflops(ranks * threads, 1024, 3));
                     }};
}

std::vector<std::pair<std::string, std::string>> kernel_library_info() {
  return {{"blas_core", cpu::blas_core()},
          {"blas_config", cpu::blas_config()},
          {"omp_wait_policy", cpu::omp_wait_policy()}};
}

}  // namespace gpt2
