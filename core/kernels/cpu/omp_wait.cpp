#include "kernels/cpu/omp_wait.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gpt2::cpu {

namespace {

// The engine's setting (see omp_wait.h for why this value).
constexpr const char* kVariable = "GOMP_SPINCOUNT";
constexpr const char* kValue = "300";
// Set beside it before the re-execution: the program started again sees it
// and does not execute itself a third time, and provenance can tell the
// engine's choice from the user's.
constexpr const char* kMarker = "GPT2_OMP_WAIT_POLICY";

// An empty value counts as unset, as libgomp reads it.
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

void set_omp_wait_policy(char** argv) {
  if (env(kMarker) || env("OMP_WAIT_POLICY") || env("GOMP_SPINCOUNT")) return;
  if (argv == nullptr || argv[0] == nullptr) return;
  setenv(kVariable, kValue, 1);
  setenv(kMarker, fmt::format("{}={}", kVariable, kValue).c_str(), 1);
  // /proc/self/exe, not argv[0]: the program may have been started by a
  // relative name from another directory, or through PATH.
  execv("/proc/self/exe", argv);
  // Still here: the program could not be started again (no /proc). It runs
  // with libgomp's default; the environment says so to provenance and to
  // any child process.
  unsetenv(kVariable);
  unsetenv(kMarker);
}

std::string omp_wait_policy() {
  const char* policy = env("OMP_WAIT_POLICY");
  const char* spin = env("GOMP_SPINCOUNT");
  std::string s;
  if (policy) s = fmt::format("OMP_WAIT_POLICY={}", policy);
  if (spin) s += fmt::format("{}GOMP_SPINCOUNT={}", s.empty() ? "" : " ", spin);
  if (s.empty()) return "libgomp default";
  const char* marker = env(kMarker);
  return s + (marker && s == marker ? " (engine)" : " (environment)");
}

}  // namespace gpt2::cpu
