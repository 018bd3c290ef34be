// MPI step experiments: parsing, expansion into jobs, and each job's runs of
// the mpi stage (see mpi_step_experiment.h).
#include "runner/mpi_step_experiment.h"

#include <fmt/format.h>

#include <stdexcept>

#include "runner/stage_runner.h"
#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kTopKeys = {"kind",   "name",   "description",  "base",     "config",   "ranks",
                                           "buckets", "rounds", "warmup_steps", "hostfile", "timeout_s", "unset_env"};

std::string bucket_text(double mb) { return fmt::format("{}", mb); }

}  // namespace

MpiStepExperiment load_mpi_step_experiment(const fs::path& file, ConfigResolver& resolver) {
  const ExperimentFile f = open_experiment(file, "mpi_step", kTopKeys, "an mpi_step experiment", "'kind: mpi_step'");
  const YAML::Node& root = f.root;
  const Reader& rd = f.rd;
  MpiStepExperiment ex;
  static_cast<ExperimentInfo&>(ex) = f.info;
  const StageBase base = read_stage_base(f);
  const std::vector<int> ranks = root["ranks"] ? rd.axis(root["ranks"], "ranks", 1) : std::vector<int>{1, 2};
  std::vector<double> buckets = {0};
  if (root["buckets"]) {
    buckets.clear();
    const YAML::Node list = root["buckets"];
    if (!list.IsSequence() || list.size() == 0) rd.fail(list, "buckets: expected a non-empty list of MiB, e.g. [0, 4]");
    for (const auto& b : list) buckets.push_back(rd.non_negative(b, "buckets"));
  }
  if (root["rounds"]) ex.rounds = rd.integer(root["rounds"], "rounds", 1);
  if (root["warmup_steps"]) ex.warmup_steps = rd.integer(root["warmup_steps"], "warmup_steps", 0);
  if (root["timeout_s"]) ex.timeout_s = rd.seconds(root["timeout_s"], "timeout_s");
  if (root["unset_env"]) ex.unset_env = rd.strings(root["unset_env"], "unset_env");
  if (root["hostfile"]) {
    ex.hostfile = rd.path(root["hostfile"], "hostfile").string();
    if (!fs::is_regular_file(ex.hostfile)) rd.fail(root["hostfile"], fmt::format("hostfile: no such file '{}'", ex.hostfile));
  }
  const YAML::Node where = root["config"] ? root["config"] : root["base"];
  for (int r : ranks) {
    // One rank has no gradient allreduce: bucketing would change nothing.
    for (double b : r == 1 ? std::vector<double>{0} : buckets) {
      std::vector<Override> overrides = base.overrides;
      overrides.push_back(Override{"train.grad_bucket_mb", bucket_text(b), root["buckets"]});
      // A benchmark's runs keep no checkpoint (44 MB each at the original size).
      overrides.push_back(Override{"train.save_checkpoint", "false", YAML::Node()});
      const ResolvedConfig& cfg = resolve_for_run(resolver, rd, base, overrides, where);
      const int64_t batch = cfg.integer("train.batch_size"), steps = cfg.integer("train.steps");
      if (batch % r != 0) {
        rd.fail(root["ranks"] ? root["ranks"] : where,
                fmt::format("ranks: train.batch_size {} is not divisible by {} ranks", batch, r));
      }
      const std::string corpus = cfg.text("data.corpus");
      if (!fs::is_regular_file(corpus)) rd.fail(where, fmt::format("data.corpus: no such file '{}'", corpus));
      if (steps <= ex.warmup_steps) {
        rd.fail(root["warmup_steps"] ? root["warmup_steps"] : where,
                fmt::format("warmup_steps: {} leaves no timed step of train.steps {}", ex.warmup_steps, steps));
      }
      ex.jobs.push_back(MpiStepJob{r, b, cfg.yaml, steps});
    }
  }
  return ex;
}

std::vector<Job> mpi_step_jobs(const MpiStepExperiment& ex, const std::string& build_id, const fs::path& stages_dir) {
  const Availability av = stage_availability("mpi", stages_dir);
  std::vector<Job> jobs;
  for (const MpiStepJob& j : ex.jobs) {
    const Json settings{{"ranks", j.ranks},
                        {"bucket_mb", j.bucket_mb},
                        {"rounds", ex.rounds},
                        {"warmup_steps", ex.warmup_steps},
                        {"hostfile", ex.hostfile}};
    std::string key = fmt::format("{}|{}|{}", json_text(settings), j.config, build_id);
    for (const std::string& e : ex.unset_env) key += "|-" + e;
    const std::string label = fmt::format("r{}-b{}", j.ranks, bucket_text(j.bucket_mb));
    jobs.push_back(Job{fmt::format("mpi-{}-{}", label, id_hash(key)), label,
                       fmt::format("{} x {} steps, timeout {:.0f} s", ex.rounds, j.steps, ex.timeout_s), av.reason,
                       settings, [&ex, &j, program = av.program](const fs::path& dir) {
                         write_file_atomically(dir / "run.yaml", j.config);
                         JobCommands cmd(dir, ex.timeout_s, ex.unset_env);
                         for (int k = 0; k < ex.rounds; ++k) {
                           const fs::path out = dir / fmt::format("round-{}", k);
                           if (auto st = cmd.run(stage_train_command("mpi", program, j.ranks, ex.hostfile,
                                                                     dir / "run.yaml", out))) {
                             return *st;
                           }
                           if (!fs::exists(out / "metrics.jsonl")) {
                             return Status{"failed", fmt::format("round {}: the stage wrote no metrics stream", k), 0, ""};
                           }
                         }
                         return Status{"ok", "", 0, ""};
                       }});
  }
  return jobs;
}

}  // namespace gpt2::harness
