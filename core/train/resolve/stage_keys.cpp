#include "train/resolve/stage_keys.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/params.h"

namespace gpt2 {

StageSplit stage_split(const RunConfig& c, std::vector<int> counts) {
  StageSplit s;
  s.counts = std::move(counts);
  s.ranks = c.parallel.pp;
  s.v_shape = c.parallel.schedule == ScheduleKind::kZbV;
  const std::vector<std::string>& given = c.parallel.pass_times;
  if (!given.empty() && !s.v_shape) {
    throw std::invalid_argument(fmt::format("parallel.pass_times: shapes zb-v's lists only, not parallel.schedule {}",
                                            to_string(c.parallel.schedule)));
  }
  if (s.v_shape && given.empty()) {
    s.passes = layer_pass_costs(c.model, c.train.batch_size / std::max(c.parallel.microbatches, 1), c.train.seq_len);
  } else if (s.v_shape) {
    std::string list;
    for (const std::string& g : given) list += (list.empty() ? "" : ",") + g;
    double x[3] = {0, 0, 0};
    bool ok = given.size() == 3;
    for (size_t i = 0; ok && i < 3; ++i) {
      size_t used = 0;
      try {
        x[i] = std::stod(given[i], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      ok = used == given[i].size() && std::isfinite(x[i]) && x[i] > 0 && x[i] < 1e6;
    }
    if (!ok) {
      throw std::invalid_argument(
          fmt::format("parallel.pass_times {}: three positive numbers F,B,W (a chunk's "
                      "forward, input-gradient and weight-gradient times), e.g. 1,1.3,0.5",
                      list));
    }
    s.passes = {x[0], x[1], x[2]};
  }
  return s;
}

std::vector<int> stage_layer_counts(const RunConfig& c) {
  const int L = c.model.L, v = std::max(c.parallel.virtual_stages, 1), p = c.parallel.pp * v;
  const std::vector<std::string>& given = c.parallel.stage_layers;
  if (v > 1 && p > L) {
    throw std::invalid_argument(
        fmt::format("parallel.pp {} x parallel.virtual_stages {} = {} stages for model.n_layer "
                    "{}: each stage holds at least one layer",
                    c.parallel.pp, v, p, L));
  }
  (void)StageLayers::of(L, p, 0);  // no more stages than layers (names parallel.pp)
  if (given.empty() && v > 1 && L % p != 0) {
    throw std::invalid_argument(
        fmt::format("parallel.virtual_stages {}: parallel.pp {} x {} = {} chunks do not divide model.n_layer {} (give "
                    "parallel.stage_layers {} counts, or auto)",
                    v, c.parallel.pp, v, p, L, p));
  }
  if (given.empty()) return StageLayers::even_counts(L, p);
  if (given.size() == 1 && given[0] == "auto") {
    return balance_stages(L, p, stage_costs(c.model, c.train.batch_size, c.train.seq_len));
  }
  const auto refuse = [&](const std::string& why) {
    std::string list;
    for (const std::string& g : given) list += (list.empty() ? "" : ",") + g;
    throw std::invalid_argument(fmt::format("parallel.stage_layers {}: {}", list, why));
  };
  if (static_cast<int>(given.size()) != p) {
    refuse(v > 1 ? fmt::format("{} counts for parallel.pp {} x parallel.virtual_stages {} = {} stages (one count per "
                               "stage in layer order, or auto)",
                               given.size(), c.parallel.pp, v, p)
                 : fmt::format("{} counts for parallel.pp {} stages (one count per stage, or auto)", given.size(), p));
  }
  std::vector<int> counts;
  int64_t sum = 0;  // counts up to 2^31 - 1 each (issue 70: an int sum wrapped, and the plan crashed)
  for (const std::string& g : given) {
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(g, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != g.size() || n < 1) refuse(fmt::format("'{}' is not a positive layer count (or auto)", g));
    counts.push_back(n);
    sum += n;
  }
  if (sum != L) refuse(fmt::format("the counts sum to {}, not model.n_layer {}", sum, L));
  return counts;
}

}  // namespace gpt2
