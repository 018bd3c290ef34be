// Provenance: what a figure or a run depends on besides the inputs: the
// build (git commit and dirty flag, build type, compiler, library versions)
// and the machine (CPU, cores, the BLAS kernel actually selected, the
// environment that steers it). Every metrics stream and report carries it.
#pragma once

#include <string>

namespace gpt2 {

struct MachineInfo {
  std::string cpu_model;
  int logical_cores = 0;
  std::string hostname;
  std::string blas_core;              // openblas_get_corename()
  std::string blas_config;            // openblas_get_config()
  std::string openblas_coretype_env;  // OPENBLAS_CORETYPE, or "(unset)"
  std::string date_utc;
};

struct BuildInfo {
  std::string git_commit;  // `git describe --always --dirty`: "-dirty" marks uncommitted changes
  bool git_dirty = false;
  std::string build_type;
  std::string compiler;
  std::string native;      // "true" if built with -march=native
  std::string fmt_version;
  std::string yaml_cpp_version;
  std::string openblas_version;
};

MachineInfo machine_info();
BuildInfo build_info();
std::string describe(const MachineInfo& m);
// One JSON object with every provenance field (and the extra run fields given
// as ready-made `"key": value` text, e.g. threads and seed).
std::string provenance_json(const MachineInfo& m, const BuildInfo& b, const std::string& extra_fields);

// Median GFLOP/s of a square SGEMM (n x n x n) with OpenBLAS's own threading
// on `threads` threads: the machine's practical matrix-multiply ceiling.
// Leaves OpenBLAS set to 1 thread afterwards (the CPU backend's setting).
double sgemm_ceiling_gflops(int threads, int n = 2048, int reps = 5);

// JSON string literal for s (quotes and escapes included).
std::string json_string(const std::string& s);

}  // namespace gpt2
