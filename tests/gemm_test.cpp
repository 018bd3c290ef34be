// The fp32 products' providers (kernels/cpu/gemm.h, issue 45): under
// train.gemm auto a shape's provider is decided once (timed), kept for the
// process and written to the cache file, which a later process reads
// instead of timing (and which decides, whatever it says); the key forces a
// provider without timing or writing; train.deterministic never times. And
// the two providers agree: every op of the op table, on every backend-ops
// shape, run with OpenBLAS and with oneDNN, each within its derived
// tolerance of the reference and of the other.
#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend_ops.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops/op_check.h"
#include "kernels/ops/op_table.h"
#include "util/json.h"
#include "util/signal_stack.h"

namespace gpt2 {
namespace {

namespace fs = std::filesystem;
using cpu::GemmDecision;
using cpu::GemmProvider;
using cpu::GemmProviders;
using cpu::GemmShape;

// A fresh cache folder for one test, named by GPT2_CACHE_DIR while it lives,
// and no decision of an earlier test remembered (as in a new process).
class FreshCache {
 public:
  FreshCache() : dir_(fs::temp_directory_path() / ("gemm_test_" + std::to_string(::getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv("GPT2_CACHE_DIR", dir_.c_str(), 1);
    cpu::reset_gemm_decisions_for_tests();
  }
  ~FreshCache() {
    ::unsetenv("GPT2_CACHE_DIR");
    cpu::reset_gemm_decisions_for_tests();
    fs::remove_all(dir_);
  }
  fs::path file() const { return dir_ / "gemm_choices.json"; }
  Json read() const { return Json::parse(std::ifstream(file())); }

 private:
  fs::path dir_;
};

const GemmShape kShape{192, 160, 128, false, true, 1};

TEST(GemmChoice, AutoTimesAShapeOnceAndKeepsIt) {
  FreshCache cache;
  GemmProviders auto_mode(GemmChoice::kAuto, false, 1);
  EXPECT_FALSE(fs::exists(cache.file()));
  const GemmProvider first = auto_mode.provider(kShape);
  ASSERT_EQ(auto_mode.decisions().size(), 1u);
  const GemmDecision d = auto_mode.decisions()[0];
  EXPECT_EQ(d.how, "timed");
  EXPECT_GT(d.openblas_gflops, 0);
  EXPECT_GT(d.onednn_gflops, 0);
  EXPECT_EQ(d.provider, d.onednn_gflops > d.openblas_gflops ? GemmProvider::kOnednn : GemmProvider::kOpenblas);
  // Written to the cache under this machine's key, by the shape's name.
  const Json j = cache.read();
  ASSERT_TRUE(j.contains(cpu::gemm_cache_key())) << j.dump();
  ASSERT_TRUE(j[cpu::gemm_cache_key()].contains(kShape.text())) << j.dump();
  EXPECT_EQ(j[cpu::gemm_cache_key()][kShape.text()]["provider"], cpu::to_string(first));
  // Asked again (by this backend or another of the process): the same decision, not timed again.
  const auto written = fs::last_write_time(cache.file());
  GemmProviders other(GemmChoice::kAuto, false, 1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(other.provider(kShape), first);
  ASSERT_EQ(other.decisions().size(), 1u);
  EXPECT_EQ(other.decisions()[0].how, "timed");
  EXPECT_EQ(fs::last_write_time(cache.file()), written);
  // Another thread count is another shape.
  GemmProviders two(GemmChoice::kAuto, false, 2);
  EXPECT_TRUE(two.decisions().empty());
}

TEST(GemmChoice, ALaterProcessReadsTheCacheAndTheCacheDecides) {
  FreshCache cache;
  const GemmProvider timed = GemmProviders(GemmChoice::kAuto, false, 1).provider(kShape);
  // A new process (the decisions forgotten) takes the cached choice, without timing.
  cpu::reset_gemm_decisions_for_tests();
  GemmProviders later(GemmChoice::kAuto, false, 1);
  EXPECT_EQ(later.provider(kShape), timed);
  ASSERT_EQ(later.decisions().size(), 1u);
  EXPECT_EQ(later.decisions()[0].how, "cached");
  // Whatever the cache says is what a new process uses: flip it.
  const GemmProvider flipped = timed == GemmProvider::kOnednn ? GemmProvider::kOpenblas : GemmProvider::kOnednn;
  Json j = cache.read();
  j[cpu::gemm_cache_key()][kShape.text()]["provider"] = cpu::to_string(flipped);
  std::ofstream(cache.file()) << j.dump();
  cpu::reset_gemm_decisions_for_tests();
  EXPECT_EQ(GemmProviders(GemmChoice::kAuto, false, 1).provider(kShape), flipped);
  // A damaged cache is timed again and rewritten, not an error.
  std::ofstream(cache.file()) << "{not json";
  cpu::reset_gemm_decisions_for_tests();
  GemmProviders after_damage(GemmChoice::kAuto, false, 1);
  after_damage.provider(kShape);
  EXPECT_EQ(after_damage.decisions().at(0).how, "timed");
  EXPECT_TRUE(cache.read().contains(cpu::gemm_cache_key()));
}

TEST(GemmChoice, TheKeyForcesAProviderAndDeterministicNeverTimes) {
  FreshCache cache;
  EXPECT_EQ(GemmProviders(GemmChoice::kOpenblas, false, 1).provider(kShape), GemmProvider::kOpenblas);
  EXPECT_EQ(GemmProviders(GemmChoice::kOnednn, false, 1).provider(kShape), GemmProvider::kOnednn);
  EXPECT_EQ(GemmProviders(GemmChoice::kOnednn, true, 1).provider(kShape), GemmProvider::kOnednn);
  // train.deterministic with auto: the machine's provider (oneDNN with AVX-512, else OpenBLAS), never a timing.
  GemmProviders det(GemmChoice::kAuto, true, 1);
  EXPECT_EQ(det.provider(kShape), __builtin_cpu_supports("avx512f") ? GemmProvider::kOnednn : GemmProvider::kOpenblas);
  EXPECT_EQ(det.provider(kShape), cpu::deterministic_provider());
  // None of them timed or wrote anything.
  EXPECT_TRUE(det.decisions().empty());
  EXPECT_FALSE(fs::exists(cache.file()));
  // A product too small to time takes OpenBLAS, untimed.
  GemmProviders auto_mode(GemmChoice::kAuto, false, 1);
  EXPECT_EQ(auto_mode.provider(GemmShape{8, 8, 8, false, false, 1}), GemmProvider::kOpenblas);
  EXPECT_TRUE(auto_mode.decisions().empty());
  // The key's text.
  GemmChoice g{};
  from_string("onednn", g);
  EXPECT_EQ(g, GemmChoice::kOnednn);
  EXPECT_EQ(to_string(GemmChoice::kAuto), "auto");
  try {
    from_string("mkl", g);
    FAIL() << "accepted train.gemm mkl";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train.gemm: unknown value 'mkl' (expected auto | openblas | onednn)"),
              std::string::npos)
        << e.what();
  }
}

// train.gemm_choices: a run's record pins those shapes (no timing, nothing
// written), read from the JSON object or from a metrics stream's provenance;
// what is not a shape or a provider is refused naming the entry.
TEST(GemmChoice, PinsFromARunsRecordAreUsedAndChecked) {
  FreshCache cache;
  const GemmShape other{96, 80, 128, true, false, 1};
  const std::string metrics = (cache.file().parent_path() / "metrics.jsonl").string();
  std::ofstream(metrics) << R"({"event":"step","step":0,"loss":5.0})" << "\n"
                         << R"({"event":"summary","provenance":{"gemm":"auto","gemm_choices":{")" << kShape.text()
                         << R"(":"onednn",")" << other.text() << R"(":"openblas"}}})" << "\n";
  const std::map<std::string, GemmChoice> pins = read_gemm_choices(metrics);
  ASSERT_EQ(pins.size(), 2u);
  EXPECT_EQ(pins.at(kShape.text()), GemmChoice::kOnednn);
  GemmProviders pinned(GemmChoice::kAuto, false, 1, pins);
  EXPECT_EQ(pinned.provider(kShape), GemmProvider::kOnednn);
  EXPECT_EQ(pinned.provider(other), GemmProvider::kOpenblas);
  ASSERT_EQ(pinned.decisions().size(), 2u);
  EXPECT_EQ(pinned.decisions()[0].how, "pinned (train.gemm_choices)");
  EXPECT_FALSE(fs::exists(cache.file()));  // nothing timed, nothing written
  // The same object on its own reads the same.
  const std::string object = (cache.file().parent_path() / "choices.json").string();
  std::ofstream(object) << R"({")" << kShape.text() << R"(":"onednn"})";
  EXPECT_EQ(read_gemm_choices(object).at(kShape.text()), GemmChoice::kOnednn);
  const auto refused = [&](const std::string& text, const std::string& says) {
    std::ofstream(object) << text;
    try {
      read_gemm_choices(object);
      ADD_FAILURE() << "accepted " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("train.gemm_choices: " + object), std::string::npos) << e.what();
    }
  };
  refused(R"({"12x3 NT t2":"onednn"})", "'12x3 NT t2' is not a product shape");
  refused(R"({"12x3x4 NX t2":"onednn"})", "is not a product shape");
  refused(R"({"12x3x4 NT t2":"mkl"})", "\"mkl\" is not a provider");
  refused(R"([1, 2])", "holds no gemm_choices object");
  refused("{not json", "neither JSON nor JSON lines");
  // Pins with a forced provider or under train.deterministic are refused.
  EXPECT_THROW(GemmProviders(GemmChoice::kOpenblas, false, 1, pins), std::invalid_argument);
  EXPECT_THROW(GemmProviders(GemmChoice::kAuto, true, 1, pins), std::invalid_argument);
  EXPECT_EQ(cpu::parse_gemm_shape("4096x1152x384 NT t2").text(), "4096x1152x384 NT t2");
}

// Both providers on every transpose pair, strided operands, alpha and beta 1:
// the same product within fp32 rounding of a double-precision one.
TEST(GemmChoice, BothProvidersComputeTheStridedProduct) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int m = 37, n = 29, k = 53, pad = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
      std::vector<float> A(static_cast<size_t>((ta ? k : m) * lda)), B(static_cast<size_t>((tb ? n : k) * ldb));
      std::vector<float> C0(static_cast<size_t>(m * ldc));
      for (float& x : A) x = u(gen);
      for (float& x : B) x = u(gen);
      for (float& x : C0) x = u(gen);
      const float alpha = 0.375f;
      for (float beta : {0.0f, 1.0f}) {
        std::vector<double> want(static_cast<size_t>(m * n));
        for (int i = 0; i < m; ++i) {
          for (int j = 0; j < n; ++j) {
            double s = 0;
            for (int p = 0; p < k; ++p) {
              const double a = ta ? A[static_cast<size_t>(p * lda + i)] : A[static_cast<size_t>(i * lda + p)];
              const double b = tb ? B[static_cast<size_t>(j * ldb + p)] : B[static_cast<size_t>(p * ldb + j)];
              s += a * b;
            }
            want[static_cast<size_t>(i * n + j)] = alpha * s + beta * C0[static_cast<size_t>(i * ldc + j)];
          }
        }
        for (GemmProvider p : {GemmProvider::kOpenblas, GemmProvider::kOnednn}) {
          std::vector<float> C = C0;
#pragma omp parallel num_threads(1)
          cpu::run_sgemm(p, cpu::Sgemm{ta, tb, m, n, k, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc});
          for (int i = 0; i < m; ++i) {
            for (int j = 0; j < ldc; ++j) {
              const size_t at = static_cast<size_t>(i * ldc + j);
              if (j >= n) {  // the padding is not written
                EXPECT_EQ(C[at], C0[at]);
                continue;
              }
              // k products of |a|,|b| <= 1: the fp32 sum is within k * 2^-23 * k of the exact one, roughly
              EXPECT_NEAR(C[at], want[static_cast<size_t>(i * n + j)], 1e-5 * k)
                  << cpu::to_string(p) << " ta " << ta << " tb " << tb << " beta " << beta << " at " << i << "," << j;
            }
          }
        }
      }
    }
  }
}

// oneDNN's jit GEMM under a storm of signals (util/signal_stack.h): its
// kernels point the stack pointer into the heap, so a handler run on the
// thread's own stack corrupts the heap (a signal every 50 us aborted a plain
// dnnl_sgemm loop within 0.04 s here). With the handler installed as the
// stop handlers are (install_signal_handler: SA_ONSTACK) and each thread
// given its alternate stack by run_sgemm, the loop on this thread and on a
// team of 2 (the signals sent to the process land on either) runs on, heap
// traffic between products, and its products stay right.
std::atomic<long> g_storm_signals{0};
void count_signal(int) { g_storm_signals.fetch_add(1, std::memory_order_relaxed); }

TEST(GemmChoice, OnednnProductsSurviveSignals) {
  install_signal_handler(SIGUSR2, count_signal);
  const pthread_t main_thread = pthread_self();
  std::atomic<bool> done{false};
  std::thread pest([&] {
    sigset_t mine;  // the storm lands on the computing threads, not on this one
    sigemptyset(&mine);
    sigaddset(&mine, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &mine, nullptr);
    for (long i = 0; !done.load(); ++i) {
      if (i % 2) pthread_kill(main_thread, SIGUSR2); else kill(getpid(), SIGUSR2);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  const int shapes[][3] = {{512, 384, 128}, {512, 128, 512}, {128, 512, 512}, {256, 96, 160}};
  std::vector<float> A(512 * 512), B(512 * 512);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : A) x = u(gen);
  for (float& x : B) x = u(gen);
  long products = 0;
  bool all_right = true;
  // The storm lasts 1.5 s at the least, and until 2000 signals have landed and 64 products are done (a slow or
  // busy machine takes longer to get there; the signals come every 50 us here): the checks below hold whatever
  // the machine's speed. 120 s is the deadline for a storm that never lands.
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::steady_clock::now() - t0; };
  while (elapsed() < std::chrono::seconds(120) &&
         (elapsed() < std::chrono::milliseconds(1500) || g_storm_signals.load() < 2000 || products < 64)) {
    for (const auto& [m, n, k] : shapes) {
      for (bool tb : {false, true}) {
        const cpu::Sgemm one{false, tb, m, n, k, 1.0f, A.data(), k, B.data(), tb ? k : n, 0.0f, nullptr, n};
        std::vector<float> C1(static_cast<size_t>(m * n)), C2(C1.size()), ref(C1.size());
#pragma omp parallel num_threads(1)
        {
          cpu::Sgemm g = one;
          g.C = C1.data();
          cpu::run_sgemm(GemmProvider::kOnednn, g);
        }
#pragma omp parallel num_threads(2)
        {  // each thread its half of the rows
          const int half = m / 2, r0 = omp_get_thread_num() * half;
          cpu::Sgemm g = one;
          g.m = half;
          g.A = A.data() + static_cast<size_t>(r0) * k;
          g.C = C2.data() + static_cast<size_t>(r0) * n;
          cpu::run_sgemm(GemmProvider::kOnednn, g);
        }
        std::vector<char> traffic(static_cast<size_t>(1000 + products % 5000), 1);  // frees and mallocs between
        if (products % 16 == 0) {
          cpu::Sgemm g = one;
          g.C = ref.data();
          cpu::run_sgemm(GemmProvider::kOpenblas, g);
          for (size_t i = 0; i < ref.size(); ++i) {
            all_right = all_right && std::fabs(C1[i] - ref[i]) <= 1e-5f * k && std::fabs(C2[i] - ref[i]) <= 1e-5f * k;
          }
        }
        products += traffic.back();  // one product (the allocation used, so it is made)
      }
    }
  }
  done = true;
  pest.join();
  signal(SIGUSR2, SIG_DFL);
  EXPECT_TRUE(all_right) << "a product under the signals differs from OpenBLAS's or between teams";
  EXPECT_GT(g_storm_signals.load(), 1000) << "the storm did not land: " << g_storm_signals.load() << " signals over "
                                          << products << " products";
}

// Every op of the op table at every backend-ops shape with each provider
// forced, at 1 and 2 threads: each within its derived tolerance of the
// reference (check_op), and OpenBLAS's and oneDNN's outputs within the same
// tolerance of each other.
class ProvidersAgree : public ::testing::TestWithParam<std::tuple<ops::OpShape, int>> {};

TEST_P(ProvidersAgree, OnEveryOpOfTheTable) {
  const auto& [shape, threads] = GetParam();
  auto blas = make_cpu_backend(BackendOptions::with_threads(threads).with_gemm(GemmChoice::kOpenblas));
  auto dnnl = make_cpu_backend(BackendOptions::with_threads(threads).with_gemm(GemmChoice::kOnednn));
  for (const ops::OpSpec& spec : ops::op_table()) {
    testing::check_op(*blas, "cpu/openblas/t" + std::to_string(threads), spec, shape);
    testing::check_op(*dnnl, "cpu/onednn/t" + std::to_string(threads), spec, shape);
    const ops::Expected expected = ops::run_reference(spec, shape);
    const std::vector<ops::OpOutput> a = ops::run_on(spec, shape, *blas), b = ops::run_on(spec, shape, *dnnl);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      testing::expect_match(spec.name() + " at " + spec.shape(shape).str() + ": oneDNN against OpenBLAS", b[i], a[i],
                            ops::tolerance_on(*blas, expected.tolerances[i], a[i]));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ProvidersAgree,
                         ::testing::Combine(::testing::ValuesIn(testing::backend_ops_shapes()), ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return testing::shape_name(std::get<0>(info.param)) + "_t" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace gpt2
