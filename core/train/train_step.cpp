#include "train/train_step.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "model/model.h"

namespace gpt2 {

double global_mean(Communicator& comm, double local_mean, int rows, int batch_size) {
  return comm.allreduce_sum(local_mean * rows / batch_size);
}

LocalTrainStep::LocalTrainStep(Backend& be, Gpt2& model, Optimizer& opt, Activations& acts)
    : comm_(make_local_communicator()),
      sync_(*comm_, model.grad_data(), model.num_params(), 0),
      ctx_{be, model, opt, acts, sync_, *comm_, acts.B} {}

StepResult train_step(const StepContext& s, const int32_t* inputs, const int32_t* targets) {
  const int rows = s.acts.B;
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
  r.comm_s = s.sync.seconds() + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!std::isfinite(r.loss) || (s.max_loss > 0 && r.loss > s.max_loss)) {
    throw std::runtime_error(fmt::format(
        "step {}: the loss is {:.6g}{} (training diverged); no update was made, and the last checkpoint, if any, is "
        "kept: lower optimizer.lr", s.opt.steps_done(), r.loss,
        std::isfinite(r.loss) ? fmt::format(", above train.max_loss {:.6g}", s.max_loss) : ""));
  }
  r.update = s.opt.step(s.be, s.model);
  return r;
}

}  // namespace gpt2
