// The fp32 products' providers and the choice between them (gemm.h).
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <omp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cmath>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <stdexcept>
#include <tuple>

#include "util/files.h"
#include "util/json.h"
#include "util/provenance.h"
#include "util/signal_stack.h"
#include "util/stats.h"

namespace gpt2::cpu {


std::string to_string(GemmProvider p) { return p == GemmProvider::kOnednn ? "onednn" : "openblas"; }

std::string GemmShape::text() const {
  return fmt::format("{}x{}x{} {}{} t{}", m, n, k, ta ? 'T' : 'N', tb ? 'T' : 'N', threads);
}

// ---------------------------------------------------------------- oneDNN

// oneDNN's BLAS-like SGEMM (dnnl_sgemm: row-major, its jit GEMM kernels for
// this CPU). Not its matmul primitive: executing a primitive allocates on
// every call (5 mallocs a product, measured with oneDNN 2.6.3); dnnl_sgemm
// allocates nothing at the original configuration's products, about once a
// call at smaller ones (128 x 192 x 64).
void ensure_team_signal_stacks(int threads) {
  ensure_signal_stack();
#pragma omp parallel num_threads(std::max(threads, 1))
  ensure_signal_stack();
}

void run_sgemm(GemmProvider p, const Sgemm& g) {
  if (g.m <= 0 || g.n <= 0) return;
  if (p == GemmProvider::kOpenblas || g.k <= 0) {
    cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k,
                g.alpha, g.A, g.lda, g.B, g.ldb, g.beta, g.C, g.ldc);
    return;
  }
  if (g.beta != 0.0f && g.beta != 1.0f) {
    throw std::invalid_argument(fmt::format("run_sgemm: oneDNN with beta {} (0 or 1 only)", g.beta));
  }
  ensure_signal_stack();  // its jit kernels move the stack pointer into the heap (util/signal_stack.h)
  // On this thread alone: outside an active region (a team of one included)
  // oneDNN would otherwise fork a team of the default size for every
  // product. The setting is the calling task's and ends with its region
  // (Bf16TileGemm does the same).
  if (omp_get_level() > 0) omp_set_num_threads(1);
  const dnnl_status_t st = dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, g.alpha, g.A, g.lda, g.B,
                                      g.ldb, g.beta, g.C, g.ldc);
  if (st != dnnl_success) {
    throw std::runtime_error(
        fmt::format("dnnl_sgemm failed (status {}) at {}x{}x{}", static_cast<int>(st), g.m, g.n, g.k));
  }
}

// ---------------------------------------------------------------- the choice

namespace {

// Below this many flops (2mnk) a product is not timed: OpenBLAS (the timing
// would cost more than it could save, and such products are noise in a step).
constexpr double kMinTimedFlops = 2.0 * 64 * 64 * 64;

// Every decision of this process, shared by every backend (so that two
// backends of one process, and the ranks of one machine through the cache
// file, compute with the same providers).
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<GemmShape, GemmDecision>& registry() {
  static std::map<GemmShape, GemmDecision> r;
  return r;
}

// The median GFLOP/s of each provider on a compact product of this shape,
// run on the calling thread: a warm-up each, then the two alternately.
std::pair<double, double> time_providers(const GemmShape& s) {
  const size_t m = static_cast<size_t>(s.m), n = static_cast<size_t>(s.n), k = static_cast<size_t>(s.k);
  std::vector<float> A(m * k), B(k * n), C(m * n, 0.0f);
  for (size_t i = 0; i < A.size(); ++i) A[i] = static_cast<float>(i % 17) * 0.03125f - 0.25f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = static_cast<float>(i % 13) * 0.0625f - 0.375f;
  const Sgemm g{s.ta, s.tb, s.m, s.n, s.k, 1.0f, A.data(), s.ta ? s.m : s.k, B.data(), s.tb ? s.k : s.n,
                0.0f, C.data(), s.n};
  const double flops = 2.0 * double(m) * double(n) * double(k);
  std::vector<double> rates[2];
#pragma omp parallel num_threads(1)  // a region, so that oneDNN runs on this thread alone (run_sgemm)
  {
    const auto once = [&](GemmProvider p) {
      const auto t0 = std::chrono::steady_clock::now();
      run_sgemm(p, g);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    const double warm = std::max(once(GemmProvider::kOpenblas), once(GemmProvider::kOnednn));
    // At least 3 each and about 20 ms each in all, at most 9.
    const int reps = std::clamp(static_cast<int>(std::ceil(0.02 / std::max(warm, 1e-6))), 3, 9);
    for (int r = 0; r < reps; ++r) {
      for (GemmProvider p : {GemmProvider::kOpenblas, GemmProvider::kOnednn}) {
        rates[static_cast<int>(p)].push_back(flops / std::max(once(p), 1e-9) / 1e9);
      }
    }
  }
  return {median(rates[0]), median(rates[1])};
}

// Not named from_json: nlohmann's ADL finds a free from_json beside GemmShape and takes it for one of its
// own conversions, which nlohmann_json 3.11.3 (Ubuntu 24.04's) then fails to compile.
GemmDecision decision_from_json(const GemmShape& s, const Json& j) {
  GemmDecision d;
  d.shape = s;
  d.how = "cached";
  const std::string p = j.value("provider", "");
  if (p != "openblas" && p != "onednn") throw std::runtime_error("bad provider");
  d.provider = p == "onednn" ? GemmProvider::kOnednn : GemmProvider::kOpenblas;
  d.openblas_gflops = j.value("openblas_gflops", 0.0);
  d.onednn_gflops = j.value("onednn_gflops", 0.0);
  return d;
}

// An exclusive lock on the cache (flock on a lock file beside it), so that
// the processes of one machine starting at once time each shape once and
// all take the first one's choice. Without a cache folder: no lock.
class CacheLock {
 public:
  explicit CacheLock(const std::string& path) {
    if (path.empty()) return;
    fd_ = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // closing drops the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

// The cache's entry for `s` (read under the lock), or time it and add it.
GemmDecision decide(const GemmShape& s) {
  const std::string path = engine_cache_file("gemm_choices.json", true);
  const std::string key = gemm_cache_key();
  CacheLock lock(path);
  Json cache = Json::object();
  if (!path.empty()) {
    try {  // through the bounded reader: a FIFO or a device planted there is skipped, not waited on
      cache = Json::parse(read_input_file(path, kMaxTextInputBytes, "", "the GEMM provider cache"));
      if (!cache.is_object()) cache = Json::object();
    } catch (const std::exception&) {
      cache = Json::object();  // missing or unreadable: started again
    }
    try {
      if (cache.contains(key) && cache[key].is_object() && cache[key].contains(s.text())) {
        return decision_from_json(s, cache[key][s.text()]);
      }
    } catch (const std::exception&) {
      // a damaged entry: timed again and replaced
    }
  }
  GemmDecision d;
  d.shape = s;
  d.how = "timed";
  std::tie(d.openblas_gflops, d.onednn_gflops) = time_providers(s);
  d.provider = d.onednn_gflops > d.openblas_gflops ? GemmProvider::kOnednn : GemmProvider::kOpenblas;
  if (!path.empty()) {
    if (!cache.contains(key) || !cache[key].is_object()) cache[key] = Json::object();
    cache[key][s.text()] = Json{{"provider", to_string(d.provider)},
                                {"openblas_gflops", round_fixed(d.openblas_gflops, 1)},
                                {"onednn_gflops", round_fixed(d.onednn_gflops, 1)}};
    try {
      write_file_atomically(path, json_text(cache, 1) + "\n");
    } catch (const std::exception&) {
      // The cache is a convenience; the decision stands for this process.
    }
  }
  return d;
}

}  // namespace

std::string gemm_cache_path() { return engine_cache_file("gemm_choices.json"); }

std::string gemm_cache_key() {
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}|{}|{}|onednn {}.{}.{}", machine_info().cpu_model, openblas_get_config(),
                     openblas_get_corename(), v->major, v->minor, v->patch);
}

void reset_gemm_decisions_for_tests() {
  std::lock_guard<std::mutex> hold(registry_mutex());
  registry().clear();
}

GemmShape parse_gemm_shape(const std::string& text) {
  GemmShape s;
  char ta = 0, tb = 0;
  int used = 0;
  if (std::sscanf(text.c_str(), "%dx%dx%d %c%c t%d%n", &s.m, &s.n, &s.k, &ta, &tb, &s.threads, &used) != 6 ||
      used != static_cast<int>(text.size()) || s.m <= 0 || s.n <= 0 || s.k <= 0 || s.threads <= 0 ||
      (ta != 'N' && ta != 'T') || (tb != 'N' && tb != 'T')) {
    throw std::invalid_argument(
        fmt::format("'{}' is not a product shape (expected \"MxNxK XY tT\": X, Y N or T, T threads, e.g. "
                    "\"4096x1152x384 NT t2\")",
                    text.substr(0, 80)));
  }
  s.ta = ta == 'T';
  s.tb = tb == 'T';
  if (s.text() != text) throw std::invalid_argument(fmt::format("'{}' is not a product shape as written", text));
  return s;
}

GemmProvider deterministic_provider() {
  static const GemmProvider p = __builtin_cpu_supports("avx512f") ? GemmProvider::kOnednn : GemmProvider::kOpenblas;
  return p;
}

GemmProviders::GemmProviders(GemmChoice mode, bool deterministic, int threads,
                             const std::map<std::string, GemmChoice>& pins)
    : mode_(mode), deterministic_(deterministic), threads_(threads), local_(static_cast<size_t>(threads)) {
  if (!pins.empty() && (mode != GemmChoice::kAuto || deterministic)) {
    throw std::invalid_argument(
        "train.gemm_choices: pins auto's per-shape choices; it needs train.gemm auto without train.deterministic");
  }
  for (const auto& [text, choice] : pins) {
    GemmShape s;
    try {
      s = parse_gemm_shape(text);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("train.gemm_choices: ") + e.what());
    }
    if (choice == GemmChoice::kAuto) {
      throw std::invalid_argument(
          fmt::format("train.gemm_choices: '{}': auto is not a provider (expected openblas or onednn)", text));
    }
    // Pins for another thread count name products this backend never makes: kept out.
    if (s.threads == threads) {
      pins_[s] = choice == GemmChoice::kOnednn ? GemmProvider::kOnednn : GemmProvider::kOpenblas;
    }
  }
}

GemmProviders::~GemmProviders() = default;

std::optional<GemmProvider> GemmProviders::fixed() const {
  if (mode_ == GemmChoice::kOpenblas) return GemmProvider::kOpenblas;
  if (mode_ == GemmChoice::kOnednn) return GemmProvider::kOnednn;
  if (deterministic_) return deterministic_provider();  // the machine's, never a timing
  return std::nullopt;
}

GemmProvider GemmProviders::provider(const GemmShape& s) {
  if (const auto p = fixed()) return *p;
  if (auto pin = pins_.find(s); pin != pins_.end()) return pin->second;
  if (2.0 * s.m * double(s.n) * s.k < kMinTimedFlops) return GemmProvider::kOpenblas;
  std::lock_guard<std::mutex> hold(registry_mutex());
  auto it = registry().find(s);
  if (it == registry().end()) it = registry().emplace(s, decide(s)).first;
  return it->second.provider;
}

void GemmProviders::run(int tid, const Sgemm& g) {
  GemmProvider p = GemmProvider::kOpenblas;
  if (const auto f = fixed()) {
    p = *f;
  } else {
    const GemmShape s{g.m, g.n, g.k, g.ta, g.tb, threads_};
    auto& mine = local_[static_cast<size_t>(tid)];  // this thread's decisions seen: no lock
    auto it = mine.find(s);
    if (it == mine.end()) it = mine.emplace(s, provider(s)).first;
    p = it->second;
  }
  run_sgemm(p, g);
}

std::vector<GemmDecision> GemmProviders::decisions() const {
  std::map<GemmShape, GemmDecision> mine;
  for (const auto& [s, p] : pins_) mine[s] = GemmDecision{s, p, "pinned (train.gemm_choices)", 0, 0};
  {
    std::lock_guard<std::mutex> hold(registry_mutex());
    for (const auto& [s, d] : registry()) {
      if (s.threads == threads_ && !mine.contains(s)) mine[s] = d;
    }
  }
  std::vector<GemmDecision> out;
  for (const auto& [s, d] : mine) out.push_back(d);
  return out;
}

double onednn_sgemm_ceiling_gflops(int threads, int n, int reps) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), c(a.size());
  const int before = omp_get_max_threads();
  ensure_team_signal_stacks(threads);
  omp_set_num_threads(threads);  // dnnl_sgemm outside any region runs on the default team size
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, a.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * n * n * double(n) / s / 1e9);
  }
  omp_set_num_threads(before);
  return median(rates);
}

}  // namespace gpt2::cpu

namespace gpt2 {

std::map<std::string, GemmChoice> read_gemm_choices(const std::string& path) {
  const auto fail = [&](const std::string& problem) {
    return std::invalid_argument(fmt::format("train.gemm_choices: {}: {}", path, problem));
  };
  const std::string text = read_input_file(path, kMaxRecordBytes, "train.gemm_choices",
                                           "a JSON object of product shapes and providers, or a run's metrics.jsonl");
  // The object itself, or the last line of a metrics stream whose provenance holds one.
  Json choices;
  try {
    const Json j = Json::parse(text);
    choices = j.contains("provenance") ? j["provenance"].value("gemm_choices", Json()) : j;
  } catch (const Json::parse_error&) {
    size_t start = 0;
    while (start < text.size()) {
      const size_t end = std::min(text.find('\n', start), text.size());
      try {
        const Json line = Json::parse(text.substr(start, end - start));
        if (line.is_object() && line.contains("provenance") && line["provenance"].contains("gemm_choices")) {
          choices = line["provenance"]["gemm_choices"];
        }
      } catch (const Json::parse_error&) {
        throw fail("neither JSON nor JSON lines (a metrics.jsonl)");
      }
      start = end + 1;
    }
  }
  if (!choices.is_object()) {
    throw fail("holds no gemm_choices object (a run's provenance records one under train.gemm auto)");
  }
  std::map<std::string, GemmChoice> out;
  for (const auto& [shape, provider] : choices.items()) {
    try {
      cpu::parse_gemm_shape(shape);
    } catch (const std::invalid_argument& e) {
      throw fail(e.what());
    }
    if (!provider.is_string() || (provider != "openblas" && provider != "onednn")) {
      throw fail(fmt::format("'{}': {} is not a provider (expected \"openblas\" or \"onednn\")", shape,
                             provider.dump().substr(0, 40)));
    }
    from_string(provider.get<std::string>(), out[shape]);
  }
  return out;
}

}  // namespace gpt2
