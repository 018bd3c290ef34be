// Signal handlers on an alternate stack, for threads that run oneDNN's jit
// GEMM.
//
// oneDNN's generated fp32 GEMM kernels (its AVX2 and AVX-512 "gemm:jit",
// which dnnl_sgemm runs; releases up to 3.11) point the stack pointer at a
// workspace on the heap while they run (uxlfoundation/oneDNN#4845, fixed
// upstream by #4855 after the 2.6.3 Debian 12 ships). A signal handled on
// such a thread's own stack has its frame written at that pointer, into the
// heap, and a later free() aborts ("corrupted size vs. prev_size"): issue 45
// met it as a stop signal crashing 1 in 15-30 preempted runs with
// train.gemm onednn, and a signal every 50 us crashed a dnnl_sgemm loop
// within 0.04 s. A handler installed with SA_ONSTACK runs on the thread's
// alternate stack when it has one, wherever the stack pointer is; so every
// thread that may run oneDNN's GEMM calls ensure_signal_stack() first, and
// every handler of ours is installed by install_signal_handler.
#pragma once

namespace gpt2 {

// Gives the calling thread an alternate signal stack (sigaltstack) unless it
// has one: made once per thread (a thread-local check after that), freed
// when the thread ends. Async-signal-safety is not needed: call it from
// ordinary code.
void ensure_signal_stack();

// Installs `handler` for `sig` with SA_RESTART (an interrupted blocking call
// goes on) and SA_ONSTACK (on the alternate stack of the thread it lands
// on, where that thread has one), and gives the calling thread its
// alternate stack. Throws std::runtime_error if sigaction fails.
void install_signal_handler(int sig, void (*handler)(int));

}  // namespace gpt2
