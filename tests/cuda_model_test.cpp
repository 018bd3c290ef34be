// The GPU suite's backend and model tests: the CUDA backend's staging of
// host token and target arrays (against the reference backend, with the
// tolerance table's rows; every op itself, the cuBLAS products included, is
// checked through the op table by cuda_kernels_test and
// cuda_backend_ops_test), then the whole model against the CPU backend:
// loss, every parameter gradient, three optimizer steps, run-to-run
// determinism and generation. Inputs from the one random scheme
// (test_util.h). Exits 77 (meson: skipped) where there is no CUDA device.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops/op_check.h"
#include "kernels/ops/op_table.h"
#include "kernels/ops/tolerances.h"
#include "model/generate.h"
#include "model/model.h"
#include "model/optim.h"
#include "cuda_test_main.h"
#include "test_util.h"
#include "train/schedule/train_step.h"

namespace gpt2 {
namespace {

using testing::all_close;
using testing::random_tokens;
using testing::random_vec;

// A host vector in a backend's memory, and back.
struct On {
  Backend& be;
  Buffer buf;
  On(Backend& b, const std::vector<float>& host) : be(b), buf(host.size(), b.memory()) { buf.upload(host); }
  Tensor t(std::initializer_list<int64_t> dims) const { return Tensor(buf.data(), dims); }
  std::vector<float> host() const { return buf.download(); }
};

// The backend under test and the one it is held to.
class Pair {
 public:
  Pair() : cuda_(make_cuda_backend()), cpu_(make_cpu_backend(1)) {}
  Backend& cuda() { return *cuda_; }
  Backend& cpu() { return *cpu_; }

 private:
  std::unique_ptr<Backend> cuda_, cpu_;
};

TEST(CudaBackend, HostTokensAndTargetsAreStaged) {
  // The contract lets the caller reuse its token and target arrays as soon
  // as a call returns, while the device may still be working: each call here
  // works on a scratch copy that is overwritten (with other valid ids) right
  // after the call. A first, smaller batch makes the staging buffers grow.
  // Held to the reference backend (which reads the arrays at once) with the
  // tolerance table's rows (the op table's checks of these ops take their
  // arrays from a case that keeps them): inputs in the ranges the rows
  // assume, dloss = 1/N as they do.
  auto cuda = make_cuda_backend();
  auto ref = make_reference_backend();
  const int T = 40, C = 64, V = 50;
  const auto wte = random_vec(size_t{V} * C, 9), wpe = random_vec(size_t{T} * C, 10);
  for (int B : {1, 3}) {
    const size_t N = static_cast<size_t>(B * T);
    const auto tokens = random_tokens(N, V, 7), targets = random_tokens(N, V, 8);
    const auto logits0 = random_vec(N * V, 11, -5.0f, 5.0f);
    const float dloss = 1.0f / static_cast<float>(N);
    std::vector<ops::OpOutput> got[2];  // on the CUDA backend, on the reference
    Backend* backends[] = {cuda.get(), ref.get()};
    for (int i = 0; i < 2; ++i) {
      Backend& be = *backends[i];
      On te(be, wte), pe(be, wpe), out(be, std::vector<float>(N * C));
      On dte(be, std::vector<float>(wte.size(), 0.5f)), dpe(be, std::vector<float>(wpe.size(), 0.25f));
      On logits(be, logits0), losses(be, std::vector<float>(N));
      std::vector<int32_t> scratch;
      auto use = [&](const std::vector<int32_t>& ids) {
        scratch = ids;
        return scratch.data();
      };
      auto clobber = [&] { std::fill(scratch.begin(), scratch.end(), V - 1); };
      be.encoder_forward(out.t({B, T, C}), use(tokens), te.t({V, C}), pe.t({T, C}));
      clobber();
      be.encoder_backward(dte.t({V, C}), dpe.t({T, C}), out.t({B, T, C}), use(tokens));
      clobber();
      be.crossentropy_forward(losses.t({B, T}), logits.t({B * T, V}), use(targets));
      clobber();
      be.crossentropy_backward(logits.t({B * T, V}), logits.t({B * T, V}), use(targets), dloss);
      clobber();
      got[i] = {{"out", out.host(), {}},
                {"dwte", dte.host(), {}},
                {"dwpe", dpe.host(), {}},
                {"losses", losses.host(), {}},
                {"dlogits", logits.host(), {}},
                {"sum", {}, {be.sum(losses.t({B * T}))}},
                {"sum", {}, {be.sum_squares(logits.t({B * T * V}))}}};
    }
    // The op of each result, and the sizes its tolerance row reads.
    const ops::OpShape s{.B = B, .T = T, .C = C, .V = V};
    const std::pair<const char*, ops::OpShape> rows[] = {
        {"encoder_forward", s},      {"encoder_backward", s},      {"encoder_backward", s},
        {"crossentropy_forward", s}, {"crossentropy_backward", s}, {"sum", {.P = B * T}},
        {"sum_squares", {.P = B * T * V}}};
    ASSERT_EQ(got[0].size(), std::size(rows));
    for (size_t k = 0; k < std::size(rows); ++k) {
      const auto& [op, shape] = rows[k];
      const ops::OpOutput &actual = got[0][k], &expected = got[1][k];
      const ops::Tolerance row = ops::tolerance(op, expected.name, ops::Dtype::f32, ops::ToleranceFacts{shape, {}, {}});
      const std::string err = ops::compare(actual, expected, ops::tolerance_on(*cuda, row, expected));
      EXPECT_TRUE(err.empty()) << op << " (B " << B << "): " << err;
    }
  }
}

// A configuration the CUDA kernels take (head size a multiple of 32) that
// still runs in a moment on the CPU.
Gpt2Config test_config() {
  Gpt2Config c;
  c.V = 96;
  c.T = 64;
  c.L = 2;
  c.NH = 2;
  c.C = 64;
  return c;
}

struct TrainResult {
  std::vector<float> losses, params;
  std::vector<std::vector<float>> grads;  // per tensor, after the first backward
  std::vector<int32_t> greedy, greedy_kv;
};

TrainResult train(Backend& be, const Gpt2Config& cfg, int B, int T, int steps) {
  Gpt2 model(cfg, be.memory());
  model.init_weights(42);
  Optimizer opt(OptimizerConfig::adamw(), model.num_params(), be.memory());
  ActivationArena arena(cfg, B, T, be.memory());
  TrainResult r;
  LocalTrainStep step(be, model, opt, arena.acts());  // the step every stage runs (train/schedule/train_step.h)
  for (int s = 0; s < steps; ++s) {
    auto x = random_tokens(static_cast<size_t>(B * T + 1), cfg.V, 300u + static_cast<uint32_t>(s));
    r.losses.push_back(static_cast<float>(step(x.data(), x.data() + 1).loss));
    if (s == 0) {  // the update reads the gradients but leaves them in place
      std::vector<float> all(model.num_params());
      be.memory().download(all.data(), model.grad_data(), all.size() * sizeof(float));
      for (const ParamInfo& info : model.infos()) {
        r.grads.emplace_back(all.begin() + static_cast<ptrdiff_t>(info.offset),
                             all.begin() + static_cast<ptrdiff_t>(info.offset + static_cast<size_t>(info.view->numel())));
      }
    }
  }
  r.params = model.params_to_host();
  // 58 + 12 tokens: with T = 64 the window slides for the last 6 (a full
  // recompute then, as the KV cache cannot help a sliding window).
  const std::vector<int32_t> prompt = random_tokens(58, cfg.V, 5);
  GenerateConfig g;
  g.max_new_tokens = 12;
  g.kv_cache = false;
  r.greedy = generate(be, model, prompt, g, -1).tokens;
  g.kv_cache = true;
  r.greedy_kv = generate(be, model, prompt, g, -1).tokens;
  return r;
}

// Every parameter gradient of `got` within `rel` of `want`, per tensor and
// against the tensor's largest gradient (as model_test does): tiny elements
// carry the absolute rounding of their larger neighbours.
void expect_grads_close(const Gpt2Config& cfg, const TrainResult& got, const TrainResult& want, double rel) {
  Gpt2 names(cfg);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t k = 0; k < got.grads.size(); ++k) {
    double scale = 0;
    for (float v : want.grads[k]) scale = std::max(scale, std::fabs(double{v}));
    EXPECT_TRUE(all_close(fmt::format("grad {}", names.infos()[k].name), got.grads[k], want.grads[k],
                          rel * scale + 1e-12, rel));
  }
}

TEST(CudaModel, LossGradientsAndStepsMatchTheCpuBackend) {
  Pair p;
  const Gpt2Config cfg = test_config();
  const TrainResult gpu = train(p.cuda(), cfg, 4, 64, 3), cpu = train(p.cpu(), cfg, 4, 64, 3);
  // Loss: reduction orders differ; through two layers a few ulp of O(1).
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t s = 0; s < gpu.losses.size(); ++s) {
    EXPECT_NEAR(gpu.losses[s], cpu.losses[s], 2e-5 * std::fabs(cpu.losses[s])) << "step " << s;
  }
  expect_grads_close(cfg, gpu, cpu, 2e-4);
  // After three AdamW steps (lr 3e-4 warm-up): parameters move by < 1e-3,
  // so their differences stay near the rounding of the update.
  EXPECT_TRUE(all_close("params after 3 steps", gpu.params, cpu.params, 2e-5, 1e-4));
  EXPECT_EQ(gpu.greedy, cpu.greedy) << "greedy generation, full recompute";
  EXPECT_EQ(gpu.greedy_kv, gpu.greedy) << "KV-cache decoding gives the same tokens";
}

TEST(CudaModel, OriginalConfigurationLossAndGradients) {
  Pair p;
  Gpt2Config cfg;  // the original's: V172 T256 L6 NH6 C384
  const TrainResult gpu = train(p.cuda(), cfg, 2, 256, 1), cpu = train(p.cpu(), cfg, 2, 256, 1);
  EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 2e-5 * std::fabs(cpu.losses[0]));
  expect_grads_close(cfg, gpu, cpu, 5e-4);  // six layers and T = 256: longer sums than above
}

TEST(CudaModel, Tf32IsOptInAndCloseToFp32) {
  auto fp32 = make_cuda_backend(), tf32 = make_cuda_backend({.tf32 = true});
  EXPECT_EQ(fp32->name().find("TF32"), std::string::npos) << fp32->name();
  EXPECT_NE(tf32->name().find("TF32"), std::string::npos) << tf32->name();
  Gpt2Config cfg;  // the original's widths: products long enough for TF32's 10-bit mantissa to show
  const TrainResult a = train(*fp32, cfg, 2, 256, 1), b = train(*tf32, cfg, 2, 256, 1);
  // TF32 rounds the products' inputs to 11 significant bits (~5e-4 relative).
  EXPECT_NEAR(b.losses[0], a.losses[0], 5e-3 * std::fabs(a.losses[0]));
  EXPECT_NE(b.losses[0], a.losses[0]) << "TF32 requested but the loss is bitwise the FP32 one";
}

TEST(CudaModel, TrainingIsBitwiseDeterministic) {
  auto be = make_cuda_backend();
  const Gpt2Config cfg = test_config();
  const TrainResult a = train(*be, cfg, 4, 64, 3), b = train(*be, cfg, 4, 64, 3);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.params, b.params);
}

}  // namespace
}  // namespace gpt2

int main(int argc, char** argv) { return gpt2::testing::cuda_test_main(argc, argv); }
