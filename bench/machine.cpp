#include "machine.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>
#include <vector>

namespace gpt2::bench {

MachineInfo machine_info() {
  MachineInfo m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      m.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  m.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  m.blas_core = openblas_get_corename();
  m.blas_config = openblas_get_config();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  m.openblas_coretype_env = env ? env : "(unset)";
  m.compiler = fmt::format("g++ {}", __VERSION__);
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.date_utc = buf;
  return m;
}

std::string describe(const MachineInfo& m) {
  return fmt::format(
      "machine: {} ({} logical cores)\nBLAS: OpenBLAS kernel '{}' (OPENBLAS_CORETYPE={}), {}\n"
      "compiler: {}\ndate: {}\n",
      m.cpu_model, m.logical_cores, m.blas_core, m.openblas_coretype_env, m.blas_config, m.compiler,
      m.date_utc);
}

double sgemm_ceiling_gflops(int threads, int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  openblas_set_num_threads(threads);
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {  // the first run is warm-up
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * n * n * double(n) / s / 1e9);
  }
  openblas_set_num_threads(1);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace gpt2::bench
