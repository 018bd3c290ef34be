#include "util/records.h"
#include "util/files.h"

#include <fmt/format.h>

#include <sstream>
#include <stdexcept>

namespace gpt2 {

namespace {

template <typename X>
X field(const Json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end()) throw std::runtime_error(fmt::format("{}: record has no '{}'", where, key));
  try {
    return it->get<X>();
  } catch (const Json::exception&) {
    throw std::runtime_error(fmt::format("{}: '{}' has the wrong type ({})", where, key, json_text(*it)));
  }
}

template <typename X>
X field_or(const Json& j, const char* key, X fallback, const std::string& where) {
  return j.contains(key) ? field<X>(j, key, where) : fallback;
}

}  // namespace

Json to_json(const StepRecord& r) {
  Json j{{"event", "step"},
              {"step", r.step},
              {"loss", round_sig(r.loss, 7)},
              {"lr", round_sig(r.lr, 7)},
              {"grad_norm", round_sig(r.grad_norm, 7)},
              {"step_ms", round_fixed(r.step_ms, 3)},
              {"tokens_per_s", round_fixed(r.tokens_per_s, 1)},
              {"flops_per_s", round_sig(r.flops_per_s, 4)},
              {"mfu", round_fixed(r.mfu, 4)},
              {"comm_ms", round_fixed(r.comm_ms, 3)},
              {"comm_bytes", r.comm_bytes},
              {"tp_calls", r.tp_calls},
              {"tp_bytes", r.tp_bytes},
              {"dp_calls", r.dp_calls},
              {"dp_bytes", r.dp_bytes},
              {"pp_calls", r.pp_calls},
              {"pp_bytes", r.pp_bytes},
              {"cp_calls", r.cp_calls},
              {"cp_bytes", r.cp_bytes},
              {"mem_params", r.mem_params},
              {"mem_grads", r.mem_grads},
              {"mem_moments", r.mem_moments},
              {"mem_activations", r.mem_activations},
              {"mem_gathered", r.mem_gathered},
              {"mem_comm_buffers", r.mem_comm_buffers},
              {"peak_rss_mb", round_fixed(r.peak_rss_mb, 1)}};
  if (!r.layer_grad_norms.empty()) {
    Json norms = Json::array();
    for (double v : r.layer_grad_norms) norms.push_back(round_sig(v, 6));
    j["layer_grad_norms"] = norms;
  }
  if (!r.stage_wait_ms.empty()) {
    Json waits = Json::array();
    for (double w : r.stage_wait_ms) waits.push_back(round_fixed(w, 3));
    j["stage_wait_ms"] = waits;
    j["stage_arenas"] = r.stage_arenas;
  }
  return j;
}

Json to_json(const EvalRecord& r) {
  return Json{{"event", "eval"}, {"step", r.step}, {"val_loss", round_sig(r.val_loss, 7)}};
}

Json to_json(const RunSummary& r) {
  return Json{{"event", "summary"},
              {"status", r.status},
              {"steps", r.steps},
              {"first_step", r.first_step},
              {"ranks", r.ranks},
              {"train_s", round_fixed(r.train_s, 6)},
              {"train_wall_s", round_fixed(r.train_wall_s, 6)},
              {"comm_s", round_fixed(r.comm_s, 6)},
              {"inference_s", round_fixed(r.inference_s, 6)},
              {"final_loss", round_sig(r.final_loss, 7)},
              {"tokens_per_s", round_fixed(r.tokens_per_s, 1)},
              {"peak_rss_mb", round_fixed(r.peak_rss_mb, 1)},
              {"generated_tokens", r.generated_tokens},
              {"generated_text", r.generated_text},
              {"checkpoint", r.checkpoint},
              {"state_hash", r.state_hash},
              {"console_dropped_lines", r.console_dropped_lines},
              {"provenance", r.provenance}};
}

RecordKind record_kind(const Json& line) {
  if (!line.is_object() || !line.contains("event") || !line["event"].is_string()) return RecordKind::kOther;
  const std::string e = line["event"].get<std::string>();
  if (e == "step") return RecordKind::kStep;
  if (e == "eval") return RecordKind::kEval;
  if (e == "summary") return RecordKind::kSummary;
  return RecordKind::kOther;
}

StepRecord step_record(const Json& j, const std::string& where) {
  StepRecord r;
  r.step = field<int64_t>(j, "step", where);
  r.loss = field<double>(j, "loss", where);
  r.lr = field<double>(j, "lr", where);
  r.grad_norm = field<double>(j, "grad_norm", where);
  r.step_ms = field<double>(j, "step_ms", where);
  r.tokens_per_s = field<double>(j, "tokens_per_s", where);
  r.flops_per_s = field<double>(j, "flops_per_s", where);
  r.mfu = field<double>(j, "mfu", where);
  r.comm_ms = field_or<double>(j, "comm_ms", 0.0, where);
  r.comm_bytes = field_or<uint64_t>(j, "comm_bytes", 0, where);
  r.tp_calls = field_or<uint64_t>(j, "tp_calls", 0, where);
  r.tp_bytes = field_or<uint64_t>(j, "tp_bytes", 0, where);
  r.dp_calls = field_or<uint64_t>(j, "dp_calls", 0, where);
  r.dp_bytes = field_or<uint64_t>(j, "dp_bytes", 0, where);
  r.pp_calls = field_or<uint64_t>(j, "pp_calls", 0, where);
  r.pp_bytes = field_or<uint64_t>(j, "pp_bytes", 0, where);
  r.cp_calls = field_or<uint64_t>(j, "cp_calls", 0, where);
  r.cp_bytes = field_or<uint64_t>(j, "cp_bytes", 0, where);
  r.mem_params = field_or<uint64_t>(j, "mem_params", 0, where);
  r.mem_grads = field_or<uint64_t>(j, "mem_grads", 0, where);
  r.mem_moments = field_or<uint64_t>(j, "mem_moments", 0, where);
  r.mem_activations = field_or<uint64_t>(j, "mem_activations", 0, where);
  r.mem_gathered = field_or<uint64_t>(j, "mem_gathered", 0, where);
  r.mem_comm_buffers = field_or<uint64_t>(j, "mem_comm_buffers", 0, where);
  r.peak_rss_mb = field_or<double>(j, "peak_rss_mb", 0.0, where);
  r.layer_grad_norms = field_or<std::vector<double>>(j, "layer_grad_norms", {}, where);
  if (j.contains("stage_wait_ms")) {
    r.stage_wait_ms = field<std::vector<double>>(j, "stage_wait_ms", where);
    r.stage_arenas = field_or<std::vector<int>>(j, "stage_arenas", {}, where);
  }
  return r;
}

EvalRecord eval_record(const Json& j, const std::string& where) {
  return EvalRecord{field<int64_t>(j, "step", where), field<double>(j, "val_loss", where)};
}

RunSummary run_summary(const Json& j, const std::string& where) {
  RunSummary r;
  r.status = field<std::string>(j, "status", where);
  r.steps = field<int64_t>(j, "steps", where);
  r.first_step = field_or<int64_t>(j, "first_step", 0, where);
  r.ranks = field_or<int>(j, "ranks", 1, where);
  r.train_s = field<double>(j, "train_s", where);
  r.train_wall_s = field_or<double>(j, "train_wall_s", r.train_s, where);
  r.comm_s = field_or<double>(j, "comm_s", 0.0, where);
  r.inference_s = field<double>(j, "inference_s", where);
  r.final_loss = field<double>(j, "final_loss", where);
  r.tokens_per_s = field<double>(j, "tokens_per_s", where);
  r.peak_rss_mb = field_or<double>(j, "peak_rss_mb", 0.0, where);
  r.generated_tokens = field_or<int64_t>(j, "generated_tokens", 0, where);
  r.generated_text = field_or<std::string>(j, "generated_text", "", where);
  r.checkpoint = field_or<std::string>(j, "checkpoint", "", where);
  r.state_hash = field_or<std::string>(j, "state_hash", "", where);
  r.console_dropped_lines = field_or<int64_t>(j, "console_dropped_lines", 0, where);
  if (j.contains("provenance")) {
    if (!j["provenance"].is_object()) throw std::runtime_error(fmt::format("{}: 'provenance' is not an object", where));
    r.provenance = j["provenance"];
  }
  return r;
}

MetricsStream read_metrics_stream(const std::filesystem::path& path) {
  std::istringstream f(read_record_file(path, "cannot read the metrics stream", "a metrics stream"));
  MetricsStream m;
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), n);
    const Json j = parse_json(line, where);
    switch (record_kind(j)) {
      case RecordKind::kStep: m.steps.push_back(step_record(j, where)); break;
      case RecordKind::kEval: m.evals.push_back(eval_record(j, where)); break;
      case RecordKind::kSummary: m.summary = run_summary(j, where); break;
      case RecordKind::kOther: break;  // records of newer versions are skipped
    }
  }
  return m;
}

}  // namespace gpt2
