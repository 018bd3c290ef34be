// Proves that a training step (forward, backward, optimizer update) performs
// no heap allocation once the first step has run: every malloc-family call
// and operator new in the process is counted while a step runs. With
// OpenBLAS's products (train.gemm openblas; train.deterministic's default
// on a CPU without AVX-512): oneDNN's SGEMM allocates its own buffers on some
// calls (about one a call at 128 x 192 x 64, none at the original
// configuration's larger products), so under train.gemm auto or onednn, and
// train.deterministic on an AVX-512 CPU, the guarantee is OpenBLAS's shapes'
// only (docs/kernels.md).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "model/activations.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"
#include "test_util.h"
#include "train/schedule/train_step.h"

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {
std::atomic<long> g_allocations{0};
}

// Interpose the C allocator for the whole process (OpenBLAS and the OpenMP
// runtime included) and forward to glibc.
extern "C" void* malloc(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t n, size_t m) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(n, m);
}
extern "C" void* realloc(void* p, size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
extern "C" void* aligned_alloc(size_t a, size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(a, n);
}
extern "C" int posix_memalign(void** p, size_t a, size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  *p = __libc_memalign(a, n);
  return *p ? 0 : ENOMEM;
}
// operator new goes through malloc in libstdc++; count it anyway in case an
// implementation does not.
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = __libc_malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace gpt2 {
namespace {

TEST(NoAllocation, TrainingStepAllocatesNothing) {
  for (int threads : {1, 2}) {
    auto be = make_cpu_backend(BackendOptions::with_threads(threads).with_gemm(GemmChoice::kOpenblas));
    Gpt2 model(preset("small"));
    model.init_weights(3);
    const int B = 4, T = 32;
    ActivationArena arena(model.config(), B, T);
    Optimizer opt(OptimizerConfig::adamw(), model.num_params());
    auto x = testing::random_tokens(B * T + 1, model.config().V, 5);
    LocalTrainStep train(*be, model, opt, arena.acts());  // the step every stage runs (train/schedule/train_step.h)
    auto step = [&] { train(x.data(), x.data() + 1); };
    step();  // warm-up: scratch buffers and thread pools are created here
    const long before = g_allocations.load();
    step();
    step();
    EXPECT_EQ(g_allocations.load() - before, 0) << "allocations during two steps, " << threads << " threads";
    // The counter works: an allocation is seen.
    const long probe = g_allocations.load();
    void* volatile p = std::malloc(64);
    std::free(p);
    EXPECT_EQ(g_allocations.load() - probe, 1);
  }
}

}  // namespace
}  // namespace gpt2
