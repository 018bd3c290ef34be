// Kernel experiments: parsing and running the benchmark programs (see kernels_experiment.h).
#include "runner/kernels_experiment.h"

#include <fmt/format.h>
#include <unistd.h>

#include <set>
#include <stdexcept>

#include "runner/job_loop.h"
#include "runner/process.h"
#include "runner/yaml_reader.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopKeys = {"kind",     "name",      "description", "repetitions",
                                           "min_time", "timeout_s", "unset_env",   "benchmarks"};
const std::vector<std::string> kProgramKeys = {"program", "args", "filter", "ranks"};

std::string program_id(const KernelsExperiment& ex, const KernelProgram& p, const std::string& build_id) {
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}", p.program, p.filter, p.ranks, ex.repetitions, ex.min_time, build_id);
  for (const std::string& a : p.args) key += "|" + a;
  for (const std::string& e : ex.unset_env) key += "|-" + e;
  return fmt::format("{}-{}", p.program, id_hash(key));
}

// Whether `p` can run here, and why not.
std::string unavailable_reason(const KernelProgram& p, const fs::path& program) {
  if (access(program.c_str(), X_OK) != 0) {
    return p.ranks > 1 ? fmt::format("not built: {} needs MPI (MPICH) and Google Benchmark at configure time", p.program)
                       : fmt::format("not built: {} needs Google Benchmark at configure time", p.program);
  }
  if (p.ranks > 1 && find_on_path("mpiexec").empty()) return "mpiexec not found on PATH";
  return "";
}

Status run_program(const KernelsExperiment& ex, const KernelProgram& p, const fs::path& program, const fs::path& dir) {
  std::vector<std::string> argv;
  if (p.ranks > 1) argv = {"mpiexec", "-n", std::to_string(p.ranks)};
  const std::vector<std::string> cmd = benchmark_command(ex, p, program, dir / "benchmark.json");
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  LaunchOptions opt;
  opt.timeout_s = ex.timeout_s;
  opt.unset_env = ex.unset_env;
  const int rc = launch(argv, dir / "log.txt", opt);
  Status st = status_of_exit(rc, dir / "log.txt", ex.timeout_s);
  if (st.status == "ok" && !fs::exists(dir / "benchmark.json")) st = Status{"failed", "the program wrote no benchmark.json", 0, ""};
  return st;
}

}  // namespace

KernelsExperiment load_kernels_experiment(const fs::path& file, const std::string& build_id) {
  const ExperimentFile f = open_experiment(file, "kernels", kTopKeys, "a kernels experiment", "'kind' and 'benchmarks'");
  const YAML::Node& root = f.root;
  const Reader& rd = f.rd;
  KernelsExperiment ex;
  static_cast<ExperimentInfo&>(ex) = f.info;
  if (root["repetitions"]) ex.repetitions = rd.integer(root["repetitions"], "repetitions", 1);
  if (root["min_time"]) ex.min_time = rd.seconds(root["min_time"], "min_time", true);
  if (root["timeout_s"]) ex.timeout_s = rd.seconds(root["timeout_s"], "timeout_s");
  if (root["unset_env"]) ex.unset_env = rd.strings(root["unset_env"], "unset_env");
  const YAML::Node list = root["benchmarks"];
  if (!list || !list.IsSequence() || list.size() == 0) {
    throw std::invalid_argument(fmt::format("{}: 'benchmarks' must be a non-empty list of programs", file.string()));
  }
  std::set<std::string> ids;
  for (const auto& b : list) {
    if (!b.IsMap()) rd.fail(b, "benchmarks: each entry is a mapping with at least 'program'");
    rd.known_keys(b, kProgramKeys, "a benchmark program");
    if (!b["program"]) rd.fail(b, "a benchmark program needs 'program' (e.g. kernel_bench)");
    KernelProgram p;
    p.program = rd.scalar(b["program"], "program");
    if (!is_plain_name(p.program)) {
      rd.fail(b["program"], fmt::format("program: '{}' must be a program name in the build's bench/ folder", p.program));
    }
    if (b["args"]) p.args = rd.strings(b["args"], "args");
    for (const std::string& a : p.args) {
      if (a.rfind("--benchmark_out", 0) == 0 || a.rfind("--benchmark_repetitions", 0) == 0) {
        rd.fail(b["args"], fmt::format("args: '{}' is set by the harness (use repetitions / min_time)", a));
      }
    }
    if (b["filter"]) p.filter = rd.scalar(b["filter"], "filter");
    if (b["ranks"]) p.ranks = rd.integer(b["ranks"], "ranks", 1);
    p.id = program_id(ex, p, build_id);
    if (!ids.insert(p.id).second) rd.fail(b, fmt::format("this entry repeats an earlier one ({})", p.id));
    ex.programs.push_back(std::move(p));
  }
  return ex;
}

std::vector<std::string> benchmark_command(const KernelsExperiment& ex, const KernelProgram& p, const fs::path& program,
                                           const fs::path& json) {
  std::vector<std::string> cmd = {program.string()};
  cmd.insert(cmd.end(), p.args.begin(), p.args.end());
  if (!p.filter.empty()) cmd.push_back("--benchmark_filter=" + p.filter);
  cmd.push_back(fmt::format("--benchmark_repetitions={}", ex.repetitions));
  cmd.push_back(fmt::format("--benchmark_min_time={}", ex.min_time));
  cmd.push_back("--benchmark_report_aggregates_only=true");
  cmd.push_back("--benchmark_out_format=json");
  cmd.push_back("--benchmark_out=" + json.string());
  return cmd;
}

std::vector<Job> kernels_jobs(const KernelsExperiment& ex, const fs::path& bench_dir) {
  std::vector<Job> jobs;
  for (const KernelProgram& p : ex.programs) {
    const fs::path program = bench_dir / p.program;
    jobs.push_back(Job{p.id, p.program, fmt::format("timeout {:.0f} s", ex.timeout_s), unavailable_reason(p, program),
                       nullptr, [&ex, &p, program](const fs::path& dir) { return run_program(ex, p, program, dir); }});
  }
  return jobs;
}

}  // namespace gpt2::harness
