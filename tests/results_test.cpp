// The committed results (results/<experiment>/) still read: every run
// directory that a runs.csv lists gives, through the harness's one reader of
// the metrics stream (util/records.h, via the stage runner's run_row), the
// numbers and provenance of its committed runs.csv row and the losses of its
// committed loss.csv rows. Those files were written by earlier versions of
// the trainer (a format-string writer) and of the harness (which copied the
// stream's number text), so this pins both schemas against history.
// Numbers compare exactly: both sides are the same decimal text read as a
// double.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runner/job_loop.h"
#include "runner/stage_runner.h"
#include "records/tables.h"

namespace gpt2::harness {
namespace {

namespace fs = std::filesystem;

const fs::path kResults = fs::path(GPT2_TEST_DATA).parent_path().parent_path() / "results";

TEST(CommittedResults, RunDirectoriesGiveTheirRunsAndLossRows) {
  int experiments = 0, runs_checked = 0, losses_checked = 0;
  for (const auto& e : fs::directory_iterator(kResults)) {
    const fs::path runs_csv = e.path() / "runs.csv";
    if (!fs::exists(runs_csv)) continue;  // another kind of experiment
    ++experiments;
    // (run, epoch) -> loss and validation loss
    std::map<std::pair<std::string, int64_t>, std::pair<double, std::optional<double>>> committed_loss;
    for (const LossRow& l : read_loss_csv(e.path() / "loss.csv")) committed_loss[{l.run_id, l.epoch}] = {*l.loss, l.val_loss};
    for (const RunRow& want : read_runs_csv(runs_csv)) {
      const fs::path dir = e.path() / want.run_id;
      if (!fs::exists(dir)) continue;  // not every run directory is committed
      SCOPED_TRACE(dir.string());
      const std::optional<Status> st = read_status(dir);
      ASSERT_TRUE(st.has_value());
      EXPECT_EQ(st->status, want.status);
      EXPECT_EQ(st->reason, want.reason);
      std::vector<LossRow> loss;
      const RunRow got = run_row(want.experiment, spec_of_row(want), *st, dir, loss);
      if (want.status != "ok") continue;  // provenance of a run that did not complete is the reader's machine
      ++runs_checked;
      // Every counter; a column an older file lacks reads as no value, and is not compared.
      for (const CounterSpec& c : run_counters()) {
        if (!c.since_start && !want.get(c.name)) continue;
        EXPECT_EQ(got.get(c.name), want.get(c.name)) << c.name;
      }
      for (auto [g, w] : {std::pair(got.git_commit, want.git_commit), {got.git_dirty, want.git_dirty},
                          {got.build_type, want.build_type}, {got.compiler, want.compiler}, {got.cpu, want.cpu},
                          {got.cores, want.cores}, {got.blas_core, want.blas_core}, {got.host, want.host},
                          {got.date, want.date}}) {
        EXPECT_EQ(g, w);
      }
      if (!want.backend.empty()) {
        EXPECT_EQ(got.backend, want.backend);
      }
      EXPECT_FALSE(loss.empty());
      for (const LossRow& l : loss) {
        const auto it = committed_loss.find({l.run_id, l.epoch});
        ASSERT_NE(it, committed_loss.end()) << "epoch " << l.epoch;
        EXPECT_EQ(*l.loss, it->second.first) << "epoch " << l.epoch;
        EXPECT_EQ(l.val_loss, it->second.second) << "epoch " << l.epoch;
        ++losses_checked;
      }
    }
  }
  std::printf("%d experiments, %d completed runs, %d losses checked\n", experiments, runs_checked, losses_checked);
  EXPECT_GE(experiments, 4);
  EXPECT_GE(runs_checked, 10);
  EXPECT_GE(losses_checked, 500);
}

}  // namespace
}  // namespace gpt2::harness
