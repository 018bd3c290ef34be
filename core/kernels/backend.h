// Backend: the kernel contract every backend implements (forward/backward
// pairs, the optimizer update and the gradient norm). The model calls only
// this interface; the build and the stage program choose the implementation
// once, at start-up.
//
// Argument order everywhere: outputs, inputs, weights; sizes come from the
// views. Shapes use the letters of model/config.h; N = B * T rows.
// Accumulation rules (the backward pass relies on them):
//   * parameter gradients (dweight, dbias, dwte, dwpe) are ACCUMULATED (+=),
//     so zero_grad once per step and gradient accumulation both work;
//   * layernorm_backward and rmsnorm_backward ACCUMULATE into dinp: the residual stream's gradient
//     lives in one buffer and each block adds its share;
//   * every other activation gradient is OVERWRITTEN (=).
// Backends assume valid shapes: the model builds them; tests construct them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/sequence_pieces.h"
#include "kernels/tensor.h"

namespace gpt2 {

// One Adam/AdamW update, already reduced to per-element coefficients by the
// optimizer (model/optim.h), so that both variants share one kernel:
//   g  = grad * grad_scale                     (global-norm clipping)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p  = p * decay_factor - step_size * m / (sqrt(v) * v_scale + eps)
struct AdamCoefficients {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float step_size = 0.0f;
  float v_scale = 1.0f;
  float decay_factor = 1.0f;
  float grad_scale = 1.0f;
};

// Thrown when a backend cannot run on this machine (no CUDA device): the
// stage exits with kExitUnavailable and the harness records "skipped".
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// train.deterministic under tensor parallelism (docs/determinism.md): the
// two products whose inner dimension tensor parallelism cuts, in the
// canonical pieces. The inner dimension is `segments` (lengths summing to
// it, in order, each divisible by `groups`); piece (g, s) is the g-th
// groups-th of segment s. Each piece is multiplied alone; a group's pieces
// are added in segment order, and the groups in one balanced binary tree
// (groups a power of two). A shard holding some groups computes its
// subtree; the group's tree sum (TpGroup::tree_sum) finishes it.
// A capability, not part of every backend: Backend::tree_products().
class TreeProducts {
 public:
  virtual ~TreeProducts() = default;
  // out (N,OC) = inp (N,K) @ weight (OC,K)^T + bias; K cut, the bias (may
  // be empty) in group 0's first piece's product.
  virtual void matmul_forward_tree(Tensor out, Tensor inp, Tensor weight, Tensor bias,
                                   std::span<const int64_t> segments, int groups) = 0;
  // dinp (N,C) = dout (N,OC) @ weight (OC,C); OC cut.
  virtual void matmul_backward_input_tree(Tensor dinp, Tensor dout, Tensor weight,
                                          std::span<const int64_t> segments, int groups) = 0;
};

// train.sequence_pieces under train.deterministic (kernels/sequence_pieces.h,
// docs/determinism.md "Sequence pieces"): the operations whose sums over a
// batch's tokens the pair tree defines, over an arena of this layout's rows
// (N = m T / cp). With it on, matmul_backward's weight and bias gradients
// and the norms' weight gradients are pair trees as well, and every
// product's rows are tiled inside pieces. Each result is this rank's
// subtree; a tree sum over the context-parallel group finishes it.
// A capability, not part of every backend: Backend::piece_ops().
class PieceOps {
 public:
  virtual ~PieceOps() = default;
  virtual const SequencePieces& pieces() const = 0;
  // The causal attention of the arena's query rows (its pairs, the first
  // of them the row's pair `first_pair`; whole rows: 0) against `whole`
  // (m,T,W): every row of the batch whole, in position order (whole rows:
  // qkv itself). out, lse as attention_forward's.
  virtual void attention_pieces_forward(Tensor out, Tensor lse, Tensor qkv, Tensor whole, int NH, int KVH,
                                        int64_t first_pair) = 0;
  // Its backward: dqkv's query columns = the arena rows' dQ (its key and
  // value columns not touched); dkv (m,T,2*KVH*HS, attention_kv_pack's
  // columns) = this rank's subtree of the pair tree of every key position's dK and dV.
  virtual void attention_pieces_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                         Tensor whole, int NH, int KVH, int64_t first_pair) = 0;
  // dwte += the pair tree of the arena's rows of dout added into their tokens' rows.
  virtual void embedding_pieces_backward(Tensor dwte, Tensor dout, const int32_t* tokens) = 0;
  // The pair tree's sum of x (one value per arena row), in double.
  virtual double sum_pieces(Tensor x) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // What ran, for the record: "cpu", "reference", "cuda (NVIDIA H100 ..., sm_90)".
  virtual std::string name() const = 0;
  // The device libraries under it and their versions, for provenance:
  // {"cuda_runtime", "13.0"}, {"cuda_driver", "13.0"}, {"cublas", "13.1.0"}; none for host backends
  // (the BLAS kernel is kernel_library_info's).
  virtual std::vector<std::pair<std::string, std::string>> library_versions() const { return {}; }
  // Where this backend's tensors must live: the model, the optimizer and the
  // activations allocate their Buffers here. Token and target arrays are
  // always passed as HOST pointers; a device backend copies them itself.
  virtual Memory& memory() { return host_memory(); }
  // Returns when every kernel issued so far has finished (a device backend
  // runs them asynchronously; host backends are always finished): what a
  // timer needs before it stops.
  virtual void synchronize() {}
  // Whether the stored activations may be bf16 (train.precision bf16,
  // model/activations.h). Then these arguments may be bf16 tensors, and
  // only these: the `out` of layernorm_forward, rmsnorm_forward,
  // attention_forward and the gelu, relu, silu and swiglu forwards (the
  // float result rounded once, to nearest even); the `out` that
  // attention_backward takes; the `inp` of matmul_forward and
  // matmul_backward (read exactly). Every other tensor is f32 always.
  virtual bool accepts_bf16() const { return false; }
  // The matrix products' operand type, fixed when the backend is made: f32,
  // or bf16 with train.precision bf16 (fp32 sums either way). The MFU peak
  // is measured on products of this type.
  virtual Dtype products() const { return Dtype::f32; }

  // x = 0.
  virtual void zero(Tensor x) = 0;
  // dst = src (same number of elements).
  virtual void copy(Tensor dst, Tensor src) = 0;

  // out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T). A negative token
  // id stands for no row of wte (a vocabulary shard's lookup of a token that
  // another rank holds): out = wpe[t] alone.
  virtual void encoder_forward(Tensor out, const int32_t* tokens, Tensor wte, Tensor wpe) = 0;
  // dwte (V,C) +=, dwpe (T',C) += from dout (B,T,C); a negative token id adds
  // nothing to dwte (its position row still gets its share). An empty dwte
  // (the CPU backend, under train.sequence_pieces: PieceOps adds it) adds to dwpe alone.
  virtual void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens) = 0;

  // Per row of inp (N,C): out = (x - mean) * rstd * weight + bias, eps 1e-5.
  // mean, rstd (N) are kept for the backward pass.
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                 Tensor bias) = 0;
  virtual void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                  Tensor weight, Tensor mean, Tensor rstd) = 0;
  // RMSNorm (Zhang and Sennrich 2019), per row of inp (N,C):
  // out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + 1e-5); rstd (N) is
  // kept for the backward pass. No bias and no mean subtraction.
  virtual void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight) = 0;
  // dinp (N,C) += (accumulated, as layernorm_backward); dweight (C) +=.
  virtual void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                                Tensor rstd) = 0;

  // out (N,OC) = inp (N,C) @ weight (OC,C)^T + bias (OC); bias may be empty.
  virtual void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) = 0;
  // dinp (N,C) =; dweight (OC,C) +=; dbias (OC) += (may be empty). Either
  // half may be skipped: an empty dinp computes no input gradient (a
  // pipeline's W pass), an empty dweight no weight or bias gradient (its B
  // pass); dbias must then be empty too.
  virtual void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                               Tensor weight) = 0;
  // The canonical-piece products of train.deterministic under tensor
  // parallelism (TreeProducts, below) where this backend has them: the
  // deterministic fp32 CPU backend; null elsewhere. A run asks once, when it
  // lays out the model (train/resolve/layout.h deterministic_pieces), so a backend
  // without them is never asked for them mid-step.
  virtual TreeProducts* tree_products() { return nullptr; }
  // train.sequence_pieces' operations (PieceOps); null when it is off or unsupported.
  virtual PieceOps* piece_ops() { return nullptr; }

  // Causal multi-head self-attention with NH query heads and KVH key/value
  // heads (grouped-query attention; KVH divides NH, KVH = NH is plain
  // multi-head). qkv (B,T,(NH+2*KVH)*HS) holds per position the NH query
  // heads, then the KVH key heads, then the KVH value heads, each HS wide;
  // query head h reads key/value head h / (NH / KVH). out (B,T,NH*HS);
  // lse (B,NH,T) is the log-sum-exp of each softmax row (scaled scores),
  // kept so backward can rebuild probabilities without storing the (T,T)
  // matrix. HS = out.dim(2) / NH.
  virtual void attention_forward(Tensor out, Tensor lse, Tensor qkv, int NH, int KVH) = 0;
  // dqkv (B,T,(NH+2*KVH)*HS) =, from dout (B,T,NH*HS) and the forward's out,
  // lse and qkv. A key/value head's gradient sums over its group's query heads.
  virtual void attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, int NH,
                                  int KVH) = 0;

  // One query against a key/value cache (generation with a KV cache): the
  // query is the last row of qkv (1,P,(NH+2*KVH)*HS), keys and values are
  // its rows 0..P-1; out (1,1,NH*HS). The same arithmetic as row P-1 of
  // attention_forward.
  virtual void attention_decode(Tensor out, Tensor qkv, int NH, int KVH) = 0;

  // Context parallelism's ring attention (model/context_parallel.h): the
  // causal attention cut into blocks of keys. qkv (N,L,(NH+2*KVH)*HS)
  // supplies the query heads of L rows, kv (N,L,2*KVH*HS) one block of L
  // keys and values (attention_kv_pack's layout: the key heads, then the
  // value heads). Query row t sees key s when s <= t (`causal`: the block
  // holds the queries' own positions) or every key (`!causal`: an earlier
  // block). The block's normalized output o and log-sum-exp l are merged
  // into out (N,L,NH*HS) and lse (N,NH,L) by their log-sum-exps (`merge`):
  //   out = (out e^lse + o e^l) / (e^lse + e^l),  lse = log(e^lse + e^l);
  // or written (`!merge`: the rows' first block). All f32.
  virtual void attention_block_forward(Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH, int KVH, bool causal,
                                       bool merge);
  // Its backward, given dout and the final out and lse (every block
  // merged): with P = exp(scale q.k - lse) and D = dout . out per row,
  // dqkv's query columns += dS k and dkv += (dS^T q, P^T dout), dS = P (dout.v - D) scale;
  // dqkv's key and value columns are not touched. A key/value head sums its group's query heads.
  virtual void attention_block_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv,
                                        Tensor kv, int NH, int KVH, bool causal);
  // kv (N,L,2*KVH*HS) = the key and value heads of qkv (N,L,(NH+2*KVH)*HS);
  // unpack: dqkv's key and value columns = dkv (its query columns kept).
  virtual void attention_kv_pack(Tensor kv, Tensor qkv, int NH, int KVH);
  virtual void attention_kv_unpack(Tensor dqkv, Tensor dkv, int NH, int KVH);

  // Rotary position embedding (RoPE, Su et al. 2021), in place on the NH
  // query and KVH key heads of qkv (B,T,(NH+2*KVH)*HS); value heads are left
  // alone. Row t sits at position pos0 + t. In every rotated head the pair
  // (x[2i], x[2i+1]), i < HS/2, turns by the angle pos * theta^(-2i/HS):
  //   x'[2i]   = x[2i] cos - x[2i+1] sin
  //   x'[2i+1] = x[2i] sin + x[2i+1] cos
  // The angle, its cosine and its sine are computed in double and rounded to
  // float, so every backend uses the same (cos, sin) for a position.
  virtual void rope_forward(Tensor qkv, int NH, int KVH, int pos0, float theta) = 0;
  // Its backward: the gradient turned back by the same angle (the transpose
  // of a rotation is its inverse), in place on dqkv's query and key heads.
  virtual void rope_backward(Tensor dqkv, int NH, int KVH, int pos0, float theta) = 0;

  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void gelu_forward(Tensor out, Tensor inp) = 0;
  // dinp = dout * gelu'(inp), element by element: dinp may alias dout or inp.
  virtual void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) = 0;
  // ReLU: max(x, 0); its backward passes dout where inp > 0 (0 at inp = 0).
  virtual void relu_forward(Tensor out, Tensor inp) = 0;
  virtual void relu_backward(Tensor dinp, Tensor dout, Tensor inp) = 0;
  // SiLU (swish): x * sigmoid(x); dinp = dout * s (1 + x (1 - s)), s = sigmoid(x).
  // Both backwards allow dinp to alias dout or inp, as gelu_backward.
  virtual void silu_forward(Tensor out, Tensor inp) = 0;
  virtual void silu_backward(Tensor dinp, Tensor dout, Tensor inp) = 0;
  // SwiGLU (Shazeer 2020): inp (N,2H) holds per row the gate g (its first H
  // columns) and the up projection u (its last H); out (N,H) = silu(g) * u.
  virtual void swiglu_forward(Tensor out, Tensor inp) = 0;
  // dinp (N,2H) =: dg = dout * u * silu'(g), du = dout * silu(g); no aliasing.
  virtual void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) = 0;

  // out = a + b (same shapes); out may alias a or b. Its backward is the identity into both
  // branches, which the model gets by accumulating into one dresidual buffer.
  virtual void residual_forward(Tensor out, Tensor a, Tensor b) = 0;

  // losses (N) = -log softmax(logits (N,V))[target]; targets (N).
  virtual void crossentropy_forward(Tensor losses, Tensor logits, const int32_t* targets) = 0;
  // dlogits (N,V) = dloss * (softmax(logits) - onehot(target)); may alias logits.
  virtual void crossentropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets,
                                     float dloss) = 0;

  // The vocabulary-parallel cross-entropy (Megatron's, without gathering the
  // logits): a rank holds the columns [v0, v0 + W) of the (N, vocab) logits
  // as logits (N, W); columns at or past `vocab` are padding and take no part.
  // The row's softmax is put together from every shard's log-sum-exp.
  //
  // lse (N) = log sum_j exp(logits[i, j]) over the shard's real columns
  // (-infinity for a shard with none); target_logit (N) = the target's logit
  // where v0 <= targets[i] < min(v0 + W, vocab), else 0.
  virtual void crossentropy_shard_stats(Tensor lse, Tensor target_logit, Tensor logits, const int32_t* targets,
                                        int64_t v0, int64_t vocab) = 0;
  // parts (P+1, N): rows 0..P-1 each shard's lse, row P the target's logit
  // (the group's sum, each rank having filled its own rows). lse (N) = the
  // log-sum-exp of the P shard values, taken in rank order from their
  // maximum; losses (N) = lse - parts[P]. Every rank computes the same bits.
  virtual void crossentropy_shard_combine(Tensor losses, Tensor lse, Tensor parts) = 0;
  // dlogits (N, W) = dloss * (exp(logits - lse) - onehot(target)) on the real
  // columns, 0 on the padding; lse (N) from crossentropy_shard_combine. May
  // alias logits.
  virtual void crossentropy_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, const int32_t* targets,
                                           int64_t v0, int64_t vocab, float dloss) = 0;

  // In-place update of one parameter tensor and its moments (see above).
  virtual void adam_update(Tensor param, Tensor grad, Tensor m, Tensor v,
                           const AdamCoefficients& k) = 0;
  // Sum of squares of x, accumulated in double.
  virtual double sum_squares(Tensor x) = 0;
  // Sum of x, accumulated in double (the mean loss).
  virtual double sum(Tensor x) = 0;

  // Where a backend chooses a library per product shape (the CPU backend
  // under train.gemm auto): each shape it has decided, as (shape, library),
  // "4096x1152x384 NT t2" -> "onednn"; the run's provenance records them.
  virtual std::vector<std::pair<std::string, std::string>> product_choices() const { return {}; }
};

// Sum of a host tensor in element order, in double (the CPU backends' sum).
double sum_in_order(Tensor x);

// attention_kv_pack (`unpack` false: packed = full's key and value columns)
// and attention_kv_unpack (true: full's key and value columns = packed) on
// host memory, for the host backends: packed (N,L,2*KVH*HS), full
// (N,L,(NH+2*KVH)*HS).
void host_kv_columns(Tensor packed, Tensor full, int NH, int KVH, bool unpack);

// train.gemm: which library runs the CPU backend's fp32 matrix products
// (kernels/cpu/gemm.h). auto: per product shape, the faster of OpenBLAS and
// oneDNN as timed once on this machine (OpenBLAS under train.deterministic).
enum class GemmChoice { kAuto, kOpenblas, kOnednn };
std::string to_string(GemmChoice g);                       // "auto" | "openblas" | "onednn"
void from_string(const std::string& text, GemmChoice& g);  // throws std::invalid_argument naming train.gemm
// train.gemm_choices: the per-shape choices a run recorded (its provenance's
// "gemm_choices": {"4096x1152x384 NT t2": "onednn", ...}), read from a JSON
// file holding that object or from a run's metrics.jsonl (its summary's
// provenance), so that a rerun makes the same choices. Throws
// std::invalid_argument "train.gemm_choices: <path>: <problem>".
std::map<std::string, GemmChoice> read_gemm_choices(const std::string& path);

// What a stage asks of its backend, from the configuration.
struct BackendOptions {
  int threads = 1;      // CPU threads (train.threads, 0 resolved to every core)
  bool tf32 = false;    // train.tf32: CUDA matrix products on TF32 tensor cores
  int device_hint = 0;  // CUDA: the GPU is device_hint % device count (a rank's local rank)
  bool bf16 = false;    // train.precision bf16: matrix products with bf16 inputs, fp32 accumulation (CPU)
  bool deterministic = false;  // train.deterministic: the same bits at any thread count (CPU)
  int column_tile = 0;         // with deterministic: the products' column tiles (canonical_column_tile; 0: 256)
  GemmChoice gemm = GemmChoice::kAuto;  // train.gemm: the fp32 products' library (CPU)
  std::map<std::string, GemmChoice> gemm_pins;  // train.gemm_choices (read_gemm_choices): auto's choices pinned
  SequencePieces pieces;  // with deterministic: train.sequence_pieces (CPU; PieceOps)

  // `threads` threads, every other option at its default; then the ones a test or tool sets.
  static BackendOptions with_threads(int n) {
    BackendOptions o;
    o.threads = n;
    return o;
  }
  BackendOptions& with_bf16(bool on) { bf16 = on; return *this; }
  BackendOptions& with_deterministic(bool on) { deterministic = on; return *this; }
  BackendOptions& with_gemm(GemmChoice g) { gemm = g; return *this; }
  BackendOptions& with_pieces(const SequencePieces& p) { pieces = p; return *this; }
};

// A kind of backend as a stage program chooses it, once: how to make one,
// and how to measure the FP32 matrix-product ceiling (GFLOP/s) of a job of
// `ranks` such backends, `ranks_per_machine` of them on each machine, with
// `threads` CPU threads each (the MFU denominator; a device backend counts
// the devices the ranks actually use). Measuring the machine is kept off the
// kernel contract above.
struct BackendKind {
  std::string name;  // "cpu", "cuda"
  std::function<std::unique_ptr<Backend>(const BackendOptions&)> make;
  std::function<double(Backend& be, int ranks, int ranks_per_machine, int threads)> ceiling_gflops;
};

// The CPU backend's kind: make_cpu_backend, and as the ceiling the better of
// OpenBLAS's own threaded SGEMM and oneDNN's fp32 matmul on ranks x threads
// threads (kernels/cpu/blas.h, gemm.h); a bf16 backend's, oneDNN's bf16 product.
BackendKind cpu_backend_kind();

// The kernel libraries linked into every program, for provenance: the
// OpenBLAS kernel chosen at run time and its build configuration, as
// ("blas_core", ...), ("blas_config", ...), and OpenMP's wait policy
// ("omp_wait_policy", kernels/cpu/omp_wait.h).
std::vector<std::pair<std::string, std::string>> kernel_library_info();

// The naive reference kernels (kernels/reference/): loops that follow the
// formulas, single-threaded; the test oracle and the benchmark baseline.
std::unique_ptr<Backend> make_reference_backend();
// The optimised CPU kernels (kernels/cpu/): BLAS GEMMs, OpenMP threads.
// threads = 1 runs truly serially (no worker threads are used). With `bf16`
// every matrix product rounds its inputs to bf16 and accumulates in fp32
// through oneDNN (kernels/cpu/bf16_matmul.h), and the backend accepts bf16
// tensors for the activations only a product reads (accepts_bf16); every
// other kernel computes in fp32 (train.precision bf16, docs/precision.md).
// With `deterministic` (train.deterministic) every result is the same bits
// at any thread count: the sums over rows that threads would split (the
// norms' weight and bias gradients, sum_squares) take a fixed order, and
// the matrix products are cut into fixed tiles (an OpenBLAS product's result
// can depend on its size); the other kernels give the same bits at any
// thread count already (docs/determinism.md).
// `column_tile`: with deterministic, the width of the products' column tiles
// (0: 256; CpuBackend).
// `gemm`: the fp32 products' provider (train.gemm; kernels/cpu/gemm.h).
// The run's options as resolved (`o.tf32` and `o.device_hint` are the CUDA
// stages' and do nothing here).
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& o);
// One with `threads` threads and every other option at its default (tests, tools).
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace gpt2
