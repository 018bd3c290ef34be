#include "train/run/checkpoint_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "train/formats/checkpoint.h"
#include "train/formats/checkpoint_store.h"
#include "train/formats/sharded_checkpoint.h"

namespace gpt2 {

namespace fs = std::filesystem;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class FileWriter final : public CheckpointWriter {
 public:
  FileWriter(CheckpointRecord record, int keep) : CheckpointWriter(std::move(record)), keep_(keep) {}
  std::string save(const std::string& out_dir, int64_t steps, const RunState& st, const std::string& run_id,
                   ProcessGrid& grid, uint64_t* hash) override {
    const auto t0 = std::chrono::steady_clock::now();
    std::string path = store_training_checkpoint(out_dir, steps, st, record_, keep_, run_id, grid, hash);
    last_wait_s_ = seconds_since(t0);
    return path;
  }
  bool hashes() const override { return true; }

 private:
  int keep_;
};

// What this rank writes: its part, the ranges of it it owns, and where the
// arrays are (in place, or copies: a snapshot, or a device's state).
struct RankWrite {
  RankPart part;
  RankArrays at;
  std::vector<float> copies[3];
};

// The ranges this rank writes: its moments' shard, or, where every
// data-parallel rank holds the same (ZeRO 0), an even share of its part.
RankWrite rank_write(const RunState& st, ProcessGrid& grid, bool snapshot) {
  const Gpt2& model = *st.model;
  RankWrite w;
  w.part = {model.tp().shape(), model.tp().rank, model.stage(), {}};
  w.part.ranges = owned_ranges(model.num_params(), grid.dp(), grid.dp_comm().rank(), st.homes.moments->replicated(),
                               st.homes.moments->held());
  const bool packed = st.homes.moments->packed();
  w.at = {st.homes.params->host_at(), {st.opt->m_data(), packed}, {st.opt->v_data(), packed}};
  if (!model.memory().is_host()) {  // a device's state: its host copies
    w.copies[0] = st.homes.params->gather(true);
    w.copies[1] = st.opt->m_to_host();
    w.copies[2] = st.opt->v_to_host();
    w.at = {{w.copies[0].data(), false}, {w.copies[1].data(), packed}, {w.copies[2].data(), packed}};
  }
  if (!snapshot) return w;
  // The snapshot: the ranges' floats of each array, packed one after another.
  size_t total = 0;
  std::vector<ShardRange> ranges;
  for (const ShardRange& r : w.part.ranges) {
    ranges.push_back({r.lo, r.hi, total});
    total += r.hi - r.lo;
  }
  std::vector<float> snap[3];
  for (int a = 0; a < 3; ++a) {
    snap[a].reserve(total);  // filled by the copies alone (no zeroing pass first)
    const StateAt& from = w.at[static_cast<StateArray>(a)];
    for (const ShardRange& r : w.part.ranges) {
      const float* p = from.at(r, r.lo);
      snap[a].insert(snap[a].end(), p, p + (r.hi - r.lo));
    }
  }
  RankWrite s;
  s.part = w.part;
  s.part.ranges = ranges;
  for (int a = 0; a < 3; ++a) s.copies[a] = std::move(snap[a]);
  s.at = {{s.copies[0].data(), true}, {s.copies[1].data(), true}, {s.copies[2].data(), true}};
  return s;
}

class ShardedWriter final : public CheckpointWriter {
 public:
  ShardedWriter(CheckpointRecord record, bool async, int keep, std::function<void(const std::string&)> note,
                double delay_s)
      : CheckpointWriter(std::move(record)), async_(async), keep_(keep), delay_s_(delay_s), note_(std::move(note)) {}
  ~ShardedWriter() override {
    if (job_ && job_->thread.joinable()) job_->thread.join();  // a failing run: the folder stays incomplete
  }

  std::string save(const std::string& out_dir, int64_t steps, const RunState& st, const std::string& run_id,
                   ProcessGrid& grid, uint64_t* hash) override {
    const auto t0 = std::chrono::steady_clock::now();
    finish(grid, steps);
    if (hash) *hash = 0;
    Communicator& world = grid.world();
    // World rank 0 makes the step folder; every rank learns it (or the reason
    // it could not) and the run's id, which only rank 0's log holds.
    std::vector<std::string> made = {"", run_id};
    if (world.rank() == 0) {
      try {
        made[0] = begin_checkpoint(out_dir, steps).string();
      } catch (const std::exception& e) {
        made[0] = std::string("!") + e.what();
      }
    }
    broadcast_strings(world, made, 0);
    if (made[0].starts_with("!")) throw std::runtime_error(made[0].substr(1));
    job_ = std::make_unique<Job>();
    Job& job = *job_;
    job.out_dir = out_dir;
    job.dir = made[0];
    job.step = steps;
    job.keep = keep_;
    job.cfg = st.model_config;
    job.delay_s = delay_s_;
    job.run_id = made[1];
    if (world.rank() == 0) {
      job.header = training_header(st, record_, run_id);
      job.vocabulary = vocabulary_bytes(st.data.tok);
    }
    const auto copy0 = std::chrono::steady_clock::now();
    job.write = rank_write(st, grid, async_);
    last_snapshot_s_ = async_ ? seconds_since(copy0) : 0.0;
    if (async_) {
      job.thread = std::thread([&job, rank = world.rank()] { job.run(rank); });
      last_wait_s_ = seconds_since(t0);
    } else {
      job.run(world.rank());
      complete(grid);
      last_wait_s_ = seconds_since(t0);
    }
    return made[0];
  }

  int64_t poll(ProcessGrid& grid, int64_t steps) override {
    if (!job_) return -1;
    const uint8_t done = job_->done.load() ? 1 : 0;
    done_.resize(static_cast<size_t>(grid.world().size()));  // made once: this runs at every step's end
    grid.world().all_gather(&done, done_.data(), 1);
    if (std::find(done_.begin(), done_.end(), uint8_t{0}) != done_.end()) return -1;
    const int64_t step = job_->step;
    finish(grid, steps);
    return step;
  }

  void finish(ProcessGrid& grid, int64_t steps) override {
    if (!job_) return;
    const auto t0 = std::chrono::steady_clock::now();
    if (job_->thread.joinable()) job_->thread.join();
    const double waited = seconds_since(t0);
    const Job& job = *job_;
    const std::string said =
        !async_ ? ""
        : steps > job.step
            ? fmt::format("checkpoint after step {} complete: written in the background while steps {} to {} ran "
                          "(the loop then waited {:.3f} s for the rest of it)", job.step, job.step + 1, steps, waited)
            : fmt::format("checkpoint after step {} complete (the loop waited {:.3f} s for it)", job.step, waited);
    complete(grid);
    if (!said.empty() && note_) note_(said);
  }

 private:
  struct Job {
    std::string out_dir, run_id;
    fs::path dir;
    int64_t step = 0;
    int keep = 2;
    double delay_s = 0;  // TestHooks::checkpoint_delay_s
    Gpt2Config cfg;
    KeyValues header;        // rank 0
    std::string vocabulary;  // rank 0
    RankWrite write;
    std::thread thread;
    std::atomic<bool> done{false};
    std::optional<RankFile> file;
    std::string error;
    void run(int rank) {
      if (delay_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
      try {
        file = write_rank_file(dir, rank, step, run_id, cfg, write.part, write.at);
      } catch (const std::exception& e) {
        error = e.what();
      }
      for (std::vector<float>& v : write.copies) std::vector<float>().swap(v);  // the snapshot's memory back now
      done.store(true);
    }
  };

  // Collective: every rank's file (or error) to every rank; world rank 0
  // writes the manifest and commits. The job is over either way.
  void complete(ProcessGrid& grid) {
    const std::unique_ptr<Job> job = std::move(job_);
    Communicator& world = grid.world();
    const std::vector<std::string> records =
        all_gather_strings(world, job->file ? rank_file_record(*job->file) : "!" + job->error);
    for (size_t r = 0; r < records.size(); ++r) {
      if (records[r].starts_with("!")) {
        if (world.rank() == 0) abandon_checkpoint(job->dir);
        throw std::runtime_error(fmt::format("rank {}: checkpoint not written: {}", r, records[r].substr(1)));
      }
    }
    if (world.rank() != 0) return;
    std::vector<RankFile> files;
    std::vector<std::string> names = {kManifestFile, kVocabularyFile};
    for (const std::string& rec : records) {
      files.push_back(parse_rank_file_record(rec));
      names.push_back(files.back().name);
    }
    try {
      write_manifest(job->dir, job->step, job->run_id, job->cfg, job->header, job->vocabulary, files);
    } catch (...) {
      abandon_checkpoint(job->dir);
      throw;
    }
    commit_checkpoint(job->out_dir, job->dir, job->step, names, job->keep);
  }

  bool async_;
  int keep_;  // complete step folders kept (CheckpointSink::keep)
  double delay_s_;  // the tests' wait before a rank's file is written (TestHooks::checkpoint_delay_s)
  std::function<void(const std::string&)> note_;
  std::unique_ptr<Job> job_;
  std::vector<uint8_t> done_;  // poll's gather: every rank's "my file is written"
};

}  // namespace

std::unique_ptr<CheckpointWriter> make_checkpoint_writer(const CheckpointSink& sink, CheckpointRecord record,
                                                         std::function<void(const std::string&)> note, double delay_s) {
  if (sink.format == CheckpointFormat::kSharded) {
    return std::make_unique<ShardedWriter>(std::move(record), sink.async, sink.keep, std::move(note), delay_s);
  }
  return std::make_unique<FileWriter>(std::move(record), sink.keep);
}

}  // namespace gpt2
