#include "provenance.h"

#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>
#include <vector>

#include "build_info.h"

namespace gpt2 {

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
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  m.hostname = host;
  m.blas_core = openblas_get_corename();
  m.blas_config = openblas_get_config();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  m.openblas_coretype_env = env ? env : "(unset)";
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.date_utc = buf;
  return m;
}

BuildInfo build_info() {
  BuildInfo b;
  b.git_commit = kGitDescribe;
  b.git_dirty = b.git_commit.find("-dirty") != std::string::npos;
  b.build_type = kBuildType;
  b.compiler = fmt::format("g++ {}", __VERSION__);
  b.native = kNative;
  b.fmt_version = fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100);
  b.yaml_cpp_version = kYamlCppVersion;
  b.openblas_version = kOpenBlasVersion;
  return b;
}

std::string describe(const MachineInfo& m) {
  return fmt::format(
      "machine: {} ({} logical cores)\nBLAS: OpenBLAS kernel '{}' (OPENBLAS_CORETYPE={}), {}\n"
      "compiler: g++ {}\ndate: {}\n",
      m.cpu_model, m.logical_cores, m.blas_core, m.openblas_coretype_env, m.blas_config, __VERSION__,
      m.date_utc);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string provenance_json(const MachineInfo& m, const BuildInfo& b, const std::string& extra) {
  return fmt::format(
      "{{\"git_commit\": {}, \"git_dirty\": {}, \"build_type\": {}, \"compiler\": {}, \"native\": {}, "
      "\"fmt\": {}, \"yaml_cpp\": {}, \"openblas\": {}, \"blas_core\": {}, \"blas_config\": {}, "
      "\"openblas_coretype\": {}, \"cpu\": {}, \"cores\": {}, \"host\": {}, \"date\": {}{}{}}}",
      json_string(b.git_commit), b.git_dirty ? "true" : "false", json_string(b.build_type),
      json_string(b.compiler), b.native, json_string(b.fmt_version), json_string(b.yaml_cpp_version),
      json_string(b.openblas_version), json_string(m.blas_core), json_string(m.blas_config),
      json_string(m.openblas_coretype_env), json_string(m.cpu_model), m.logical_cores, json_string(m.hostname),
      json_string(m.date_utc), extra.empty() ? "" : ", ", extra);
}

double sgemm_ceiling_gflops(int threads, int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  openblas_set_num_threads(threads);
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {  // the first run is warm-up
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * n * n * double(n) / s / 1e9);
  }
  openblas_set_num_threads(1);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace gpt2
