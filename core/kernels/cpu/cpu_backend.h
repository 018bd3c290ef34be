// The optimised CPU backend: GEMMs through CBLAS (single-threaded OpenBLAS
// called on slabs of the output from each thread), every other kernel a
// vectorisable loop; all parallelised with OpenMP over `threads` threads.
// Reductions across threads go through per-thread partials summed in thread
// order, so results are bit-identical run to run for a given thread count.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.h"
#include "kernels/bf16.h"
#include "kernels/buffer.h"
#include "kernels/cpu/bf16_matmul.h"
#include "kernels/cpu/gemm.h"

namespace gpt2::cpu {

class CpuBackend final : public Backend, public TreeProducts, public PieceOps {
 public:
  // From the run's BackendOptions (kernels/backend.h; `tf32` and `device_hint` are the CUDA stages'):
  // `bf16`: matrix products with bf16 inputs through oneDNN (make_cpu_backend).
  // `deterministic`: train.deterministic; every result the same bits at any
  // thread count (the norms' and sum_squares' sums in a fixed order, the
  // products cut into fixed tiles: matmul.cpp).
  // `column_tile` (deterministic only; 0: 256): the products' output columns
  // are cut into tiles of this width from column 0, so that a product over a
  // tensor-parallel shard of the columns makes the same calls as the whole
  // product does there (docs/determinism.md, "Tensor parallelism").
  // `gemm`: the fp32 products' provider (train.gemm; gemm.h).
  // `gemm_pins`: train.gemm_choices, auto's choices for those shapes (gemm.h).
  // `pieces` (deterministic, fp32 only): train.sequence_pieces (PieceOps; pieces.cpp).
  explicit CpuBackend(const BackendOptions& o);
  // "cpu", or "cpu (bf16 products: oneDNN 2.6.3 brg:avx512_core_bf16)": the
  // kernel oneDNN chose names the path (native bf16 or conversions).
  std::string name() const override;
  std::vector<std::pair<std::string, std::string>> library_versions() const override;
  int threads() const { return threads_; }
  // The fp32 products' providers: the mode and every per-shape decision (provenance, the kernel report).
  const GemmProviders& gemm() const { return gemm_; }
  std::vector<std::pair<std::string, std::string>> product_choices() const override;
  // The products' operand type, fixed at construction: f32 (OpenBLAS) or
  // bf16 (oneDNN). Each product kernel dispatches on it once per call; no
  // kernel body tests it (attention's tiles take it as a template type).
  Dtype products() const override { return products_; }
  // With bf16 products (a bf16 input goes to oneDNN as it is).
  bool accepts_bf16() const override { return products_ == Dtype::bf16; }

  void zero(Tensor x) override;
  void copy(Tensor dst, Tensor src) override;

  void encoder_forward(Tensor out, const int32_t* tokens, Tensor wte, Tensor wpe) override;
  void encoder_backward(Tensor dwte, Tensor dwpe, Tensor dout, const int32_t* tokens) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                         Tensor bias) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                          Tensor weight, Tensor mean, Tensor rstd) override;
  void matmul_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
  void matmul_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                       Tensor weight) override;
  // The tree products with deterministic fp32 products; null otherwise.
  TreeProducts* tree_products() override {
    return deterministic_ && products_ == Dtype::f32 ? this : nullptr;
  }
  void matmul_forward_tree(Tensor out, Tensor inp, Tensor weight, Tensor bias, std::span<const int64_t> segments,
                           int groups) override;
  void matmul_backward_input_tree(Tensor dinp, Tensor dout, Tensor weight, std::span<const int64_t> segments,
                                  int groups) override;
  // train.sequence_pieces' operations (pieces.cpp); null when it is off.
  PieceOps* piece_ops() override { return pieces_.on() ? this : nullptr; }
  const SequencePieces& pieces() const override { return pieces_; }
  void attention_pieces_forward(Tensor out, Tensor lse, Tensor qkv, Tensor whole, int NH, int KVH,
                                int64_t first_pair) override;
  void attention_pieces_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, Tensor whole,
                                 int NH, int KVH, int64_t first_pair) override;
  void embedding_pieces_backward(Tensor dwte, Tensor dout, const int32_t* tokens) override;
  double sum_pieces(Tensor x) override;
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor inp, Tensor weight) override;
  void rmsnorm_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight,
                        Tensor rstd) override;
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, int NH, int KVH) override;
  void attention_backward(Tensor dqkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, int NH,
                          int KVH) override;
  void attention_decode(Tensor out, Tensor qkv, int NH, int KVH) override;
  // Context parallelism's ring attention (ring_attention.cpp).
  void attention_block_forward(Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH, int KVH, bool causal,
                               bool merge) override;
  void attention_block_backward(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, Tensor kv,
                                int NH, int KVH, bool causal) override;
  void attention_kv_pack(Tensor kv, Tensor qkv, int NH, int KVH) override { host_kv_columns(kv, qkv, NH, KVH, false); }
  void attention_kv_unpack(Tensor dqkv, Tensor dkv, int NH, int KVH) override {
    host_kv_columns(dkv, dqkv, NH, KVH, true);
  }
  void rope_forward(Tensor qkv, int NH, int KVH, int pos0, float theta) override;
  void rope_backward(Tensor dqkv, int NH, int KVH, int pos0, float theta) override;
  void gelu_forward(Tensor out, Tensor inp) override;
  void gelu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void relu_forward(Tensor out, Tensor inp) override;
  void relu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void silu_forward(Tensor out, Tensor inp) override;
  void silu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void swiglu_forward(Tensor out, Tensor inp) override;
  void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp) override;
  void residual_forward(Tensor out, Tensor a, Tensor b) override;
  void crossentropy_forward(Tensor losses, Tensor logits, const int32_t* targets) override;
  void crossentropy_backward(Tensor dlogits, Tensor logits, const int32_t* targets,
                             float dloss) override;
  void crossentropy_shard_stats(Tensor lse, Tensor target_logit, Tensor logits, const int32_t* targets, int64_t v0,
                                int64_t vocab) override;
  void crossentropy_shard_combine(Tensor losses, Tensor lse, Tensor parts) override;
  void crossentropy_shard_backward(Tensor dlogits, Tensor logits, Tensor lse, const int32_t* targets, int64_t v0,
                                   int64_t vocab, float dloss) override;
  void adam_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamCoefficients& k) override;
  double sum_squares(Tensor x) override;
  double sum(Tensor x) override { return sum_in_order(x); }

 private:
  // Scratch of at least n floats, reused across calls. It grows (allocates)
  // only when a larger shape than any before is seen: the first step.
  float* scratch(size_t n);

  // The bf16 copies of a product's operands (grown, never shrunk: no
  // allocation once the step's shapes have been seen), converted with
  // threads_ threads; a bf16 tensor is its own copy.
  const bf16* as_bf16(std::vector<bf16>& to, Tensor from);

  // The kernels that write a stored activation, over its element type
  // (float or bf16; the math in float either way).
  template <typename T>
  void layernorm_rows(T* out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias);
  template <typename T>
  void rmsnorm_rows(T* out, Tensor rstd, Tensor inp, Tensor weight);
  // The attention's tiles: T the output's (stored) element type, Prod the
  // products' operand type (float: OpenBLAS; bf16: oneDNN's tile products).
  template <typename T, typename Prod>
  void attention_tiles(T* out, Tensor lse, Tensor qkv, int64_t C, int NH, int KVH);
  template <typename T, typename Prod>
  void attention_backward_tiles(Tensor dqkv, Tensor dout, const T* out, Tensor lse, Tensor qkv, int64_t C, int NH,
                                int KVH);
  // The ring attention's block kernels (ring_attention.cpp), Prod the
  // products' operand type as attention_tiles'.
  template <typename Prod>
  void block_tiles(Tensor out, Tensor lse, Tensor qkv, Tensor kv, int NH, int KVH, bool causal, bool merge);
  template <typename Prod>
  void block_backward_tiles(Tensor dqkv, Tensor dkv, Tensor dout, Tensor out, Tensor lse, Tensor qkv, Tensor kv,
                            int NH, int KVH, bool causal);
  // matmul_forward and matmul_backward's products with bf16 operands (oneDNN):
  // the operands rounded to bf16, the sums in fp32.
  void onednn_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias);
  void onednn_backward(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight);

  // Under bf16 products: one tile product per thread and, per thread, two
  // bf16 tiles of `tile` elements (the attention's P and dS); grown, never shrunk.
  void ready_tile_products(size_t tile);

  // The tiles a product's output is cut into among nt threads (matmul.cpp).
  struct Tiling {
    int rows = 1, cols = 1;
    int col_width = 0;  // deterministic_: columns in tiles of this many from 0 (the last may be short)
    int row_width = 0;  // the same for rows (a weight gradient's output channels); 0: near-equal slabs
    int count() const { return rows * cols; }
    // Tile row r's first row and count of `n` rows; tile column c's of `n` columns.
    int row0(int n, int r) const { return row_width ? r * row_width : static_cast<int>(int64_t{n} * r / rows); }
    int nrows(int n, int r) const { return (row_width ? std::min(n, (r + 1) * row_width) : row0(n, r + 1)) - row0(n, r); }
    int col0(int n, int c) const { return col_width ? c * col_width : static_cast<int>(int64_t{n} * c / cols); }
    int ncols(int n, int c) const { return (col_width ? std::min(n, (c + 1) * col_width) : col0(n, c + 1)) - col0(n, c); }
  };
  Tiling tiling(int rows, int cols, int nt, bool by_rows) const;
  // A weight gradient's (output channels x inputs): under deterministic_ both
  // cut every column_tile_, since tensor parallelism splits either.
  Tiling channel_tiling(int rows, int cols, int nt) const;
  // The inner-dimension tree of matmul_forward_tree and matmul_backward_input_tree:
  // out (N,M) = the pieces' sum of A[:, piece] (lda) times the piece of B:
  // B (M,K) transposed (b_rows false: B[:, piece]^T) or B (K,M) (b_rows: B[piece, :]).
  // `bias` (or nullptr) joins the product of group 0's first piece.
  void inner_tree(float* out, const float* A, int lda, const float* B, int ldb, bool b_rows, int N, int M,
                  std::span<const int64_t> segments, int groups, const float* bias);
  // out (N,M) = A (N,k, lda) @ B^T or B (as inner_tree) [+ bias (M)], in this backend's tiles.
  void tiled_product(float* out, const float* A, int lda, const float* B, int ldb, bool b_rows, int N, int M, int k,
                     const float* bias);

  // The norms' weight (and bias) gradients under deterministic_: each column
  // summed over the rows in row order by the one thread that owns it.
  // The norms' backward over the rows; kByColumns: the weight (and bias)
  // gradients by norm_weight_columns afterwards (deterministic_).
  template <bool kByColumns>
  void layernorm_backward_rows(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                               Tensor mean, Tensor rstd);
  template <bool kByColumns>
  void rmsnorm_backward_rows(Tensor dinp, Tensor dweight, Tensor dout, Tensor inp, Tensor weight, Tensor rstd);
  template <bool kLayerNorm>
  void norm_weight_columns(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean, Tensor rstd);
  // Row i's terms of those sums, columns [c0, c1): dw += xhat dout and (kLayerNorm) db += dout.
  template <bool kLayerNorm>
  static void norm_columns_row(float* dw, float* db, Tensor dout, Tensor inp, Tensor mean, Tensor rstd, int64_t i,
                               int64_t c0, int64_t c1) {
    const int64_t C = inp.cols();
    const float* x = inp.data + i * C;
    const float* d = dout.data + i * C;
    const float s = rstd.data[i];
    if constexpr (kLayerNorm) {
      const float m = mean.data[i];
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        float xhat = (x[c] - m) * s;
        db[c] += d[c];
        dw[c] += xhat * d[c];
      }
    } else {
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        const float xhat = x[c] * s;
        dw[c] += xhat * d[c];
      }
    }
  }
  // Under sequence pieces (pieces.cpp): matmul_backward's weight and bias
  // gradients and the norms' (norm_weight_columns'), each the pair tree of
  // its pairs' leaves, added into the gradient once.
  void matmul_weight_pieces(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp);
  template <bool kLayerNorm>
  void norm_columns_pieces(Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor mean, Tensor rstd);
  // The pair tree over this rank's pairs of leaf(j, dst), each leaf into a
  // zeroed buffer of `count` floats: the root's buffer.
  template <typename Leaf>
  float* pair_tree(size_t count, const Leaf& leaf);
  // dst[0, n) += src[0, n), element by element (any thread count: the same bits).
  void add_floats(float* dst, const float* src, size_t n);

  int threads_;
  bool deterministic_ = false;
  int column_tile_ = 256;            // deterministic_: the products' output columns in tiles this wide
  std::vector<Buffer> tree_buffers_;  // inner_tree's partial sums and one piece's product
  SequencePieces pieces_;             // train.sequence_pieces (off: 1 piece)
  std::vector<Buffer> pair_buffers_;  // pair_tree's levels
  Buffer gather_;                     // one pair's rows of a product's two operands
  // embedding_pieces_backward's rows grouped by token (counting sort): each token's first index, a cursor,
  // and the rows with their pairs.
  std::vector<int64_t> token_first_, token_next_, by_token_row_;
  std::vector<int32_t> by_token_pair_;
  std::vector<double> chunk_sums_;  // sum_squares' fixed chunks (deterministic_)
  Buffer scratch_;
  Dtype products_ = Dtype::f32;
  GemmProviders gemm_;                  // the fp32 products (OpenBLAS or oneDNN per shape)
  std::unique_ptr<Bf16Matmul> onednn_;  // the bf16 products (products_ bf16); null otherwise
  std::vector<bf16> bf16_a_, bf16_b_, bf16_c_;  // the products' bf16 operands (as_bf16)
  std::vector<std::unique_ptr<Bf16TileGemm>> tile_gemm_;  // one per thread (attention, bf16 products)
  std::vector<bf16> tile16_;                               // threads x 2 tiles
};

}  // namespace gpt2::cpu
