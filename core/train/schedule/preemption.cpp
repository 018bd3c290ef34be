// The stop signals' handlers (see preemption.h). A handler may only touch
// lock-free atomics and call async-signal-safe functions: it stores the
// signal and the time (clock_gettime is async-signal-safe; CLOCK_MONOTONIC
// is the steady clock's), or on a second signal restores the default action
// and raises the signal again.
#include "train/schedule/preemption.h"

#include <fmt/format.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "util/signal_stack.h"

namespace gpt2 {

namespace {
std::atomic<int> g_signal{0};

// CLOCK_MONOTONIC (the steady clock's) in nanoseconds; async-signal-safe.
int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::atomic<int64_t> g_ns{0};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free);

void on_stop_signal(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig)) {  // the second: at once
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_ns.store(monotonic_ns());
}
}  // namespace

void install_stop_handlers() {
  // SA_RESTART (a blocking call the signal interrupts goes on; the flag is read at a stop point) and SA_ONSTACK:
  // on the alternate stack of a thread that runs oneDNN's GEMM (util/signal_stack.h).
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) install_signal_handler(sig, on_stop_signal);
}

int stop_signal() { return g_signal.load(); }
int64_t stop_signal_ns() { return g_ns.load(); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
  }
  return fmt::format("signal {}", sig);
}

StopRequest agreed_stop(Communicator& comm, double step_s) {
  const int64_t ns = stop_signal_ns();
  // Each rank's signal and how long ago it came (its own clock: hosts need not agree on time).
  const StopRequest mine{stop_signal(), ns > 0 ? static_cast<double>(monotonic_ns() - ns) * 1e-9 : 0.0, step_s};
  if (comm.size() == 1) return mine;
  static std::vector<StopRequest> all;  // grown once: a training step allocates nothing (tests/alloc_test.cpp)
  all.resize(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), 1);
  StopRequest out;
  for (const StopRequest& r : all) {
    out.signal = std::max(out.signal, r.signal);
    out.waited_s = std::max(out.waited_s, r.waited_s);
    out.step_s = std::max(out.step_s, r.step_s);
  }
  return out;
}

}  // namespace gpt2
