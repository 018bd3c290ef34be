// The kernels report: Google Benchmark JSON of each program into Markdown,
// CSV and a roofline chart (see kernels_report.h).
#include "reports/kernels_report.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>

#include "render/chart.h"
#include "records/csv.h"
#include "runner/job_loop.h"
#include "render/report_format.h"
#include "records/tables.h"
#include "util/stats.h"

namespace gpt2::harness {

namespace fs = std::filesystem;

namespace {

double to_ms(double t, const std::string& unit, const fs::path& file) {
  if (unit == "ns") return t / 1e6;
  if (unit == "us") return t / 1e3;
  if (unit == "ms") return t;
  if (unit == "s") return t * 1e3;
  throw std::runtime_error(fmt::format("{}: unknown time_unit '{}'", file.string(), unit));
}

// "matmul_forward.fc/original/cpu/t2/iterations:1/repeats:1/real_time" ->
// {matmul_forward.fc, original, cpu/t2}: Google Benchmark's own suffixes dropped.
void parse_name(const std::string& run_name, KernelResult& r, const fs::path& file) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= run_name.size()) {
    const size_t end = std::min(run_name.find('/', start), run_name.size());
    const std::string p = run_name.substr(start, end - start);
    if (p != "real_time" && p != "manual_time" && p.find(':') == std::string::npos) parts.push_back(p);
    start = end + 1;
  }
  if (parts.size() != 4) {
    throw std::runtime_error(
        fmt::format("{}: benchmark '{}' is not named KERNEL/SHAPE/BACKEND/tTHREADS", file.string(), run_name));
  }
  r.kernel = parts[0];
  r.shape = parts[1];
  r.variant = parts[2] + "/" + parts[3];
}

// One benchmark's entries in the JSON (its aggregates, or its runs).
struct Entries {
  std::optional<YAML::Node> median;
  std::vector<YAML::Node> runs;
  std::string error;
};

double number(const YAML::Node& b, const char* key, const fs::path& file) {
  if (!b[key]) throw std::runtime_error(fmt::format("{}: benchmark '{}' has no '{}'", file.string(), b["name"].as<std::string>(""), key));
  return b[key].as<double>();
}

KernelResult summarise(const std::string& run_name, const Entries& e, const std::string& program, const fs::path& file) {
  KernelResult r;
  r.program = program;
  parse_name(run_name, r, file);
  if (!e.error.empty()) {
    r.error = e.error;
    return r;
  }
  std::vector<YAML::Node> use = e.median ? std::vector<YAML::Node>{*e.median} : e.runs;
  r.samples = e.median ? e.median->operator[]("repetitions").as<int>(0) : static_cast<int>(e.runs.size());
  auto med = [&](const char* key) {
    std::vector<double> v;
    for (const YAML::Node& b : use) v.push_back(number(b, key, file));
    return median(v);
  };
  std::vector<double> times;
  for (const YAML::Node& b : use) times.push_back(to_ms(number(b, "real_time", file), b["time_unit"].as<std::string>("ns"), file));
  r.time_ms = median(times);
  r.gflops = med("flop_rate") / 1e9;
  r.gbs = med("byte_rate") / 1e9;
  r.roofline = med("roofline");
  r.threads = static_cast<int>(med("kernel_threads"));
  r.flop = med("flop");
  r.bytes = med("bytes");
  return r;
}

YAML::Node load_json(const fs::path& file) {
  try {
    return YAML::LoadFile(file.string());  // JSON is YAML's flow style
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("{}: not readable as Google Benchmark JSON: {}", file.string(), e.what()));
  }
}

struct ProgramResult {
  std::string program;
  std::optional<Status> status;
  std::map<std::string, std::string> context;  // scalar entries of the JSON's context
  std::vector<KernelResult> results;
};

std::string fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }

std::string ctx(const ProgramResult& p, const std::string& key) {
  auto it = p.context.find(key);
  return it == p.context.end() ? "?" : it->second;
}

// The report's ceilings: per thread count (1, 2), the best of the programs';
// and the GPU's (kernel_bench_cuda), which the CUDA rows are held to.
struct ReportCeilings {
  double gflops[2] = {0, 0}, gbs[2] = {0, 0};
  double gpu_gflops = 0, gpu_gbs = 0;
  bool found() const { return gflops[0] > 0 && gbs[0] > 0; }
  // The fraction of the roofline reached by one call of r.
  double fraction(const KernelResult& r) const {
    const int i = r.threads >= 2 ? 1 : 0;
    const bool gpu = r.variant.rfind("cuda/", 0) == 0 && gpu_gflops > 0;
    const double peak = gpu ? gpu_gflops : gflops[i], bw = gpu ? gpu_gbs : gbs[i];
    const double floor_s = std::max(r.flop / (peak * 1e9), r.bytes / (bw * 1e9));
    return r.time_ms > 0 ? floor_s / (r.time_ms / 1e3) : 0;
  }
};

ReportCeilings best_ceilings(const std::vector<ProgramResult>& programs) {
  ReportCeilings c;
  for (const ProgramResult& p : programs) {
    for (int t = 1; t <= 2; ++t) {
      const auto g = p.context.find(fmt::format("ceiling_sgemm_gflops_t{}", t));
      const auto b = p.context.find(fmt::format("ceiling_bandwidth_gbs_t{}", t));
      if (g != p.context.end()) c.gflops[t - 1] = std::max(c.gflops[t - 1], std::stod(g->second));
      if (b != p.context.end()) c.gbs[t - 1] = std::max(c.gbs[t - 1], std::stod(b->second));
    }
    const auto g = p.context.find("ceiling_gpu_sgemm_gflops"), b = p.context.find("ceiling_gpu_copy_gbs");
    if (g != p.context.end()) c.gpu_gflops = std::max(c.gpu_gflops, std::stod(g->second));
    if (b != p.context.end()) c.gpu_gbs = std::max(c.gpu_gbs, std::stod(b->second));
  }
  return c;
}

const std::vector<std::string> kShapeOrder = {"tiny", "small", "original", "larger"};

int shape_rank(const std::string& s) {
  auto it = std::find(kShapeOrder.begin(), kShapeOrder.end(), s);
  return static_cast<int>(it - kShapeOrder.begin());
}

// The roofline chart: every timed benchmark as a point (x = FLOP/byte,
// y = GFLOP/s), one series per variant, under the ceilings min(SGEMM peak,
// FLOP/byte x memory bandwidth) at 1 and 2 threads.
std::string roofline_chart(const fs::path& dir, const std::vector<const KernelResult*>& rows, const ReportCeilings& ceil,
                           std::vector<fs::path>& written) {
  std::map<std::string, std::vector<const KernelResult*>> by_variant;
  for (const KernelResult* r : rows) {
    if (r->error.empty() && r->flop > 0 && r->bytes > 0) by_variant[r->variant].push_back(r);
  }
  std::string data, plot;
  int index = 0;
  for (const auto& [variant, pts] : by_variant) {
    data += fmt::format("# {}: FLOP/byte GFLOP/s label\n", variant);
    for (const KernelResult* r : pts) {
      data += fmt::format("{} {} {}\n", r->flop / r->bytes, r->gflops, gnuplot_string(r->kernel + "@" + r->shape));
    }
    data += "\n\n";
    plot += fmt::format("{}\"roofline.dat\" index {} using 1:2 with points pt {} ps 1.2 title {}", index ? ", \\\n     " : "",
                        index, 5 + 2 * index, gnuplot_string(variant));
    ++index;
  }
  if (index == 0) return "(no roofline: no benchmark was timed)\n";
  // No point labels (they overlap); roofline.dat names every point's kernel and shape.
  const std::string commands = fmt::format(
      "set logscale xy\n"
      "set xlabel \"arithmetic intensity (FLOP per minimum byte)\"\n"
      "set ylabel \"GFLOP/s\"\n"
      "set key left top box opaque\n"
      "set xrange [0.03:1000]\n"
      "set yrange [0.05:1000]\n"
      "set samples 400\n"
      "peak1 = {0}; peak2 = {1}; bw1 = {2}; bw2 = {3}\n"
      "roof(x, p, b) = x * b < p ? x * b : p\n"
      "plot roof(x, peak1, bw1) with lines lw 2 dt 2 lc rgb \"gray40\" title sprintf(\"ceiling, 1 thread (%.0f GFLOP/s, %.1f GB/s)\", peak1, bw1), \\\n"
      "     roof(x, peak2, bw2) with lines lw 2 lc rgb \"black\" title sprintf(\"ceiling, 2 threads (%.0f GFLOP/s, %.1f GB/s)\", peak2, bw2), \\\n"
      "     {4}\n",
      ceil.gflops[0], ceil.gflops[1], ceil.gbs[0], ceil.gbs[1], plot);
  return draw_chart(dir, "roofline", "Kernels on the roofline of this machine", data, commands, written);
}

}  // namespace

std::vector<KernelResult> read_benchmark_json(const fs::path& file, const std::string& program) {
  const YAML::Node root = load_json(file);
  if (!root.IsMap() || !root["benchmarks"] || !root["benchmarks"].IsSequence()) {
    throw std::runtime_error(fmt::format("{}: no 'benchmarks' list (a truncated or foreign file?)", file.string()));
  }
  std::vector<std::string> order;
  std::map<std::string, Entries> by_name;
  for (const YAML::Node& b : root["benchmarks"]) {
    const std::string run_name = b["run_name"].as<std::string>(b["name"].as<std::string>(""));
    if (!by_name.count(run_name)) order.push_back(run_name);
    Entries& e = by_name[run_name];
    if (b["error_occurred"] && b["error_occurred"].as<bool>()) {
      e.error = b["error_message"].as<std::string>("error");
    } else if (b["run_type"].as<std::string>("iteration") == "aggregate") {
      if (b["aggregate_name"].as<std::string>("") == "median") e.median = b;
    } else {
      e.runs.push_back(b);
    }
  }
  std::vector<KernelResult> out;
  for (const std::string& n : order) out.push_back(summarise(n, by_name[n], program, file));
  return out;
}

namespace {

// The programs of the last run, from its index (not from ids derived from
// this build: a report must not depend on which build reads the results).
std::vector<ProgramResult> read_programs(const fs::path& results_dir) {
  std::vector<ProgramResult> programs;
  for (const JobRow& row : read_job_index(results_dir / kKernelsIndex, "program")) {
    const std::string& program = row.label;
    const std::string& id = row.id;
    ProgramResult pr{program, read_status(results_dir / id), {}, {}};
    if (pr.status && pr.status->status == "ok") {
      const fs::path json = results_dir / id / "benchmark.json";
      const YAML::Node root = load_json(json);
      for (const auto& kv : root["context"]) {
        if (kv.second.IsScalar()) pr.context[kv.first.as<std::string>()] = kv.second.as<std::string>();
      }
      if (root["context"]["load_avg"] && root["context"]["load_avg"].IsSequence()) {  // 1, 5 and 15 minutes
        std::string load;
        for (const auto& x : root["context"]["load_avg"]) load += (load.empty() ? "" : ", ") + fmt::format("{:.2f}", x.as<double>());
        pr.context["load_avg"] = load;
      }
      pr.results = read_benchmark_json(json, program);
    }
    programs.push_back(std::move(pr));
  }
  return programs;
}

// The ceilings each program measured, the report's (the best), and a warning
// for a program whose two threads did not get two cores.
std::string ceilings_md(const std::vector<ProgramResult>& programs, const ReportCeilings& ceilings,
                        const ProgramResult& m) {
  std::string md = fmt::format("Ceilings, measured at the start of each program ({}):\n\n", ctx(m, "ceiling_method"));
  md += "| program | threads | SGEMM GFLOP/s | memcpy GB/s | triad GB/s | bandwidth ceiling GB/s | load average at start |\n"
        "|---|---:|---:|---:|---:|---:|---|\n";
  for (const ProgramResult& p : programs) {
    if (p.context.empty()) continue;
    for (int t = 1; t <= 2; ++t) {
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", p.program, t,
                        ctx(p, fmt::format("ceiling_sgemm_gflops_t{}", t)), ctx(p, fmt::format("memcpy_gbs_t{}", t)),
                        ctx(p, fmt::format("triad_gbs_t{}", t)), ctx(p, fmt::format("ceiling_bandwidth_gbs_t{}", t)),
                        t == 1 ? ctx(p, "load_avg") : "");
    }
  }
  for (int t = 1; t <= 2; ++t) {
    md += fmt::format("| **this report's ceiling** (the best above) | {} | **{:.2f}** | | | **{:.2f}** | |\n", t,
                      ceilings.gflops[t - 1], ceilings.gbs[t - 1]);
  }
  // Two threads on two cores should come close to twice one thread's SGEMM;
  // much less means the other core was taken by another process meanwhile.
  for (const ProgramResult& p : programs) {
    const auto t1 = p.context.find("ceiling_sgemm_gflops_t1"), t2 = p.context.find("ceiling_sgemm_gflops_t2");
    if (t1 == p.context.end() || t2 == p.context.end()) continue;
    const double ratio = std::stod(t2->second) / std::stod(t1->second);
    if (ratio < 1.5) {
      md += fmt::format("\n**{}: its 2-thread SGEMM ceiling is only {:.2f}x its 1-thread one**: another process held "
                        "a core while it was measured, so this program's own `roofline` counters overstate its "
                        "2-thread percentages, and its 2-thread times may include waiting for a core. The tables "
                        "below use this report's ceiling.\n",
                        p.program, ratio);
    }
  }
  return md + "\n";
}

// The machine (from the first program that ran: every program records it) and its ceilings.
std::string machine_md(const std::vector<ProgramResult>& programs, const ReportCeilings& ceilings) {
  const ProgramResult* ref = nullptr;
  for (const ProgramResult& p : programs) {
    if (!p.context.empty() && !ref) ref = &p;
  }
  if (!ref) return "";
  const ProgramResult& m = *ref;
  std::string md = "## Machine\n\n";
  md += fmt::format("* CPU: {} ({} logical cores), host `{}`; run {}\n", ctx(m, "cpu_model"), ctx(m, "logical_cores"),
                    ctx(m, "host_name"), ctx(m, "date"));
  md += fmt::format("* Build: {} ({}), commit `{}` (sources {}), options `{}`; Google Benchmark's own library: {} "
                    "build\n", ctx(m, "compiler"), ctx(m, "build_type"), ctx(m, "git_commit"), ctx(m, "source_hash"),
                    ctx(m, "build_options"), ctx(m, "library_build_type"));
  md += fmt::format("* BLAS: OpenBLAS {} with kernel **{}** (`openblas_get_corename()`); config `{}`\n",
                    ctx(m, "openblas_version"), ctx(m, "blas_core"), ctx(m, "blas_config"));
  md += fmt::format("* Environment: OPENBLAS_CORETYPE {}, OPENBLAS_L2_SIZE {}\n", ctx(m, "env_OPENBLAS_CORETYPE"),
                    ctx(m, "env_OPENBLAS_L2_SIZE"));
  if (ceilings.gpu_gflops > 0) {
    md += fmt::format("* GPU: {}; its ceilings, which the CUDA rows' roofline uses: SGEMM **{:.2f}** GFLOP/s, device "
                      "copy **{:.2f}** GB/s ({}). The roofline chart draws the host's ceilings only.\n",
                      ctx(m, "gpu"), ceilings.gpu_gflops, ceilings.gpu_gbs, ctx(m, "ceiling_gpu_method"));
  }
  return md + "\n" + ceilings_md(programs, ceilings, m);
}

// One kernel's table (rows by shape, then variant) and its CSV lines.
void kernel_table(const std::string& k, std::vector<const KernelResult*> rows, const ReportCeilings& ceilings,
                  std::string& md, std::string& csv) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const KernelResult* a, const KernelResult* b) { return shape_rank(a->shape) < shape_rank(b->shape); });
  md += fmt::format("### {}\n\n| shape | variant | time ms | GFLOP/s | GB/s | FLOP/byte | % of roofline | speed-up over naive |\n"
                    "|---|---|---:|---:|---:|---:|---:|---:|\n", k);
  const bool has_naive = std::any_of(rows.begin(), rows.end(),
                                     [](const KernelResult* o) { return o->variant.rfind("naive/", 0) == 0; });
  for (const KernelResult* r : rows) {
    std::optional<double> naive;
    for (const KernelResult* o : rows) {
      if (o->shape == r->shape && o->variant.rfind("naive/", 0) == 0 && o->error.empty()) naive = o->time_ms;
    }
    if (!r->error.empty()) {
      md += fmt::format("| {} | {} | **error** | | | | | {} |\n", r->shape, r->variant, r->error);
      csv += csv_row({k, r->shape, r->variant, "", "", "", "", "", "", "", r->error});
      continue;
    }
    const std::string speedup = naive      ? fmt::format("{:.1f}x", *naive / r->time_ms)
                                : has_naive ? "naive not timed"
                                            : "no naive variant";
    const std::string note = r->samples <= 1 ? " (1 run)" : "";
    const double ai = r->bytes > 0 ? r->flop / r->bytes : 0;
    md += fmt::format("| {} | {} | {}{} | {} | {} | {} | {:.0f}% | {} |\n", r->shape, r->variant, sig3(r->time_ms), note,
                      sig3(r->gflops), sig3(r->gbs), sig3(ai), 100 * ceilings.fraction(*r), speedup);
    csv += csv_row({k, r->shape, r->variant, fmt::format("{:.6g}", r->time_ms), fmt::format("{:.6g}", r->gflops),
                    fmt::format("{:.6g}", r->gbs), fmt::format("{:.6g}", ai), fmt::format("{:.4g}", 100 * ceilings.fraction(*r)),
                    naive ? fmt::format("{:.4g}", *naive / r->time_ms) : "", std::to_string(r->samples), ""});
  }
  md += "\n";
}

}  // namespace

std::vector<fs::path> write_kernels_report(const KernelsExperiment& ex, const fs::path& results_dir,
                                           const fs::path& reports_dir, const std::string& reproduce_command) {
  const std::vector<ProgramResult> programs = read_programs(results_dir);
  make_reports_dir(reports_dir);
  const ReportCeilings ceilings = best_ceilings(programs);
  std::string md = fmt::format("# Kernel microbenchmarks: {}\n\n", ex.name);
  if (!ex.description.empty()) md += ex.description + "\n\n";
  md += fmt::format("Reproduce: `{}` (then `build/bench/harness report {}` rebuilds this page from results/).\n\n",
                    reproduce_command, ex.name);
  md += fmt::format("Medians over {} repetitions (`--benchmark_min_time={}` s each) unless a row says otherwise; "
                    "every benchmark was checked against the naive reference before it was timed.\n\n",
                    ex.repetitions, ex.min_time);
  md += machine_md(programs, ceilings);
  md += "## Programs\n\n| program | status | reason | seconds |\n|---|---|---|---:|\n";
  for (const ProgramResult& p : programs) {
    md += fmt::format("| {} | {} | {} | {} |\n", p.program, p.status ? p.status->status : "not run",
                      p.status ? p.status->reason : "", p.status ? fixed(p.status->seconds, 1) : "");
  }
  md += "\n";
  // Rows grouped by kernel in first-seen order, then by shape and variant.
  std::vector<std::string> kernels;
  std::map<std::string, std::vector<const KernelResult*>> by_kernel;
  std::vector<const KernelResult*> all;
  for (const ProgramResult& p : programs) {
    for (const KernelResult& r : p.results) {
      if (!by_kernel.count(r.kernel)) kernels.push_back(r.kernel);
      by_kernel[r.kernel].push_back(&r);
      all.push_back(&r);
    }
  }
  std::string csv = csv_row({"kernel", "shape", "variant", "time_ms", "gflops", "gbs", "flop_per_byte",
                             "roofline_percent", "speedup_over_naive", "samples", "error"});
  md += "## Kernels\n\nTime: median wall-clock time per call. GFLOP/s and GB/s: the kernel's FLOPs and minimum "
        "bytes (core/kernels/ops/op_costs.cpp) over that time. Roofline: the time the call would take at the "
        "ceiling of this report for the variant's threads (a CUDA row: the GPU's), max(FLOP / SGEMM peak, bytes / "
        "bandwidth ceiling), as a "
        "percentage of the time it took. Speed-up: the naive reference's time at the same shape over this "
        "one's.\n\n";
  for (const std::string& k : kernels) kernel_table(k, by_kernel[k], ceilings, md, csv);
  std::vector<fs::path> written;
  md += "## Roofline\n\n";
  md += ceilings.found() ? roofline_chart(reports_dir, all, ceilings, written) : "(no roofline: no program ran)\n";
  write_report(reports_dir / "kernels.csv", csv, written);
  write_report(reports_dir / "kernels.md", md, written);
  return written;
}

}  // namespace gpt2::harness
