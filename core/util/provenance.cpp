#include "util/provenance.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include "util/build_info.h"

namespace gpt2 {

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buf;
}

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
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  m.openblas_coretype_env = env ? env : "(unset)";
  m.date_utc = utc_now();
  if (const char* job = std::getenv("SLURM_JOB_ID"); job != nullptr && *job != '\0') {
    m.slurm_job = job;
    const char* nodes = std::getenv("SLURM_JOB_NODELIST");
    m.slurm_nodes = nodes ? nodes : "";
    const char* restarts = std::getenv("SLURM_RESTART_COUNT");
    m.slurm_attempt = 1 + (restarts != nullptr ? std::max(0, std::atoi(restarts)) : 0);
  }
  return m;
}

BuildInfo build_info() {
  BuildInfo b;
  const std::string stamp = kSourceStamp;
  const size_t bar = stamp.find('|');
  b.git_commit = stamp.substr(0, bar);
  b.source_hash = bar == std::string::npos ? "unknown" : stamp.substr(bar + 1);
  b.build_options = kBuildOptions;
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
  return fmt::format("machine: {} ({} logical cores)\ncompiler: g++ {}\ndate: {}\n", m.cpu_model, m.logical_cores,
                     __VERSION__, m.date_utc);
}

Json provenance_json(const MachineInfo& m, const BuildInfo& b) {
  Json j;
  j["git_commit"] = b.git_commit;
  j["git_dirty"] = b.git_dirty;
  j["source_hash"] = b.source_hash;
  j["build_type"] = b.build_type;
  j["build_options"] = b.build_options;
  j["compiler"] = b.compiler;
  j["native"] = b.native == "true";
  j["fmt"] = b.fmt_version;
  j["yaml_cpp"] = b.yaml_cpp_version;
  j["openblas"] = b.openblas_version;
  j["openblas_coretype"] = m.openblas_coretype_env;
  j["cpu"] = m.cpu_model;
  j["cores"] = m.logical_cores;
  j["host"] = m.hostname;
  j["date"] = m.date_utc;
  if (!m.slurm_job.empty()) {  // absent outside Slurm: records made without it are unchanged
    j["slurm"] = Json{{"job_id", m.slurm_job}, {"attempt", m.slurm_attempt}, {"nodes", m.slurm_nodes}};
  }
  return j;
}

}  // namespace gpt2
