// The communication a training step should count under a tensor-parallel
// layout (docs/tensor_parallel.md, "Communication"), worked out from the
// model's shape alone, so a report can set it beside what the stage counted
// (the metrics stream's tp_calls, tp_bytes, dp_calls, dp_bytes). Per rank
// and step; bytes are the calls' buffers:
//   tp group (tp > 1): per `tp` layer 4 allreduces of N*C floats (2 forward,
//     2 backward); per private run of k layers (`spd` is a run of 1; `parallel`
//     layers in a row are one run) 2 allreduces, N*C floats forward and
//     N*C + 6*C*k backward; and 1 allreduce of a double (the shards' squared
//     gradient norm);
//   dp group (dp > 1): 1 allreduce of the shard's gradient (4 bytes a
//     parameter) and 1 of a double (the loss);
// N = rows per replica x seq_len. A group of one rank counts nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpt2::harness {

struct CommShape {
  int64_t vocab = 0, block_size = 0, n_layer = 0, n_embd = 0;
  int64_t batch = 0, seq_len = 0;  // the global batch: rows per replica = batch / dp
  int tp = 1, dp = 1;
  std::vector<std::string> block_types;  // empty: all tp
  bool bucketed = false;                 // train.grad_bucket_mb > 0: the dp sum is split into buckets
};

struct CommCounts {
  int64_t tp_calls = 0, tp_bytes = 0;
  std::optional<int64_t> dp_calls, dp_bytes;  // none when the gradient sum is bucketed
};

// Throws std::invalid_argument for a shape the stages would refuse (tp not
// dividing n_embd, a block_types list of the wrong length or an unknown name).
CommCounts expected_comm(const CommShape& s);

// The parameters one tensor-parallel rank holds (the data-parallel sum's size).
int64_t shard_parameters(const CommShape& s);

}  // namespace gpt2::harness
