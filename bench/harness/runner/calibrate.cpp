#include "runner/calibrate.h"

#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "runner/process.h"
#include "runner/scratch_folder.h"
#include "util/console.h"
#include "util/files.h"
#include "util/json.h"
#include "util/provenance.h"
#include "util/text.h"

namespace fs = std::filesystem;

namespace gpt2::harness {

namespace {

// The schema the stages' reader takes (core/app/machine_file.h).
constexpr const char* kSchema = "gpt2-machine/1";

struct Timing {
  std::string op;
  std::map<std::string, int64_t> shape;
  int threads = 1;
  double seconds = 0;
};

double seconds_of(const Json& b) {
  const double t = b.at("real_time").get<double>();
  const std::string unit = b.value("time_unit", "ns");
  return unit == "s" ? t : unit == "ms" ? t * 1e-3 : unit == "us" ? t * 1e-6 : t * 1e-9;
}

// A benchmark's op as the machine file names it: the Backend method, ".bf16" for a bf16 row; "" for the variants
// the model does not read (grouped-query attention, the in-place forms).
std::string op_of(const std::string& first) {
  static const std::set<std::string> layers = {"qkv", "fc", "fcproj", "lm_head"};
  std::vector<std::string> parts;
  std::stringstream ss(first);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (parts.empty()) return "";
  const bool bf16 = parts.back() == "bf16";
  if (bf16) parts.pop_back();
  if (parts.size() == 2 && !layers.count(parts[1])) return "";
  if (parts.size() > 2) return "";
  return parts[0] + (bf16 ? ".bf16" : "");
}

// "B 2 T 7 C 48 NH 3 V 37 OC 149 P 1779 KVH 1" (ops::OpShape::str, kernel_bench's label).
std::map<std::string, int64_t> shape_of(const std::string& label, const std::string& name) {
  std::map<std::string, int64_t> s;
  std::stringstream ss(label);
  std::string key;
  int64_t v = 0;
  while (ss >> key >> v) s[key] = v;
  if (s.empty()) throw std::runtime_error(fmt::format("kernel_bench: {} has no shape label", name));
  return s;
}

Json read_benchmarks(const fs::path& file, const std::string& program) {
  if (!fs::exists(file)) throw std::runtime_error(fmt::format("{} wrote no results ({})", program, file.string()));
  Json j = Json::parse(read_record_file(file, program + "'s results", "Google Benchmark's JSON"));
  for (const Json& b : j.at("benchmarks")) {
    if (b.value("error_occurred", false)) {
      throw std::runtime_error(
          fmt::format("{}: {} failed its check: {}", program, b.value("name", "?"), b.value("error_message", "")));
    }
  }
  return j;
}

// The medians (or, with one repetition, the runs) of a benchmark output.
std::vector<Json> medians(const Json& j, int repetitions) {
  std::vector<Json> out;
  for (const Json& b : j.at("benchmarks")) {
    if (repetitions > 1 ? b.value("aggregate_name", "") == "median" : b.value("run_type", "") == "iteration") {
      out.push_back(b);
    }
  }
  return out;
}

std::string context(const Json& j, const char* key) {
  const Json& c = j.at("context");
  return c.contains(key) && c[key].is_string() ? c[key].get<std::string>() : "";
}

void run_or_throw(const std::vector<std::string>& argv, const fs::path& log, double timeout_s) {
  LaunchOptions opt;
  opt.timeout_s = timeout_s;
  const int rc = launch(argv, log, opt);
  if (rc != 0) {
    const std::string why = error_from_log(log);
    throw std::runtime_error(fmt::format("calibrate: {} {}{}", argv.front() == "mpiexec" ? argv[3] : argv.front(),
                                         rc < 0 ? "timed out" : fmt::format("exited with status {}", rc),
                                         why.empty() ? "" : ": " + why));
  }
}

struct LinkFit {
  double latency_s = 0, bytes_per_s = 0;
  std::string text;
};

// alpha and beta from the whole-buffer allreduce of each shape's gradient: a line through (ring bytes per rank,
// seconds), least squares over the shapes (two: exact), its intercept the latency (at least 0) and its slope the
// bandwidth; one shape gives the bandwidth alone.
LinkFit fit_link(const Json& j, int repetitions, int ranks) {
  std::vector<std::pair<double, double>> points;  // (bytes, seconds)
  for (const Json& b : medians(j, repetitions)) {
    if (b.at("name").get<std::string>().rfind("allreduce/", 0) == 0) {
      points.emplace_back(b.at("bytes").get<double>(), seconds_of(b));
    }
  }
  if (points.empty()) throw std::runtime_error(fmt::format("allreduce_bench at {} ranks: no medians", ranks));
  double mx = 0, my = 0;
  for (const auto& [x, y] : points) {
    mx += x / static_cast<double>(points.size());
    my += y / static_cast<double>(points.size());
  }
  double sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sxx += (x - mx) * (x - mx);
    sxy += (x - mx) * (y - my);
  }
  LinkFit f;
  const double slope = sxx > 0 ? sxy / sxx : my / mx;
  f.latency_s = sxx > 0 ? std::max(0.0, my - slope * mx) : 0.0;
  f.bytes_per_s = slope > 0 ? 1.0 / slope : mx / my;
  std::string seen;
  for (const auto& [x, y] : points)
    seen += fmt::format("{}{:.3f} ms for {:.2f} MB a rank", seen.empty() ? "" : ", ", y * 1e3, x / 1e6);
  f.text = fmt::format("{} ranks: {}: latency {:.1f} us, {:.2f} GB/s of ring traffic per rank", ranks, seen,
                       f.latency_s * 1e6, f.bytes_per_s / 1e9);
  return f;
}

// Every kernel of our CPU backend at the shapes and thread counts asked for: its median seconds a call.
std::vector<Timing> time_kernels(const CalibrateRequest& req, const fs::path& kernel_bench, const fs::path& scratch_dir,
                                 const std::vector<std::string>& common, Json& kj) {
  std::string alternation;
  for (int t : req.threads) alternation += (alternation.empty() ? "" : "|") + std::to_string(t);
  std::string shapes = req.shapes;
  std::replace(shapes.begin(), shapes.end(), ',', '|');
  std::vector<std::string> argv = {kernel_bench.string(), "--shapes", req.shapes};
  if (req.quick) argv.push_back("--quick");
  argv.push_back(fmt::format("--benchmark_filter=/({})/cpu/t({})/", shapes, alternation));
  argv.insert(argv.end(), common.begin(), common.end());
  argv.push_back("--benchmark_out=" + (scratch_dir / "kernels.json").string());
  console::err(fmt::format("calibrate: {}\n", command_text(argv)));
  run_or_throw(argv, scratch_dir / "kernels.log", req.timeout_s);
  kj = read_benchmarks(scratch_dir / "kernels.json", "kernel_bench");
  std::vector<Timing> timings;
  for (const Json& b : medians(kj, req.repetitions)) {
    std::string name = b.at("name").get<std::string>();
    const std::string first = name.substr(0, name.find('/'));
    Timing t;
    t.op = op_of(first);
    if (t.op.empty()) continue;
    t.threads = static_cast<int>(b.at("kernel_threads").get<double>());
    t.seconds = seconds_of(b);
    t.shape = shape_of(b.value("label", ""), name);
    timings.push_back(t);
  }
  if (timings.empty()) throw std::runtime_error("calibrate: kernel_bench timed no kernel of the CPU backend");

  return timings;
}

// The node's link: latency and bandwidth fitted at 2 ranks (4 ranks' fit in the text), or assumed without MPI.
LinkFit time_links(const CalibrateRequest& req, const fs::path& allreduce_bench, const fs::path& scratch_dir,
                   const std::vector<std::string>& common, bool links) {
  LinkFit node;
  std::string link_source = "not measured: allreduce_bench or mpiexec missing; latency 0, 1 GB/s assumed";
  node.bytes_per_s = 1e9;
  if (links) {
    std::vector<std::string> texts;
    for (int ranks : {2, 4}) {
      std::vector<std::string> a = {"mpiexec",  "-n",       std::to_string(ranks),           allreduce_bench.string(),
                                    "--shapes", req.shapes, "--benchmark_filter=^allreduce/"};  // the whole buffer's
      if (req.quick) a.push_back("--quick");
      a.insert(a.end(), common.begin(), common.end());
      const fs::path out = scratch_dir / fmt::format("allreduce_r{}.json", ranks);
      a.push_back("--benchmark_out=" + out.string());
      console::err(fmt::format("calibrate: {}\n", command_text(a)));
      run_or_throw(a, scratch_dir / fmt::format("allreduce_r{}.log", ranks), req.timeout_s);
      const LinkFit f = fit_link(read_benchmarks(out, "allreduce_bench"), req.repetitions, ranks);
      if (ranks == 2) node = f;
      texts.push_back(f.text);
    }
    link_source = fmt::format(
        "allreduce_bench (GradientSync over MPI), medians of {}; the model's figures are the "
        "2-rank fit. {}; {}",
        req.repetitions, texts[0], texts[1]);
  }

  node.text = link_source;
  return node;
}

// The machine file's text (the schema core/app/machine_file.h reads).
std::string machine_text(const CalibrateRequest& req, const Json& kj, const std::vector<Timing>& timings,
                         const LinkFit& node) {
  const MachineInfo mi = machine_info();
  const BuildInfo bi = build_info();
  const std::string cpu = context(kj, "cpu_model");
  const std::string blas = fmt::format("OpenBLAS {} {}", context(kj, "openblas_version"), context(kj, "blas_core"));
  const std::string peak_text = context(kj, "ceiling_sgemm_gflops_t1");
  const double peak = peak_text.empty() ? 0.0 : std::stod(peak_text);
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "schema" << YAML::Value << kSchema;
  y << YAML::Key << "name" << YAML::Value
    << (req.name.empty() ? fmt::format("{} ({} cores)", cpu.empty() ? mi.cpu_model : cpu, mi.logical_cores) : req.name);
  y << YAML::Key << "source" << YAML::Value
    << fmt::format("harness calibrate{} on {} at {} (build {}{}), {} repetitions, kernels: {} shape{}",
                   req.quick ? " --quick (figures meaningless)" : "", mi.hostname, mi.date_utc, bi.git_commit,
                   bi.git_dirty ? ", dirty" : "", req.repetitions, req.shapes, " (kernel_bench, our CPU backend)");
  y << YAML::Key << "cpu" << YAML::Value << cpu;
  y << YAML::Key << "blas" << YAML::Value << blas;
  y << YAML::Key << "cores" << YAML::Value << mi.logical_cores;
  y << YAML::Key << "peak_gflops" << YAML::Value << fmt::format("{:.6g}", peak);
  y << YAML::Key << "node" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "latency_us" << YAML::Value << fmt::format("{:.6g}", node.latency_s * 1e6);
  y << YAML::Key << "gbytes_per_s" << YAML::Value << fmt::format("{:.6g}", node.bytes_per_s / 1e9);
  y << YAML::Key << "source" << YAML::Value << node.text;
  y << YAML::EndMap;
  y << YAML::Key << "kernels" << YAML::Value << YAML::BeginSeq;
  for (const Timing& t : timings) {
    y << YAML::Flow << YAML::BeginMap;
    y << YAML::Key << "op" << YAML::Value << t.op;
    y << YAML::Key << "threads" << YAML::Value << t.threads;
    y << YAML::Key << "seconds" << YAML::Value << fmt::format("{:.6g}", t.seconds);
    y << YAML::Key << "shape" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [k, v] : t.shape) {
      if (v != 0) y << YAML::Key << k << YAML::Value << v;
    }
    y << YAML::EndMap << YAML::EndMap;
  }
  y << YAML::EndSeq << YAML::EndMap;
  return std::string("# Written by harness calibrate (docs/prediction.md).\n") + y.c_str() + "\n";
}

}  // namespace

int calibrate(const CalibrateRequest& req) {
  if (req.out.empty()) throw std::invalid_argument("calibrate: --out FILE (the machine file to write) is needed");
  check_output(req.out, OutputRules{"--out", {}, req.overwrite, false});
  if (req.threads.empty()) throw std::invalid_argument("--threads: at least one thread count");
  for (int t : req.threads) {
    if (t < 1 || t > 4096) throw std::invalid_argument(fmt::format("--threads: {} is not from 1 to 4096", t));
  }
  if (req.repetitions < 1 || req.repetitions > 100) {
    throw std::invalid_argument(fmt::format("--repetitions: {} is not from 1 to 100", req.repetitions));
  }
  const fs::path kernel_bench = req.build / "bench" / "kernel_bench";
  const fs::path allreduce_bench = req.build / "bench" / "allreduce_bench";
  if (access(kernel_bench.c_str(), X_OK) != 0) {
    throw std::invalid_argument(
        fmt::format("calibrate: {} is not built (it needs Google Benchmark)", kernel_bench.string()));
  }
  const bool links = access(allreduce_bench.c_str(), X_OK) == 0 && !find_on_path("mpiexec").empty();
  ScratchFolder scratch("harness_calibrate_");
  const std::vector<std::string> common = {fmt::format("--benchmark_repetitions={}", req.repetitions),
                                           "--benchmark_report_aggregates_only=true", "--benchmark_out_format=json"};
  Json kj;
  const std::vector<Timing> timings = time_kernels(req, kernel_bench, scratch.path(), common, kj);
  const LinkFit node = time_links(req, allreduce_bench, scratch.path(), common, links);
  write_file_atomically(req.out, machine_text(req, kj, timings, node));
  console::err(fmt::format("calibrate: {} kernels timed, the node's link {}; {}\n", timings.size(),
                           links ? "fitted" : "assumed", req.out.string()));
  return static_cast<int>(timings.size());
}

}  // namespace gpt2::harness
