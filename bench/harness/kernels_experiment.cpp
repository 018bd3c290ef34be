#include "kernels_experiment.h"

#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>

#include "app/cli.h"
#include "csv.h"
#include "util/files.h"
#include "util/hash.h"
#include "runner.h"
#include "yaml_reader.h"

namespace gpt2::harness {

namespace {

const std::vector<std::string> kTopKeys = {"kind",     "name",      "description", "repetitions",
                                           "min_time", "timeout_s", "unset_env",   "benchmarks"};
const std::vector<std::string> kProgramKeys = {"program", "args", "filter", "ranks"};

std::string program_id(const KernelsExperiment& ex, const KernelProgram& p, const std::string& build_id) {
  std::string key = fmt::format("{}|{}|{}|{}|{}|{}", p.program, p.filter, p.ranks, ex.repetitions, ex.min_time, build_id);
  for (const std::string& a : p.args) key += "|" + a;
  for (const std::string& e : ex.unset_env) key += "|-" + e;
  return fmt::format("{}-{:010x}", p.program, fnv1a64(key.data(), key.size()) & 0xffffffffffull);
}

YAML::Node load_file(const fs::path& file) {
  try {
    return YAML::LoadFile(file.string());
  } catch (const YAML::BadFile&) {
    throw std::invalid_argument(fmt::format("{}: cannot read the experiment file", file.string()));
  } catch (const YAML::ParserException& e) {
    throw std::invalid_argument(
        fmt::format("{}:{}:{}: YAML syntax error: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg));
  }
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

// The last non-empty line of a log: what a program that cannot run here
// (e.g. "kernel_bench_cuda: no CUDA device (...)") said last.
std::string last_line_of(const fs::path& log) {
  std::ifstream f(log);
  std::string last;
  for (std::string l; std::getline(f, l);) {
    if (!l.empty()) last = l;
  }
  return last;
}

Status run_program(const KernelsExperiment& ex, const KernelProgram& p, const fs::path& program, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string why_not = unavailable_reason(p, program);
  if (!why_not.empty()) return Status{"skipped", why_not, 0, ""};
  std::vector<std::string> argv;
  if (p.ranks > 1) argv = {"mpiexec", "-n", std::to_string(p.ranks)};
  const std::vector<std::string> cmd = benchmark_command(ex, p, program, dir / "benchmark.json");
  argv.insert(argv.end(), cmd.begin(), cmd.end());
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = launch(argv, dir / "log.txt", ex.timeout_s);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc == -1) return Status{"failed", fmt::format("timed out after {:.0f} s (timeout_s)", ex.timeout_s), secs, ""};
  if (rc == kExitUnavailable) {  // this machine lacks what it needs (a GPU): as the stages runner does
    const std::string why = last_line_of(dir / "log.txt");
    return Status{"skipped", why.empty() ? "the program cannot run on this machine (exit status 3)" : why, secs, ""};
  }
  if (rc != 0) {
    const std::string why = error_from_log(dir / "log.txt");
    return Status{"failed", why.empty() ? fmt::format("exit status {} (see log.txt)", rc) : why, secs, ""};
  }
  if (!fs::exists(dir / "benchmark.json")) return Status{"failed", "the program wrote no benchmark.json", secs, ""};
  return Status{"ok", "", secs, ""};
}

}  // namespace

bool is_kernels_experiment(const fs::path& file) {
  const YAML::Node root = load_file(file);
  if (!root.IsMap() || !root["kind"]) return false;
  const Reader rd(file);
  const std::string kind = rd.scalar(root["kind"], "kind");
  if (kind == "kernels") return true;
  if (kind == "stages") return false;
  rd.fail(root["kind"], fmt::format("kind: unknown kind '{}' (expected stages or kernels)", kind));
}

KernelsExperiment load_kernels_experiment(const fs::path& file, const std::string& build_id) {
  const YAML::Node root = load_file(file);
  const Reader rd(file);
  if (!root.IsMap()) throw std::invalid_argument(fmt::format("{}: expected a mapping with 'kind' and 'benchmarks'", file.string()));
  rd.known_keys(root, kTopKeys, "a kernels experiment");
  KernelsExperiment ex;
  ex.file = file;
  ex.name = rd.experiment_name(root);
  if (root["description"]) ex.description = rd.scalar(root["description"], "description");
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
    if (p.program.empty() || p.program.find('/') != std::string::npos) {
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

int run_kernels_experiment(const KernelsExperiment& ex, const fs::path& results_dir, const fs::path& bench_dir,
                           bool force) {
  fs::create_directories(results_dir);
  for (const std::string& v : ex.unset_env) unsetenv(v.c_str());  // for the programs we start
  int failed = 0, index = 0;
  const size_t total = ex.programs.size();
  for (const KernelProgram& p : ex.programs) {
    ++index;
    const fs::path dir = results_dir / p.id;
    const std::optional<Status> prev = read_status(dir);
    if (prev && prev->status == "ok" && !force) {
      fmt::print(stderr, "[{}/{}] {}: done earlier, reused\n", index, total, p.id);
      continue;
    }
    fmt::print(stderr, "[{}/{}] {}: running (timeout {:.0f} s)...\n", index, total, p.id, ex.timeout_s);
    const Status st = run_program(ex, p, bench_dir / p.program, attempt_dir(dir));
    if (!commit_attempt(dir, st, prev)) {
      fmt::print(stderr, "[{}/{}] {}: this attempt {} ({}); the earlier completed run is kept\n", index, total, p.id,
                 st.status, st.reason);
    } else {
      fmt::print(stderr, "[{}/{}] {}: {}{} ({:.1f} s)\n", index, total, p.id, st.status,
                 st.reason.empty() ? "" : ": " + st.reason, st.seconds);
    }
    if (st.status == "failed") ++failed;
  }
  std::string table = csv_row({"program", "id", "status", "reason", "seconds", "date"});
  for (const KernelProgram& p : ex.programs) {
    const std::optional<Status> st = read_status(results_dir / p.id);
    table += csv_row({p.program, p.id, st ? st->status : "not run", st ? st->reason : "",
                      st ? fmt::format("{:.1f}", st->seconds) : "", st ? st->date : ""});
  }
  write_file_atomically(results_dir / kKernelsIndex, table);
  return failed;
}

}  // namespace gpt2::harness
