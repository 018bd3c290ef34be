#include "bench_setup.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "kernels/buffer.h"
#include "app/cli.h"
#include "kernels/cpu/blas.h"
#include "model/params.h"
#include "util/provenance.h"
#include "util/stats.h"

namespace gpt2::bench {

const std::vector<BenchShape>& bench_shapes() {
  // Gpt2Config fields: V, T, L, NH, C.
  static const std::vector<BenchShape> shapes = {
      {"tiny", Gpt2Config{37, 16, 1, 2, 32}, 2},
      {"small", Gpt2Config{172, 64, 4, 4, 128}, 16},  // experiments/parallelism.yaml's model
      {"original", preset("original"), 16},
      {"larger", Gpt2Config{8192, 512, 12, 12, 768}, 8},
  };
  return shapes;
}

const BenchShape& bench_shape(const std::string& name) {
  for (const BenchShape& s : bench_shapes()) {
    if (s.name == name) return s;
  }
  throw std::invalid_argument(fmt::format("unknown shape '{}' (expected tiny, small, original or larger)", name));
}

ops::OpShape op_shape(const BenchShape& s) {
  ops::OpShape o;
  o.B = s.B;
  o.T = s.cfg.T;
  o.C = s.cfg.C;
  o.NH = s.cfg.NH;
  o.V = s.cfg.V;
  o.P = static_cast<int64_t>(param_count(s.cfg));
  return o;
}

std::string Variant::label() const { return fmt::format("{}/t{}", backend, threads); }

const std::vector<Variant>& bench_variants() {
  // {backend, threads, factory, roof (set by the program), unsupported
  // (none)}. The naive reference is single-threaded by definition. A new host
  // backend is one more line here; the reference check and the counters apply
  // to it unchanged. A device backend needs its own ceilings and a program
  // that links it: see cuda_program.cpp.
  static const std::vector<Variant> variants = {
      {"naive", 1, [](int) { return make_reference_backend(); }, {}, {}},
      {"cpu", 1, [](int t) { return make_cpu_backend(t); }, {}, {}},
      {"cpu", 2, [](int t) { return make_cpu_backend(t); }, {}, {}},
      // The CPU backend with each fp32 products' provider forced (train.gemm; kernels/cpu/gemm.h):
      // beside "cpu" (auto), which provider each kernel's products run faster with at each shape.
      {"cpu-openblas", 1,
       [](int t) { return make_cpu_backend(BackendOptions::with_threads(t).with_gemm(GemmChoice::kOpenblas)); },
       {}, {}},
      {"cpu-openblas", 2,
       [](int t) { return make_cpu_backend(BackendOptions::with_threads(t).with_gemm(GemmChoice::kOpenblas)); },
       {}, {}},
      {"cpu-onednn", 1,
       [](int t) { return make_cpu_backend(BackendOptions::with_threads(t).with_gemm(GemmChoice::kOnednn)); }, {}, {}},
      {"cpu-onednn", 2,
       [](int t) { return make_cpu_backend(BackendOptions::with_threads(t).with_gemm(GemmChoice::kOnednn)); }, {}, {}},
      {"cpu-bf16", 1,
       [](int t) { return make_cpu_backend(BackendOptions::with_threads(t).with_bf16(true)); }, {}, {}, true},
      {"cpu-bf16", 2,
       [](int t) { return make_cpu_backend(BackendOptions::with_threads(t).with_bf16(true)); }, {}, {}, true},
  };
  return variants;
}

namespace {

// GB/s of copying `bytes` from one buffer to another on `threads` threads,
// counting the bytes read and the bytes written (STREAM's convention).
double memcpy_rate(size_t bytes, int threads, int reps) {
  Buffer src(bytes / sizeof(float)), dst(bytes / sizeof(float));
  std::fill(src.data(), src.data() + src.size(), 1.0f);
  const int64_t n = static_cast<int64_t>(src.size());
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {  // the first is warm-up (and faults the pages in)
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const int id = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t lo = n * id / nt, hi = n * (id + 1) / nt;
      std::memcpy(dst.data() + lo, src.data() + lo, static_cast<size_t>(hi - lo) * sizeof(float));
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  return median(rates);
}

// GB/s of STREAM's triad a = b + s * c on `threads` threads, counting the two
// arrays read and the one written (12 bytes per element).
double triad_rate(size_t bytes_per_array, int threads, int reps) {
  Buffer a(bytes_per_array / sizeof(float)), b(a.size()), c(a.size());
  std::fill(b.data(), b.data() + b.size(), 1.0f);
  std::fill(c.data(), c.data() + c.size(), 2.0f);
  const int64_t n = static_cast<int64_t>(a.size());
  float* pa = a.data();
  const float *pb = b.data(), *pc = c.data();
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) rates.push_back(3.0 * static_cast<double>(bytes_per_array) / s / 1e9);
  }
  return median(rates);
}

std::string g_help;
void print_help() {
  std::fputs(g_help.c_str(), stdout);
  std::fputs("\nGoogle Benchmark's flags:\n", stdout);
  benchmark::PrintDefaultHelp();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string env_or_unset(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

}  // namespace

namespace {

struct CeilingSizes {
  int sgemm_n, reps;
  size_t copy_mib;
};
CeilingSizes ceiling_sizes(bool quick) { return quick ? CeilingSizes{256, 1, 8} : CeilingSizes{2048, 5, 512}; }

}  // namespace

Ceilings measure_ceilings(bool quick) {
  Ceilings c;
  const CeilingSizes z = ceiling_sizes(quick);
  for (int t = 1; t <= 2; ++t) {
    c.sgemm_gflops[t - 1] = cpu::sgemm_ceiling_gflops(t, z.sgemm_n, z.reps);
    c.bf16_gflops[t - 1] = cpu::bf16_ceiling_gflops(t, z.sgemm_n, z.reps);
    c.memcpy_gbs[t - 1] = memcpy_rate(z.copy_mib << 20, t, z.reps);
    c.triad_gbs[t - 1] = triad_rate((z.copy_mib << 20) / 2, t, z.reps);
    c.bandwidth_gbs[t - 1] = std::max(c.memcpy_gbs[t - 1], c.triad_gbs[t - 1]);
  }
  return c;
}

Fields BenchOptions::fields() {
  Fields f;
  f.add("shapes", shape_list, "comma-separated shapes (below); with --quick, tiny unless given");
  f.add("quick", quick, "the tiny shape and quick, meaningless ceilings: for tests");
  f.add("corrupt", corrupt, "a kernel (e.g. gelu_forward) whose result is perturbed before its reference check, "
                            "to see the check fail");
  return f;
}

BenchOptions init_benchmarks(int* argc, char** argv, const char* head, const char* tail) {
  BenchOptions o;
  const Fields fields = o.fields();
  g_help = std::string(head) + fields.help() +
           fmt::format("  --{:<24} {}\n\nShapes:\n", "help", "this text and Google Benchmark's flags");
  for (const BenchShape& s : bench_shapes()) {
    g_help += fmt::format("  {:<10} B {}, {}\n", s.name, s.B, s.cfg.describe());
  }
  g_help += tail;
  benchmark::Initialize(argc, argv, print_help);
  const CommandLine cl = parse_command_line({argv + 1, argv + *argc}, fields);
  if (!cl.positional.empty()) {
    throw std::invalid_argument(fmt::format("unexpected argument '{}' (see --help)", cl.positional.front()));
  }
  apply_settings(fields, cl);
  const bool shapes_given =
      std::any_of(cl.settings.begin(), cl.settings.end(), [](const auto& kv) { return kv.first == "shapes"; });
  o.shapes = o.quick && !shapes_given ? std::vector<std::string>{"tiny"} : split(o.shape_list);
  for (const std::string& s : o.shapes) bench_shape(s);  // validates
  return o;
}

void add_context(const Ceilings& c, const BenchOptions& o) {
  const MachineInfo m = machine_info();
  const BuildInfo b = build_info();
  benchmark::AddCustomContext("cpu_model", m.cpu_model);
  benchmark::AddCustomContext("logical_cores", std::to_string(m.logical_cores));
  benchmark::AddCustomContext("blas_core", cpu::blas_core());
  benchmark::AddCustomContext("blas_config", cpu::blas_config());
  benchmark::AddCustomContext("env_OPENBLAS_CORETYPE", env_or_unset("OPENBLAS_CORETYPE"));
  benchmark::AddCustomContext("env_OPENBLAS_L2_SIZE", env_or_unset("OPENBLAS_L2_SIZE"));
  benchmark::AddCustomContext("git_commit", b.git_commit);
  benchmark::AddCustomContext("source_hash", b.source_hash);
  benchmark::AddCustomContext("build_options", b.build_options);
  benchmark::AddCustomContext("compiler", b.compiler);
  benchmark::AddCustomContext("build_type", b.build_type);
  benchmark::AddCustomContext("openblas_version", b.openblas_version);
  for (int t = 1; t <= 2; ++t) {
    benchmark::AddCustomContext(fmt::format("ceiling_sgemm_gflops_t{}", t), fmt::format("{:.2f}", c.gflops(t)));
    benchmark::AddCustomContext(fmt::format("ceiling_bf16_gflops_t{}", t),
                                fmt::format("{:.2f}", c.bf16_gflops[t - 1]));
    benchmark::AddCustomContext(fmt::format("ceiling_bandwidth_gbs_t{}", t), fmt::format("{:.2f}", c.gbs(t)));
    benchmark::AddCustomContext(fmt::format("memcpy_gbs_t{}", t), fmt::format("{:.2f}", c.memcpy_gbs[t - 1]));
    benchmark::AddCustomContext(fmt::format("triad_gbs_t{}", t), fmt::format("{:.2f}", c.triad_gbs[t - 1]));
  }
  const CeilingSizes z = ceiling_sizes(o.quick);
  benchmark::AddCustomContext(
      "ceiling_method",
      fmt::format("compute: median of {} runs of a {}^3 SGEMM with OpenBLAS's own threads (bf16 variants: of a bf16 "
                  "product through oneDNN at that size); bandwidth: the better of "
                  "the medians of {} memcpy of {} MiB and {} STREAM triads over 3 x {} MiB, bytes read + written{}",
                  z.reps, z.sgemm_n, z.reps, z.copy_mib, z.reps, z.copy_mib / 2,
                  o.quick ? " (--quick: not meaningful)" : ""));
  for (const std::string& name : o.shapes) {
    const BenchShape& s = bench_shape(name);
    benchmark::AddCustomContext("shape_" + name, fmt::format("B {} {}", s.B, s.cfg.describe()));
  }
}

void set_counters(benchmark::State& st, const ops::OpCost& cost, const Roof& roof, int threads) {
  using benchmark::Counter;
  const double roof_s = std::max(cost.flop / (roof.gflops * 1e9), cost.bytes / (roof.gbs * 1e9));
  st.counters["flop_rate"] = Counter(cost.flop, Counter::kIsIterationInvariantRate);
  st.counters["byte_rate"] = Counter(cost.bytes, Counter::kIsIterationInvariantRate);
  st.counters["roofline"] = Counter(roof_s, Counter::kIsIterationInvariantRate);
  st.counters["flop"] = Counter(cost.flop);
  st.counters["bytes"] = Counter(cost.bytes);
  st.counters["kernel_threads"] = Counter(threads);
}


}  // namespace gpt2::bench
