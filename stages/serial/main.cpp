// Stage 0: serial. One process on the CPU backend (threads from
// train.threads; 1 = truly serial). Everything else is the core's.
#include "app/cli.h"
#include "kernels/cpu/omp_wait.h"

int main(int argc, char** argv) {
  gpt2::cpu::set_omp_wait_policy(argv);
  return gpt2::stage_main(argc, argv, {"serial", gpt2::cpu_backend_kind(), nullptr, {}});
}
