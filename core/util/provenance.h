// Provenance: what a figure or a run depends on besides its inputs: the build
// (git commit and dirty flag, build type, compiler, library versions) and the
// machine (CPU, cores, host, the environment that steers OpenBLAS). Every
// metrics stream and report carries it. The BLAS kernel that OpenBLAS chose
// at run time is the kernels layer's to report (kernels/backend.h,
// kernel_library_info): this layer links no BLAS.
#pragma once

#include <string>

#include "util/json.h"

namespace gpt2 {

struct MachineInfo {
  std::string cpu_model;
  int logical_cores = 0;
  std::string hostname;
  std::string openblas_coretype_env;  // OPENBLAS_CORETYPE, or "(unset)"
  std::string date_utc;
  // Under Slurm (docs/cluster.md): the job (SLURM_JOB_ID; "" outside a
  // job), its attempt (SLURM_RESTART_COUNT + 1: a requeued job's second is 2)
  // and its nodes (SLURM_JOB_NODELIST).
  std::string slurm_job, slurm_nodes;
  int slurm_attempt = 0;
};

struct BuildInfo {
  // `git describe --always --dirty` of the tree that was built ("-dirty" marks
  // uncommitted changes), taken at build time by scripts/source_stamp.sh; a
  // copy without git history uses the .source-stamp written where it was known.
  std::string git_commit;
  bool git_dirty = false;
  std::string source_hash;    // sha256 (12 hex) of the sources compiled: names the build with or without git
  std::string build_options;  // Meson options and compiler flags: "buildtype=release optimization=3 ... flags=..." 
  std::string build_type;
  std::string compiler;
  std::string native;      // "true" if built with -march=native
  std::string fmt_version;
  std::string yaml_cpp_version;
  std::string openblas_version;
};

MachineInfo machine_info();
BuildInfo build_info();
// "machine: <cpu> (<n> logical cores)\ncompiler: ...\ndate: ...\n"
std::string describe(const MachineInfo& m);
// One JSON object with every provenance field of the build and the machine;
// callers add their own (the BLAS kernel, threads, seed, ...).
Json provenance_json(const MachineInfo& m, const BuildInfo& b);

// The current UTC time as ISO 8601 ("2026-11-23T08:00:00Z").
std::string utc_now();

}  // namespace gpt2
