// The CPU's bf16 matrix products (oneDNN, kernels/cpu/bf16_matmul.h) against
// its fp32 ones (OpenBLAS, through the CPU backend's matmul_forward and
// matmul_backward), side by side in one run: the three products of each
// linear layer of the original configuration's step (N = 16 x 256 rows;
// C -> OC: qkv 384 -> 1152, attention projection 384 -> 384, fc 384 -> 1536,
// fc projection 1536 -> 384, head 384 -> 265) and a 2048^3 square, on 1 and
// 2 threads. Counters: GFLOP/s (2 N C OC a product). The bf16 rows time the
// product alone (inputs already bf16); `to_bf16` rows time one conversion of
// the (N,C) input. The context names the OpenBLAS kernel and oneDNN's
// version; each bf16 row's label is the implementation oneDNN chose
// (impl_info). First measurements of issue 30 (docs/precision.md).
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/bf16.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/blas.h"

namespace gpt2 {
namespace {

struct Shape {
  const char* name;
  int64_t N, C, OC;
};
const Shape kShapes[] = {{"qkv", 4096, 384, 1152}, {"attproj", 4096, 384, 384}, {"fc", 4096, 384, 1536},
                         {"fcproj", 4096, 1536, 384}, {"head", 4096, 384, 265}, {"square", 2048, 2048, 2048}};

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
  }
  return v;
}

enum class Product { kForward, kInput, kWeight };
const char* product_name(Product p) {
  return p == Product::kForward ? "forward" : p == Product::kInput ? "backward_input" : "backward_weight";
}

void set_rate(benchmark::State& st, const Shape& s) {
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(s.N * s.C * s.OC) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void fp32_product(benchmark::State& st, Shape s, Product p, int threads) {
  const std::unique_ptr<Backend> be = make_cpu_backend(threads);
  const size_t n = static_cast<size_t>(s.N), c = static_cast<size_t>(s.C), oc = static_cast<size_t>(s.OC);
  std::vector<float> inp = random_floats(n * c, 1), w = random_floats(oc * c, 2), out = random_floats(n * oc, 3);
  std::vector<float> dinp(n * c), dw(oc * c);
  const Tensor ti(inp.data(), {s.N, s.C}), tw(w.data(), {s.OC, s.C}), to(out.data(), {s.N, s.OC});
  const Tensor tdi(dinp.data(), {s.N, s.C}), tdw(dw.data(), {s.OC, s.C});
  for (auto _ : st) {
    if (p == Product::kForward) be->matmul_forward(to, ti, tw, Tensor{});
    else if (p == Product::kInput) be->matmul_backward(tdi, Tensor{}, Tensor{}, to, ti, tw);
    else be->matmul_backward(Tensor{}, tdw, Tensor{}, to, ti, tw);
    benchmark::ClobberMemory();
  }
  set_rate(st, s);
}

void bf16_product(benchmark::State& st, Shape s, Product p, int threads) {
  cpu::Bf16Matmul mm(threads);
  const size_t n = static_cast<size_t>(s.N), c = static_cast<size_t>(s.C), oc = static_cast<size_t>(s.OC);
  std::vector<bf16> inp(n * c), w(oc * c), dout(n * oc);
  to_bf16(random_floats(n * c, 1), inp);
  to_bf16(random_floats(oc * c, 2), w);
  to_bf16(random_floats(n * oc, 3), dout);
  std::vector<float> out(n * oc), dinp(n * c), dw(oc * c);
  for (auto _ : st) {
    if (p == Product::kForward) mm.forward(out.data(), inp.data(), w.data(), nullptr, s.N, s.C, s.OC);
    else if (p == Product::kInput) mm.backward_input(dinp.data(), dout.data(), w.data(), s.N, s.C, s.OC);
    else mm.backward_weight(dw.data(), dout.data(), inp.data(), s.N, s.C, s.OC);
    benchmark::ClobberMemory();
  }
  st.SetLabel(mm.impl_info());
  set_rate(st, s);
}

void conversion(benchmark::State& st, Shape s, int threads) {
  const std::vector<float> x = random_floats(static_cast<size_t>(s.N * s.C), 4);
  std::vector<bf16> y(x.size());
  for (auto _ : st) {
    to_bf16(x, y, threads);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(x.size()) * 6);
}

void register_all() {
  for (const Shape& s : kShapes) {
    for (int threads : {1, 2}) {
      for (Product p : {Product::kForward, Product::kInput, Product::kWeight}) {
        const std::string tail = std::string(product_name(p)) + "." + s.name + "/t" + std::to_string(threads);
        benchmark::RegisterBenchmark(("fp32/" + tail).c_str(), fp32_product, s, p, threads)
            ->Unit(benchmark::kMillisecond)->UseRealTime();
        benchmark::RegisterBenchmark(("bf16/" + tail).c_str(), bf16_product, s, p, threads)
            ->Unit(benchmark::kMillisecond)->UseRealTime();
      }
      benchmark::RegisterBenchmark(("to_bf16/" + std::string(s.name) + "/t" + std::to_string(threads)).c_str(),
                                   conversion, s, threads)
          ->Unit(benchmark::kMillisecond)->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::AddCustomContext("blas_core", gpt2::cpu::blas_core());
  benchmark::AddCustomContext("onednn", gpt2::cpu::Bf16Matmul::library_version());
  gpt2::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
