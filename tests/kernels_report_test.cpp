// The kernels report's reading of Google Benchmark JSON, on files written
// literally here: the median aggregate is used when there is one, a single
// run when there is none, Google Benchmark's suffixes are dropped from the
// names, times are converted to milliseconds, and a benchmark whose check
// failed is carried as its error, not as a time. The report's rows are
// checked against values worked out by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "reports/kernels_report.h"

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

// One benchmark entry of Google Benchmark's JSON (a single run).
std::string entry(const std::string& name, double time_ns, double flop, double bytes, int threads) {
  const double s = time_ns / 1e9;
  return "{\"name\": \"" + name + "\", \"run_name\": \"" + name + "\", \"run_type\": \"iteration\", " +
         "\"real_time\": " + std::to_string(time_ns) + ", \"time_unit\": \"ns\", \"flop_rate\": " +
         std::to_string(flop / s) + ", \"byte_rate\": " + std::to_string(bytes / s) +
         ", \"roofline\": 0.5, \"flop\": " + std::to_string(flop) + ", \"bytes\": " + std::to_string(bytes) +
         ", \"kernel_threads\": " + std::to_string(threads) + "}";
}

void put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// Two programs whose start-up ceilings differ (kernel_bench's 2-thread SGEMM
// was measured while another process held a core): the report's ceiling is
// the best of each, and percentages are computed against it:
// matmul cpu/t2 takes 10 ms for 1.2 GFLOP and 1 MB; at 160 GFLOP/s and
// 40 GB/s the floor is max(7.5 ms, 0.025 ms), so 75%; the naive run's
// 1000 ms makes the speed-up 100.0x.
TEST(KernelsReport, ReportUsesTheBestCeilingAndTheIndex) {
  const fs::path root = fs::temp_directory_path() / "kernels_report_test_run";
  fs::remove_all(root);
  const fs::path results = root / "results", reports = root / "reports";
  put(results / "programs.csv",
      "program,id,status,reason,seconds,date\nkernel_bench,kernel_bench-1,ok,,1.0,d\n"
      "allreduce_bench,allreduce_bench-1,ok,,1.0,d\nmissing_bench,missing_bench-1,skipped,not built: no MPI,0.0,d\n");
  const std::string ok = R"({"status": "ok", "reason": "", "seconds": 1.0, "date": "d"})";
  put(results / "kernel_bench-1" / "status.json", ok);
  put(results / "allreduce_bench-1" / "status.json", ok);
  put(results / "missing_bench-1" / "status.json", R"({"status": "skipped", "reason": "not built: no MPI", "seconds": 0, "date": "d"})");
  put(results / "kernel_bench-1" / "benchmark.json",
      std::string(R"({"context": {"cpu_model": "Test CPU", "logical_cores": "2", "blas_core": "Zen",
        "ceiling_sgemm_gflops_t1": "80", "ceiling_sgemm_gflops_t2": "100",
        "ceiling_bandwidth_gbs_t1": "20", "ceiling_bandwidth_gbs_t2": "40"}, "benchmarks": [)") +
          entry("matmul_forward.fc/original/naive/t1/iterations:1/repeats:1/real_time", 1e9, 1.2e9, 1e6, 1) + ", " +
          entry("matmul_forward.fc/original/cpu/t2/real_time", 1e7, 1.2e9, 1e6, 2) + "]}");
  put(results / "allreduce_bench-1" / "benchmark.json",
      std::string(R"({"context": {"ceiling_sgemm_gflops_t1": "70", "ceiling_sgemm_gflops_t2": "160",
        "ceiling_bandwidth_gbs_t1": "18", "ceiling_bandwidth_gbs_t2": "30"}, "benchmarks": [)") +
          entry("allreduce/original/mpi/r2/manual_time", 2e7, 1e6, 8e6, 2) + "]}");
  KernelsExperiment ex;
  ex.name = "kx";
  const auto files = write_kernels_report(ex, results, reports, "build/bench/harness run kx.yaml");
  ASSERT_TRUE(fs::exists(reports / "kernels.md"));
  std::ifstream f(reports / "kernels.md");
  const std::string md((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(md.find("| **this report's ceiling** (the best above) | 2 | **160.00** | | | **40.00** | |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| original | cpu/t2 | 10.0 (1 run) | 120 | 0.100 | 1200 | 75% | 100.0x |"), std::string::npos) << md;
  EXPECT_NE(md.find("| original | naive/t1 | 1000 (1 run) |"), std::string::npos) << md;
  EXPECT_NE(md.find("its 2-thread SGEMM ceiling is only 1.25x its 1-thread one"), std::string::npos) << md;
  EXPECT_NE(md.find("| missing_bench | skipped | not built: no MPI |"), std::string::npos) << md;
  EXPECT_NE(md.find("### allreduce"), std::string::npos) << md;
  fs::remove_all(root);
}

}  // namespace
}  // namespace gpt2::harness
