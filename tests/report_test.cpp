// The harness's CSV reading/writing and its reports: small runs.csv, loss.csv
// and paper tables written literally here, reports checked against values
// worked out by hand (medians and ranges of three repetitions, speed-ups,
// paper ratios, deviations from serial, scaling efficiency). Whether gnuplot
// is installed is never asserted; only what the reports say when it is not.
#include "reports/report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "records/csv.h"

namespace gpt2::harness {
namespace {

namespace fs = std::filesystem;

// A median of three picks one input unchanged, so medians, minima and maxima
// compare as text. Ratios and differences of inputs near 1 to 10 carry a few
// ulps of rounding (about 1e-15), far inside this absolute tolerance.
constexpr double kTol = 1e-12;

const char* kRunsHeader =
    "experiment,run_id,stage,ranks,threads,repetition,seed,status,reason,training_s,inference_s,tokens_per_s,"
    "final_loss,steps,comm_s,peak_rss_mb,git_commit,git_dirty,build_type,compiler,cpu,cores,blas_core,host,date\n";
const char* kMachine = "abc1234,true,release,g++ 12.2.0,Test CPU @ 2.00GHz,8,Haswell,testhost,2025-01-02T03:04:05Z";

// serial: training 10, 12, 11 -> median 11 [10-12]; inference 1.0, 1.2, 1.1 -> 1.1 [1.0-1.2].
// mpi r2: training 6, 5.5, 7 -> 6; comm share 0.1, 0.1, 0.2 -> 0.1.
// mpi r4: training 3.5, 3.0, 4.0 (and one failed) -> 3.5; comm share 0.2 each.
// cuda and mpi_cuda: skipped (the second reason holds a comma, so it is quoted).
std::string fixture_runs() {
  std::string m = kMachine;
  return std::string(kRunsHeader) + "fx,s0,serial,1,1,0,1,ok,,10,1.0,400,3.0,3,0,100," + m + "\n" +
         "fx,s1,serial,1,1,1,2,ok,,12,1.2,360,3.3,3,0,100," + m + "\n" +
         "fx,s2,serial,1,1,2,3,ok,,11,1.1,380,3.1,3,0,100," + m + "\n" +
         "fx,m2a,mpi,2,1,0,1,ok,,6,1.0,700,3.2,3,0.6,100," + m + "\n" +
         "fx,m2b,mpi,2,1,1,2,ok,,5.5,0.9,760,3.1,3,0.55,100," + m + "\n" +
         "fx,m2c,mpi,2,1,2,3,ok,,7,1.1,650,3.3,3,1.4,100," + m + "\n" +
         "fx,m4a,mpi,4,1,0,1,ok,,3.5,0.8,1300,3.2,3,0.7,100," + m + "\n" +
         "fx,m4b,mpi,4,1,1,2,ok,,3.0,0.7,1400,3.2,3,0.6,100," + m + "\n" +
         "fx,m4c,mpi,4,1,2,3,ok,,4.0,0.9,1200,3.3,3,0.8,100," + m + "\n" +
         "fx,m4d,mpi,4,1,3,4,failed,exit status 1: rank 3: out of memory,,,,,,,," + m + "\n" +
         "fx,c0,cuda,1,1,0,1,skipped,not built: nvcc not found,,,,,,,," + m + "\n" +
         "fx,c1,cuda,1,1,1,2,skipped,not built: nvcc not found,,,,,,,," + m + "\n" +
         "fx,mc0,mpi_cuda,2,1,0,1,skipped,\"no CUDA device, and not built: nvcc not found\",,,,,,,," + m + "\n";
}

// Medians per epoch: serial 5.1, 4.1, 3.1; mpi r2 5.1, 4.3, 3.2 (max deviation
// 0.2 at epoch 1); mpi r4 5.2, 4.1, 3.15 (max deviation 0.1 at epoch 0). The
// failed run's rows (9.9) must be ignored.
const char* kLoss =
    "experiment,run_id,stage,ranks,threads,repetition,epoch,loss\n"
    "fx,s0,serial,1,1,0,0,5.0\nfx,s0,serial,1,1,0,1,4.0\nfx,s0,serial,1,1,0,2,3.0\n"
    "fx,s1,serial,1,1,1,0,5.2\nfx,s1,serial,1,1,1,1,4.1\nfx,s1,serial,1,1,1,2,3.3\n"
    "fx,s2,serial,1,1,2,0,5.1\nfx,s2,serial,1,1,2,1,4.2\nfx,s2,serial,1,1,2,2,3.1\n"
    "fx,m2a,mpi,2,1,0,0,5.1\nfx,m2a,mpi,2,1,0,1,4.3\nfx,m2a,mpi,2,1,0,2,3.2\n"
    "fx,m2b,mpi,2,1,1,0,5.1\nfx,m2b,mpi,2,1,1,1,4.4\nfx,m2b,mpi,2,1,1,2,3.1\n"
    "fx,m2c,mpi,2,1,2,0,5.1\nfx,m2c,mpi,2,1,2,1,4.2\nfx,m2c,mpi,2,1,2,2,3.3\n"
    "fx,m4a,mpi,4,1,0,0,5.3\nfx,m4a,mpi,4,1,0,1,4.2\nfx,m4a,mpi,4,1,0,2,3.15\n"
    "fx,m4b,mpi,4,1,1,0,5.0\nfx,m4b,mpi,4,1,1,1,4.1\nfx,m4b,mpi,4,1,1,2,3.15\n"
    "fx,m4c,mpi,4,1,2,0,5.2\nfx,m4c,mpi,4,1,2,1,4.0\nfx,m4c,mpi,4,1,2,2,3.2\n"
    "fx,m4d,mpi,4,1,3,0,9.9\nfx,m4d,mpi,4,1,3,1,9.9\nfx,m4d,mpi,4,1,3,2,9.9\n";

// Paper / ours: serial 110 / 11 = 10 and 11 / 1.1 = 10; mpi 30 / 6 = 5 and 10 / 1 = 10.
const char* kPaperTable1 = "stage,training_s,inference_s\nserial,110,11\nmpi,30,10\ncuda,5.5,1\nmpi_cuda,4,0.5\n";
// Paper deviations from paper serial: mpi 0.25 (epoch 1), cuda 0.5 (epoch 2), mpi_cuda 0.2 (epoch 2).
const char* kPaperTable2 = "epoch,serial,mpi,cuda,mpi_cuda\n0,5.0,5.0,5.0,5.0\n1,4.0,4.25,4.1,4.0\n2,3.0,3.1,3.5,3.2\n";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// The row of `t` whose columns `keys` hold `values`; fails the test if none.
std::vector<std::string> find_row(const CsvTable& t, const std::vector<std::string>& keys,
                                  const std::vector<std::string>& values) {
  for (size_t r = 1; r < t.size(); ++r) {
    bool match = true;
    for (size_t k = 0; k < keys.size(); ++k) match = match && t[r][column(t, keys[k], "table")] == values[k];
    if (match) return t[r];
  }
  ADD_FAILURE() << "no row with " << keys[0] << " = " << values[0];
  return std::vector<std::string>(t[0].size());
}

double num(const CsvTable& t, const std::vector<std::string>& row, const std::string& name) {
  return std::stod(row[column(t, name, "table")]);
}

std::string cell(const CsvTable& t, const std::vector<std::string>& row, const std::string& name) {
  return row[column(t, name, "table")];
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / unique_name(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    spec_.experiment = "fx";
    spec_.description = "A fixture experiment: three repetitions per configuration.";
    spec_.kinds = {"table1", "table2", "scaling"};
    spec_.results_dir = dir_ / "results" / "fx";
    spec_.reports_dir = dir_ / "reports" / "fx";
    spec_.paper_dir = dir_ / "data" / "paper";
    spec_.reproduce_command = "build/bench/harness run experiments/fx.yaml";
    write_file(spec_.paper_dir / "paper_table1.csv", kPaperTable1);
    write_file(spec_.paper_dir / "paper_table2.csv", kPaperTable2);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string unique_name(const std::string& test) {
    return "report_test_" + test + "_" + std::to_string(::getpid());
  }
  std::string report(const std::string& name) { return slurp(spec_.reports_dir / name); }
  CsvTable table(const std::string& name) { return read_csv(spec_.reports_dir / name); }

  fs::path dir_;
  ReportSpec spec_;
};

TEST(Csv, RoundTripsQuotesCommasAndNewlines) {
  const fs::path p = fs::temp_directory_path() / ("csv_round_trip_" + std::to_string(::getpid()) + ".csv");
  const std::vector<std::vector<std::string>> rows = {
      {"name", "value", "note"},
      {"plain", "1.5", ""},
      {"comma, inside", "\"quoted\"", "line one\nline two"},
      {"", "ends with quote\"", "crlf\r\nkept"},
  };
  std::string text;
  for (const auto& r : rows) text += csv_row(r);
  EXPECT_EQ(csv_row({"a,b", "say \"hi\"", "x"}), "\"a,b\",\"say \"\"hi\"\"\",x\n");
  write_file(p, text);
  EXPECT_EQ(read_csv(p), rows);
  write_file(p, "a,b\r\n1,2\r\n\r\n3,4");  // CRLF, a blank line, no final newline
  EXPECT_EQ(read_csv(p), (CsvTable{{"a", "b"}, {"1", "2"}, {"3", "4"}}));
  fs::remove(p);
}

// The message must name the file and the line where the problem starts.
void expect_csv_error(const std::string& text, const std::string& where, const std::string& what) {
  const fs::path p = fs::temp_directory_path() / ("csv_bad_" + std::to_string(::getpid()) + ".csv");
  write_file(p, text);
  try {
    read_csv(p);
    ADD_FAILURE() << "no error for " << text;
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p.string() + ":" + where + ":"), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
  fs::remove(p);
}

TEST(Csv, MalformedInputNamesFileAndLine) {
  expect_csv_error("a,b\n1,2\n3,\"open\n4,5\n", "3", "unterminated");
  expect_csv_error("a,b\n1,2\n\"x\ny\",2\n1,2,3\n", "5", "3 fields, but the header has 2");
  expect_csv_error("a,b\n\"x\"y,2\n", "2", "after a closing quote");
  expect_csv_error("a,b\nx\"y,2\n", "2", "quote inside an unquoted field");
  const fs::path empty = fs::temp_directory_path() / ("csv_empty_" + std::to_string(::getpid()) + ".csv");
  write_file(empty, "");
  EXPECT_THROW(read_csv(empty), std::runtime_error);
  fs::remove(empty);
  EXPECT_THROW(read_csv("/nonexistent/runs.csv"), std::runtime_error);
}

TEST(Csv, MissingColumnNamesFileAndColumn) {
  const CsvTable t = {{"stage", "training_s"}};
  EXPECT_EQ(column(t, "training_s", "p.csv"), 1u);
  try {
    column(t, "inference_s", "results/x/runs.csv");
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("results/x/runs.csv"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("inference_s"), std::string::npos) << e.what();
  }
}

TEST_F(ReportTest, Table1MediansRangesSpeedupsAndPaperRatios) {
  write_file(spec_.results_dir / "runs.csv", fixture_runs());
  write_file(spec_.results_dir / "loss.csv", kLoss);
  const std::vector<fs::path> written = write_reports(spec_);
  for (const fs::path& p : written) EXPECT_TRUE(fs::exists(p)) << p;
  for (const auto& e : fs::directory_iterator(spec_.reports_dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  }

  const CsvTable t = table("table1.csv");
  ASSERT_EQ(t.size(), 6u);  // header + serial, mpi r2, mpi r4, cuda, mpi_cuda, in that order
  EXPECT_EQ(t[1][0], "serial");
  EXPECT_EQ(t[2][0] + t[2][1], "mpi2");
  EXPECT_EQ(t[3][0] + t[3][1], "mpi4");
  EXPECT_EQ(t[4][0], "cuda");
  EXPECT_EQ(t[5][0], "mpi_cuda");
  const auto serial = t[1], mpi2 = t[2], mpi4 = t[3], cuda = t[4], mpi_cuda = t[5];
  EXPECT_EQ(cell(t, serial, "training_s_median"), "11");
  EXPECT_EQ(cell(t, serial, "training_s_min"), "10");
  EXPECT_EQ(cell(t, serial, "training_s_max"), "12");
  EXPECT_EQ(cell(t, serial, "inference_s_median"), "1.1");
  EXPECT_EQ(cell(t, serial, "tokens_per_s_median"), "380");
  EXPECT_EQ(cell(t, serial, "final_loss_median"), "3.1");
  EXPECT_EQ(cell(t, serial, "speedup_vs_serial"), "1");
  EXPECT_NEAR(num(t, serial, "paper_over_ours_training"), 10.0, 10 * kTol);   // 110 / 11
  EXPECT_NEAR(num(t, serial, "paper_over_ours_inference"), 10.0, 10 * kTol);  // 11 / 1.1
  EXPECT_EQ(cell(t, mpi2, "training_s_min") + " " + cell(t, mpi2, "training_s_max"), "5.5 7");
  EXPECT_NEAR(num(t, mpi2, "speedup_vs_serial"), 11.0 / 6.0, kTol);
  EXPECT_NEAR(num(t, mpi2, "paper_over_ours_training"), 5.0, kTol);  // 30 / 6
  EXPECT_NEAR(num(t, mpi4, "speedup_vs_serial"), 11.0 / 3.5, kTol);
  EXPECT_EQ(cell(t, mpi4, "status"), "partial");
  EXPECT_EQ(cell(t, mpi4, "runs_ok") + "/" + cell(t, mpi4, "runs_total"), "3/4");
  EXPECT_EQ(cell(t, mpi4, "reason"), "exit status 1: rank 3: out of memory");
  EXPECT_EQ(cell(t, cuda, "status"), "skipped");
  EXPECT_EQ(cell(t, cuda, "reason"), "not built: nvcc not found");
  EXPECT_EQ(cell(t, cuda, "training_s_median"), "");
  EXPECT_EQ(cell(t, cuda, "paper_training_s"), "5.5");
  EXPECT_EQ(cell(t, cuda, "paper_over_ours_training"), "");
  EXPECT_EQ(cell(t, mpi_cuda, "reason"), "no CUDA device, and not built: nvcc not found");

  const std::string md = report("table1.md");
  EXPECT_EQ(md.rfind("# fx: ", 0), 0u) << md;
  EXPECT_NE(md.find(spec_.description), std::string::npos);
  EXPECT_NE(md.find("Measured on Test CPU @ 2.00GHz (8 cores, BLAS kernel Haswell), host testhost, "
                    "2025-01-02T03:04:05Z, commit abc1234 (dirty)"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("build/bench/harness run experiments/fx.yaml"), std::string::npos);
  EXPECT_NE(md.find("| serial | 1 | 1 | ok 3/3 | 11.00 [10.00–12.00] | 1.10 [1.00–1.20] | 380 | 3.1000 | 1.00 | "
                    "110.00 | 11.00 | 10.0 | 10.0 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| mpi | 2 | 1 | ok 3/3 | 6.00 [5.50–7.00] | 1.00 [0.90–1.10] | 700 | 3.2000 | 1.83 | 30.00 | "
                    "10.00 | 5.00 | 10.0 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| ok 3/4; failed 1/4: exit status 1: rank 3: out of memory | 3.50 [3.00–4.00] |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| cuda | 1 | 1 | skipped: not built: nvcc not found |"), std::string::npos) << md;
  EXPECT_NE(md.find("| skipped: no CUDA device, and not built: nvcc not found |"), std::string::npos) << md;
  EXPECT_NE(md.find("[data/paper/README.md](../../data/paper/README.md)"), std::string::npos) << md;
  EXPECT_NE(md.find("not run on this machine"), std::string::npos);
  EXPECT_TRUE(md.find("table1_runtime.svg") != std::string::npos || md.find("(plot not drawn: ") != std::string::npos);
  EXPECT_TRUE(fs::exists(spec_.reports_dir / "table1_runtime.dat"));
  EXPECT_TRUE(fs::exists(spec_.reports_dir / "table1_runtime.gp"));

  const std::string runs = report("runs.md");
  for (const char* id : {"| s0 |", "| m2c |", "| m4d |", "| mc0 |"}) EXPECT_NE(runs.find(id), std::string::npos) << id;
  EXPECT_NE(runs.find("| failed | exit status 1: rank 3: out of memory |"), std::string::npos) << runs;
}

TEST_F(ReportTest, Table2MedianLossAndDeviationFromSerial) {
  write_file(spec_.results_dir / "runs.csv", fixture_runs());
  write_file(spec_.results_dir / "loss.csv", kLoss);
  spec_.kinds = {"table2"};
  write_reports(spec_);

  const CsvTable t = table("table2.csv");
  EXPECT_EQ(t[0], (std::vector<std::string>{"epoch", "serial_r1_t1", "mpi_r2_t1", "mpi_r4_t1", "paper_serial",
                                            "paper_mpi", "paper_cuda", "paper_mpi_cuda"}));
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[1], (std::vector<std::string>{"0", "5.1", "5.1", "5.2", "5", "5", "5", "5"}));
  EXPECT_EQ(t[2], (std::vector<std::string>{"1", "4.1", "4.3", "4.1", "4", "4.25", "4.1", "4"}));
  EXPECT_EQ(t[3], (std::vector<std::string>{"2", "3.1", "3.2", "3.15", "3", "3.1", "3.5", "3.2"}));

  const CsvTable s = table("table2_summary.csv");
  const auto dev = [&](const std::string& curve) { return find_row(s, {"curve"}, {curve}); };
  EXPECT_EQ(num(s, dev("serial r1 t1"), "max_abs_deviation"), 0.0);
  EXPECT_NEAR(num(s, dev("mpi r2 t1"), "max_abs_deviation"), 0.2, 1e-12);  // |4.3 - 4.1|
  EXPECT_EQ(cell(s, dev("mpi r2 t1"), "at_epoch"), "1");
  EXPECT_EQ(cell(s, dev("mpi r2 t1"), "final_loss"), "3.2");
  EXPECT_NEAR(num(s, dev("mpi r4 t1"), "max_abs_deviation"), 0.1, 1e-12);  // |5.2 - 5.1|
  EXPECT_EQ(cell(s, dev("mpi r4 t1"), "at_epoch"), "0");
  EXPECT_NEAR(num(s, dev("paper mpi"), "max_abs_deviation"), 0.25, 1e-12);
  EXPECT_NEAR(num(s, dev("paper cuda"), "max_abs_deviation"), 0.5, 1e-12);
  EXPECT_EQ(cell(s, dev("paper cuda"), "at_epoch"), "2");
  EXPECT_NEAR(num(s, dev("paper mpi_cuda"), "max_abs_deviation"), 0.2, 1e-12);
  EXPECT_EQ(cell(s, dev("paper mpi_cuda"), "final_loss"), "3.2");

  const std::string md = report("table2.md");
  EXPECT_NE(md.find("| 1 | 4.1000 | 4.3000 | 4.1000 | 4.0000 | 4.2500 | 4.1000 | 4.0000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| mpi r2 t1 | serial r1 t1 | 0.2000 | 1 | 2 | 3.2000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| paper cuda | paper serial | 0.5000 | 2 | 2 | 3.5000 |"), std::string::npos) << md;
  EXPECT_NE(md.find("cuda r1 t1 (skipped: not built: nvcc not found)"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(spec_.reports_dir / "table2_loss.dat"));
}

TEST_F(ReportTest, ScalingSpeedupEfficiencyAndCommShare) {
  write_file(spec_.results_dir / "runs.csv", fixture_runs());
  spec_.kinds = {"scaling"};
  write_reports(spec_);

  const CsvTable t = table("scaling.csv");
  ASSERT_EQ(t.size(), 3u);  // mpi r2, mpi r4; mpi_cuda has no completed run
  const auto r2 = find_row(t, {"stage", "ranks"}, {"mpi", "2"}), r4 = find_row(t, {"stage", "ranks"}, {"mpi", "4"});
  EXPECT_EQ(num(t, r2, "speedup"), 1.0);
  EXPECT_EQ(num(t, r2, "efficiency"), 1.0);
  EXPECT_NEAR(num(t, r2, "comm_share_median"), 0.1, 1e-12);  // 0.6 / 6, 0.55 / 5.5, 1.4 / 7
  EXPECT_NEAR(num(t, r4, "speedup"), 6.0 / 3.5, kTol);
  EXPECT_NEAR(num(t, r4, "efficiency"), 6.0 / 3.5 / 2.0, kTol);
  EXPECT_NEAR(num(t, r4, "comm_share_median"), 0.2, 1e-12);
  EXPECT_EQ(cell(t, r4, "training_s_median"), "3.5");
  EXPECT_EQ(cell(t, r4, "tokens_per_s_median"), "1300");

  const std::string md = report("scaling.md");
  EXPECT_NE(md.find("| mpi | 1 | 4 | 3/4 | 3.50 | 1300 | 1.71 | 0.857 | 20.0% |"), std::string::npos) << md;
  EXPECT_NE(md.find("mpi_cuda r2 t1 (skipped: no CUDA device, and not built: nvcc not found)"), std::string::npos)
      << md;
}

TEST_F(ReportTest, NoCompletedRunsAndNoLossFileDoNotFail) {
  write_file(spec_.results_dir / "runs.csv",
             std::string(kRunsHeader) + "fx,c0,cuda,1,1,0,1,skipped,no CUDA device,,,,,,,," + kMachine + "\n");
  const std::vector<fs::path> written = write_reports(spec_);
  for (const char* name : {"runs.md", "table1.md", "table2.md", "scaling.md"}) {
    EXPECT_NE(report(name).find("no completed runs"), std::string::npos) << name << ":\n" << report(name);
  }
  EXPECT_NE(report("table1.md").find("skipped: no CUDA device"), std::string::npos);
}

TEST_F(ReportTest, MissingLossFileIsReported) {
  write_file(spec_.results_dir / "runs.csv", fixture_runs());
  spec_.kinds = {"table2"};
  write_reports(spec_);
  EXPECT_NE(report("table2.md").find("No loss.csv"), std::string::npos) << report("table2.md");
}

TEST_F(ReportTest, WithoutGnuplotTheReportSaysSo) {
  write_file(spec_.results_dir / "runs.csv", fixture_runs());
  write_file(spec_.results_dir / "loss.csv", kLoss);
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  const fs::path empty_bin = dir_ / "empty_bin";
  fs::create_directories(empty_bin);
  ::setenv("PATH", empty_bin.c_str(), 1);
  std::vector<fs::path> written;
  try {
    written = write_reports(spec_);
  } catch (...) {
    ::setenv("PATH", saved.c_str(), 1);
    throw;
  }
  ::setenv("PATH", saved.c_str(), 1);
  for (const char* name : {"table1.md", "table2.md", "scaling.md"}) {
    EXPECT_NE(report(name).find("(plot not drawn: gnuplot not available)"), std::string::npos) << name;
  }
  for (const char* name : {"table1_runtime", "table2_loss", "scaling"}) {
    EXPECT_TRUE(fs::exists(spec_.reports_dir / (std::string(name) + ".dat"))) << name;
    EXPECT_TRUE(fs::exists(spec_.reports_dir / (std::string(name) + ".gp"))) << name;
    EXPECT_FALSE(fs::exists(spec_.reports_dir / (std::string(name) + ".svg"))) << name;
  }
}

TEST_F(ReportTest, SeveralMachinesAreEachListed) {
  write_file(spec_.results_dir / "runs.csv",
             std::string(kRunsHeader) +
                 "fx,a,serial,1,1,0,1,ok,,10,1,400,3,3,0,100,abc1234,false,release,g++ 12,CPU A,4,Haswell,host-a,"
                 "2025-01-01T00:00:00Z\n"
                 "fx,b,serial,1,1,1,1,ok,,10,1,400,3,3,0,100,abc1234-dirty,false,release,g++ 12,CPU B,8,Zen,host-b,"
                 "2025-01-02T00:00:00Z\n");
  spec_.kinds = {};
  write_reports(spec_);
  const std::string md = report("runs.md");
  EXPECT_NE(md.find("- Measured on CPU A (4 cores, BLAS kernel Haswell), host host-a, 2025-01-01T00:00:00Z, commit "
                    "abc1234;"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- Measured on CPU B (8 cores, BLAS kernel Zen), host host-b, 2025-01-02T00:00:00Z, commit "
                    "abc1234 (dirty);"),
            std::string::npos)
      << md;
}

TEST_F(ReportTest, UnknownKindIsRejectedBeforeWriting) {
  write_file(spec_.results_dir / "runs.csv", fixture_runs());
  spec_.kinds = {"table1", "table3"};
  try {
    write_reports(spec_);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'table3'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(spec_.reports_dir));
}

TEST_F(ReportTest, BadRunsFileNamesFileRowAndKey) {
  std::string runs = fixture_runs();
  runs.replace(runs.find(",12,1.2,"), 8, ",1x2,1.2,");  // training_s of s1, data row 2
  write_file(spec_.results_dir / "runs.csv", runs);
  try {
    write_reports(spec_);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("runs.csv: row 2: training_s '1x2'"), std::string::npos) << msg;
  }
  write_file(spec_.results_dir / "runs.csv", "experiment,run_id,stage\nfx,a,serial\n");
  EXPECT_THROW(write_reports(spec_), std::runtime_error);
}

// A tensor-parallel experiment: the standard model (seeds 1-3: validation
// 2.0, 2.1, 2.2; step 60, 58, 62 ms), tp 2 spd (1.9, 2.05, 2.3: paired
// differences -0.1, -0.05, +0.1; step 30, 32, 31 ms) with its counts equal to
// the formula, and tp 2 all tp whose bytes differ from it (100 against 96).
TEST_F(ReportTest, TensorParallelTimesCommunicationAndPairedLoss) {
  const std::string head =
      "experiment,run_id,stage,ranks,threads,repetition,tp,block_types,seed,status,reason,training_s,inference_s,"
      "tokens_per_s,final_loss,steps,comm_s,peak_rss_mb,step_ms,val_loss,tp_calls,tp_bytes,dp_calls,dp_bytes,"
      "formula_tp_calls,formula_tp_bytes,formula_dp_calls,formula_dp_bytes,git_commit,git_dirty,build_type,"
      "compiler,cpu,cores,blas_core,host,date\n";
  const std::string m = kMachine;
  std::string runs = head;
  for (auto [id, seed, ms, val] : {std::tuple("s1", 1, "60", "2.0"), {"s2", 2, "58", "2.1"}, {"s3", 3, "62", "2.2"}}) {
    runs += fmt::format("tpx,{},mpi,1,1,0,1,,{},ok,,1,0,1,3.0,3,0,10,{},{},0,0,0,0,0,0,0,0,{}\n", id, seed, ms, val, m);
  }
  for (auto [id, seed, ms, val] : {std::tuple("p1", 1, "30", "1.9"), {"p2", 2, "32", "2.05"}, {"p3", 3, "31", "2.3"}}) {
    runs += fmt::format("tpx,{},mpi,2,1,0,2,\"spd,spd\",{},ok,,1,0,1,3.0,3,0,10,{},{},5,800,0,0,5,800,0,0,{}\n", id,
                        seed, ms, val, m);
  }
  runs += "tpx,t1,mpi,2,1,0,2,\"tp,tp\",1,ok,,1,0,1,3.0,3,0,10,40,2.0,9,100,0,0,9,96,0,0," + m + "\n";
  runs += "tpx,t2,mpi,2,1,0,2,\"tp,tp\",2,failed,exit status 1,,,,,,,,,,,,,,,,,," + m + "\n";
  write_file(spec_.results_dir / "runs.csv", runs);
  spec_.kinds = {"tensor_parallel"};
  write_reports(spec_);

  const CsvTable t = table("tensor_parallel.csv");
  ASSERT_EQ(t.size(), 4u);
  const auto std1 = find_row(t, {"tp"}, {"1"}), spd = find_row(t, {"block_types"}, {"all spd"}),
             tp = find_row(t, {"block_types"}, {"all tp"});
  EXPECT_EQ(cell(t, std1, "step_ms_median"), "60");
  EXPECT_EQ(cell(t, spd, "step_ms_median"), "31");
  EXPECT_NEAR(num(t, spd, "speedup"), 60.0 / 31.0, kTol);
  EXPECT_EQ(cell(t, spd, "dp"), "1");
  EXPECT_EQ(cell(t, spd, "comm_equals_formula"), "true");
  EXPECT_EQ(cell(t, tp, "comm_equals_formula"), "false");
  EXPECT_EQ(cell(t, tp, "runs_ok"), "1");
  EXPECT_EQ(cell(t, tp, "runs_total"), "2");
  EXPECT_NEAR(num(t, spd, "val_diff_median"), -0.05, kTol);
  EXPECT_NEAR(num(t, spd, "val_diff_min"), -0.1, kTol);
  EXPECT_NEAR(num(t, spd, "val_diff_max"), 0.1, kTol);
  EXPECT_EQ(cell(t, spd, "seeds_paired"), "3");
  EXPECT_EQ(cell(t, tp, "val_diff_median"), "0");  // seed 1 against seed 1
  EXPECT_EQ(cell(t, spd, "val_loss_median"), "2.05");

  const std::string md = report("tensor_parallel.md");
  EXPECT_NE(md.find("| mpi r2 t1 tp2 (all spd) | tp 2 x dp 1 | all spd | 3/3 | 31.0 [30.0–32.0] | 1.94x | 5 (5) |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| 9 (9) | 0.000100 (0.0000960) ≠ |"), std::string::npos) << md;
  EXPECT_NE(md.find("Counts that differ from the formula: mpi r2 t1 tp2 (all tp)."), std::string::npos) << md;
  EXPECT_NE(md.find("| -0.0500 [-0.1000 to +0.1000] |"), std::string::npos) << md;
  EXPECT_NE(md.find("| mpi r2 t1 tp2 (all tp) | all tp | 1 | 2.0000 | identical |"), std::string::npos) << md;
  EXPECT_NE(md.find("| mpi r1 t1 | standard | 3 | 2.1000 [2.0000–2.2000] | (reference) |"), std::string::npos) << md;
  // The layout shows in runs.md when a run is tensor-parallel.
  EXPECT_NE(report("runs.md").find("| p1 | mpi | 2 | 1 | tp2 (all spd) |"), std::string::npos) << report("runs.md");
}

}  // namespace
}  // namespace gpt2::harness
