// The benchmarks' list of ops and their check against the naive reference
// (bench_ops.h), over the op table.
#include "bench_ops.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kernels/ops/op_check.h"

namespace gpt2::bench {

namespace {

// One of the model's linear layers: (N, C_in) -> (N, C_out), with or without bias.
struct Linear {
  int64_t in, out;
  bool bias;
};

Linear linear_of(const std::string& layer, const Gpt2Config& cfg) {
  const int64_t C = cfg.C;
  if (layer == "qkv") return {C, 3 * C, false};
  if (layer == "fc") return {C, 4 * C, true};
  if (layer == "fcproj") return {4 * C, C, true};
  return {C, cfg.V, false};  // lm_head
}

bool is_matmul(const std::string& op) { return op == "matmul_forward" || op == "matmul_backward"; }

}  // namespace

ops::OpShape BenchOp::shape(const BenchShape& s) const {
  ops::OpShape o = spec->shape(op_shape(s));
  if (!layer.empty()) {
    const Linear l = linear_of(layer, s.cfg);
    o.B = 1;
    o.T = s.N();
    o.C = l.in;
    o.OC = l.out;
  }
  return o;
}

ops::OpShape BenchOp::check_shape(const BenchShape& s) const {
  ops::OpShape o = shape(s);
  if (!layer.empty()) o.T = std::min<int64_t>(o.T, 256);
  if (kernel().rfind("attention_", 0) == 0) o.B = 1;  // the tiling depends on T, NH and HS only
  return o;
}

const std::vector<BenchOp>& bench_ops() {
  static const std::vector<BenchOp> list = [] {
    const std::set<std::string> not_benchmarked = {"attention_decode", "sum"};
    std::vector<BenchOp> v;
    for (const Dtype dtype : {Dtype::f32, Dtype::bf16}) {  // the bf16 rows after the f32 table
      const std::string tail = dtype == Dtype::bf16 ? ".bf16" : "";
      for (const ops::OpSpec& spec : ops::op_table(dtype)) {
        if (not_benchmarked.count(spec.op)) continue;
        if (!is_matmul(spec.op)) {
          v.push_back({&spec, "", spec.op.rfind("attention_", 0) == 0});
        } else if (spec.name() == "matmul_forward" + tail) {
          // Both products per layer, in the order qkv, fc, fcproj, lm_head; the
          // table's other matmul entries are reached from here.
          for (const char* layer : {"qkv", "fc", "fcproj", "lm_head"}) {
            const std::string suffix = linear_of(layer, Gpt2Config{}).bias ? "" : ".nobias";
            v.push_back({&ops::op_spec("matmul_forward" + suffix + tail), layer, true});
            v.push_back({&ops::op_spec("matmul_backward" + suffix + tail), layer, true});
          }
        }
      }
    }
    return v;
  }();
  return list;
}

namespace {

// The reference's outputs for the last (op, shape) checked: every variant
// of one op and shape is checked against one reference run.
struct ReferenceCache {
  std::string key;
  ops::Expected expected;
};

}  // namespace

std::string check_against_reference(const BenchOp& op, const BenchShape& shape, Backend& variant, bool corrupt) {
  static ReferenceCache cache;
  const std::string key = op.name() + "/" + shape.name;
  const ops::OpShape s = op.check_shape(shape);
  if (cache.key != key) {
    cache.key.clear();
    cache.expected = ops::run_reference(*op.spec, s);
    cache.key = key;
  }
  std::vector<ops::OpOutput> outs = ops::run_on(*op.spec, s, variant);
  if (corrupt) {
    ops::OpOutput& first = outs.front();
    if (first.f64.empty())
      first.f32[0] += 1.0f;
    else
      first.f64[0] += 1.0;
  }
  const ops::Expected& e = cache.expected;
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string err =
        ops::compare(outs[i], e.outputs[i], ops::tolerance_on(variant, e.tolerances[i], e.outputs[i]));
    if (!err.empty()) return op.name() + " differs from the naive reference: " + err;
  }
  return "";
}

}  // namespace gpt2::bench
