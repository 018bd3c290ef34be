// harness: runs YAML experiments over the stage programs and turns their
// metrics streams into tidy CSV results and Markdown reports; experiments of
// `kind: kernels` run the kernel microbenchmarks (bench/kernels) instead.
//   harness run EXPERIMENT.yaml [--force] [--results DIR] [--reports DIR] [--build DIR]
//   harness report EXPERIMENT   [--results DIR] [--reports DIR]
//   harness list                [--experiments DIR] [--build DIR]
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiment.h"
#include "kernels_experiment.h"
#include "kernels_report.h"
#include "util/provenance.h"
#include "report.h"
#include "runner.h"

namespace fs = std::filesystem;
using namespace gpt2::harness;

namespace {

const char* kHelp = R"(harness: run experiments over the GPT-2 stages and report them.

usage:
  harness run EXPERIMENT.yaml [--force] [--results DIR] [--reports DIR] [--build DIR]
      Runs every run of the experiment (reusing completed ones unless --force),
      writes DIR/<experiment>/<run-id>/ for each, runs.csv and loss.csv, then
      the reports. Exit status: 0 all runs ok or skipped, 1 a run failed,
      2 bad input (nothing is run).
  harness report EXPERIMENT [--results DIR] [--reports DIR]
      Rebuilds the reports from stored results (no run). EXPERIMENT is a file
      or a name in experiments/.
  harness list [--experiments DIR] [--build DIR]
      The experiments, and which stages this machine can run (and why not).
  harness [COMMAND] --help

An experiment with `kind: kernels` (e.g. experiments/kernels.yaml) runs the
kernel microbenchmark programs of <build>/bench instead of the stages, into
DIR/<experiment>/<program>-<hash>/benchmark.json, and reports them as
<reports>/<experiment>/kernels.md with a roofline chart.

defaults: --results <repo>/results, --reports <repo>/reports, --experiments
<repo>/experiments, --build: the build this harness belongs to; <repo> is the
parent of the experiment file's directory (or of this build).
)";

// Up to the first ". " (a period inside a name such as backend.h does not end it).
std::string first_sentence(const std::string& text) {
  const size_t end = text.find(". ");
  return end == std::string::npos ? text : text.substr(0, end + 1);
}

fs::path self_dir() { return fs::canonical("/proc/self/exe").parent_path(); }
// build/bench/harness -> build; the repository root is recorded at configure time.
fs::path default_build() { return self_dir().parent_path(); }

struct Args {
  std::string command, target;
  std::map<std::string, std::string> opts;
  bool force = false;
};

Args parse(int argc, char** argv) {
  Args a;
  std::vector<std::string> v(argv + 1, argv + argc);
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string& x = v[i];
    if (x == "--help" || x == "-h") {
      a.command = "help";
      return a;
    }
    if (x == "--force") {
      a.force = true;
    } else if (x.rfind("--", 0) == 0) {
      const std::string k = x.substr(2);
      if (k != "results" && k != "reports" && k != "build" && k != "experiments") {
        throw std::invalid_argument(fmt::format("unknown option '{}' (see harness --help)", x));
      }
      if (i + 1 >= v.size()) throw std::invalid_argument(fmt::format("{}: missing value", x));
      a.opts[k] = v[++i];
    } else if (a.command.empty()) {
      a.command = x;
    } else if (a.target.empty()) {
      a.target = x;
    } else {
      throw std::invalid_argument(fmt::format("unexpected argument '{}'", x));
    }
  }
  return a;
}

fs::path opt_path(const Args& a, const std::string& k, const fs::path& dflt) {
  auto it = a.opts.find(k);
  return it == a.opts.end() ? dflt : fs::absolute(it->second);
}

// An experiment given by file or by name (experiments/<name>.yaml).
fs::path experiment_file(const std::string& target, const fs::path& experiments_dir) {
  if (fs::is_regular_file(target)) return fs::absolute(target);
  const fs::path named = experiments_dir / (target + ".yaml");
  if (fs::is_regular_file(named)) return named;
  throw std::invalid_argument(fmt::format("no experiment '{}' (neither a file nor {})", target, named.string()));
}

ReportSpec report_spec(const Experiment& ex, const fs::path& results, const fs::path& reports, const fs::path& repo) {
  ReportSpec s;
  s.experiment = ex.name;
  s.description = ex.description;
  s.kinds = ex.reports;
  s.results_dir = results / ex.name;
  s.reports_dir = reports / ex.name;
  s.paper_dir = repo / "data" / "paper";
  std::error_code ec;
  const fs::path rel = fs::relative(ex.file, repo, ec);
  s.reproduce_command = fmt::format("build/bench/harness run {}", ec ? ex.file.string() : rel.string());
  return s;
}

// `harness run|report` of a kernels experiment.
int run_kernels(const Args& a, const fs::path& file, const fs::path& build, const std::string& build_id,
                const fs::path& results, const fs::path& reports, const fs::path& repo) {
  const KernelsExperiment ex = load_kernels_experiment(file, build_id);
  int failed = 0;
  if (a.command == "run") {
    failed = run_kernels_experiment(ex, results / ex.name, build / "bench", a.force);
  } else if (!fs::exists(results / ex.name / kKernelsIndex)) {
    throw std::invalid_argument(fmt::format("no results for '{}' in {} (run it first)", ex.name, results.string()));
  }
  std::error_code ec;
  const fs::path rel = fs::relative(ex.file, repo, ec);
  const std::string cmd = fmt::format("build/bench/harness run {}", ec ? ex.file.string() : rel.string());
  for (const fs::path& f : write_kernels_report(ex, results / ex.name, reports / ex.name, cmd)) {
    if (f.extension() == ".md") fmt::print("report: {}\n", f.string());
  }
  fmt::print(stderr, "results: {}\n", (results / ex.name).string());
  return failed > 0 ? 1 : 0;
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.command.empty() || a.command == "help") {
    fmt::print("{}", kHelp);
    return a.command.empty() ? 2 : 0;
  }
  const fs::path build = opt_path(a, "build", default_build());
  const fs::path stages = build / "stages";
  const std::string build_id = gpt2::build_info().git_commit;
  if (a.command == "list") {
    const fs::path exps = opt_path(a, "experiments", fs::path(kRepoRoot) / "experiments");
    fmt::print("experiments in {}:\n", exps.string());
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(exps)) {
      if (e.path().extension() == ".yaml") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      try {
        if (is_kernels_experiment(f)) {
          const KernelsExperiment kx = load_kernels_experiment(f, build_id);
          const std::string d = first_sentence(kx.description);
          fmt::print("  {:<10} {:>3} benchmark programs  {}\n", kx.name, kx.programs.size(), d);
          continue;
        }
        const Experiment ex = load_experiment(f, build_id);
        if (ex.runs.empty()) continue;
        const std::string d = first_sentence(ex.description);
        fmt::print("  {:<10} {:>3} runs  {}\n", ex.name, ex.runs.size(), d);
      } catch (const std::invalid_argument& e) {
        // Stage configurations (no 'runs') live here too; list only experiments.
        if (std::string(e.what()).find("unknown key") == std::string::npos &&
            std::string(e.what()).find("'runs'") == std::string::npos) {
          fmt::print("  {:<10} invalid: {}\n", f.stem().string(), e.what());
        }
      }
    }
    fmt::print("stages in {}:\n", stages.string());
    for (const std::string& s : kStages) {
      const Availability av = stage_availability(s, stages);
      fmt::print("  {:<9} {}\n", s, av.available ? "available" : "unavailable: " + av.reason);
    }
    return 0;
  }
  if (a.command != "run" && a.command != "report") {
    throw std::invalid_argument(fmt::format("unknown command '{}' (expected run, report or list)", a.command));
  }
  if (a.target.empty()) throw std::invalid_argument(fmt::format("{}: which experiment? (see harness --help)", a.command));
  const fs::path file = experiment_file(a.target, fs::path(kRepoRoot) / "experiments");
  const fs::path repo = file.parent_path().parent_path();
  const fs::path results = opt_path(a, "results", repo / "results");
  const fs::path reports = opt_path(a, "reports", repo / "reports");
  if (is_kernels_experiment(file)) return run_kernels(a, file, build, build_id, results, reports, repo);
  const Experiment ex = load_experiment(file, build_id);  // validates every run before any runs
  int failed = 0;
  if (a.command == "run") {
    failed = run_experiment(ex, RunnerOptions{results / ex.name, stages, a.force});
  } else if (!fs::exists(results / ex.name / "runs.csv")) {
    throw std::invalid_argument(fmt::format("no results for '{}' in {} (run it first)", ex.name, results.string()));
  }
  const auto files = write_reports(report_spec(ex, results, reports, repo));
  fmt::print(stderr, "results: {}\n", (results / ex.name).string());
  for (const fs::path& f : files) {
    if (f.extension() == ".md") fmt::print("report: {}\n", f.string());
  }
  return failed > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "harness: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "harness: error: {}\n", e.what());
    return 1;
  }
}
