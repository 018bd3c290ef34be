#include "train/run/announce.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <thread>

#include "parallel/gradient_sync.h"
#include "parallel/process_grid.h"
#include "model/activations.h"
#include "model/flops.h"
#include "train/run/run_state.h"
#include "train/schedule/pipeline.h"
#include "train/schedule/train_step.h"
#include "util/console.h"
#include "util/provenance.h"
#include "train/run/memory.h"

namespace gpt2 {

namespace fs = std::filesystem;

// The MFU denominator: the configured peak, or the matrix-product ceiling of
// all the job's backends, measured by rank 0 while the others wait idle (on
// one machine; give train.peak_gflops for several) and raised to the best
// ever measured here for this layout (train/run/mfu_peak.h), so that a busy
// start-up does not lower it.
MfuPeak mfu_peak(const RunConfig& c, const ProgramContext& ctx, RunState& st, Communicator& comm, int threads) {
  MfuPeak peak{c.train.peak_gflops, "train.peak_gflops"};
  if (peak.gflops <= 0) {
    if (comm.rank() == 0) {
      const double measured = ctx.backend.ceiling_gflops(*st.backend, comm.size(), comm.local_size(), threads);
      const MachineInfo m = machine_info();
      std::string key =
          fmt::format("{}|{}|{}|{}x{}", m.hostname, m.cpu_model, st.backend->name(), comm.size(), threads);
      for (const auto& [k, v] : kernel_library_info()) key += "|" + v;
      // A bf16 run's ceiling is its bf16 products' (cpu_backend_kind measures those).
      peak = best_known_peak(key, measured,
                             st.backend->products() == Dtype::bf16 ? "bf16 product" : "fp32 product (OpenBLAS or oneDNN)");
    }
    comm.broadcast(&peak.gflops, sizeof peak.gflops, 0);
  }
  return peak;
}

// The summary's provenance: build and machine, the kernel libraries, and how this run was laid out.
Json run_provenance(const TrainRequest& req, const ProgramContext& ctx, const RunState& st, Communicator& comm,
                    int threads, const MfuPeak& peak, const std::string& run_id) {
  const RunConfig& c = req.config;
  Json p = provenance_json(machine_info(), build_info());
  for (const auto& [k, v] : kernel_library_info()) p[k] = v;
  p["stage"] = ctx.program;
  p["backend"] = st.backend->name();
  p["communicator"] = comm.name();
  for (const auto& [k, v] : st.backend->library_versions()) p[k] = v;
  for (const auto& [k, v] : comm.library_versions()) p[k] = v;
  if (const auto choices = st.backend->product_choices(); !choices.empty()) {
    // train.gemm auto's per-shape libraries (rank 0's): train.gemm_choices pins them in a rerun.
    Json g = Json::object();
    for (const auto& [shape, provider] : choices) g[shape] = provider;
    p["gemm_choices"] = g;
  }
  p["threads"] = threads;
  p["ranks"] = comm.size();
  p["tp"] = c.parallel.tp;
  p["pp"] = c.parallel.pp;
  p["cp"] = c.parallel.cp;
  p["dp"] = comm.size() / (c.parallel.tp * c.parallel.pp * c.parallel.cp);
  p["microbatches"] = c.parallel.microbatches;
  p["schedule"] = to_string(c.parallel.schedule);
  p["zero"] = st.homes.zero.zero_stage;
  p["vocab_parallel"] = st.model->tp().shape().vocab;
  p["precision"] = to_string(c.train.precision);
  p["deterministic"] = c.train.deterministic;
  p["block_types"] = TpPlace{c.parallel.tp, 0, c.parallel.blocks(), nullptr}.describe();
  p["hostfile"] = req.hostfile;
  p["seed"] = c.train.seed;
  p["init"] = to_string(st.model_config.init);
  p["config_file"] = req.config_file;
  p["run_id"] = run_id;
  p["peak_gflops"] = round_fixed(peak.gflops, 2);
  p["peak_source"] = peak.source;
  return p;
}

// The two lines that open a run's log: the model and data, the layout and the MFU peak.
void announce(const RunLogger& log, const RunLayout& run, const RunState& st, Communicator& comm, int threads,
              const MfuPeak& peak, double max_loss) {
  const RunConfig& c = run.config;
  log.note(fmt::format("model {} ({} parameters), {} tokens ({} train, {} val), vocabulary {}",
                       st.model_config.describe(), st.model->num_params(), st.data.size(), st.data.split.train.size(),
                       st.data.split.val.size(), st.data.tok.size()));
  if (st.data.shards) log.note(st.data.shards->describe());  // which files, from prepare's manifest
  log.note(fmt::format("{} backend, {} ranks x {} threads, batch {} x {} ({} rows per replica), {} steps from step {}, "
                       "MFU peak {:.1f} GFLOP/s ({}), divergence bound: loss {:.4g}", st.backend->name(), comm.size(),
                       threads, c.train.batch_size, c.train.seq_len, st.rows, c.train.steps, st.first_step,
                       peak.gflops, peak.source, max_loss));
  const TpPlace& tp = st.model->tp();
  const LayoutFacts facts{st.model_config,
                          st.model->num_params(),
                          st.homes.moments->updated(),
                          st.homes.moments->units(),
                          tp.describe(),
                          tp.has_private(),
                          tp.pieces};
  for (const std::string& line : run.notes(facts)) log.note(line);
  if (!st.unchecked.empty()) {
    std::string keys;
    for (const std::string& k : st.unchecked) keys += (keys.empty() ? "" : ", ") + k;
    log.note(fmt::format("the checkpoint's format records no {}: resuming could not check them", keys));
  }
}

}  // namespace gpt2
