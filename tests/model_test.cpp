// The model as a whole on the CPU: layout, initialisation, the optimised
// backend against the reference backend, determinism, optimizer schedules.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "model/activations.h"
#include "kernels/backend.h"
#include "kernels/exact_sum.h"
#include "model/flops.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/rng.h"
#include "test_util.h"
#include "train/schedule/train_step.h"

namespace gpt2 {
namespace {

TEST(Layout, OriginalParameterCount) {
  const Gpt2Config c = preset("original");
  const size_t C = 384, V = 172, T = 256, L = 6;
  // wte + wpe + L * (2 LN (2C each), qkv 3C^2, proj C^2 + C, fc 4C^2 + 4C,
  // fc_proj 4C^2 + C) + lnf 2C + lm_head VC
  const size_t expected = V * C + T * C + L * (12 * C * C + 10 * C) + 2 * C + V * C;
  EXPECT_EQ(param_count(c), expected);
  EXPECT_EQ(expected, 10871040u);
}

TEST(Layout, ViewsTileTheBufferInOrder) {
  Gpt2 model(preset("small"));
  size_t next = 0;
  for (const ParamInfo& info : model.infos()) {
    EXPECT_EQ(info.offset, next) << info.name;
    EXPECT_EQ(info.view->data, model.param_data() + info.offset) << info.name;
    next += static_cast<size_t>(info.view->numel());
  }
  EXPECT_EQ(next, model.num_params());
  EXPECT_EQ(model.grads.lm_head.data, model.grad_data() + model.infos().back().offset);
}

TEST(Config, RejectsBadSizes) {
  EXPECT_THROW((Gpt2Config{10, 8, 1, 3, 16}.validate()), std::invalid_argument);  // 16 % 3
  EXPECT_THROW((Gpt2Config{0, 8, 1, 2, 16}.validate()), std::invalid_argument);
  EXPECT_THROW((Gpt2Config{10, 8, -1, 2, 16}.validate()), std::invalid_argument);
  EXPECT_THROW(preset("gpt5"), std::invalid_argument);
  try {
    Gpt2Config{10, 8, 1, 3, 16}.validate();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos) << e.what();
  }
}

TEST(Rng, PhiloxKnownAnswers) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution.
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Init, CounterBasedAndDistributedAsSpecified) {
  Gpt2 a(preset("small")), b(preset("small")), c(preset("small"));
  a.init_weights(42);
  b.init_weights(42);
  c.init_weights(43);
  EXPECT_EQ(std::memcmp(a.param_data(), b.param_data(), a.num_params() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.param_data(), c.param_data(), a.num_params() * sizeof(float)), 0);
  // Element i of parameter k is 0.02 * normal(seed, k, i): nothing else.
  const auto& infos = a.infos();
  EXPECT_EQ(a.params.lm_head.data[17], 0.02f * normal(42, static_cast<uint32_t>(infos.size() - 1), 17));
  double sum = 0, sq = 0;
  const Tensor& fc = a.params.layers[1].fc_w;
  for (float v : fc) {
    sum += v;
    sq += double{v} * v;
  }
  const double n = static_cast<double>(fc.numel()), mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(n));  // 5 standard errors
  EXPECT_NEAR(sd, 0.02, 0.02 * 5 / std::sqrt(2 * n));
  for (float v : a.params.layers[0].ln1_w) EXPECT_EQ(v, 1.0f);
  for (float v : a.params.layers[0].fc_b) EXPECT_EQ(v, 0.0f);
}

// A rank's part of the initial weights computed in place (initial_values,
// what ZeRO-3 starts from) has the same bytes as the whole model's weights
// cut into its shard, for tensor-parallel shards with and without the
// vocabulary cut (265 rows over 4 ranks: 3 padding rows), pipeline stages and
// windows that start and end inside tensors.
TEST(Init, InitialValuesAreTheShardOfTheWholeModelsWeights) {
  for (InitKind kind : {InitKind::kPhilox, InitKind::kGpt2}) {
  Gpt2Config cfg = preset("small");
  cfg.V = 265;
  cfg.init = kind;
  const std::vector<float> whole = initial_weights(cfg, 7);
  for (const TpShape tp : {TpShape(1), TpShape(2), TpShape(4, true), TpShape(2, true)}) {
    for (int stages : {1, 2}) {
      for (int rank = 0; rank < tp.size; ++rank) {
        for (int s = 0; s < stages; ++s) {
          const StageLayers stage = StageLayers::of(cfg.L, stages, s);
          const std::vector<float> want = shard_of(cfg, tp, rank, whole, stage);
          std::vector<float> got(want.size(), 7.0f);
          initial_values(cfg, 7, tp, rank, stage, 0, got);
          const std::string what = fmt::format("tp {}{} rank {} stage {}/{}", tp.size, tp.vocab ? " vocab" : "", rank,
                                               s, stages);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << what;
          const size_t a = want.size() / 3, b = 2 * want.size() / 3 + 5;  // a window across tensors
          std::vector<float> part(b - a, 7.0f);
          initial_values(cfg, 7, tp, rank, stage, a, part);
          EXPECT_EQ(std::memcmp(part.data(), want.data() + a, part.size() * sizeof(float)), 0) << what << " window";
        }
      }
    }
  }
  }
  Gpt2Config cfg = preset("small");
  Gpt2Config original = cfg;
  original.init = InitKind::kOriginal;
  std::vector<float> one(1);
  EXPECT_THROW(initial_values(original, 7, 1, 0, {}, 0, one), std::invalid_argument);
}

// model.init gpt2 (issue 46): GPT-2's scheme, philox's draws with the
// residual projections (attn_proj_w, fc_proj_w) scaled by 1/sqrt(2 L):
// those tensors are philox's times that factor (in fp32, exactly), every
// other tensor is philox's bytes, and their spread shrinks accordingly.
TEST(Init, Gpt2ScalesTheResidualProjections) {
  Gpt2Config philox = preset("small");
  Gpt2Config gpt2 = philox;
  gpt2.init = InitKind::kGpt2;
  const std::vector<float> a = initial_weights(philox, 11), b = initial_weights(gpt2, 11);
  const float scale = static_cast<float>(1.0 / std::sqrt(2.0 * philox.L));
  ParamTensors p;
  int scaled = 0;
  for (const ParamInfo& info : layout(philox, p)) {
    const bool residual = info.name.ends_with("attn_proj_w") || info.name.ends_with("fc_proj_w");
    scaled += residual;
    double sa = 0, sb = 0;
    for (size_t i = info.offset; i < info.offset + info.count(); ++i) {
      ASSERT_EQ(b[i], residual ? scale * a[i] : a[i]) << info.name << " element " << i - info.offset;
      sa += double(a[i]) * a[i];
      sb += double(b[i]) * b[i];
    }
    if (residual) {
      EXPECT_NEAR(std::sqrt(sb / sa), scale, 1e-6) << info.name;
    }
  }
  EXPECT_EQ(scaled, 2 * philox.L);
  EXPECT_EQ(to_string(parse_init_kind("gpt2")), "gpt2");
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<float> params;
};

// Trains `steps` steps of the small model on fixed random batches.
TrainRun train(Backend& be, int steps, OptimizerConfig oc = OptimizerConfig::original(), int B = 2, int T = 16) {
  Gpt2 model(preset("small"));
  model.init_weights(1234);
  ActivationArena arena(model.config(), B, T);
  Optimizer opt(oc, model.num_params());
  LocalTrainStep step(be, model, opt, arena.acts());
  TrainRun r;
  for (int s = 0; s < steps; ++s) {
    auto x = testing::random_tokens(static_cast<size_t>(B * T + 1), model.config().V, 100u + static_cast<uint32_t>(s));
    r.losses.push_back(static_cast<float>(step(x.data(), x.data() + 1).loss));
  }
  r.params.assign(model.param_data(), model.param_data() + model.num_params());
  return r;
}

// The small preset as each architecture variant (model/config.h).
std::vector<std::pair<std::string, Gpt2Config>> small_variants() {
  std::vector<std::pair<std::string, Gpt2Config>> out;
  auto add = [&](const std::string& name, auto&& edit) {
    Gpt2Config c = preset("small");
    edit(c);
    out.emplace_back(name, c.resolved());
  };
  add("gpt2", [](Gpt2Config&) {});
  add("llama", [](Gpt2Config& c) { c.arch = Arch::kLlama; });
  add("llama gqa 2 tied", [](Gpt2Config& c) {
    c.arch = Arch::kLlama;
    c.n_kv_head = 2;
    c.tie_embeddings = true;
  });
  add("post-norm relu", [](Gpt2Config& c) {
    c.norm_position = NormPosition::kPost;
    c.activation = ActivationKind::kRelu;
  });
  add("rmsnorm silu mqa", [](Gpt2Config& c) {
    c.norm = NormKind::kRmsNorm;
    c.activation = ActivationKind::kSilu;
    c.n_kv_head = 1;
  });
  add("rope swiglu", [](Gpt2Config& c) {
    c.position = PositionKind::kRope;
    c.mlp = MlpKind::kSwiglu;
  });
  add("gpt2 exact: q/k/v biases, tied, 60 of 64 ids", [](Gpt2Config& c) {
    c.bias = BiasKind::kAll;
    c.tie_embeddings = true;
    c.vocab_valid = 60;
  });
  add("no linear biases", [](Gpt2Config& c) { c.bias = BiasKind::kNone; });
  return out;
}

TEST(Model, CpuBackendMatchesReferenceBackend) {
  auto ref = make_reference_backend();
  for (const auto& [variant, cfg] : small_variants()) {
  SCOPED_TRACE(variant);
  for (int threads : {1, 2}) {
    auto cpu = make_cpu_backend(threads);
    const int B = 3, T = 32;
    Gpt2 m1(cfg), m2(cfg);
    m1.init_weights(7);
    m2.init_weights(7);
    ActivationArena a1(m1.config(), B, T), a2(m2.config(), B, T);
    auto x = testing::random_tokens(static_cast<size_t>(B * T + 1), m1.config().V, 9);
    float l1 = gpt2_forward(*cpu, m1, a1.acts(), x.data(), x.data() + 1);
    float l2 = gpt2_forward(*ref, m2, a2.acts(), x.data(), x.data() + 1);
    // Different summation orders (BLAS blocking, vector lanes) through 2
    // layers: a few hundred ulp at most on O(1) values.
    EXPECT_NEAR(l1, l2, 1e-5 * std::fabs(l2));
    EXPECT_TRUE(testing::all_close("logits", a1.acts().logits.data, a2.acts().logits.data,
                                   static_cast<size_t>(a1.acts().logits.numel()), 1e-5, 1e-4));
    gpt2_backward(*cpu, m1, a1.acts(), x.data(), x.data() + 1, 1.0f / (B * T));
    gpt2_backward(*ref, m2, a2.acts(), x.data(), x.data() + 1, 1.0f / (B * T));
    // Per tensor, against the tensor's largest gradient: tiny elements carry
    // the absolute rounding of their larger neighbours.
    for (size_t k = 0; k < m1.infos().size(); ++k) {
      const ParamInfo& info = m1.infos()[k];
      const float* g1 = m1.grad_data() + info.offset;
      const float* g2 = m2.grad_data() + info.offset;
      const size_t n = static_cast<size_t>(info.view->numel());
      double scale = 0;
      for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(double{g2[i]}));
      EXPECT_TRUE(testing::all_close(fmt::format("grad {} ({} threads)", info.name, threads), g1, g2, n,
                                     1e-4 * scale + 1e-12, 1e-4));
    }
  }
  }
}

TEST(Layout, VariantsDecideTheTensors) {
  // llama with 2 key/value heads and tied embeddings on the small preset
  // (V64 T32 L2 NH4 C64): no wpe, no norm biases, qkv (4 + 2*2) heads of 16,
  // SwiGLU hidden 176 (8 x 64 / 3 rounded up to 16), no lm_head.
  Gpt2Config c = preset("small");
  c.arch = Arch::kLlama;
  c.n_kv_head = 2;
  c.tie_embeddings = true;
  const int64_t C = 64, H = 176, per_layer = C + 128 * C + C * C + C + C + 2 * H * C + 2 * H + C * H + C;
  EXPECT_EQ(param_count(c), static_cast<size_t>(64 * C + 2 * per_layer + C));
  ParamTensors p;
  std::vector<std::string> names;
  for (const ParamInfo& info : layout(c, p)) names.push_back(info.name);
  EXPECT_EQ(names.front(), "wte");
  EXPECT_EQ(names[1], "h.0.ln1_w");
  EXPECT_EQ(names.back(), "lnf_w");
  // The default configuration is GPT-2, and "auto" is its own resolution.
  EXPECT_TRUE(preset("original").is_gpt2());
  EXPECT_EQ(preset("original"), preset("original").resolved());
  EXPECT_EQ(preset("original").mlp_width(), 4 * 384);
}

TEST(Layout, BiasSettingsDecideTheBiases) {
  Gpt2Config c = preset("small");  // V64 T32 L2 NH4 C64
  const size_t base = param_count(c);
  c.bias = BiasKind::kAll;  // + qkv_b (3C) a layer
  EXPECT_EQ(param_count(c), base + 2 * 3 * 64);
  c.bias = BiasKind::kNone;  // - attn_proj_b (C), fc_b (4C), fc_proj_b (C) a layer
  EXPECT_EQ(param_count(c), base - 2 * 6 * 64);
  ParamTensors p;
  c.bias = BiasKind::kAll;
  const auto infos = layout(c, p);
  EXPECT_EQ(infos[5].name, "h.0.qkv_b");  // wte, wpe, ln1_w, ln1_b, qkv_w, qkv_b
  EXPECT_FALSE(infos[5].decay);
  // The gpt2-124m preset is GPT-2 small: 124,475,904 parameters (with the 47 padding rows of wte).
  EXPECT_EQ(param_count(preset("gpt2-124m")), size_t{124475904});
  Gpt2Config bad = preset("small");
  bad.vocab_valid = 65;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  EXPECT_THROW(resolve_vocab(preset("gpt2-124m"), 50258), std::invalid_argument);
}

// Whole-model gradients of the GPT-2-exact variant against central
// differences: q/k/v biases and the tied head, with 4 padding ids masked
// (their rows of the tied wte get exactly no gradient, and changing them
// changes no loss).
TEST(Model, Gpt2ExactVariantGradientsMatchFiniteDifferences) {
  Gpt2Config c{64, 8, 1, 2, 16};
  c.bias = BiasKind::kAll;
  c.tie_embeddings = true;
  c.vocab_valid = 60;
  auto be = make_cpu_backend(1);
  Gpt2 model(c);
  model.init_weights(3);
  // Larger biases than the zero start, so that their products matter.
  for (const ParamInfo& info : model.infos()) {
    if (info.name.ends_with("_b")) {
      for (int64_t i = 0; i < info.view->numel(); ++i) model.param_data()[info.offset + i] = 0.1f * std::sin(float(i));
    }
  }
  const int B = 2, T = 8;
  ActivationArena arena(model.config(), B, T);
  auto x = testing::random_tokens(B * T + 1, 60, 21);
  auto loss = [&] { return double{gpt2_forward(*be, model, arena.acts(), x.data(), x.data() + 1)}; };
  loss();
  model.zero_grad();
  gpt2_backward(*be, model, arena.acts(), x.data(), x.data() + 1, 1.0f / (B * T));
  const std::vector<float> grads(model.grad_data(), model.grad_data() + model.num_params());
  for (const ParamInfo& info : model.infos()) {
    for (int64_t i : {int64_t{0}, info.view->numel() / 3, info.view->numel() - 1}) {
      const size_t at = info.offset + static_cast<size_t>(i);
      float& w = model.param_data()[at];
      const float w0 = w, h = 1e-2f;
      w = w0 + h;
      const double up = loss();
      w = w0 - h;
      const double down = loss();
      w = w0;
      const double fd = (up - down) / (2.0 * h);
      EXPECT_NEAR(grads[at], fd, 2e-3 + 2e-2 * std::fabs(fd)) << info.name << "[" << i << "]";
    }
  }
  // wte's padding rows 60..63: no gradient at all, and no effect on the loss.
  const ParamInfo& wte = model.infos()[0];
  for (size_t i = 60 * 16; i < 64 * 16; ++i) EXPECT_EQ(grads[wte.offset + i], 0.0f) << "wte element " << i;
  const double before = loss();
  for (size_t i = 60 * 16; i < 64 * 16; ++i) model.param_data()[wte.offset + i] = 5.0f;
  EXPECT_EQ(loss(), before);
}

TEST(Model, TrainingIsBitwiseDeterministic) {
  for (int threads : {1, 2}) {
    auto be = make_cpu_backend(threads);
    TrainRun a = train(*be, 4), b = train(*be, 4);
    ASSERT_EQ(a.losses.size(), b.losses.size());
    EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)), 0);
  }
}

TEST(Model, LearnsAFixedBatch) {
  // Property: both optimizers drive the loss of one repeated batch well down.
  auto be = make_cpu_backend(2);
  for (OptimizerConfig oc : {OptimizerConfig::original(), OptimizerConfig::adamw()}) {
    oc.lr = 3e-3f;
    oc.min_lr = 3e-4f;
    Gpt2 model(preset("small"));
    model.init_weights(5);
    const int B = 2, T = 16;
    ActivationArena arena(model.config(), B, T);
    Optimizer opt(oc, model.num_params());
    LocalTrainStep step(*be, model, opt, arena.acts());
    auto x = testing::random_tokens(B * T + 1, model.config().V, 77);
    float first = 0, last = 0;
    for (int s = 0; s < 30; ++s) {
      last = static_cast<float>(step(x.data(), x.data() + 1).loss);
      if (s == 0) first = last;
    }
    EXPECT_NEAR(first, std::log(64.0f), 0.1f) << "initial loss is about ln V";
    EXPECT_LT(last, 0.5f * first) << to_string(oc.kind);
  }
}

TEST(Optim, OriginalScheduleIsLinearFrom1e4By9e5Over10000Steps) {
  OptimizerConfig c = OptimizerConfig::original();
  // The rates are held as floats (1e-4f, 1e-5f): compare in those values.
  const double lr = double{1e-4f}, min_lr = double{1e-5f};
  EXPECT_DOUBLE_EQ(learning_rate(c, 0), lr);
  EXPECT_DOUBLE_EQ(learning_rate(c, 5000), lr - 0.5 * (lr - min_lr));
  EXPECT_DOUBLE_EQ(learning_rate(c, 10000), min_lr);
  EXPECT_DOUBLE_EQ(learning_rate(c, 20000), min_lr);
}

TEST(Optim, AdamWWarmsUpThenCosine) {
  OptimizerConfig c = OptimizerConfig::adamw();  // lr 3e-4, warm-up 10, decay 1000, min 3e-5
  EXPECT_NEAR(learning_rate(c, 0), 3e-5, 1e-9);
  EXPECT_NEAR(learning_rate(c, 9), 3e-4, 1e-9);
  EXPECT_NEAR(learning_rate(c, 10), 3e-4, 1e-9);
  EXPECT_NEAR(learning_rate(c, 505), 3e-5 + 0.5 * (3e-4 - 3e-5), 1e-9);
  EXPECT_NEAR(learning_rate(c, 1000), 3e-5, 1e-9);
}

TEST(Optim, ClipsTheGlobalNorm) {
  auto be = make_cpu_backend(1);
  Gpt2 model(preset("small"));
  model.init_weights(1);
  for (size_t i = 0; i < model.num_params(); ++i) model.grad_data()[i] = 1.0f;
  Optimizer opt(OptimizerConfig::original(), model.num_params());
  StepStats s = opt.step(*be, model);
  EXPECT_NEAR(s.grad_norm, std::sqrt(static_cast<double>(model.num_params())), 1e-6 * s.grad_norm);
  EXPECT_NEAR(s.grad_scale, 1.0 / (s.grad_norm + 1e-6), 1e-12);
  EXPECT_EQ(opt.steps_done(), 1);
}

// Past the 64-bit lanes' blocks (262,128 terms): 600,001 squares of the
// largest mantissa at one exponent, where a lane's sum would overflow 64 bits
// without the block's flush, equal n M^2 exactly (rounded once to a double).
TEST(ExactSquares, ManySquaresOfOneExponentStayExact) {
  const uint64_t M = (uint64_t{1} << 24) - 1;  // x = M 2^-23, x^2 = M^2 2^-46
  const size_t n = 600001;
  std::vector<float> x(n, std::ldexp(static_cast<float>(M), -23));
  x[5] = std::numeric_limits<float>::infinity();  // counted apart, in any block
  ExactSquares sum;
  sum.add(std::span<const float>(x).subspan(6));
  const uint128 exact = static_cast<uint128>(n - 6) * (static_cast<uint128>(M) * M);
  EXPECT_EQ(std::bit_cast<uint64_t>(sum.value()), std::bit_cast<uint64_t>(std::ldexp(static_cast<double>(exact), -46)));
  ExactSquares with_inf;
  with_inf.add(x);
  EXPECT_TRUE(std::isinf(with_inf.value()));
}

// train.deterministic's norm: the exact sum of squares is one value however
// its terms are split into parts and in whatever order the parts' digits add.
TEST(ExactSquares, SameBitsHoweverSplitAndOrdered) {
  std::vector<float> x(20001);
  for (size_t i = 0; i < x.size(); ++i) {  // signs, subnormals, and exponents from 2^-150 to 2^60
    const double u = uniform01(7, 0, i), e = uniform01(7, 1, i);
    x[i] = static_cast<float>(std::ldexp(2 * u - 1, static_cast<int>(e * 210) - 150));
  }
  x[3] = 0.0f;
  x[4] = std::ldexp(1.0f, -149);
  ExactSquares whole;
  whole.add(x);
  // Three parts of uneven length, as three ranks' shards, their digits added in two orders.
  const size_t cut1 = 777, cut2 = 15000;
  ExactSquares parts[3];
  parts[0].add({x.data(), cut1});
  parts[1].add({x.data() + cut1, cut2 - cut1});
  parts[2].add({x.data() + cut2, x.size() - cut2});
  for (const std::array<int, 3>& order : {std::array<int, 3>{0, 1, 2}, std::array<int, 3>{2, 0, 1}}) {
    std::array<float, ExactSquares::kFloats> sum{};
    for (int k : order) {
      const auto f = parts[k].to_floats();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += f[i];
    }
    ExactSquares joined;
    joined.add_floats(sum);
    EXPECT_EQ(std::bit_cast<uint64_t>(joined.value()), std::bit_cast<uint64_t>(whole.value()));
  }
  std::vector<float> reversed(x.rbegin(), x.rend());
  ExactSquares backwards;
  backwards.add(reversed);
  EXPECT_EQ(std::bit_cast<uint64_t>(backwards.value()), std::bit_cast<uint64_t>(whole.value()));
  // Near the sum in long double (the check of the digits' value, not of its bits).
  long double ref = 0;
  std::vector<long double> sq;
  for (float v : x) sq.push_back(static_cast<long double>(v) * v);
  std::sort(sq.begin(), sq.end());
  for (long double v : sq) ref += v;
  EXPECT_NEAR(whole.value(), static_cast<double>(ref), 1e-14 * static_cast<double>(ref));
}

TEST(ExactSquares, ExactWhereDoubleSumsLoseAndNonFiniteTerms) {
  // n squares of the smallest subnormal: n 2^-298, exactly.
  ExactSquares tiny;
  tiny.add(std::vector<float>(1000, std::ldexp(1.0f, -149)));
  EXPECT_EQ(tiny.value(), std::ldexp(1000.0, -298));
  // 2^24 ones after 2^30 (squared: 2^60). A double sum of the squares in
  // this order loses every 1 (2^60's unit in the last place is 256).
  ExactSquares mixed;
  std::vector<float> terms(1 << 24, 1.0f);
  terms.insert(terms.begin(), std::ldexp(1.0f, 30));
  mixed.add(terms);
  EXPECT_EQ(mixed.value(), std::ldexp(1.0, 60) + std::ldexp(1.0, 24));
  ExactSquares bad;
  bad.add(std::vector<float>{1.0f, std::numeric_limits<float>::infinity()});
  EXPECT_TRUE(std::isinf(bad.value()));
  bad.add(std::vector<float>{std::numeric_limits<float>::quiet_NaN()});
  EXPECT_TRUE(std::isnan(bad.value()));
}

// Forwards every kernel to a real backend and adds up the multiply-adds of
// the matrix products the model actually asks for, from the shapes it passes.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(Backend& inner) : in_(inner) {}
  double forward = 0, backward = 0;

  std::string name() const override { return "counting"; }
  void zero(Tensor x) override { in_.zero(x); }
  void copy(Tensor d, Tensor s) override { in_.copy(d, s); }
  void encoder_forward(Tensor o, const int32_t* t, Tensor a, Tensor b) override { in_.encoder_forward(o, t, a, b); }
  void encoder_backward(Tensor a, Tensor b, Tensor d, const int32_t* t) override { in_.encoder_backward(a, b, d, t); }
  void layernorm_forward(Tensor o, Tensor m, Tensor r, Tensor x, Tensor w, Tensor b) override {
    in_.layernorm_forward(o, m, r, x, w, b);
  }
  void layernorm_backward(Tensor dx, Tensor dw, Tensor db, Tensor d, Tensor x, Tensor w, Tensor m, Tensor r) override {
    in_.layernorm_backward(dx, dw, db, d, x, w, m, r);
  }
  void matmul_forward(Tensor o, Tensor x, Tensor w, Tensor b) override {
    forward += 2.0 * x.rows() * x.cols() * w.dim(0);
    in_.matmul_forward(o, x, w, b);
  }
  void matmul_backward(Tensor dx, Tensor dw, Tensor db, Tensor d, Tensor x, Tensor w) override {
    backward += 2 * 2.0 * x.rows() * x.cols() * w.dim(0);  // dinp and dweight
    in_.matmul_backward(dx, dw, db, d, x, w);
  }
  // Causal: query t meets t + 1 keys; Q K^T and P V are one multiply-add per
  // (pair, query channel) each, whatever the key/value heads: out (B,T,NH*HS).
  static double attention_pairs(const Tensor& out) {
    const double T = static_cast<double>(out.dim(1));
    return out.dim(0) * T * (T + 1) / 2 * out.dim(2);
  }
  void attention_forward(Tensor o, Tensor l, Tensor qkv, int NH, int KVH) override {
    forward += 2 * 2.0 * attention_pairs(o);
    in_.attention_forward(o, l, qkv, NH, KVH);
  }
  void attention_backward(Tensor dqkv, Tensor d, Tensor o, Tensor l, Tensor qkv, int NH, int KVH) override {
    backward += 4 * 2.0 * attention_pairs(d);  // dP, dV, dQ, dK
    in_.attention_backward(dqkv, d, o, l, qkv, NH, KVH);
  }
  void attention_decode(Tensor o, Tensor qkv, int NH, int KVH) override { in_.attention_decode(o, qkv, NH, KVH); }
  void rmsnorm_forward(Tensor o, Tensor r, Tensor x, Tensor w) override { in_.rmsnorm_forward(o, r, x, w); }
  void rmsnorm_backward(Tensor dx, Tensor dw, Tensor d, Tensor x, Tensor w, Tensor r) override {
    in_.rmsnorm_backward(dx, dw, d, x, w, r);
  }
  void rope_forward(Tensor qkv, int NH, int KVH, int pos0, float theta) override {
    in_.rope_forward(qkv, NH, KVH, pos0, theta);
  }
  void rope_backward(Tensor dqkv, int NH, int KVH, int pos0, float theta) override {
    in_.rope_backward(dqkv, NH, KVH, pos0, theta);
  }
  void relu_forward(Tensor o, Tensor x) override { in_.relu_forward(o, x); }
  void relu_backward(Tensor dx, Tensor d, Tensor x) override { in_.relu_backward(dx, d, x); }
  void silu_forward(Tensor o, Tensor x) override { in_.silu_forward(o, x); }
  void silu_backward(Tensor dx, Tensor d, Tensor x) override { in_.silu_backward(dx, d, x); }
  void swiglu_forward(Tensor o, Tensor x) override { in_.swiglu_forward(o, x); }
  void swiglu_backward(Tensor dx, Tensor d, Tensor x) override { in_.swiglu_backward(dx, d, x); }
  void gelu_forward(Tensor o, Tensor x) override { in_.gelu_forward(o, x); }
  void gelu_backward(Tensor dx, Tensor d, Tensor x) override { in_.gelu_backward(dx, d, x); }
  void residual_forward(Tensor o, Tensor a, Tensor b) override { in_.residual_forward(o, a, b); }
  void crossentropy_forward(Tensor l, Tensor z, const int32_t* t) override { in_.crossentropy_forward(l, z, t); }
  void crossentropy_backward(Tensor dz, Tensor z, const int32_t* t, float d) override {
    in_.crossentropy_backward(dz, z, t, d);
  }
  void crossentropy_shard_stats(Tensor l, Tensor tl, Tensor z, const int32_t* t, int64_t v0, int64_t V) override {
    in_.crossentropy_shard_stats(l, tl, z, t, v0, V);
  }
  void crossentropy_shard_combine(Tensor l, Tensor lse, Tensor p) override { in_.crossentropy_shard_combine(l, lse, p); }
  void crossentropy_shard_backward(Tensor dz, Tensor z, Tensor l, const int32_t* t, int64_t v0, int64_t V,
                                   float d) override {
    in_.crossentropy_shard_backward(dz, z, l, t, v0, V, d);
  }
  void adam_update(Tensor p, Tensor g, Tensor m, Tensor v, const AdamCoefficients& k) override {
    in_.adam_update(p, g, m, v, k);
  }
  double sum_squares(Tensor x) override { return in_.sum_squares(x); }
  double sum(Tensor x) override { return in_.sum(x); }

 private:
  Backend& in_;
};

TEST(Flops, TrainingFlopsCountWhatTheModelComputes) {
  // The formula of core/model/flops.h against the matrix products of an actual
  // forward and backward pass, counted from the shapes the model passes.
  auto cpu = make_cpu_backend(1);
  CountingBackend counting(*cpu);
  Gpt2 model(preset("small"));
  model.init_weights(1);
  const int B = 2, T = 24;
  ActivationArena arena(model.config(), B, T);
  auto x = testing::random_tokens(B * T + 1, model.config().V, 1);
  gpt2_forward(counting, model, arena.acts(), x.data(), x.data() + 1);
  gpt2_backward(counting, model, arena.acts(), x.data(), x.data() + 1, 1.0f / (B * T));
  const FlopCount f = training_flops(model.config(), B, T);
  EXPECT_DOUBLE_EQ(f.forward, counting.forward);
  EXPECT_DOUBLE_EQ(f.backward, counting.backward);
  // And the original configuration's figure quoted in the docs.
  EXPECT_NEAR(training_flops(preset("original"), 16, 256).total(), 277.09e9, 0.01e9);
}

TEST(Flops, VariantsCountTheirOwnWidths) {
  // Grouped-query attention and SwiGLU change the products' widths; the
  // count must follow them.
  Gpt2Config c = preset("small");
  c.arch = Arch::kLlama;
  c.n_kv_head = 2;
  c.tie_embeddings = true;
  auto cpu = make_cpu_backend(1);
  CountingBackend counting(*cpu);
  Gpt2 model(c);
  model.init_weights(1);
  const int B = 2, T = 24;
  ActivationArena arena(model, B, T);
  auto x = testing::random_tokens(B * T + 1, c.V, 1);
  gpt2_forward(counting, model, arena.acts(), x.data(), x.data() + 1);
  gpt2_backward(counting, model, arena.acts(), x.data(), x.data() + 1, 1.0f / (B * T));
  const FlopCount f = training_flops(c, B, T);
  EXPECT_DOUBLE_EQ(f.forward, counting.forward);
  EXPECT_DOUBLE_EQ(f.backward, counting.backward);
}

}  // namespace
}  // namespace gpt2
