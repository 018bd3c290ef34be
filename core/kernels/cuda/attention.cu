// Causal self-attention kernels of the CUDA backend (attention_forward and
// attention_backward of kernels.h). Flash-style: no (T,T) matrix is ever
// stored; the forward keeps a running softmax per query row and the
// backward rebuilds P_ij = exp(s_ij - lse_i) from the forward's lse.
//
// Structure shared by the three kernels: a block of kRows warps takes kRows
// consecutive rows (query rows, or key rows for dk/dv) of one (b, h), one
// row per warp. The rows of the other side are walked in tiles of 32 that
// the whole block copies to shared memory once (so each K/V or Q/dO row is
// read from L2 once per block, not once per warp). Within a tile lane l
// handles row l (a full HS-long dot product), and each lane accumulates its
// own output channels lane, lane+32, ... with the tile's 32 weights
// broadcast by shuffle. No limit on T; HS is 32, 64, 96 or 128.
//
// Grouped-query attention: a query head h reads key/value head h / G,
// G = NH / KVH query heads per group. The forward and dq blocks belong to a
// query head and only read their group's K and V; a dk/dv block belongs to
// a key/value head and walks its group's query heads one after the other,
// in head order, inside the block: the group's sum needs no atomics and
// no scratch, and it is the same on every run. With KVH = NH (G = 1) every
// kernel does exactly the arithmetic of plain multi-head attention.
// Letters: B batch, T time, NH query heads, KVH key/value heads, G = NH / KVH,
// HS head size, C = NH * HS (out's width), W = (NH + 2 KVH) HS (qkv's).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_math.h"
#include "kernels/cuda/kernel_common.cuh"
#include "kernels/cuda/kernels.h"

namespace gpt2::cuda {
namespace {

using detail::check_launch;
using detail::kFullMask;
using detail::warp_reduce;
using dm::kWarpSize;

constexpr int kRows = dm::kAttnWarps;  // rows per block, one per warp
constexpr int kTile = kWarpSize;       // rows per shared-memory tile, one per lane
constexpr int kThreads = kRows * kWarpSize;

// Within a qkv row of W floats: query head h at h * HS, key head g at
// (NH + g) HS, value head g at (NH + KVH + g) HS. With KVH = NH these are
// h * HS, C + g * HS and 2C + g * HS: the (B,T,3C) layout.
struct QkvHeads {
  const float* qkv;
  int64_t row;  // W
  int T, HS, k_off, v_off;
  __device__ QkvHeads(const float* p, int T_, int HS_, int NH, int KVH)
      : qkv(p),
        row(static_cast<int64_t>(NH + 2 * KVH) * HS_),
        T(T_),
        HS(HS_),
        k_off(NH * HS_),
        v_off((NH + KVH) * HS_) {}
  __device__ int64_t row_at(int b, int t) const { return (static_cast<int64_t>(b) * T + t) * row; }
  __device__ const float* q(int b, int t, int h) const { return qkv + row_at(b, t) + h * HS; }
  __device__ const float* k(int b, int t, int g) const { return qkv + row_at(b, t) + k_off + g * HS; }
  __device__ const float* v(int b, int t, int g) const { return qkv + row_at(b, t) + v_off + g * HS; }
};

// The block's (b, head) and first row, for `heads` heads per batch row (NH
// query heads, or KVH key/value heads for dk/dv); `reverse` hands out the
// last row groups first (for the causal forward and dq those are the longest).
struct BlockRows {
  int b, h;
  int64_t bh;  // b * heads + h
  int row0;
};
__device__ BlockRows block_rows(int rows, int heads, bool reverse) {
  const int groups = (rows + kRows - 1) / kRows;
  const int64_t bh = blockIdx.x / groups;
  int g = static_cast<int>(blockIdx.x % groups);
  if (reverse) g = groups - 1 - g;
  return {static_cast<int>(bh / heads), static_cast<int>(bh % heads), bh, g * kRows};
}

// Copies rows [row0, row0 + kTile) ∩ [0, limit) of a strided (rows, HS)
// source into a shared tile of row stride `stride` floats; the whole block
// takes part, a warp reading consecutive float4 of a row (coalesced).
template <int HS>
__device__ void load_tile(float* tile, int stride, const float* src, int64_t src_stride, int row0, int limit) {
  constexpr int kVecs = HS / 4;
  for (int idx = threadIdx.x; idx < kTile * kVecs; idx += kThreads) {
    const int r = idx / kVecs, v = idx % kVecs;
    if (row0 + r < limit) {
      const float4* row = reinterpret_cast<const float4*>(src + (row0 + r) * src_stride);
      *reinterpret_cast<float4*>(tile + r * stride + 4 * v) = __ldg(row + v);
    }
  }
}

// One row of HS floats into this warp's shared float4 slot.
template <int HS>
__device__ void load_row(float4* dst, const float* src, int lane) {
  const float4* s4 = reinterpret_cast<const float4*>(src);
  for (int i = lane; i < HS / 4; i += kWarpSize) dst[i] = s4[i];
  __syncwarp();
}

// a (the warp's row, broadcast) . b (this lane's tile row), through Dot4.
template <int HS>
__device__ float dot_smem(const float4* a, const float* b) {
  const float4* b4 = reinterpret_cast<const float4*>(b);
  dm::Dot4 acc;
#pragma unroll 8
  for (int i = 0; i < HS / 4; ++i) {
    const float4 x = a[i], y = b4[i];
    acc.add(x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w);
  }
  return acc.total();
}

// Row stride of tiles that lanes read row-wise as float4: HS + 4 floats puts
// the 8 lanes of each quarter-warp on distinct banks (HS alone would put all
// 32 lanes on one).
template <int HS>
constexpr int kPadded = HS + 4;

// acc[j] += sum over k < count of w_k * rows[k * stride + lane + 32 j], where
// w_k is lane k's `w`, broadcast by shuffle: the weighted sum of a tile's rows
// (P V in the forward pass, dS K for dq), added in row order.
template <int kDims>
__device__ void add_weighted_rows(float (&acc)[kDims], float w, const float* rows, int stride, int count, int lane) {
  for (int k = 0; k < count; ++k) {
    const float wk = __shfl_sync(kFullMask, w, k);
    const float* row = rows + k * stride;
#pragma unroll
    for (int j = 0; j < kDims; ++j) acc[j] += wk * row[lane + j * kWarpSize];
  }
}

// Forward: warp = query row t; tiles of 32 keys. Lane l scores key s0 + l,
// the warp merges the tile into the running (max, sum) (online softmax) and
// adds the weighted value rows to its channels.
// No __launch_bounds__ here or below: with it ptxas caps registers and spills.
template <int kDims>
__global__ void attention_forward_kernel(float* out, float* lse, const float* qkv, int T, int NH, int KVH,
                                         int first_row, float scale) {
  constexpr int HS = kDims * kWarpSize, kStride = kPadded<HS>;
  __shared__ float4 q_smem[kRows][HS / 4];
  __shared__ __align__(16) float k_tile[kTile * kStride];
  __shared__ __align__(16) float v_tile[kTile * HS];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int R = T - first_row;
  const BlockRows blk = block_rows(R, NH, true);
  const int r = blk.row0 + warp;
  const bool active = r < R;  // warp-uniform
  const int t = first_row + r;
  const int t_last = first_row + min(R, blk.row0 + kRows) - 1;  // the block's last query row
  const QkvHeads L(qkv, T, HS, NH, KVH);
  const int kvh = blk.h / (NH / KVH);
  const int C = NH * HS;

  if (active) load_row<HS>(q_smem[warp], L.q(blk.b, t, blk.h), lane);
  float m = -INFINITY, l = 0.0f;
  float acc[kDims];
#pragma unroll
  for (int j = 0; j < kDims; ++j) acc[j] = 0.0f;

  for (int s0 = 0; s0 <= t_last; s0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    load_tile<HS>(k_tile, kStride, L.k(blk.b, 0, kvh), L.row, s0, t_last + 1);
    load_tile<HS>(v_tile, HS, L.v(blk.b, 0, kvh), L.row, s0, t_last + 1);
    __syncthreads();
    if (!active || s0 > t) continue;  // warp-uniform; the block still loads tiles for its other rows
    const int s = s0 + lane;
    const float score = s <= t ? scale * dot_smem<HS>(q_smem[warp], k_tile + lane * kStride) : -INFINITY;
    const float m_new = fmaxf(m, warp_reduce(score, dm::MaxOp{}));
    const float corr = dm::softmax_rescale(m, m_new);
    const float p = s <= t ? expf(score - m_new) : 0.0f;
    l = l * corr + warp_reduce(p, dm::SumOp{});
#pragma unroll
    for (int j = 0; j < kDims; ++j) acc[j] *= corr;
    add_weighted_rows(acc, p, v_tile, HS, min(kTile, t - s0 + 1), lane);
    m = m_new;
  }
  if (!active) return;
  float* o = out + (static_cast<int64_t>(blk.b) * R + r) * C + blk.h * HS;
#pragma unroll
  for (int j = 0; j < kDims; ++j) o[lane + j * kWarpSize] = acc[j] / l;
  if (lse != nullptr && lane == 0) lse[blk.bh * R + r] = dm::softmax_lse(m, l);
}

// Backward, pass 1: warp = query row t; tiles of 32 keys. D_t = dO_t . O_t
// goes to d_rows (B,NH,T) for pass 2; dq_t = scale * sum_{s<=t} dS_ts k_s.
template <int kDims>
__global__ void attention_backward_dq_kernel(float* dqkv, float* d_rows, const float* dout, const float* out,
                                             const float* lse, const float* qkv, int T, int NH, int KVH,
                                             float scale) {
  constexpr int HS = kDims * kWarpSize, kStride = kPadded<HS>;
  __shared__ float4 q_smem[kRows][HS / 4];
  __shared__ float4 do_smem[kRows][HS / 4];
  __shared__ __align__(16) float k_tile[kTile * kStride];
  __shared__ __align__(16) float v_tile[kTile * kStride];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const BlockRows blk = block_rows(T, NH, true);
  const int t = blk.row0 + warp;
  const bool active = t < T;
  const int t_last = min(T, blk.row0 + kRows) - 1;
  const QkvHeads L(qkv, T, HS, NH, KVH);
  const int kvh = blk.h / (NH / KVH);
  const int C = NH * HS;
  const int64_t out_off = (static_cast<int64_t>(blk.b) * T + t) * C + blk.h * HS;

  float D = 0.0f, row_lse = 0.0f;
  if (active) {
    load_row<HS>(q_smem[warp], L.q(blk.b, t, blk.h), lane);
    load_row<HS>(do_smem[warp], dout + out_off, lane);
    float d_part = 0.0f;
#pragma unroll
    for (int j = 0; j < kDims; ++j) d_part += dout[out_off + lane + j * kWarpSize] * out[out_off + lane + j * kWarpSize];
    D = warp_reduce(d_part, dm::SumOp{});
    row_lse = lse[blk.bh * T + t];
    if (lane == 0) d_rows[blk.bh * T + t] = D;
  }
  float acc[kDims];
#pragma unroll
  for (int j = 0; j < kDims; ++j) acc[j] = 0.0f;
  for (int s0 = 0; s0 <= t_last; s0 += kTile) {
    __syncthreads();
    load_tile<HS>(k_tile, kStride, L.k(blk.b, 0, kvh), L.row, s0, t_last + 1);
    load_tile<HS>(v_tile, kStride, L.v(blk.b, 0, kvh), L.row, s0, t_last + 1);
    __syncthreads();
    if (!active || s0 > t) continue;
    const int s = s0 + lane;
    float ds = 0.0f;
    if (s <= t) {
      const float p = expf(scale * dot_smem<HS>(q_smem[warp], k_tile + lane * kStride) - row_lse);
      const float dp = dot_smem<HS>(do_smem[warp], v_tile + lane * kStride);
      ds = dm::attention_dscore(p, dp, D, scale);
    }
    add_weighted_rows(acc, ds, k_tile, kStride, min(kTile, t - s0 + 1), lane);
  }
  if (!active) return;
  float* dq = dqkv + L.row_at(blk.b, t) + blk.h * HS;
#pragma unroll
  for (int j = 0; j < kDims; ++j) dq[lane + j * kWarpSize] = acc[j];
}

// Backward, pass 2: warp = key row j of key/value head g; for each query
// head of g's group in turn (h = g G, ..., g G + G - 1), tiles of 32 query
// rows from the block's first key row j0 on (lane l takes query i0 + l,
// used when i >= j):
//   dv_j = sum_h sum_i P_ij dO_i,   dk_j = scale * sum_h sum_i dS_ij q_i.
template <int kDims>
__global__ void attention_backward_dkv_kernel(float* dqkv, const float* d_rows, const float* dout, const float* lse,
                                              const float* qkv, int T, int NH, int KVH, float scale) {
  constexpr int HS = kDims * kWarpSize, kStride = kPadded<HS>;
  __shared__ float4 k_smem[kRows][HS / 4];
  __shared__ float4 v_smem[kRows][HS / 4];
  __shared__ __align__(16) float q_tile[kTile * kStride];
  __shared__ __align__(16) float do_tile[kTile * kStride];
  __shared__ float lse_tile[kTile];
  __shared__ float d_tile[kTile];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const BlockRows blk = block_rows(T, KVH, false);  // small j = longest loop, handed out first
  const int j = blk.row0 + warp;
  const bool active = j < T;
  const QkvHeads L(qkv, T, HS, NH, KVH);
  const int G = NH / KVH, C = NH * HS;

  if (active) {
    load_row<HS>(k_smem[warp], L.k(blk.b, j, blk.h), lane);
    load_row<HS>(v_smem[warp], L.v(blk.b, j, blk.h), lane);
  }
  float acc_k[kDims], acc_v[kDims];
#pragma unroll
  for (int d = 0; d < kDims; ++d) acc_k[d] = acc_v[d] = 0.0f;
  for (int h = blk.h * G; h < (blk.h + 1) * G; ++h) {
    const int64_t bh = static_cast<int64_t>(blk.b) * NH + h;  // the query head's lse and D rows
    const float* dout0 = dout + static_cast<int64_t>(blk.b) * T * C + h * HS;
    for (int i0 = blk.row0; i0 < T; i0 += kTile) {
      __syncthreads();
      load_tile<HS>(q_tile, kStride, L.q(blk.b, 0, h), L.row, i0, T);
      load_tile<HS>(do_tile, kStride, dout0, C, i0, T);
      if (threadIdx.x < kTile && i0 + threadIdx.x < T) {
        lse_tile[threadIdx.x] = lse[bh * T + i0 + threadIdx.x];
        d_tile[threadIdx.x] = d_rows[bh * T + i0 + threadIdx.x];
      }
      __syncthreads();
      if (!active || i0 + kTile <= j) continue;  // the whole tile lies before j
      const int i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i >= j && i < T) {
        p = expf(scale * dot_smem<HS>(k_smem[warp], q_tile + lane * kStride) - lse_tile[lane]);
        const float dp = dot_smem<HS>(v_smem[warp], do_tile + lane * kStride);
        ds = dm::attention_dscore(p, dp, d_tile[lane], scale);
      }
      const int begin = max(0, j - i0), count = min(kTile, T - i0);
      for (int k = begin; k < count; ++k) {
        const float pw = __shfl_sync(kFullMask, p, k);
        const float dsw = __shfl_sync(kFullMask, ds, k);
        const float* q = q_tile + k * kStride;
        const float* dO = do_tile + k * kStride;
#pragma unroll
        for (int d = 0; d < kDims; ++d) {
          acc_v[d] += pw * dO[lane + d * kWarpSize];
          acc_k[d] += dsw * q[lane + d * kWarpSize];
        }
      }
    }
  }
  if (!active) return;
  float* dk = dqkv + L.row_at(blk.b, j) + L.k_off + blk.h * HS;
  float* dv = dqkv + L.row_at(blk.b, j) + L.v_off + blk.h * HS;
#pragma unroll
  for (int d = 0; d < kDims; ++d) {
    dk[lane + d * kWarpSize] = acc_k[d];
    dv[lane + d * kWarpSize] = acc_v[d];
  }
}

// One block per kRows rows of each (b, head), `heads` heads per batch row.
int attention_blocks(const char* op, int B, int heads, int rows) {
  const int64_t blocks = static_cast<int64_t>(B) * heads * ((rows + kRows - 1) / kRows);
  if (blocks > 0x7fffffff) throw std::invalid_argument(std::string(op) + ": too many rows for one grid");
  return static_cast<int>(blocks);
}

// KVH must divide NH (the launchers' front door, after the head size).
void check_kv_heads(const char* op, int NH, int KVH) {
  if (KVH <= 0 || NH % KVH != 0) {
    throw std::invalid_argument(std::string(op) + ": KVH = " + std::to_string(KVH) + " does not divide NH = " +
                                std::to_string(NH));
  }
}

template <int kDims>
void launch_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int KVH,
                              int first_row, float scale, cudaStream_t stream) {
  const int blocks = attention_blocks("attention_forward", B, NH, T - first_row);
  attention_forward_kernel<kDims><<<blocks, kThreads, 0, stream>>>(out, lse, qkv, T, NH, KVH, first_row, scale);
  check_launch("attention_forward");
}

// dq and D per query head (B NH row groups), then dk and dv per key/value
// head (B KVH row groups, each walking its G query heads).
template <int kDims>
void launch_attention_backward(float* dqkv, float* scratch, const float* dout, const float* out, const float* lse,
                               const float* qkv, int B, int T, int NH, int KVH, float scale, cudaStream_t stream) {
  attention_backward_dq_kernel<kDims><<<attention_blocks("attention_backward", B, NH, T), kThreads, 0, stream>>>(
      dqkv, scratch, dout, out, lse, qkv, T, NH, KVH, scale);
  check_launch("attention_backward_dq");
  attention_backward_dkv_kernel<kDims><<<attention_blocks("attention_backward", B, KVH, T), kThreads, 0, stream>>>(
      dqkv, scratch, dout, lse, qkv, T, NH, KVH, scale);
  check_launch("attention_backward_dkv");
}

}  // namespace

int attention_head_size(const char* op, int C, int NH) {
  if (NH <= 0 || C % NH != 0) {
    throw std::invalid_argument(std::string(op) + ": C = " + std::to_string(C) + " is not a multiple of NH = " +
                                std::to_string(NH));
  }
  const int HS = C / NH;
  if (HS % kWarpSize != 0 || HS > 4 * kWarpSize) {
    throw std::invalid_argument(std::string(op) + ": head size HS = " + std::to_string(HS) +
                                " unsupported (need a multiple of 32, at most 128)");
  }
  return HS;
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH,
                       int first_row, cudaStream_t stream) {
  const int HS = attention_head_size("attention_forward", C, NH);
  check_kv_heads("attention_forward", NH, KVH);
  if (first_row < 0 || first_row >= T) {
    throw std::invalid_argument("attention_forward: first_row = " + std::to_string(first_row) +
                                " outside [0, T = " + std::to_string(T) + ")");
  }
  if (B <= 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  switch (HS / kWarpSize) {
    case 1: launch_attention_forward<1>(out, lse, qkv, B, T, NH, KVH, first_row, scale, stream); break;
    case 2: launch_attention_forward<2>(out, lse, qkv, B, T, NH, KVH, first_row, scale, stream); break;
    case 3: launch_attention_forward<3>(out, lse, qkv, B, T, NH, KVH, first_row, scale, stream); break;
    default: launch_attention_forward<4>(out, lse, qkv, B, T, NH, KVH, first_row, scale, stream); break;
  }
}

size_t attention_backward_scratch_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * static_cast<size_t>(NH) * static_cast<size_t>(T);
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* out, const float* lse,
                        const float* qkv, int B, int T, int C, int NH, int KVH, cudaStream_t stream) {
  const int HS = attention_head_size("attention_backward", C, NH);
  check_kv_heads("attention_backward", NH, KVH);
  if (B <= 0 || T <= 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  switch (HS / kWarpSize) {
    case 1: launch_attention_backward<1>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KVH, scale, stream); break;
    case 2: launch_attention_backward<2>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KVH, scale, stream); break;
    case 3: launch_attention_backward<3>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KVH, scale, stream); break;
    default: launch_attention_backward<4>(dqkv, scratch, dout, out, lse, qkv, B, T, NH, KVH, scale, stream); break;
  }
}

}  // namespace gpt2::cuda
