// Context parallelism in the model (model/context_parallel.h), in one
// process: cp ranks as threads passing their keys and values round a ring of
// mailboxes, each with its own backend and a copy of the model. Their
// forward and backward over their head and tail chunks must give serial's
// loss (the mean of the ranks' means) and, summed over the ranks, serial's
// gradient; on GPT-2 (learned positions) and a llama variant (RoPE,
// grouped-query attention, RMSNorm, SwiGLU), on the reference and cpu
// backends. The MPI stage's runs against serial are in
// context_parallel_test.py (the mpi stage).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "model/activations.h"
#include "model/context_parallel.h"
#include "model/model.h"
#include "model/params.h"
#include "test_util.h"

namespace gpt2 {
namespace {

// A ring of P threads: rank r's start_shift leaves its tensor in rank r+1's
// mailbox (waiting until that one is empty), finish_shift takes its own into
// the tensor start_shift named.
class ThreadRing {
 public:
  explicit ThreadRing(int P) : boxes_(static_cast<size_t>(P)), full_(static_cast<size_t>(P), false) {}
  int size() const { return static_cast<int>(boxes_.size()); }
  void put(int to, Tensor t) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !full_[static_cast<size_t>(to)]; });
    boxes_[static_cast<size_t>(to)].assign(t.data, t.data + t.numel());
    full_[static_cast<size_t>(to)] = true;
    cv_.notify_all();
  }
  void take(int at, Tensor t) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return full_[static_cast<size_t>(at)]; });
    const std::vector<float>& box = boxes_[static_cast<size_t>(at)];
    ASSERT_EQ(box.size(), static_cast<size_t>(t.numel()));
    std::memcpy(t.data, box.data(), box.size() * sizeof(float));
    full_[static_cast<size_t>(at)] = false;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<float>> boxes_;
  std::vector<bool> full_;
};

class ThreadGroup final : public CpGroup {
 public:
  ThreadGroup(ThreadRing& ring, int rank) : ring_(ring), rank_(rank) {}
  int size() const override { return ring_.size(); }
  int rank() const override { return rank_; }
  void start_shift(Tensor send, Tensor recv) override {
    ring_.put((rank_ + 1) % size(), send);
    recv_ = recv;
  }
  void finish_shift() override { ring_.take(rank_, recv_); }
  void progress() override {}

 private:
  ThreadRing& ring_;
  int rank_;
  Tensor recv_;
};

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

std::unique_ptr<Backend> backend_named(const std::string& name) {
  return name == "reference" ? make_reference_backend() : make_cpu_backend(1);
}

// One forward and backward of `model_cfg` (weights from seed 7) on B rows of
// T tokens: serial with cp 1, else cp threads; the gradients summed over them.
Result run(const Gpt2Config& cfg, const std::string& backend, int B, int T, int cp,
           const std::vector<int32_t>& x, const std::vector<int32_t>& y) {
  const float dloss = 1.0f / static_cast<float>(B * T);
  if (cp == 1) {
    std::unique_ptr<Backend> be = backend_named(backend);
    Gpt2 model(cfg);
    model.init_weights(7);
    model.zero_grad();
    ActivationArena arena(model, B, T);
    Result r;
    r.loss = gpt2_forward(*be, model, arena.acts(), x.data(), y.data());
    gpt2_backward(*be, model, arena.acts(), x.data(), y.data(), dloss);
    r.grads.assign(model.grad_data(), model.grad_data() + model.num_params());
    return r;
  }
  ThreadRing ring(cp);
  std::vector<Result> per(static_cast<size_t>(cp));
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Backend> be = backend_named(backend);
      ThreadGroup group(ring, r);
      Gpt2 model(cfg);
      model.init_weights(7);
      model.zero_grad();
      const int L = T / (2 * cp);
      ActivationArena arena(model, ArenaSpec(2 * B, L).with_context(ContextCut{cp, r, &group}));
      std::vector<int32_t> cx(x.size() / static_cast<size_t>(cp)), cy(cx.size());
      context_rows(x.data(), cx.data(), B, T, cp, r, 1);
      context_rows(y.data(), cy.data(), B, T, cp, r, 1);
      Result& out = per[static_cast<size_t>(r)];
      out.loss = gpt2_forward(*be, model, arena.acts(), cx.data(), cy.data());
      gpt2_backward(*be, model, arena.acts(), cx.data(), cy.data(), dloss);
      out.grads.assign(model.grad_data(), model.grad_data() + model.num_params());
    });
  }
  for (std::thread& t : threads) t.join();
  Result sum;
  sum.grads.assign(per[0].grads.size(), 0.0f);
  for (const Result& p : per) {
    sum.loss += p.loss / cp;  // every rank holds B T / cp positions
    for (size_t i = 0; i < p.grads.size(); ++i) sum.grads[i] += p.grads[i];
  }
  return sum;
}

Gpt2Config small(bool llama) {
  Gpt2Config c{37, 32, 2, 4, 32};
  if (llama) {
    c.arch = Arch::kLlama;
    c.n_kv_head = 2;
  }
  return c.resolved();
}

TEST(ContextParallel, RowsAreHeadAndTailChunks) {
  // 2 rows of T 8 over cp 2 (chunks of 2 tokens): rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  std::vector<int32_t> in(16);
  for (int i = 0; i < 16; ++i) in[static_cast<size_t>(i)] = i;
  std::vector<int32_t> out(8);
  context_rows(in.data(), out.data(), 2, 8, 2, 0, 1);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 8, 9, 6, 7, 14, 15}));
  context_rows(in.data(), out.data(), 2, 8, 2, 1, 1);
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 10, 11, 4, 5, 12, 13}));
  // Two microbatches of one row each: each its head, then its tail.
  context_rows(in.data(), out.data(), 2, 8, 2, 0, 2);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 1, 6, 7, 8, 9, 14, 15}));
}

TEST(ContextParallel, EqualsSerialLossAndGradient) {
  const int B = 2, T = 32;
  const std::vector<int32_t> x = testing::random_tokens(B * T, 37, 11), y = testing::random_tokens(B * T, 37, 12);
  for (const bool llama : {false, true}) {
    const Gpt2Config cfg = small(llama);
    for (const std::string backend : {"reference", "cpu"}) {
      const Result serial = run(cfg, backend, B, T, 1, x, y);
      for (const int cp : {2, 4}) {
        const std::string what = fmt::format("{} on {}, cp {}", llama ? "llama" : "gpt2", backend, cp);
        const Result got = run(cfg, backend, B, T, cp, x, y);
        EXPECT_NEAR(got.loss, serial.loss, 1e-6 * serial.loss) << what;
        EXPECT_TRUE(testing::all_close(what + ": gradient", got.grads, serial.grads, 2e-6, 2e-4));
      }
    }
  }
}

}  // namespace
}  // namespace gpt2
