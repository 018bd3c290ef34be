// The fp32 matrix products' providers (issue 45): OpenBLAS's SGEMM or
// oneDNN's (dnnl_sgemm, its jit GEMM), each run on the calling thread (the
// CPU backend splits a product into tiles across its own OpenMP threads,
// matmul.cpp), and the choice between them, made once per product shape.
//
// No provider is fastest everywhere: issue 45 measured oneDNN's fp32 matmul
// 1.7x ahead of OpenBLAS's Haswell kernel on an AVX-512 machine, and
// OpenBLAS's own kernel ahead there at most shapes with the variable unset;
// on this project's AVX2-only EPYC oneDNN's SGEMM wins most of the step's
// shapes by a few percent and loses some (docs/benchmarks.md). So under
// train.gemm auto the first product of each shape (m, n, k, transposes, the
// backend's thread count) times both once, on the calling thread, keeps the
// faster, and records it in a cache file beside the MFU peak cache (keyed by
// the CPU and both libraries' versions and kernels), so that every later
// process on the machine makes the same choice without timing. A product
// too small to time meaningfully takes OpenBLAS. train.gemm openblas or
// onednn forces one provider everywhere; under train.deterministic auto is
// decided from the machine, never by a timing (deterministic_provider).
// Every thread that runs oneDNN's GEMM gets an alternate signal stack
// (ensure_team_signal_stacks below; util/signal_stack.h).
// oneDNN's matmul primitive (its brgemm kernels on AVX-512) is not used: it
// allocates on every execution. dnnl_sgemm allocates on some smaller
// products, so a step allocates nothing only with OpenBLAS's (alloc_test).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace gpt2::cpu {

enum class GemmProvider { kOpenblas, kOnednn };
std::string to_string(GemmProvider p);  // "openblas" | "onednn"

// One fp32 product, row-major: C (m,n) = alpha op(A) op(B) + beta C, where
// op(A) is (m,k) (A stored (k,m) when ta) and op(B) is (k,n) (B stored (n,k)
// when tb); beta is 0 or 1.
struct Sgemm {
  bool ta = false, tb = false;
  int m = 0, n = 0, k = 0;
  float alpha = 1.0f;
  const float* A = nullptr;
  int lda = 0;
  const float* B = nullptr;
  int ldb = 0;
  float beta = 0.0f;
  float* C = nullptr;
  int ldc = 0;
};

// What a choice is made for: a product's shape and transposes at a thread count.
struct GemmShape {
  int m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  int threads = 1;
  auto operator<=>(const GemmShape&) const = default;
  std::string text() const;  // "4096x1152x384 NT t2": the cache's and the reports' name for it
};

// How the provider of one shape was decided: the run's provenance (gemm_choices) and train_step's JSON.
struct GemmDecision {
  GemmShape shape;
  GemmProvider provider = GemmProvider::kOpenblas;
  // "timed" (by this process), "cached" (read from the cache file) or "pinned (train.gemm_choices)".
  // Forced, deterministic and untimed small products make no decision.
  std::string how;
  double openblas_gflops = 0, onednn_gflops = 0;  // the timing's medians, when timed (here or by the cached run)
};

// Gives the calling thread and each thread of an OpenMP team of `threads`
// an alternate signal stack (util/signal_stack.h): oneDNN's jit GEMM points
// the stack pointer into the heap, so a signal handled on a thread's own
// stack while it runs corrupts the heap. oneDNN's own teams are OpenMP's
// (the pool threads a team of this size reuses), so every caller of oneDNN
// outside a region of ours calls this once before it.
void ensure_team_signal_stacks(int threads);

// train.deterministic's provider under train.gemm auto, decided from the
// machine alone, so every run on it takes the same one and gives the same
// bits (issue 71): oneDNN's jit SGEMM where the CPU has AVX-512, OpenBLAS's
// otherwise. Each product is cut into fixed tiles, each tile one call on one
// thread (matmul.cpp), so the result does not depend on the thread count
// with either. Measured with the original configuration's deterministic
// step (docs/determinism.md, "The provider"): on an AVX-512 Xeon oneDNN's
// tiles were 11-18% faster than OpenBLAS's SkylakeX kernel's, and on
// AVX-512 Zen 5 far ahead of the Haswell kernel OpenBLAS ran there
// (issue 71); on an AVX2-only EPYC oneDNN made the deterministic step
// slower (+10.6% over the default against OpenBLAS's +6.0%, issue 45).
GemmProvider deterministic_provider();

// Runs an Sgemm through `p` on the calling thread. Call it from inside an
// OpenMP parallel region (a team of one included): oneDNN then runs on the
// calling thread alone.
void run_sgemm(GemmProvider p, const Sgemm& g);

// The providers of one backend: its mode, its pins and its threads' decisions.
class GemmProviders {
 public:
  // `pins`: train.gemm_choices (auto only): these shapes' providers as a run
  // recorded them, taken without timing; other shapes are decided as usual.
  // Throws std::invalid_argument naming train.gemm_choices for a pin that is
  // not a shape, names no provider, or comes with another mode.
  GemmProviders(GemmChoice mode, bool deterministic, int threads,
                const std::map<std::string, GemmChoice>& pins = {});
  ~GemmProviders();
  // C = ... through the provider chosen for g's shape; thread `tid` of the backend's team.
  void run(int tid, const Sgemm& g);
  // The provider for a shape (deciding it now if no one has): from any thread.
  GemmProvider provider(const GemmShape& s);
  // train.gemm as configured.
  GemmChoice mode() const { return mode_; }
  // The one provider every product takes when none is chosen per shape (a
  // forced train.gemm, or train.deterministic: deterministic_provider under
  // auto); std::nullopt when auto chooses per shape.
  std::optional<GemmProvider> fixed() const;
  // Every decision this backend's products used (pins, and those this process
  // made or read for its thread count), in shape order.
  std::vector<GemmDecision> decisions() const;

 private:
  GemmChoice mode_;
  bool deterministic_;
  int threads_;
  std::map<GemmShape, GemmProvider> pins_;                 // train.gemm_choices
  std::vector<std::map<GemmShape, GemmProvider>> local_;  // per thread: the decisions it has looked up
};

// "4096x1152x384 NT t2" back into its shape; throws std::invalid_argument
// saying what was expected.
GemmShape parse_gemm_shape(const std::string& text);

// The cache file of the auto choices: mfu_peak's folder (engine_cache_dir),
// gemm_choices.json; "" when no folder is known.
std::string gemm_cache_path();
// The cache's key for this machine and these libraries: CPU model, OpenBLAS
// version and kernel, oneDNN version.
std::string gemm_cache_key();

// Forgets this process's decisions (tests: a decision is otherwise made once per process).
void reset_gemm_decisions_for_tests();

// oneDNN's SGEMM (n,n,n) on `threads` threads, the median of `reps`
// after a warm-up: its ceiling beside OpenBLAS's (blas.h), the MFU peak
// being the better of the two.
double onednn_sgemm_ceiling_gflops(int threads, int n = 2048, int reps = 5);

}  // namespace gpt2::cpu
