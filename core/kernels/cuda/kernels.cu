// CUDA kernels of the GPT-2 backend and their launchers declared in
// kernels.h, all but the GEMMs (cuBLAS) and attention (attention.cu). The
// arithmetic is in device_math.h; this file holds the parallel structure:
// which thread owns which element and in what order partial results are
// combined. That order is fixed (no floating-point atomics), so the same
// inputs give bitwise the same outputs on every run.
// Letters: B batch, T time, C channels, NH query heads, KVH key/value heads,
// HS head size, V vocab, N = B * T rows, OC output channels, H SwiGLU width.
#include "kernels/cuda/kernels.h"

#include <cstdint>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/kernel_common.cuh"

namespace gpt2::cuda {
namespace {

using detail::check_launch;
using detail::warp_reduce;
using detail::warp_reduce_sum;
using dm::kWarpSize;
constexpr int kElementwiseThreads = 256;
// Grid-stride loops: enough blocks to fill an H100 several times over,
// without launching one thread per element of a 100M-element tensor.
constexpr int64_t kMaxElementwiseBlocks = 4096;

int elementwise_blocks(int64_t work_items) {
  int64_t blocks = (work_items + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<int>(blocks < kMaxElementwiseBlocks ? blocks : kMaxElementwiseBlocks);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---------------------------------------------------------------- encoder

// out (N,C) = wte[tokens[n]] + wpe[n % T]; one thread per element.
__global__ void encoder_forward_kernel(float* out, const int32_t* tokens, const float* wte, const float* wpe, int N,
                                       int T, int C) {
  const int64_t total = static_cast<int64_t>(N) * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(n % T);
    const float pe = wpe[static_cast<int64_t>(t) * C + c];
    out[i] = tokens[n] < 0 ? pe : wte[static_cast<int64_t>(tokens[n]) * C + c] + pe;  // < 0: another shard's token
  }
}

// dwpe[t,c] += dout[0,t,c] + dout[1,t,c] + ... in batch order (the
// reference's order, starting from the old dwpe value).
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const int64_t total = static_cast<int64_t>(T) * C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += dout[static_cast<int64_t>(b) * total + i];
    dwpe[i] = acc;
  }
}

// One block per bucket (= one distinct token, so no two blocks share a dwte
// row); threads stride over channels and add the bucket's positions in
// ascending order, as the reference does.
__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int32_t* bucket_token,
                                            const int32_t* starts, const int32_t* order, int C) {
  const int bucket = blockIdx.x;
  const int begin = starts[bucket], end = starts[bucket + 1];
  float* row = dwte + static_cast<int64_t>(bucket_token[bucket]) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    for (int k = begin; k < end; ++k) acc += dout[static_cast<int64_t>(order[k]) * C + c];
    row[c] = acc;
  }
}

// ---------------------------------------------------------------- layernorm

// One warp per row, kRowWarps rows per block. Two passes over the row for
// mean and variance (stable for large means), a third writes the output;
// the re-reads hit L1.
__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                             const float* bias, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warp leaves together
  const float* x = inp + static_cast<int64_t>(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sum += x[c];
  const float m = warp_reduce(sum, dm::SumOp{}) / static_cast<float>(C);
  float sq = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float d = x[c] - m;
    sq += d * d;
  }
  const float s = dm::layernorm_rstd(warp_reduce(sq, dm::SumOp{}), C);
  float* o = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += kWarpSize) o[c] = dm::layernorm_out(x[c], m, s, weight[c], bias[c]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// dinp (N,C) += per row; one warp per row.
__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    layernorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                   const float* mean, const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const int64_t off = static_cast<int64_t>(row) * C;
  const float* x = inp + off;
  const float* d = dout + off;
  const float m = mean[row], s = rstd[row];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) {
    const float xhat = (x[c] - m) * s;
    const float g = d[c] * weight[c];
    g_sum += g;
    gx_sum += g * xhat;
  }
  const float g_mean = warp_reduce(g_sum, dm::SumOp{}) / static_cast<float>(C);
  const float gx_mean = warp_reduce(gx_sum, dm::SumOp{}) / static_cast<float>(C);
  float* dx = dinp + off;
  for (int c = lane; c < C; c += kWarpSize) {
    const float xhat = (x[c] - m) * s;
    dx[c] += dm::layernorm_dinp(d[c] * weight[c], xhat, s, g_mean, gx_mean);
  }
}

// What column_partials_kernel sums: dout alone into partial_b (kBias);
// LayerNorm's dout * xhat into partial_a and dout into partial_b
// (kLayerNorm); RMSNorm's dout * x * rstd into partial_a (kRmsNorm).
enum class ColumnSums { kBias, kLayerNorm, kRmsNorm };

// Column sums, stage 1. Block (32, kColumnTileRows) covers 32 columns of a
// chunk of kColumnChunkRows rows: thread (x, y) sums rows y, y+8, ... of the
// chunk in order, then thread (x, 0) adds the 8 partials in y order and
// writes partial[chunk][col]. Coalesced: a warp reads 32 adjacent floats.
template <ColumnSums kSums>
__global__ void __launch_bounds__(kWarpSize * dm::kColumnTileRows)
    column_partials_kernel(float* partial_a, float* partial_b, const float* dout, const float* inp,
                           const float* mean, const float* rstd, int N, int C) {
  constexpr bool kHasA = kSums != ColumnSums::kBias, kHasB = kSums != ColumnSums::kRmsNorm;
  __shared__ float tile_a[dm::kColumnTileRows][kWarpSize];
  __shared__ float tile_b[dm::kColumnTileRows][kWarpSize];
  const int col = blockIdx.x * kWarpSize + threadIdx.x;
  const int chunk = blockIdx.y;
  const int row_end = min(N, (chunk + 1) * dm::kColumnChunkRows);
  float acc_a = 0.0f, acc_b = 0.0f;
  if (col < C) {
    for (int r = chunk * dm::kColumnChunkRows + threadIdx.y; r < row_end; r += dm::kColumnTileRows) {
      const float d = dout[static_cast<int64_t>(r) * C + col];
      if constexpr (kSums == ColumnSums::kLayerNorm) {
        acc_a += (inp[static_cast<int64_t>(r) * C + col] - mean[r]) * rstd[r] * d;
      } else if constexpr (kSums == ColumnSums::kRmsNorm) {
        acc_a += inp[static_cast<int64_t>(r) * C + col] * rstd[r] * d;
      }
      if constexpr (kHasB) acc_b += d;
    }
  }
  tile_a[threadIdx.y][threadIdx.x] = acc_a;
  tile_b[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float a = tile_a[0][threadIdx.x], b = tile_b[0][threadIdx.x];
    for (int y = 1; y < dm::kColumnTileRows; ++y) {
      a += tile_a[y][threadIdx.x];
      b += tile_b[y][threadIdx.x];
    }
    const int64_t at = static_cast<int64_t>(chunk) * C + col;
    if constexpr (kHasA) partial_a[at] = a;
    if constexpr (kHasB) partial_b[at] = b;
  }
}

// Column sums, stage 2: sum[c] += partial[0][c] + partial[1][c] + ... in
// chunk order; one thread per column.
__global__ void column_finalize_kernel(float* sum, const float* partial, int chunks, int C) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  float acc = 0.0f;
  for (int k = 0; k < chunks; ++k) acc += partial[static_cast<int64_t>(k) * C + col];
  sum[col] += acc;
}

// ---------------------------------------------------------------- rmsnorm

// One warp per row, kRowWarps rows per block: the sum of squares, then the
// output (the re-read hits L1).
__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warp leaves together
  const float* x = inp + static_cast<int64_t>(row) * C;
  float sq = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) sq += x[c] * x[c];
  const float s = dm::rmsnorm_rstd(warp_reduce(sq, dm::SumOp{}), C);
  float* o = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += kWarpSize) o[c] = dm::rmsnorm_out(x[c], s, weight[c]);
  if (lane == 0) rstd[row] = s;
}

// dinp (N,C) += per row; one warp per row. dweight goes through the column
// sums (ColumnSums::kRmsNorm).
__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    rmsnorm_backward_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                 const float* rstd, int N, int C) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const int64_t off = static_cast<int64_t>(row) * C;
  const float* x = inp + off;
  const float* d = dout + off;
  const float s = rstd[row];
  float gx_sum = 0.0f;
  for (int c = lane; c < C; c += kWarpSize) gx_sum += d[c] * weight[c] * (x[c] * s);
  const float gx_mean = warp_reduce(gx_sum, dm::SumOp{}) / static_cast<float>(C);
  float* dx = dinp + off;
  for (int c = lane; c < C; c += kWarpSize) dx[c] += dm::rmsnorm_dinp(d[c] * weight[c], x[c] * s, s, gx_mean);
}

// ---------------------------------------------------------------- bf16

__global__ void to_bf16_kernel(uint16_t* out, const float* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    out[i] = dm::bf16_bits(in[i]);
  }
}

// ---------------------------------------------------------------- bias

// out (N,OC) += bias on every row; kVec4 reads and writes float4 (OC % 4 == 0
// and 16-byte aligned pointers).
template <bool kVec4>
__global__ void add_bias_kernel(float* out, const float* bias, int64_t total, int OC) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if constexpr (kVec4) {
    float4* out4 = reinterpret_cast<float4*>(out);
    for (int64_t i = first; i < total / 4; i += stride) {
      const float4 b = *reinterpret_cast<const float4*>(bias + (i * 4) % OC);
      float4 o = out4[i];
      o.x += b.x;
      o.y += b.y;
      o.z += b.z;
      o.w += b.w;
      out4[i] = o;
    }
  } else {
    for (int64_t i = first; i < total; i += stride) out[i] += bias[i % OC];
  }
}

// ---------------------------------------------------------------- elementwise

struct GeluForwardOp {
  __device__ float operator()(float x, float) const { return dm::gelu_forward(x); }
};
struct GeluBackwardOp {  // a = dout, b = inp
  __device__ float operator()(float d, float x) const { return dm::gelu_grad(x) * d; }
};
struct ReluForwardOp {
  __device__ float operator()(float x, float) const { return dm::relu_forward(x); }
};
struct ReluBackwardOp {  // a = dout, b = inp
  __device__ float operator()(float d, float x) const { return dm::relu_backward(d, x); }
};
struct SiluForwardOp {
  __device__ float operator()(float x, float) const { return dm::silu_forward(x); }
};
struct SiluBackwardOp {  // a = dout, b = inp
  __device__ float operator()(float d, float x) const { return dm::silu_backward(d, x); }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// out[i] = op(a[i], b[i]); out may alias a or b (the activation backwards):
// each element is read before it is written, by the same thread. kVec4: float4
// over the n / 4 whole vectors, the last n % 4 elements by thread 0..2.
template <bool kVec4, typename Op>
__global__ void map_kernel(float* out, const float* a, const float* b, int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int64_t scalar_from = 0;
  if constexpr (kVec4) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) {
      const float4 x = reinterpret_cast<const float4*>(a)[i];
      const float4 y = reinterpret_cast<const float4*>(b)[i];
      reinterpret_cast<float4*>(out)[i] = make_float4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w));
    }
    scalar_from = n4 * 4;
  }
  for (int64_t i = scalar_from + first; i < n; i += stride) out[i] = op(a[i], b[i]);
}

template <typename Op>
void launch_map(const char* name, float* out, const float* a, const float* b, int64_t n, cudaStream_t stream,
                Op op) {
  if (n <= 0) return;
  if (aligned16(out) && aligned16(a) && aligned16(b)) {
    map_kernel<true><<<elementwise_blocks((n + 3) / 4), kElementwiseThreads, 0, stream>>>(out, a, b, n, op);
  } else {
    map_kernel<false><<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(out, a, b, n, op);
  }
  check_launch(name);
}

// ---------------------------------------------------------------- swiglu

// One thread per output element (n, j): gate inp[n][j], up inp[n][H + j].
__global__ void swiglu_forward_kernel(float* out, const float* inp, int N, int H) {
  const int64_t total = static_cast<int64_t>(N) * H;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / H;
    const float* row = inp + 2 * n * H + (i - n * H);
    out[i] = dm::swiglu_forward(row[0], row[H]);
  }
}

// The same ownership: thread (n, j) writes dinp[n][j] and dinp[n][H + j].
__global__ void swiglu_backward_kernel(float* dinp, const float* dout, const float* inp, int N, int H) {
  const int64_t total = static_cast<int64_t>(N) * H;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = i / H;
    const int64_t at = 2 * n * H + (i - n * H);
    const float g = inp[at], u = inp[at + H], d = dout[i];
    dinp[at] = dm::swiglu_dgate(d, g, u);
    dinp[at + H] = dm::swiglu_dup(d, g);
  }
}

// ---------------------------------------------------------------- rope

// One thread per (row n, pair i): (cos, sin) once, in double, then the pair
// i of each of the NH + KVH rotated heads (adjacent threads take adjacent
// pairs of a head). The value heads after them are not touched.
__global__ void rope_kernel(float* qkv, int T, int64_t N, int heads, int row_width, int HS, int pos0, float theta,
                            bool inverse) {
  const int half = HS / 2;
  const int64_t total = N * half;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t n = idx / half;
    const int i = static_cast<int>(idx - n * half);
    const dm::CosSin cs = dm::rope_cos_sin(pos0 + static_cast<int>(n % T), i, HS, theta);
    float* x = qkv + n * row_width + 2 * i;
    for (int h = 0; h < heads; ++h, x += HS) dm::rope_rotate(x[0], x[1], cs, inverse);
  }
}

// ---------------------------------------------------------------- crossentropy

// One warp per row: max, then sum of exp(z - max) (lane partials + butterfly).
__device__ void row_max_sumexp(const float* z, int V, int lane, float& maxv, float& sumexp) {
  float mx = -INFINITY;
  for (int j = lane; j < V; j += kWarpSize) mx = fmaxf(mx, z[j]);
  maxv = warp_reduce(mx, dm::MaxOp{});
  float s = 0.0f;
  for (int j = lane; j < V; j += kWarpSize) s += expf(z[j] - maxv);
  sumexp = warp_reduce(s, dm::SumOp{});
}

__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    crossentropy_forward_kernel(float* losses, const float* logits, const int32_t* targets, int N, int V) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* z = logits + static_cast<int64_t>(row) * V;
  float maxv, sumexp;
  row_max_sumexp(z, V, lane, maxv, sumexp);
  if (lane == 0) losses[row] = dm::crossentropy_loss(z[targets[row]], maxv, sumexp);
}

// dlogits may alias logits: lane l reads and writes only the elements
// j = l (mod 32), and all its reads for the max and the sum come first.
__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    crossentropy_backward_kernel(float* dlogits, const float* logits, const int32_t* targets, float dloss, int N,
                                 int V) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* z = logits + static_cast<int64_t>(row) * V;
  float* dz = dlogits + static_cast<int64_t>(row) * V;
  float maxv, sumexp;
  row_max_sumexp(z, V, lane, maxv, sumexp);
  const int target = targets[row];
  for (int j = lane; j < V; j += kWarpSize) dz[j] = dm::crossentropy_grad(z[j], maxv, sumexp, j == target, dloss);
}

// The vocabulary-parallel cross-entropy (backend.h): a warp per row of the
// shard's `real` columns (the rest is padding).
__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    crossentropy_shard_stats_kernel(float* lse, float* target_logit, const float* logits, const int32_t* targets,
                                    int N, int W, int real, int64_t v0) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* z = logits + static_cast<int64_t>(row) * W;
  float maxv, sumexp;
  row_max_sumexp(z, real, lane, maxv, sumexp);
  if (lane != 0) return;
  const int64_t t = targets[row] - v0;
  target_logit[row] = t >= 0 && t < real ? z[t] : 0.0f;
  lse[row] = dm::shard_lse(real, maxv, sumexp);
}

// One thread per row: the P shards' log-sum-exps in rank order.
__global__ void crossentropy_shard_combine_kernel(float* losses, float* lse, const float* parts, int P, int N) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < N; i += gridDim.x * blockDim.x) {
    lse[i] = dm::combine_lse(parts + i, P, N);
    losses[i] = lse[i] - parts[static_cast<int64_t>(P) * N + i];
  }
}

// dlogits may alias logits: each element is read, then written, by one lane.
__global__ void __launch_bounds__(dm::kRowWarps * kWarpSize)
    crossentropy_shard_backward_kernel(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                       float dloss, int N, int W, int real, int64_t v0) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * dm::kRowWarps + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const float* z = logits + static_cast<int64_t>(row) * W;
  float* dz = dlogits + static_cast<int64_t>(row) * W;
  const float l = lse[row];
  const int64_t t = targets[row] - v0;
  for (int j = lane; j < W; j += kWarpSize) dz[j] = dm::crossentropy_shard_grad(z[j], l, j < real, j == t, dloss);
}

// ---------------------------------------------------------------- adam

__global__ void adam_kernel(float* param, const float* grad, float* m, float* v, int64_t n, AdamCoefficients k) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float p = param[i], mi = m[i], vi = v[i];
    dm::adam_element(p, mi, vi, grad[i], k);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
  }
}

// ---------------------------------------------------------------- reduce

// Block sum in double: butterfly per warp, then warp 0 combines the warp
// sums (lane w takes warp w's, 0 beyond) with one more butterfly.
__device__ double block_reduce_sum(double v) {
  __shared__ double warp_sums[dm::kReduceThreads / kWarpSize];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_reduce_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  if (warp == 0) {
    total = warp_reduce_sum(lane < dm::kReduceThreads / kWarpSize ? warp_sums[lane] : 0.0);
  }
  return total;  // valid in warp 0
}

// Stage 1: thread g of the grid sums x[g], x[g + G], ... (G = all threads).
__global__ void __launch_bounds__(dm::kReduceThreads)
    reduce_partials_kernel(double* partials, const float* x, int64_t n, bool square) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  double acc = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const double xi = static_cast<double>(x[i]);
    acc += square ? xi * xi : xi;
  }
  const double total = block_reduce_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// Stage 2: one block, thread i takes partial i (kReduceBlocks == kReduceThreads).
__global__ void __launch_bounds__(dm::kReduceThreads) reduce_final_kernel(double* result, const double* partials) {
  const double total = block_reduce_sum(partials[threadIdx.x]);
  if (threadIdx.x == 0) *result = total;
}
static_assert(dm::kReduceBlocks == dm::kReduceThreads, "reduce_final_kernel maps one thread per partial");

}  // namespace

// ============================================================== launchers

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int N, int T, int C,
                     cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  encoder_forward_kernel<<<elementwise_blocks(static_cast<int64_t>(N) * C), kElementwiseThreads, 0, stream>>>(
      out, tokens, wte, wpe, N, T, C);
  check_launch("encoder_forward");
}

void encoder_backward_wpe(float* dwpe, const float* dout, int B, int T, int C, cudaStream_t stream) {
  if (T <= 0 || C <= 0) return;
  encoder_backward_wpe_kernel<<<elementwise_blocks(static_cast<int64_t>(T) * C), kElementwiseThreads, 0,
                                stream>>>(dwpe, dout, B, T, C);
  check_launch("encoder_backward_wpe");
}

void encoder_backward_wte(float* dwte, const float* dout, const int32_t* bucket_token, const int32_t* starts,
                          const int32_t* order, int num_buckets, int C, cudaStream_t stream) {
  if (num_buckets <= 0 || C <= 0) return;
  const int threads = C >= 256 ? 256 : ((C + kWarpSize - 1) / kWarpSize) * kWarpSize;
  encoder_backward_wte_kernel<<<num_buckets, threads, 0, stream>>>(dwte, dout, bucket_token, starts, order, C);
  check_launch("encoder_backward_wte");
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream) {
  if (N <= 0) return;
  const int blocks = (N + dm::kRowWarps - 1) / dm::kRowWarps;
  layernorm_forward_kernel<<<blocks, dm::kRowWarps * kWarpSize, 0, stream>>>(out, mean, rstd, inp, weight, bias,
                                                                            N, C);
  check_launch("layernorm_forward");
}

size_t layernorm_backward_scratch_floats(int N, int C) {
  return 2 * static_cast<size_t>(dm::column_chunks(N)) * static_cast<size_t>(C);
}

namespace {
// The deterministic column sums of column_partials_kernel<Kind> (a partial
// per chunk of rows, then each column's chunks added in order) into sum_a
// (a weight gradient) and/or sum_b (a bias gradient): whichever the kind
// fills, the partials of both side by side in `scratch`.
template <ColumnSums Kind>
void column_sums(float* sum_a, float* sum_b, float* scratch, const float* dout, const float* inp, const float* mean,
                 const float* rstd, int N, int C, cudaStream_t stream, const char* op) {
  const int chunks = dm::column_chunks(N);
  float* partial_a = sum_a ? scratch : nullptr;
  float* partial_b = sum_b ? scratch + (sum_a ? static_cast<size_t>(chunks) * C : 0) : nullptr;
  const dim3 grid((C + kWarpSize - 1) / kWarpSize, chunks);
  const dim3 block(kWarpSize, dm::kColumnTileRows);
  column_partials_kernel<Kind><<<grid, block, 0, stream>>>(partial_a, partial_b, dout, inp, mean, rstd, N, C);
  check_launch(op);
  const int fin_blocks = (C + kElementwiseThreads - 1) / kElementwiseThreads;
  if (sum_a) column_finalize_kernel<<<fin_blocks, kElementwiseThreads, 0, stream>>>(sum_a, partial_a, chunks, C);
  if (sum_b) column_finalize_kernel<<<fin_blocks, kElementwiseThreads, 0, stream>>>(sum_b, partial_b, chunks, C);
  check_launch(op);
}
}  // namespace

void layernorm_backward(float* dinp, float* dweight, float* dbias, float* scratch, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  layernorm_backward_dinp_kernel<<<(N + dm::kRowWarps - 1) / dm::kRowWarps, dm::kRowWarps * kWarpSize, 0,
                                   stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  check_launch("layernorm_backward_dinp");
  column_sums<ColumnSums::kLayerNorm>(dweight, dbias, scratch, dout, inp, mean, rstd, N, C, stream,
                                      "layernorm_backward_columns");
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     cudaStream_t stream) {
  if (N <= 0) return;
  const int blocks = (N + dm::kRowWarps - 1) / dm::kRowWarps;
  rmsnorm_forward_kernel<<<blocks, dm::kRowWarps * kWarpSize, 0, stream>>>(out, rstd, inp, weight, N, C);
  check_launch("rmsnorm_forward");
}

size_t rmsnorm_backward_scratch_floats(int N, int C) {
  return static_cast<size_t>(dm::column_chunks(N)) * static_cast<size_t>(C);
}

void rmsnorm_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  rmsnorm_backward_dinp_kernel<<<(N + dm::kRowWarps - 1) / dm::kRowWarps, dm::kRowWarps * kWarpSize, 0,
                                 stream>>>(dinp, dout, inp, weight, rstd, N, C);
  check_launch("rmsnorm_backward_dinp");
  column_sums<ColumnSums::kRmsNorm>(dweight, nullptr, scratch, dout, inp, nullptr, rstd, N, C, stream,
                                    "rmsnorm_backward_columns");
}

void to_bf16(uint16_t* out, const float* in, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  to_bf16_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(out, in, n);
  check_launch("to_bf16");
}

void add_bias(float* out, const float* bias, int N, int OC, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(N) * OC;
  if (total <= 0) return;
  if (OC % 4 == 0 && aligned16(out) && aligned16(bias)) {
    add_bias_kernel<true><<<elementwise_blocks(total / 4), kElementwiseThreads, 0, stream>>>(out, bias, total, OC);
  } else {
    add_bias_kernel<false><<<elementwise_blocks(total), kElementwiseThreads, 0, stream>>>(out, bias, total, OC);
  }
  check_launch("add_bias");
}

size_t bias_backward_scratch_floats(int N, int OC) {
  return static_cast<size_t>(dm::column_chunks(N)) * static_cast<size_t>(OC);
}

void bias_backward(float* dbias, float* scratch, const float* dout, int N, int OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  column_sums<ColumnSums::kBias>(nullptr, dbias, scratch, dout, nullptr, nullptr, nullptr, N, OC, stream,
                                 "bias_backward");
}

void gelu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map("gelu_forward", out, inp, inp, n, stream, GeluForwardOp{});
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map("gelu_backward", dinp, dout, inp, n, stream, GeluBackwardOp{});
}

void relu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map("relu_forward", out, inp, inp, n, stream, ReluForwardOp{});
}

void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map("relu_backward", dinp, dout, inp, n, stream, ReluBackwardOp{});
}

void silu_forward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map("silu_forward", out, inp, inp, n, stream, SiluForwardOp{});
}

void silu_backward(float* dinp, const float* dout, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map("silu_backward", dinp, dout, inp, n, stream, SiluBackwardOp{});
}

void swiglu_forward(float* out, const float* inp, int N, int H, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(N) * H;
  if (total <= 0) return;
  swiglu_forward_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, stream>>>(out, inp, N, H);
  check_launch("swiglu_forward");
}

void swiglu_backward(float* dinp, const float* dout, const float* inp, int N, int H, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(N) * H;
  if (total <= 0) return;
  swiglu_backward_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, stream>>>(dinp, dout, inp, N, H);
  check_launch("swiglu_backward");
}

void rope(float* qkv, int B, int T, int NH, int KVH, int HS, int pos0, float theta, bool inverse,
          cudaStream_t stream) {
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t total = N * (HS / 2);
  if (total <= 0 || NH + KVH <= 0) return;
  rope_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, stream>>>(
      qkv, T, N, NH + KVH, (NH + 2 * KVH) * HS, HS, pos0, theta, inverse);
  check_launch(inverse ? "rope_backward" : "rope_forward");
}

void residual_forward(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  launch_map("residual_forward", out, a, b, n, stream, AddOp{});
}

void crossentropy_forward(float* losses, const float* logits, const int32_t* targets, int N, int V,
                          cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_forward_kernel<<<(N + dm::kRowWarps - 1) / dm::kRowWarps, dm::kRowWarps * kWarpSize, 0, stream>>>(
      losses, logits, targets, N, V);
  check_launch("crossentropy_forward");
}

void crossentropy_backward(float* dlogits, const float* logits, const int32_t* targets, float dloss, int N, int V,
                           cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_backward_kernel<<<(N + dm::kRowWarps - 1) / dm::kRowWarps, dm::kRowWarps * kWarpSize, 0, stream>>>(
      dlogits, logits, targets, dloss, N, V);
  check_launch("crossentropy_backward");
}

void crossentropy_shard_stats(float* lse, float* target_logit, const float* logits, const int32_t* targets, int N,
                              int W, int64_t v0, int64_t vocab, cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_shard_stats_kernel<<<(N + dm::kRowWarps - 1) / dm::kRowWarps, dm::kRowWarps * kWarpSize, 0,
                                    stream>>>(lse, target_logit, logits, targets, N, W, dm::shard_real_columns(W, v0, vocab), v0);
  check_launch("crossentropy_shard_stats");
}

void crossentropy_shard_combine(float* losses, float* lse, const float* parts, int P, int N, cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_shard_combine_kernel<<<elementwise_blocks(N), kElementwiseThreads, 0, stream>>>(losses, lse, parts,
                                                                                                P, N);
  check_launch("crossentropy_shard_combine");
}

void crossentropy_shard_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                                 float dloss, int N, int W, int64_t v0, int64_t vocab, cudaStream_t stream) {
  if (N <= 0) return;
  crossentropy_shard_backward_kernel<<<(N + dm::kRowWarps - 1) / dm::kRowWarps, dm::kRowWarps * kWarpSize, 0,
                                       stream>>>(dlogits, logits, lse, targets, dloss, N, W,
                                                 dm::shard_real_columns(W, v0, vocab), v0);
  check_launch("crossentropy_shard_backward");
}

void adam_update(float* param, const float* grad, float* m, float* v, int64_t n, const AdamCoefficients& k,
                 cudaStream_t stream) {
  if (n <= 0) return;
  adam_kernel<<<elementwise_blocks(n), kElementwiseThreads, 0, stream>>>(param, grad, m, v, n, k);
  check_launch("adam_update");
}

size_t reduce_scratch_doubles() { return dm::kReduceBlocks; }

void reduce_sum(double* result, double* scratch, const float* x, int64_t n, bool square, cudaStream_t stream) {
  // n == 0 still runs: the partials are then zeros and *result = 0.
  reduce_partials_kernel<<<dm::kReduceBlocks, dm::kReduceThreads, 0, stream>>>(scratch, x, n, square);
  check_launch("reduce_sum_partials");
  reduce_final_kernel<<<1, dm::kReduceThreads, 0, stream>>>(result, scratch);
  check_launch("reduce_sum_final");
}

}  // namespace gpt2::cuda
