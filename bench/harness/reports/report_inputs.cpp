// The stage reports' shared inputs and text (see report_inputs.h).
#include "reports/report_inputs.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <tuple>

#include "render/report_format.h"
#include "runner/stage_config.h"
#include "util/files.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

int stage_index(const std::string& stage) {
  const auto it = std::find(kStages.begin(), kStages.end(), stage);
  return it == kStages.end() ? -1 : static_cast<int>(it - kStages.begin());
}

namespace {

// A run's resolved configuration as "section.key" -> value text, from its
// run.yaml (what the stage was given); empty if the folder has none.
std::map<std::string, std::string> configuration_of(const fs::path& dir) {
  try {
    const auto entries =
        config_entries(YAML::Load(read_input_file(dir / "run.yaml", kMaxTextInputBytes, "", "a run.yaml")));
    return {entries.begin(), entries.end()};
  } catch (const std::exception&) {
    return {};
  }
}

// Runs of one stage, ranks, threads and layout whose configurations differ
// (other config_digests) get Run::differs: the keys in which their
// configuration differs from the others' (but train.seed), or the digest
// where no run.yaml tells.
void name_differences(std::vector<Run>& runs, const fs::path& results_dir) {
  std::map<std::tuple<std::string, int, int, int, std::string, std::string, std::string>, std::vector<Run*>> groups;
  for (Run& r : runs) {
    groups[{r.stage, r.ranks, r.threads, r.tp, r.tp > 1 ? r.block_types : "", r.pipeline, r.variant}].push_back(&r);
  }
  for (auto& [key, members] : groups) {
    std::map<std::string, std::map<std::string, std::string>> by_digest;  // digest -> its configuration
    for (Run* r : members) {
      if (!by_digest.count(r->config_digest)) by_digest[r->config_digest] = configuration_of(results_dir / r->run_id);
    }
    if (by_digest.size() < 2) continue;
    std::set<std::string> keys;  // keys whose values are not the same in every configuration
    for (const auto& [d, cfg] : by_digest) {
      for (const auto& [k, v] : cfg) {
        for (const auto& [d2, cfg2] : by_digest) {
          const auto it = cfg2.find(k);
          if (k != "train.seed" && (it == cfg2.end() || it->second != v)) keys.insert(k);
        }
      }
    }
    for (Run* r : members) {
      const auto& cfg = by_digest[r->config_digest];
      std::string text;
      for (const std::string& k : keys) {
        const auto it = cfg.find(k);
        text += fmt::format("{}{}={}", text.empty() ? "" : " ", k, it == cfg.end() ? "?" : it->second);
      }
      r->differs = text.empty() ? "config " + r->config_digest.substr(0, 8) : text;
    }
  }
}

}  // namespace

std::vector<Run> load_runs(const fs::path& path) {
  std::vector<Run> runs;
  for (RunRow& row : read_runs_csv(path)) {
    Run r{std::move(row), false, ""};
    // `git describe --dirty` already ends in "-dirty"; keep the flag, not the suffix.
    r.dirty = r.git_dirty == "true" || r.git_dirty == "1" || r.git_dirty == "yes";
    if (r.git_commit.size() > 6 && r.git_commit.ends_with("-dirty")) {
      r.git_commit.resize(r.git_commit.size() - 6);
      r.dirty = true;
    }
    runs.push_back(std::move(r));
  }
  name_differences(runs, path.parent_path());
  return runs;
}

bool ConfigKey::operator<(const ConfigKey& o) const {
  return std::tuple(stage_index(stage), ranks, threads, tp, block_types, pipeline, variant, config_digest) <
         std::tuple(stage_index(o.stage), o.ranks, o.threads, o.tp, o.block_types, o.pipeline, o.variant,
                    o.config_digest);
}

std::string block_types_text(const ConfigKey& k) {
  if (k.block_types.empty()) return "all tp";
  const std::string first = k.block_types.substr(0, k.block_types.find(','));
  for (size_t at = 0; at < k.block_types.size();) {
    const size_t comma = std::min(k.block_types.find(',', at), k.block_types.size());
    if (k.block_types.compare(at, comma - at, first) != 0 || comma - at != first.size()) return k.block_types;
    at = comma + 1;
  }
  return "all " + first;
}

std::string label(const ConfigKey& k) {
  std::string base = fmt::format("{} r{} t{}", k.stage, k.ranks, k.threads);
  if (!k.pipeline.empty()) base += " " + k.pipeline;
  if (!k.variant.empty()) base += " [" + k.variant + "]";
  if (!k.differs.empty()) base += " {" + k.differs + "}";
  return k.tp > 1 ? fmt::format("{} tp{} ({})", base, k.tp, block_types_text(k)) : base;
}

std::string column_id(const ConfigKey& k) {
  std::string id = fmt::format("{}_r{}_t{}", k.stage, k.ranks, k.threads);
  if (k.tp > 1) {
    std::string types = block_types_text(k);
    if (types.starts_with("all ")) types.erase(0, 4);
    std::replace(types.begin(), types.end(), ',', '-');
    id += fmt::format("_tp{}_{}", k.tp, types);
  }
  if (!k.pipeline.empty()) id += "_";
  for (char ch : k.pipeline) id += ch == ' ' ? '_' : ch;
  if (!k.variant.empty()) id += "_";
  for (char ch : k.variant) id += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  if (!k.differs.empty()) id += fmt::format("_{}", k.config_digest.substr(0, 8));
  return id;
}

namespace {

ConfigKey key_of(const Run& r) {
  // Runs of one configuration share a key; config_digest splits any other
  // difference, but only where it is named (differs): files without digests
  // group as before.
  return {r.stage, r.ranks, r.threads, r.tp, r.tp > 1 ? r.block_types : "", r.pipeline, r.variant,
          r.differs.empty() ? "" : r.config_digest, r.differs};
}

std::vector<ConfigRuns> group_by_config(const std::vector<Run>& runs) {
  std::map<ConfigKey, ConfigRuns> by_key;
  for (const Run& r : runs) {
    ConfigRuns& c = by_key[key_of(r)];
    c.key = key_of(r);
    c.all.push_back(&r);
    if (r.ok()) c.ok.push_back(&r);
  }
  std::vector<ConfigRuns> out;
  for (auto& [key, c] : by_key) out.push_back(std::move(c));
  return out;
}

// "Measured on ..." lines from the completed runs, one per machine and build.
std::string provenance_text(const std::vector<Run>& runs) {
  struct Machine {
    std::string line;
    std::string first_date, last_date;
  };
  std::vector<std::pair<std::string, Machine>> machines;
  std::vector<std::string> libraries;
  auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("?") : s; };
  for (const Run& r : runs) {
    if (!r.ok()) continue;
    std::string id =
        fmt::format("{} ({} cores, {}BLAS kernel {}){}, host {}, {{dates}}, commit {}{}{}; {} build, {}", or_unknown(r.cpu),
                    or_unknown(r.cores), r.openblas.empty() ? "" : fmt::format("OpenBLAS {}, ", r.openblas),
                    or_unknown(r.blas_core), r.backend.starts_with("cuda") ? fmt::format(", backend {}", r.backend) : "",
                    or_unknown(r.host), or_unknown(r.git_commit), r.dirty ? " (dirty)" : "",
                    r.source_hash.empty() ? "" : fmt::format(" (sources {})", r.source_hash), or_unknown(r.build_type),
                    or_unknown(r.compiler));
    if (!r.build_options.empty()) id += fmt::format(", options `{}`", r.build_options);
    // The communication and device libraries of the runs that used them, listed after the machines.
    for (const std::string& lib : {r.mpi, r.cuda.empty() ? std::string() : "CUDA " + r.cuda}) {
      if (!lib.empty() && std::find(libraries.begin(), libraries.end(), lib) == libraries.end()) {
        libraries.push_back(lib);
      }
    }
    auto it = std::find_if(machines.begin(), machines.end(), [&](const auto& p) { return p.first == id; });
    if (it == machines.end()) {
      machines.emplace_back(id, Machine{id, r.date, r.date});
    } else {
      it->second.first_date = std::min(it->second.first_date, r.date);
      it->second.last_date = std::max(it->second.last_date, r.date);
    }
  }
  if (machines.empty()) return fmt::format("Measured on: nothing ({}).\n", kNoRuns);
  auto line = [&](const Machine& m) {
    std::string dates =
        m.first_date == m.last_date ? or_unknown(m.first_date) : fmt::format("{} to {}", m.first_date, m.last_date);
    std::string text = m.line;
    text.replace(text.find("{dates}"), 7, dates);
    return fmt::format("Measured on {}.", text);
  };
  std::string libs;
  for (const std::string& l : libraries) libs += (libs.empty() ? "" : "; ") + l;
  if (!libs.empty()) libs = fmt::format("Libraries of the runs that used them: {}.\n", libs);
  if (machines.size() == 1) return line(machines[0].second) + "\n" + libs;
  std::string out = "Measured on several machines or builds:\n\n";
  for (const auto& [id, m] : machines) out += fmt::format("- {}\n", line(m));
  return out + (libs.empty() ? "" : "\n" + libs);
}

}  // namespace

Inputs load_inputs(const fs::path& runs_csv) {
  Inputs in;
  in.runs = load_runs(runs_csv);
  in.configs = group_by_config(in.runs);
  in.any_ok = std::any_of(in.runs.begin(), in.runs.end(), [](const Run& r) { return r.ok(); });
  return in;
}

std::vector<const ConfigRuns*> in_run_order(const Inputs& in) {
  std::vector<const ConfigRuns*> configs;
  for (const ConfigRuns& c : in.configs) configs.push_back(&c);
  std::stable_sort(configs.begin(), configs.end(),
                   [](const ConfigRuns* a, const ConfigRuns* b) { return a->all.front() < b->all.front(); });
  return configs;
}

std::optional<Summary> stats_of(const std::vector<const Run*>& runs, const std::string& counter) {
  std::vector<double> v;
  for (const Run* r : runs) {
    if (const std::optional<double> x = r->get(counter)) v.push_back(*x);
  }
  return summarize(v);
}

std::optional<double> median_of(const std::vector<const Run*>& runs, const std::string& counter) {
  auto s = stats_of(runs, counter);
  return s ? std::optional<double>(s->median) : std::nullopt;
}

LossData load_loss(const fs::path& path, const std::vector<Run>& runs) {
  LossData data;
  if (!fs::exists(path)) return data;
  data.found = true;
  std::map<std::string, const Run*> ok_runs;
  for (const Run& r : runs) {
    if (r.ok()) ok_runs[r.run_id] = &r;
  }
  using Values = std::map<ConfigKey, std::map<int, std::map<std::string, double>>>;  // config -> epoch -> run -> loss
  Values values, val_values;
  for (const LossRow& row : read_loss_csv(path)) {
    auto it = ok_runs.find(row.run_id);
    if (it == ok_runs.end()) continue;
    if (row.loss) values[key_of(*it->second)][static_cast<int>(row.epoch)][it->first] = *row.loss;
    if (row.val_loss) val_values[key_of(*it->second)][static_cast<int>(row.epoch)][it->first] = *row.val_loss;
  }
  auto medians = [](const Values& from, std::map<ConfigKey, Curve>& to) {
    for (const auto& [key, epochs] : from) {
      for (const auto& [epoch, by_run] : epochs) {
        std::vector<double> v;
        for (const auto& [id, loss] : by_run) v.push_back(loss);
        to[key][epoch] = median(v);
      }
    }
  };
  medians(values, data.median);
  medians(val_values, data.val_median);
  return data;
}

std::string status_text(const ConfigRuns& c) {
  struct Group {
    std::string status, reason;
    size_t count = 0;
  };
  std::vector<Group> groups;  // not-ok runs by (status, reason), in first-seen order
  for (const Run* r : c.all) {
    if (r->ok()) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.status == r->status && g.reason == r->reason; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{r->status, r->reason, 0});
    ++it->count;
  }
  auto with_reason = [](const std::string& head, const std::string& reason) {
    return reason.empty() ? head : fmt::format("{}: {}", head, reason);
  };
  if (c.ok.empty() && groups.size() == 1) return with_reason(groups[0].status, groups[0].reason);
  std::string out = c.ok.empty() ? "" : fmt::format("ok {}/{}", c.ok.size(), c.all.size());
  for (const Group& g : groups) {
    if (!out.empty()) out += "; ";
    out += with_reason(fmt::format("{} {}/{}", g.status, g.count, c.all.size()), g.reason);
  }
  return out;
}

std::string status_word(const ConfigRuns& c) {
  if (c.ok.size() == c.all.size()) return "ok";
  if (!c.ok.empty()) return "partial";
  for (const Run* r : c.all) {
    if (r->status == "failed") return "failed";
  }
  for (const Run* r : c.all) {
    if (r->status == "skipped") return "skipped";
  }
  return "not run";
}

std::string reasons(const ConfigRuns& c) {
  std::vector<std::string> seen;
  for (const Run* r : c.all) {
    if (!r->ok() && !r->reason.empty() && std::find(seen.begin(), seen.end(), r->reason) == seen.end()) {
      seen.push_back(r->reason);
    }
  }
  std::string out;
  for (const std::string& s : seen) out += fmt::format("{}{}", out.empty() ? "" : "; ", s);
  return out;
}

std::string preamble(const ReportSpec& spec, const std::vector<Run>& runs, const std::string& title) {
  return preamble(spec, runs, title, spec.description);
}

std::string preamble(const ReportSpec& spec, const std::vector<Run>& runs, const std::string& title,
                     const std::string& lead) {
  std::string out = fmt::format("# {}: {}\n\n", spec.experiment, title);
  if (!lead.empty()) out += lead + "\n\n";
  out += provenance_text(runs) + "\n";
  out += reproduce_block(spec.reproduce_command);
  return out;
}

std::string paper_readme_link(const fs::path& paper_dir, const fs::path& reports_dir) {
  const fs::path target = paper_dir / "README.md";
  std::error_code e1, e2;
  const fs::path a = fs::weakly_canonical(fs::absolute(target), e1),
                 b = fs::weakly_canonical(fs::absolute(reports_dir), e2);
  const fs::path rel = (e1 || e2) ? fs::path() : a.lexically_relative(b);
  const fs::path shown = a.parent_path().parent_path().filename() / a.parent_path().filename() / "README.md";
  return fmt::format("[{}]({})", shown.generic_string(), rel.empty() ? target.generic_string() : rel.generic_string());
}

}  // namespace gpt2::harness
