// The op table's matrix products (op_table.h): matmul_forward and
// matmul_backward, with and without bias, and the per-element magnitudes
// |A||B| their tolerances are derived from (tolerances.cpp, "gemm"),
// computed from the inputs by the reference kernels in double.
// Shapes: N = s.N() rows, C input channels, OC output channels.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops/op_arrays.h"
#include "kernels/ops/op_cases.h"
#include "kernels/reference/reference_kernels.h"

namespace gpt2::ops {

namespace {

// |a| of a row-major (rows, cols) host array, in double; transposed to
// (cols, rows) when `transpose`.
std::vector<double> abs_of(const std::vector<float>& a, int64_t rows, int64_t cols, bool transpose) {
  std::vector<double> r(a.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const double v = std::fabs(static_cast<double>(a[static_cast<size_t>(i * cols + j)]));
      r[static_cast<size_t>(transpose ? j * rows + i : i * cols + j)] = v;
    }
  }
  return r;
}

// (|A||B|)_ij of A (M,K) and B given as its transpose bt (Nc,K): an
// (M,Nc) product of non-negative doubles, by the reference kernel.
std::vector<double> abs_product(const std::vector<double>& a, const std::vector<double>& bt, int64_t M, int64_t K,
                                int64_t Nc) {
  std::vector<double> out(static_cast<size_t>(M * Nc));
  ref::matmul_forward<double>(out.data(), a.data(), bt.data(), nullptr, static_cast<int>(M), static_cast<int>(K),
                              static_cast<int>(Nc));
  return out;
}

std::vector<double> abs_double(const std::vector<float>& a) {
  std::vector<double> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = std::fabs(static_cast<double>(a[i]));
  return r;
}

class MatmulForward final : public TableCase {
 public:
  MatmulForward(const OpShape& s, Memory& m, bool bias, Dtype dtype)
      : TableCase("matmul_forward", s, {"out"}, dtype),
        bias_(bias),
        x_(random_array({s.N(), s.C}, 21, m, -1.0f, 1.0f, dtype)),
        w_(random_array({s.OC, s.C}, 22, m)),
        b_(bias ? random_array({s.OC}, 23, m) : Array()),
        out_(overwritten({s.N(), s.OC}, m)) {}
  void reset() override { out_.reset(); }
  void run(Backend& be) override { be.matmul_forward(out_.t(), x_.t(), w_.t(), b_.t()); }
  std::vector<OpOutput> outputs() override { return {out(0, out_.host())}; }
  std::vector<Tolerance> tolerances() override {
    const int64_t N = s_.N(), C = s_.C, OC = s_.OC;
    ToleranceFacts f{s_, abs_product(abs_of(x_.host(), N, C, false), abs_of(w_.host(), OC, C, false), N, C, OC), {}};
    if (bias_) {  // the bias, broadcast over the rows
      const std::vector<float> b = b_.host();
      f.addend.resize(f.terms.size());
      for (size_t i = 0; i < f.addend.size(); ++i)
        f.addend[i] = std::fabs(static_cast<double>(b[i % static_cast<size_t>(OC)]));
    }
    return {tolerance(op_, "out", dtype_, f)};
  }

 private:
  bool bias_;
  Array x_, w_, b_;  // (N,C), (OC,C), (OC) or empty
  Output out_;       // (N,OC)
};

class MatmulBackward final : public TableCase {
 public:
  MatmulBackward(const OpShape& s, Memory& m, bool bias, Dtype dtype)
      : TableCase(
            "matmul_backward", s,
            bias ? std::vector<std::string>{"dinp", "dweight", "dbias"} : std::vector<std::string>{"dinp", "dweight"},
            dtype),
        bias_(bias),
        x_(random_array({s.N(), s.C}, 21, m, -1.0f, 1.0f, dtype)),
        w_(random_array({s.OC, s.C}, 22, m)),
        dout_(random_array({s.N(), s.OC}, 24, m)),
        dx_(overwritten({s.N(), s.C}, m)),
        dw_(accumulated({s.OC, s.C}, 25, m)),
        db_(bias ? accumulated({s.OC}, 26, m) : Output()) {}
  void reset() override {
    dx_.reset();
    dw_.reset();
    if (bias_) db_.reset();
  }
  void run(Backend& be) override { be.matmul_backward(dx_.t(), dw_.t(), db_.t(), dout_.t(), x_.t(), w_.t()); }
  std::vector<OpOutput> outputs() override {
    std::vector<OpOutput> o = {out(0, dx_.host()), out(1, dw_.host())};
    if (bias_) o.push_back(out(2, db_.host()));
    return o;
  }
  std::vector<Tolerance> tolerances() override {
    const int64_t N = s_.N(), C = s_.C, OC = s_.OC;
    const std::vector<float> dout = dout_.host();
    // dinp (N,C) = dout (N,OC) W (OC,C): W's transpose is (C,OC).
    const ToleranceFacts fdinp{
        s_, abs_product(abs_of(dout, N, OC, false), abs_of(w_.host(), OC, C, true), N, OC, C), {}};
    // dweight (OC,C) += dout^T (OC,N) x (N,C): x's transpose is (C,N); the
    // += starting values are the addend.
    const ToleranceFacts fdw{s_, abs_product(abs_of(dout, N, OC, true), abs_of(x_.host(), N, C, true), OC, N, C),
                             abs_double(dw_.start())};
    std::vector<Tolerance> t = {tolerance(op_, "dinp", dtype_, fdinp), tolerance(op_, "dweight", dtype_, fdw)};
    if (bias_) t.push_back(tolerance(op_, "dbias", dtype_, ToleranceFacts{s_, {}, {}}));
    return t;
  }

 private:
  bool bias_;
  Array x_, w_, dout_;   // (N,C), (OC,C), (N,OC)
  Output dx_, dw_, db_;  // (N,C) =; (OC,C) +=; (OC) += or empty
};

}  // namespace

std::unique_ptr<OpCase> make_matmul_forward(const OpShape& s, Memory& m, bool bias, Dtype dtype) {
  return std::make_unique<MatmulForward>(s, m, bias, dtype);
}
std::unique_ptr<OpCase> make_matmul_backward(const OpShape& s, Memory& m, bool bias, Dtype dtype) {
  return std::make_unique<MatmulBackward>(s, m, bias, dtype);
}

}  // namespace gpt2::ops
