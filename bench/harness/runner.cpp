#include "runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "app/cli.h"
#include "csv.h"
#include "util/files.h"
#include "util/json.h"
#include "util/provenance.h"

namespace gpt2::harness {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  for (std::string dir; std::getline(ss, dir, ':');) {
    const fs::path p = fs::path(dir) / name;
    if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

std::optional<Status> read_status(const fs::path& dir) {
  const fs::path p = dir / "status.json";
  if (!fs::exists(p)) return std::nullopt;
  try {
    YAML::Node n = YAML::LoadFile(p.string());
    return Status{n["status"].as<std::string>(), n["reason"].as<std::string>(""), n["seconds"].as<double>(0),
                  n["date"].as<std::string>("")};
  } catch (const std::exception&) {
    return std::nullopt;  // unreadable: the run is not done
  }
}

void write_status(const fs::path& dir, const Status& s) {
  write_file_atomically(dir / "status.json",
                        Json{{"status", s.status}, {"reason", s.reason}, {"seconds", round_fixed(s.seconds, 3)}, {"date", s.date}}.dump() +
                            "\n");
}

std::string error_from_log(const fs::path& log) {
  std::ifstream f(log);
  std::string last;
  for (std::string l; std::getline(f, l);) {
    if (l.find("error:") != std::string::npos) last = l;
  }
  return last;
}

namespace {

// The process group of the run in flight, for the signal handler: a harness
// interrupted by Ctrl-C or SIGTERM ends its run (mpiexec and every rank) too.
volatile sig_atomic_t g_child_group = 0;

extern "C" void forward_and_exit(int sig) {
  if (g_child_group > 0) kill(-g_child_group, SIGTERM);
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

int launch(const std::vector<std::string>& argv, const fs::path& log, double timeout_s) {
  signal(SIGINT, forward_and_exit);
  signal(SIGTERM, forward_and_exit);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot write the run's log", log.string()));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the harness killed outright (SIGKILL): end the run too
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "harness: error: cannot start %s\n", args[0]);
    std::_Exit(127);
  }
  ::close(fd);
  setpgid(pid, pid);
  g_child_group = pid;
  const auto t0 = Clock::now();
  int status = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s) {
      kill(-pid, SIGTERM);
      for (int i = 0; i < 30 && waitpid(pid, &status, WNOHANG) == 0; ++i) {  // up to 3 s to end cleanly
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      g_child_group = 0;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  g_child_group = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

namespace {

// Runs into `dir` (a fresh attempt directory).
Status run_one(const Experiment& ex, const RunSpec& r, const fs::path& dir, const Availability& av) {
  fs::remove_all(dir);  // nothing stale from an interrupted attempt
  fs::create_directories(dir);
  if (!av.available) return Status{"skipped", av.reason, 0, ""};
  RunConfig cfg = r.config;
  cfg.train.save_checkpoint = ex.checkpoints;
  write_file_atomically(dir / "run.yaml", to_yaml(cfg));
  std::vector<std::string> argv;
  if (r.stage == "mpi" || r.stage == "mpi_cuda") {
    argv = {"mpiexec", "-n", std::to_string(r.ranks)};
    if (!r.hostfile.empty()) argv.insert(argv.end(), {"-f", r.hostfile});
  }
  argv.insert(argv.end(), {av.program.string(), "train", "--config", (dir / "run.yaml").string(), "--out",
                           dir.string(), "--overwrite"});
  if (!r.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", r.hostfile});
  const auto t0 = Clock::now();
  const int rc = launch(argv, dir / "log.txt", ex.timeout_s);
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (rc == 0 && fs::exists(dir / "metrics.jsonl")) return Status{"ok", "", secs, ""};
  if (rc == -1) return Status{"failed", fmt::format("timed out after {:.0f} s (timeout_s)", ex.timeout_s), secs, ""};
  std::string why = error_from_log(dir / "log.txt");
  if (why.empty()) why = rc == 0 ? "the program exited 0 but wrote no metrics stream" : fmt::format("exit status {}", rc);
  return Status{rc == kExitUnavailable ? "skipped" : "failed", why, secs, ""};
}

}  // namespace

Availability stage_availability(const std::string& stage, const fs::path& stages_dir) {
  Availability a;
  a.program = stages_dir / stage;
  if (access(a.program.c_str(), X_OK) != 0) {
    if (stage == "mpi") {
      a.reason = "not built: MPI (MPICH) was not found when the build was configured";
    } else if (stage == "cuda" || stage == "mpi_cuda") {
      a.reason = "not built: this build has no CUDA stages";
    } else {
      a.reason = fmt::format("not built: no program {}", a.program.string());
    }
    return a;
  }
  if ((stage == "mpi" || stage == "mpi_cuda") && find_on_path("mpiexec").empty()) {
    a.reason = "mpiexec not found on PATH";
    return a;
  }
  a.available = true;
  return a;
}

void write_results_csv(const Experiment& ex, const fs::path& results_dir) {
  const MachineInfo here = machine_info();
  const BuildInfo build = build_info();
  std::string runs = csv_row({"experiment", "run_id", "stage", "ranks", "threads", "repetition", "seed", "status",
                              "reason", "training_s", "inference_s", "tokens_per_s", "final_loss", "steps", "comm_s",
                              "peak_rss_mb", "git_commit", "git_dirty", "build_type", "compiler", "cpu", "cores",
                              "blas_core", "backend", "host", "date"});
  std::string loss = csv_row({"experiment", "run_id", "stage", "ranks", "threads", "repetition", "epoch", "loss"});
  for (const RunSpec& r : ex.runs) {
    const fs::path dir = results_dir / r.id;
    const std::optional<Status> st = read_status(dir);
    if (!st) continue;  // not run yet
    std::vector<std::string> row = {ex.name, r.id, r.stage, std::to_string(r.ranks), std::to_string(r.threads),
                                    std::to_string(r.repetition), std::to_string(r.seed), st->status, st->reason};
    // Provenance: the run's own when it completed, else this machine's and
    // the time of the attempt.
    std::vector<std::string> prov = {build.git_commit, build.git_dirty ? "true" : "false", build.build_type,
                                     build.compiler, here.cpu_model, std::to_string(here.logical_cores),
                                     "", "", here.hostname, st->date};
    std::vector<std::string> nums(7);
    if (st->status == "ok") {
      std::ifstream f(dir / "metrics.jsonl");
      for (std::string l; std::getline(f, l);) {
        const YAML::Node n = YAML::Load(l);
        const std::string ev = n["event"].as<std::string>();
        if (ev == "step") {
          loss += csv_row({ex.name, r.id, r.stage, std::to_string(r.ranks), std::to_string(r.threads),
                           std::to_string(r.repetition), n["step"].as<std::string>(), n["loss"].as<std::string>()});
        } else if (ev == "summary") {
          nums = {n["train_s"].as<std::string>(), n["inference_s"].as<std::string>(),
                  n["tokens_per_s"].as<std::string>(), n["final_loss"].as<std::string>(),
                  n["steps"].as<std::string>(), n["comm_s"].as<std::string>("0"), n["peak_rss_mb"].as<std::string>()};
          const YAML::Node p = n["provenance"];
          prov = {p["git_commit"].as<std::string>(), p["git_dirty"].as<std::string>(), p["build_type"].as<std::string>(),
                  p["compiler"].as<std::string>(), p["cpu"].as<std::string>(), p["cores"].as<std::string>(),
                  p["blas_core"].as<std::string>(), p["backend"].as<std::string>(""), p["host"].as<std::string>(),
                  p["date"].as<std::string>()};
        }
      }
    }
    row.insert(row.end(), nums.begin(), nums.end());
    row.insert(row.end(), prov.begin(), prov.end());
    runs += csv_row(row);
  }
  write_file_atomically(results_dir / "runs.csv", runs);
  write_file_atomically(results_dir / "loss.csv", loss);
}

fs::path attempt_dir(const fs::path& dir) { return dir.string() + ".attempt"; }

bool commit_attempt(const fs::path& dir, Status st, const std::optional<Status>& prev) {
  const fs::path attempt = attempt_dir(dir);
  st.date = machine_info().date_utc;
  write_status(attempt, st);
  if (st.status != "ok" && prev && prev->status == "ok") {
    const fs::path kept = dir.string() + ".last-attempt";
    fs::remove_all(kept);
    fs::rename(attempt, kept);
    return false;
  }
  fs::remove_all(dir);
  fs::rename(attempt, dir);
  return true;
}

int run_experiment(const Experiment& ex, const RunnerOptions& opt) {
  fs::create_directories(opt.results_dir);
  int failed = 0, index = 0;
  for (const RunSpec& r : ex.runs) {
    ++index;
    const fs::path dir = opt.results_dir / r.id;
    const std::optional<Status> prev = read_status(dir);
    if (prev && prev->status == "ok" && !opt.force) {
      fmt::print(stderr, "[{}/{}] {}: done earlier, reused\n", index, ex.runs.size(), r.id);
      continue;
    }
    fmt::print(stderr, "[{}/{}] {}: running ({} steps, timeout {:.0f} s)...\n", index, ex.runs.size(), r.id,
               r.config.train.steps, ex.timeout_s);
    // The attempt runs beside the run's directory; a rerun (--force) that does
    // not complete keeps the earlier completed run.
    const Status st = run_one(ex, r, attempt_dir(dir), stage_availability(r.stage, opt.stages_dir));
    if (!commit_attempt(dir, st, prev)) {
      fmt::print(stderr, "[{}/{}] {}: this attempt {} ({}); the earlier completed run is kept, the attempt is in {}\n",
                 index, ex.runs.size(), r.id, st.status, st.reason, dir.string() + ".last-attempt");
      if (st.status == "failed") ++failed;
      continue;
    }
    write_results_csv(ex, opt.results_dir);  // after every run: an interruption loses nothing recorded
    if (st.status == "failed") ++failed;
    fmt::print(stderr, "[{}/{}] {}: {}{} ({:.1f} s)\n", index, ex.runs.size(), r.id, st.status,
               st.reason.empty() ? "" : ": " + st.reason, st.seconds);
  }
  write_results_csv(ex, opt.results_dir);
  return failed;
}

}  // namespace gpt2::harness
