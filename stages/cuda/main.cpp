// Stage 2: CUDA. One process on one GPU (the first; CUDA_VISIBLE_DEVICES
// picks another). The same command line, configuration and outputs as every
// stage; without a CUDA device it says so and exits with status 3, which the
// harness records as skipped. Everything else is the core's.
#include "app/cli.h"
#include "kernels/cpu/omp_wait.h"
#include "kernels/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  gpt2::cpu::set_omp_wait_policy(argv);
  return gpt2::stage_main(argc, argv, {"cuda", gpt2::cuda_backend_kind(), nullptr, {}},
                          "Runs on the first CUDA device (set CUDA_VISIBLE_DEVICES to choose); train.threads is\n"
                          "not used; matrix products are FP32 unless train.tf32 is true. Without a CUDA device it\n"
                          "prints \"no CUDA device\" and exits with status 3.\n");
}
