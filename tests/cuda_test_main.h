// The main() of a GPU-suite test that links the CUDA backend: without a
// CUDA device it prints "SKIP: no CUDA device (<why>)" and exits 77, which
// meson test reports as skipped (scripts/test.sh prints the reason); with
// one it runs the program's gtest tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_backend.h"

namespace gpt2::testing {

inline int cuda_test_main(int argc, char** argv) {
  std::string why;
  if (cuda_device_count(&why) == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", why.c_str());
    return 77;  // meson test: skipped
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace gpt2::testing
