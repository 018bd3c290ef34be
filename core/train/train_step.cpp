#include "train/train_step.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "model/model.h"
#include "train/run_state.h"

namespace gpt2 {

double global_mean(Communicator& comm, double local_mean, int rows, int batch_size) {
  return comm.allreduce_sum(local_mean * rows / batch_size);
}

LocalTrainStep::LocalTrainStep(Backend& be, Gpt2& model, Optimizer& opt, Activations& acts)
    : comm_(make_local_communicator()),
      sync_(*comm_, model.grad_data(), model.num_params(), 0),
      ctx_{be, model, opt, acts, sync_, *comm_, acts.B} {}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check_loss(const StepContext& s, double loss) {
  if (!std::isfinite(loss) || (s.max_loss > 0 && loss > s.max_loss)) {
    throw std::runtime_error(fmt::format(
        "step {}: the loss is {:.6g}{} (training diverged); no update was made, and the last checkpoint, if any, is "
        "kept: lower optimizer.lr", s.opt.steps_done(), loss,
        std::isfinite(loss) ? fmt::format(", above train.max_loss {:.6g}", s.max_loss) : ""));
  }
}

// Pipeline stages, microbatches or ZeRO-1 (see train_step.h).
StepResult layout_step(const StepContext& s, const int32_t* inputs, const int32_t* targets, int rows) {
  const int T = s.pipe ? s.pipe->seq_len() : s.acts.T;
  const float dloss = 1.0f / static_cast<float>(s.batch_size * T);
  s.model.zero_grad();
  double local_loss = 0;
  if (s.pipe) {
    local_loss = s.pipe->step(inputs, targets, dloss);
  } else {
    local_loss = gpt2_forward(s.be, s.model, s.acts, inputs, targets);
    gpt2_backward(s.be, s.model, s.acts, inputs, targets, dloss);
  }
  StepResult r;
  const auto t0 = std::chrono::steady_clock::now();
  if (s.pp && s.pp->size() > 1) local_loss = s.pp->allreduce_sum(local_loss);  // from the last stage
  size_t chunk = 0, begin = 0;
  if (s.zero) {
    chunk = s.zero->chunk;
    begin = static_cast<size_t>(s.comm.rank()) * chunk;
    s.comm.reduce_scatter_sum(s.model.grad_data(), s.model.grad_data() + begin, chunk);
  } else {
    s.sync.start_grad_sync();
    s.sync.finish_grad_sync();
  }
  r.loss = global_mean(s.comm, local_loss, rows, s.batch_size);
  r.comm_s = seconds_since(t0);
  check_loss(s, r.loss);
  if (s.layer_norms && !s.zero) r.layer_grad_norms = layer_grad_norms(s.be, s.model);  // microbatches, one stage
  r.update = s.opt.step(s.be, s.model);
  if (s.zero) {
    s.be.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    s.comm.all_gather(s.model.param_data() + begin, s.model.param_data(), chunk);
    r.comm_s += seconds_since(t1);
  }
  return r;
}

}  // namespace

std::vector<double> layer_grad_norms(Backend& be, const Gpt2& model) {
  const int L = model.config().L;
  std::vector<double> sq(static_cast<size_t>(L + 2), 0.0);
  for (const ParamInfo& info : model.infos()) {
    size_t group = static_cast<size_t>(L + 1);  // the head: lnf_*, lm_head
    if (info.name == "wte" || info.name == "wpe") group = 0;
    else if (info.name.rfind("h.", 0) == 0) group = 1 + static_cast<size_t>(std::stoi(info.name.substr(2)));
    const Tensor& p = *info.view;
    sq[group] += be.sum_squares(Tensor(model.grad_data() + (p.data - model.param_data()), {p.numel()}));
  }
  for (double& v : sq) v = std::sqrt(v);
  return sq;
}

StepResult train_step(const StepContext& s, const int32_t* inputs, const int32_t* targets) {
  const int rows = s.pipe ? s.pipe->rows() : s.acts.B;
  if (s.pipe || s.zero) return layout_step(s, inputs, targets, rows);
  // Each position's loss weighs 1 / (global B*T): summed over the ranks, the
  // gradients are those of the global mean.
  const float dloss = 1.0f / static_cast<float>(s.batch_size * s.acts.T);
  s.model.zero_grad();
  const double local_loss = gpt2_forward(s.be, s.model, s.acts, inputs, targets);
  s.sync.start_grad_sync();
  gpt2_backward(s.be, s.model, s.acts, inputs, targets, dloss, &s.sync);
  s.sync.finish_grad_sync();
  StepResult r;
  const auto t0 = std::chrono::steady_clock::now();
  r.loss = global_mean(s.comm, local_loss, rows, s.batch_size);
  r.comm_s = s.sync.seconds() + seconds_since(t0);
  check_loss(s, r.loss);
  if (s.layer_norms) r.layer_grad_norms = layer_grad_norms(s.be, s.model);
  r.update = s.opt.step(s.be, s.model);
  return r;
}

}  // namespace gpt2
