// PyTorch peer experiments: parsing and the alternating rounds of each job
// (see peer_experiment.h).
#include "runner/peer_experiment.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "runner/process.h"
#include "runner/yaml_reader.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopKeys = {"kind",      "name",   "description", "preset",   "batch",
                                           "seq",       "threads", "busy_processes", "rounds", "steps",
                                           "warmup",    "timeout_s", "python",     "unset_env"};

// Processes that only spin, competing with the timed programs for the cores
// while the object lives. Each is a fork of the harness that loops without a
// system call; the destructor kills and reaps them, so a job that fails,
// times out or throws leaves none behind, and PR_SET_PDEATHSIG ends them if
// the harness itself is killed.
class BusyProcesses {
 public:
  BusyProcesses(int n, const fs::path& log) {
    const pid_t parent = getpid();
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid < 0) throw std::runtime_error(fmt::format("cannot start a busy process: {}", std::strerror(errno)));
      if (pid == 0) {
        signal(SIGINT, SIG_DFL);  // not the harness's handler, which would signal its program's group
        signal(SIGTERM, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(0);  // the harness died before prctl took effect
        for (;;) asm volatile("" ::: "memory");  // spins; the empty asm keeps the loop from being removed
      }
      pids_.push_back(pid);
    }
    if (n > 0) {
      std::ofstream(log, std::ios::app) << fmt::format("# {} busy process(es) running: pids {}\n", n,
                                                       fmt::join(pids_, " "));
    }
  }
  ~BusyProcesses() {
    for (pid_t p : pids_) kill(p, SIGKILL);
    for (pid_t p : pids_) {
      while (waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
  BusyProcesses(const BusyProcesses&) = delete;
  BusyProcesses& operator=(const BusyProcesses&) = delete;

 private:
  std::vector<pid_t> pids_;
};

Status run_peer_job(const PeerExperiment& ex, int threads, int busy, const fs::path& train_step,
                    const fs::path& script, const fs::path& dir) {
  JobCommands cmd(dir, ex.timeout_s, ex.unset_env);
  // PyTorch first: without it there is nothing to compare against.
  if (auto st = cmd.run({ex.python, "-c", "import torch"})) {
    const std::string why = last_line_of(cmd.log());
    return Status{"skipped", fmt::format("PyTorch not available: {} cannot import torch{}", ex.python,
                                         why.empty() ? "" : " (" + why + ")"),
                  0, ""};
  }
  const std::vector<std::string> model = {"--preset", ex.preset, "--batch", std::to_string(ex.batch), "--seq",
                                          std::to_string(ex.seq)};
  const fs::path init = dir / "init.bin";
  std::vector<std::string> argv = {train_step.string()};
  argv.insert(argv.end(), model.begin(), model.end());
  argv.insert(argv.end(), {"--save-init", init.string()});
  if (auto st = cmd.run(argv)) return *st;
  const std::vector<std::string> timing = {"--steps", std::to_string(ex.steps), "--warmup", std::to_string(ex.warmup)};
  const BusyProcesses load(busy, cmd.log());  // for every round, of both sides
  for (int k = 0; k < ex.rounds; ++k) {
    const fs::path ours = dir / fmt::format("ours-{}.json", k), peer = dir / fmt::format("peer-{}.json", k);
    argv = {train_step.string(), "--threads", std::to_string(threads), "--json", ours.string()};
    argv.insert(argv.end(), model.begin(), model.end());
    argv.insert(argv.end(), timing.begin(), timing.end());
    if (auto st = cmd.run(argv)) return *st;
    // The peer's rows and sequence length are ours as train_step resolved them (seq 0: the block size).
    const std::optional<Json> o = read_json_file(ours);
    if (!o) return Status{"failed", fmt::format("train_step wrote no {}", ours.filename().string()), 0, ""};
    argv = {ex.python, script.string(), "--init", init.string(), "--threads", std::to_string(threads), "--batch",
            std::to_string(o->at("B").get<int>()), "--seq", std::to_string(o->at("T").get<int>()), "--json",
            peer.string()};
    argv.insert(argv.end(), timing.begin(), timing.end());
    const std::string n = std::to_string(threads);
    if (auto st = cmd.run(argv, {{"OPENBLAS_NUM_THREADS", n}, {"OMP_NUM_THREADS", n}})) return *st;
  }
  fs::remove(init);  // seed 1's weights, reproducible: not kept with the results
  return Status{"ok", "", 0, ""};
}

}  // namespace

PeerExperiment load_peer_experiment(const fs::path& file) {
  const ExperimentFile f = open_experiment(file, "peer", kTopKeys, "a peer experiment", "'kind: peer'");
  const YAML::Node& root = f.root;
  const Reader& rd = f.rd;
  PeerExperiment ex;
  static_cast<ExperimentInfo&>(ex) = f.info;
  if (root["preset"]) ex.preset = rd.scalar(root["preset"], "preset");
  if (root["batch"]) ex.batch = rd.integer(root["batch"], "batch", 1);
  if (root["seq"]) ex.seq = rd.integer(root["seq"], "seq", 0);
  if (root["threads"]) ex.threads = rd.axis(root["threads"], "threads", 1);
  if (root["busy_processes"]) {
    ex.busy_processes = rd.axis(root["busy_processes"], "busy_processes", 0);
    std::vector<int> sorted = ex.busy_processes;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      rd.fail(root["busy_processes"], "busy_processes: a number appears twice");
    }
  }
  if (root["rounds"]) ex.rounds = rd.integer(root["rounds"], "rounds", 1);
  if (root["steps"]) ex.steps = rd.integer(root["steps"], "steps", 1);
  if (root["warmup"]) ex.warmup = rd.integer(root["warmup"], "warmup", 0);
  if (root["timeout_s"]) ex.timeout_s = rd.seconds(root["timeout_s"], "timeout_s");
  if (root["python"]) ex.python = rd.scalar(root["python"], "python");
  if (root["unset_env"]) ex.unset_env = rd.strings(root["unset_env"], "unset_env");
  return ex;
}

std::vector<Job> peer_jobs(const PeerExperiment& ex, const std::string& build_id, const fs::path& bench_dir,
                           const fs::path& peer_script) {
  const fs::path train_step = bench_dir / "train_step";
  std::string unavailable;
  if (access(train_step.c_str(), X_OK) != 0) unavailable = fmt::format("not built: no program {}", train_step.string());
  std::vector<Job> jobs;
  for (int t : ex.threads) {
    for (int b : ex.busy_processes) {
      Json settings{{"threads", t},   {"preset", ex.preset}, {"batch", ex.batch},   {"seq", ex.seq},
                    {"rounds", ex.rounds}, {"steps", ex.steps}, {"warmup", ex.warmup}, {"python", ex.python}};
      // Only under load: the settings (and so the ids) of jobs without it stay as they were.
      if (b > 0) settings["busy_processes"] = b;
      std::string key = json_text(settings) + "|" + build_id;
      for (const std::string& e : ex.unset_env) key += "|-" + e;
      const std::string label = b > 0 ? fmt::format("t{}-busy{}", t, b) : fmt::format("t{}", t);
      jobs.push_back(Job{fmt::format("peer-{}-{}", label, id_hash(key)), label,
                         fmt::format("{} rounds of {} steps per side{}, timeout {:.0f} s", ex.rounds, ex.steps,
                                     b > 0 ? fmt::format(" against {} busy process(es)", b) : "", ex.timeout_s),
                         unavailable, settings, [&ex, t, b, train_step, peer_script](const fs::path& dir) {
                           return run_peer_job(ex, t, b, train_step, peer_script, dir);
                         }});
    }
  }
  return jobs;
}

}  // namespace gpt2::harness
