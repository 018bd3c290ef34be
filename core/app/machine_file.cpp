#include "app/machine_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>
#include <stdexcept>
#include <vector>

#include "util/text.h"
#include "util/yaml_file.h"

namespace gpt2 {

namespace {

constexpr size_t kMaxKernels = 100000;
constexpr double kMaxShape = 1099511627776.0;  // 2^40

class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw std::invalid_argument(fmt::format("{}: {}: {}", file_, key, why));
  }
  void only(const YAML::Node& n, const std::string& where, const std::set<std::string>& known) const {
    if (!n.IsMap()) fail(where.empty() ? "the file" : where, "expected a mapping");
    for (const auto& kv : n) {
      const std::string k = kv.first.as<std::string>();
      if (!known.count(k)) {
        std::string list;
        for (const std::string& x : known) list += (list.empty() ? "" : ", ") + x;
        fail(where.empty() ? excerpt(k) : where + "." + excerpt(k), "unknown key (expected " + list + ")");
      }
    }
  }
  std::string text(const YAML::Node& n, const std::string& key, bool required = true) const {
    if (!n[key]) {
      if (required) fail(key, "missing");
      return "";
    }
    if (!n[key].IsScalar()) fail(key, "expected text");
    const std::string s = n[key].as<std::string>();
    if (s.size() > 4096) fail(key, "longer than 4096 characters");
    return s;
  }
  double number(const YAML::Node& n, const std::string& where, const std::string& key, double lo, double hi,
                bool required = true) const {
    const std::string name = where.empty() ? key : where + "." + key;
    if (!n[key]) {
      if (required) fail(name, "missing");
      return 0;
    }
    double v = 0;
    try {
      v = n[key].as<double>();
    } catch (const YAML::Exception&) {
      fail(name, "expected a number, got '" + excerpt(n[key].IsScalar() ? n[key].as<std::string>() : "?") + "'");
    }
    if (!std::isfinite(v) || v < lo || v > hi) fail(name, fmt::format("{} is outside [{}, {}]", v, lo, hi));
    return v;
  }

 private:
  std::string file_;
};

bool known_op(const std::string& op) {
  const std::string base = op.substr(0, op.find('.'));
  try {
    (void)ops::op_cost(base, ops::OpShape{1, 1, 1, 1, 1, 1, 1});
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

}  // namespace

MachineModel read_machine_file(const std::filesystem::path& file) {
  const YAML::Node root = load_yaml_file(file, "machine file");
  refuse_duplicate_keys(root, file.string(), "", true);
  const Reader r(file.string());
  r.only(root, "", {"schema", "name", "source", "cpu", "blas", "cores", "peak_gflops", "node", "kernels"});
  if (r.text(root, "schema") != kMachineSchema) {
    r.fail("schema", fmt::format("'{}', expected '{}'", excerpt(r.text(root, "schema")), kMachineSchema));
  }
  MachineModel m;
  m.name = r.text(root, "name");
  if (m.name.empty()) r.fail("name", "empty");
  m.source = r.text(root, "source", false);
  m.cpu = r.text(root, "cpu", false);
  m.blas = r.text(root, "blas", false);
  m.cores = static_cast<int>(r.number(root, "", "cores", 1, 1 << 20));
  m.peak_flops = r.number(root, "", "peak_gflops", 0, 1e9, false) * 1e9;
  const YAML::Node node = root["node"];
  if (!node) r.fail("node", "missing");
  r.only(node, "node", {"latency_us", "gbytes_per_s", "source"});
  m.node.latency_s = r.number(node, "node", "latency_us", 0, 1e9) * 1e-6;
  m.node.bytes_per_s = r.number(node, "node", "gbytes_per_s", 1e-9, 1e9) * 1e9;
  m.node.source = r.text(node, "source", false);
  const YAML::Node kernels = root["kernels"];
  if (!kernels || !kernels.IsSequence() || kernels.size() == 0) r.fail("kernels", "expected a list of timed kernels");
  if (kernels.size() > kMaxKernels) r.fail("kernels", fmt::format("more than {} entries", kMaxKernels));
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string where = fmt::format("kernels[{}]", i);
    const YAML::Node k = kernels[i];
    r.only(k, where, {"op", "threads", "seconds", "shape"});
    KernelTiming t;
    if (!k["op"] || !k["op"].IsScalar()) r.fail(where + ".op", "missing");
    t.op = k["op"].as<std::string>();
    if (!known_op(t.op)) r.fail(where + ".op", "'" + excerpt(t.op) + "' is not an op of the op table");
    t.threads = static_cast<int>(r.number(k, where, "threads", 1, 4096));
    t.seconds = r.number(k, where, "seconds", 1e-12, 1e6);
    const YAML::Node s = k["shape"];
    if (!s) r.fail(where + ".shape", "missing");
    const std::string sw = where + ".shape";
    r.only(s, sw, {"B", "T", "C", "NH", "V", "OC", "P", "KVH"});
    const auto dim = [&](const char* key) { return static_cast<int64_t>(r.number(s, sw, key, 0, kMaxShape, false)); };
    t.shape = ops::OpShape{dim("B"), dim("T"), dim("C"), dim("NH"), dim("V"), dim("OC"), dim("P")};
    t.shape.KVH = dim("KVH");
    if (t.shape.NH > 0 && t.shape.C % t.shape.NH != 0) r.fail(sw, "C is not a multiple of NH");
    m.kernels.push_back(t);
  }
  return m;
}

}  // namespace gpt2
