// The kernels report's reading of Google Benchmark JSON, on files written
// literally here: the median aggregate is used when there is one, a single
// run when there is none, Google Benchmark's suffixes are dropped from the
// names, times are converted to milliseconds, and a benchmark whose check
// failed is carried as its error, not as a time. The report's rows are
// checked against values worked out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kernels_report.h"

namespace gpt2::harness {
namespace {

namespace fs = std::filesystem;

// Exact binary fractions and small integers: compared with a tolerance of a
// few ulps of the unit conversions (ns -> ms is a division by 1e6).
constexpr double kTol = 1e-12;

fs::path write(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("kernels_report_test_" + name);
  std::ofstream(p) << text;
  return p;
}

// gelu_forward on cpu/t2: three repetitions and their median/mean aggregates
// (only the median may be used); matmul on naive: one run, named with
// Google Benchmark's iteration/repeat suffixes, time in seconds; gelu on
// cpu/t1: a failed check.
const char* kJson = R"({
  "context": {"date": "2026-01-01T00:00:00+00:00", "blas_core": "Zen", "caches": [{"level": 1, "size": 32768}]},
  "benchmarks": [
    {"name": "gelu_forward/original/cpu/t2/real_time", "run_name": "gelu_forward/original/cpu/t2/real_time",
     "run_type": "iteration", "repetitions": 3, "real_time": 9.0e6, "time_unit": "ns",
     "flop_rate": 1.0e9, "byte_rate": 2.0e9, "roofline": 0.25, "flop": 4.0e6, "bytes": 8.0e6, "kernel_threads": 2},
    {"name": "gelu_forward/original/cpu/t2/real_time_mean", "run_name": "gelu_forward/original/cpu/t2/real_time",
     "run_type": "aggregate", "aggregate_name": "mean", "repetitions": 3, "real_time": 7.0e6, "time_unit": "ns",
     "flop_rate": 9.0e9, "byte_rate": 9.0e9, "roofline": 0.9, "flop": 4.0e6, "bytes": 8.0e6, "kernel_threads": 2},
    {"name": "gelu_forward/original/cpu/t2/real_time_median", "run_name": "gelu_forward/original/cpu/t2/real_time",
     "run_type": "aggregate", "aggregate_name": "median", "repetitions": 3, "real_time": 2.5e6, "time_unit": "ns",
     "flop_rate": 1.5e9, "byte_rate": 3.0e9, "roofline": 0.5, "flop": 4.0e6, "bytes": 8.0e6, "kernel_threads": 2},
    {"name": "matmul_forward.fc/original/naive/t1/iterations:1/repeats:1/real_time",
     "run_name": "matmul_forward.fc/original/naive/t1/iterations:1/repeats:1/real_time",
     "run_type": "iteration", "repetitions": 1, "real_time": 2.0, "time_unit": "s",
     "flop_rate": 2.5e9, "byte_rate": 1.0e7, "roofline": 0.03125, "flop": 5.0e9, "bytes": 2.0e7, "kernel_threads": 1},
    {"name": "gelu_forward/original/cpu/t1/real_time", "run_name": "gelu_forward/original/cpu/t1/real_time",
     "run_type": "iteration", "repetitions": 3, "error_occurred": true,
     "error_message": "gelu_forward differs from the naive reference: out index 0", "real_time": 0, "time_unit": "ns"}
  ]
})";

TEST(KernelsReport, ReadsMediansSingleRunsAndErrors) {
  const auto rows = read_benchmark_json(write("ok.json", kJson), "kernel_bench");
  ASSERT_EQ(rows.size(), 3u);

  const KernelResult& gelu = rows[0];
  EXPECT_EQ(gelu.kernel, "gelu_forward");
  EXPECT_EQ(gelu.shape, "original");
  EXPECT_EQ(gelu.variant, "cpu/t2");
  EXPECT_EQ(gelu.program, "kernel_bench");
  EXPECT_NEAR(gelu.time_ms, 2.5, kTol) << "the median aggregate, not the mean or a repetition";
  EXPECT_NEAR(gelu.gflops, 1.5, kTol);
  EXPECT_NEAR(gelu.gbs, 3.0, kTol);
  EXPECT_NEAR(gelu.roofline, 0.5, kTol);
  EXPECT_EQ(gelu.samples, 3);
  EXPECT_TRUE(gelu.error.empty());

  const KernelResult& mm = rows[1];
  EXPECT_EQ(mm.kernel, "matmul_forward.fc");
  EXPECT_EQ(mm.variant, "naive/t1");
  EXPECT_NEAR(mm.time_ms, 2000.0, kTol) << "seconds to milliseconds";
  EXPECT_NEAR(mm.flop / mm.bytes, 250.0, kTol);
  EXPECT_EQ(mm.samples, 1);

  const KernelResult& bad = rows[2];
  EXPECT_EQ(bad.variant, "cpu/t1");
  EXPECT_NE(bad.error.find("differs from the naive reference"), std::string::npos);
  EXPECT_EQ(bad.time_ms, 0.0);
}

TEST(KernelsReport, RejectsMalformedFiles) {
  // A truncated file (Google Benchmark 1.7.1 leaves one when a reporter aborts).
  EXPECT_THROW(read_benchmark_json(write("truncated.json", std::string(kJson).substr(0, 300)), "kernel_bench"),
               std::runtime_error);
  // A benchmark not named KERNEL/SHAPE/BACKEND/tTHREADS.
  const char* odd = R"({"benchmarks": [{"name": "BM_x/real_time", "run_name": "BM_x/real_time",
      "run_type": "iteration", "real_time": 1, "time_unit": "ns", "flop_rate": 1, "byte_rate": 1,
      "roofline": 1, "flop": 1, "bytes": 1}]})";
  try {
    read_benchmark_json(write("odd.json", odd), "kernel_bench");
    FAIL() << "expected an error naming the benchmark";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("BM_x"), std::string::npos) << e.what();
  }
  // A counter missing: an error naming it, not a zero in the report.
  const char* missing = R"({"benchmarks": [{"name": "k/s/cpu/t1", "run_name": "k/s/cpu/t1",
      "run_type": "iteration", "real_time": 1, "time_unit": "ns"}]})";
  try {
    read_benchmark_json(write("missing.json", missing), "kernel_bench");
    FAIL() << "expected an error naming the missing counter";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("flop_rate"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpt2::harness
