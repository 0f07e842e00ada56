// The Nemotron-H sigmoid router on the GPU (spec/nemotron_h.md § 5): one block per token. Selection
// runs as top_k rounds of a block argmax with the CPU's order (score descending, lower id on ties),
// so ids match the CPU kernel; weights are summed by one thread in slot order, as there.
#include <algorithm>
#include <cmath>

#include "cuda_util.cuh"
#include "kernels_cuda.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

// NaN never wins, as in the CPU kernel's rank_key.
__device__ __forceinline__ float rank_key(float x) { return isnan(x) ? -INFINITY : x; }

// (va, ia) ranks before (vb, ib); id −1 is "none yet".
__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) {
  if (ia < 0) return false;
  if (ib < 0) return true;
  return va > vb || (va == vb && ia < ib);
}

// Block argmax over (value, id) pairs; every thread gets the winner's id.
__device__ int block_argmax(float v, int i, float* sv, int* si) {
  sv[threadIdx.x] = v;
  si[threadIdx.x] = i;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half && better(sv[threadIdx.x + half], si[threadIdx.x + half], sv[threadIdx.x], si[threadIdx.x])) {
      sv[threadIdx.x] = sv[threadIdx.x + half];
      si[threadIdx.x] = si[threadIdx.x + half];
    }
    __syncthreads();
  }
  const int best = si[0];
  __syncthreads();  // sv/si are rewritten by the next call
  return best;
}

__global__ void route_kernel(const float* logits, const float* bias, int E, int top_k, int n_group, int topk_group,
                             bool norm, float scaling, int64_t rows, int32_t* ids, float* weights) {
  extern __shared__ float smem[];
  float* s = smem;                                       // [E] sigmoid
  float* sel = s + E;                                    // [E] selection key
  float* gscore = sel + E;                               // [n_group]
  unsigned char* avail = reinterpret_cast<unsigned char*>(gscore + n_group);  // [E] selectable
  unsigned char* gtaken = avail + E;                                           // [n_group]
  __shared__ float sv[kThreads];
  __shared__ int si[kThreads];
  const int gsize = E / n_group;

  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* lr = logits + r * E;
    __syncthreads();
    for (int j = threadIdx.x; j < E; j += blockDim.x) {
      const float sj = 1.0f / (1.0f + expf(-lr[j]));
      s[j] = sj;
      sel[j] = rank_key(bias ? sj + bias[j] : sj);
      avail[j] = n_group == 1;
    }
    __syncthreads();
    if (n_group > 1) {
      // Group score: the sum of its two best selection scores (one when a group has one expert).
      for (int g = threadIdx.x; g < n_group; g += blockDim.x) {
        const float* gs = sel + g * gsize;
        float a = -INFINITY, b = -INFINITY;
        for (int j = 0; j < gsize; ++j) {
          if (gs[j] > a) b = a, a = gs[j];
          else if (gs[j] > b) b = gs[j];
        }
        gscore[g] = rank_key(gsize > 1 ? a + b : a);
        gtaken[g] = 0;
      }
      __syncthreads();
      for (int round = 0; round < topk_group; ++round) {
        float bv = -INFINITY;
        int bi = -1;
        for (int g = threadIdx.x; g < n_group; g += blockDim.x)
          if (!gtaken[g] && better(gscore[g], g, bv, bi)) bv = gscore[g], bi = g;
        const int best = block_argmax(bv, bi, sv, si);
        for (int j = threadIdx.x; j < gsize; j += blockDim.x) avail[best * gsize + j] = 1;
        if (threadIdx.x == 0) gtaken[best] = 1;
        __syncthreads();
      }
    }
    int32_t* ir = ids + r * top_k;
    float* wr = weights + r * top_k;
    for (int slot = 0; slot < top_k; ++slot) {
      float bv = -INFINITY;
      int bi = -1;
      for (int j = threadIdx.x; j < E; j += blockDim.x)
        if (avail[j] && better(sel[j], j, bv, bi)) bv = sel[j], bi = j;
      const int best = block_argmax(bv, bi, sv, si);
      if (threadIdx.x == 0) {
        ir[slot] = best;
        wr[slot] = s[best];
        avail[best] = 0;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      float sum = 0.0f;
      for (int j = 0; j < top_k; ++j) sum += wr[j];
      if (norm)
        for (int j = 0; j < top_k; ++j) wr[j] /= sum + 1e-20f;
      for (int j = 0; j < top_k; ++j) wr[j] *= scaling;
    }
  }
}

// Ungrouped routing (n_group = 1, every Nemotron-H model) with top_k ≤ 32, one warp per token: lane
// l keeps the sigmoids and keys of experts l, l + 32, … in registers. Each slot is a pairwise tree
// over the lane's candidates, then a warp argmax by an xor butterfly, both in the CPU's order (key
// descending, lower id on ties), so every lane agrees on the winner and the ids match the CPU. Lane
// `slot` keeps the slot's weight; every lane adds the weights in slot order, as the CPU does.
constexpr int kRouteWarps = 4;

template <int EPL>
__global__ void __launch_bounds__(32 * kRouteWarps) route_warp_kernel(const float* logits, const float* bias, int E,
                                                                      int top_k, bool norm, float scaling, int64_t rows,
                                                                      int32_t* ids, float* weights) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * kRouteWarps + (threadIdx.x >> 5);
  if (r >= rows) return;
  const float* lr = logits + r * E;
  float s[EPL], key[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int j = lane + 32 * i;
    s[i] = 0.0f, key[i] = -INFINITY;
    if (j < E) {
      s[i] = 1.0f / (1.0f + expf(-lr[j]));
      key[i] = rank_key(bias ? s[i] + bias[j] : s[i]);
    }
  }
  uint32_t taken = 0;
  float mine = 0.0f, sum = 0.0f;
  int my_id = 0;
  for (int slot = 0; slot < top_k; ++slot) {
    float v[EPL], w[EPL];
    int id[EPL];
#pragma unroll
    for (int i = 0; i < EPL; ++i) {
      const int j = lane + 32 * i;
      const bool ok = j < E && !(taken >> i & 1u);
      v[i] = key[i], w[i] = s[i], id[i] = ok ? j : -1;
    }
    constexpr int kLevels = EPL >= 16 ? 4 : EPL >= 8 ? 3 : EPL >= 4 ? 2 : EPL >= 2 ? 1 : 0;
#pragma unroll
    for (int lvl = 0; lvl < kLevels; ++lvl) {
      const int half = EPL >> (lvl + 1);
#pragma unroll
      for (int i = 0; i < EPL / 2; ++i)
        if (i < half && better(v[i + half], id[i + half], v[i], id[i]))
          v[i] = v[i + half], id[i] = id[i + half], w[i] = w[i + half];
    }
    float bv = v[0], bs = w[0];
    int bi = id[0];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off), os = __shfl_xor_sync(0xffffffffu, bs, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (better(ov, oi, bv, bi)) bv = ov, bi = oi, bs = os;
    }
    if (lane == (bi & 31)) taken |= 1u << (bi >> 5);
    if (lane == slot) mine = bs, my_id = bi;
    sum += bs;
  }
  if (lane < top_k) {
    float wt = mine;
    if (norm) wt /= sum + 1e-20f;
    wt *= scaling;
    ids[r * top_k + lane] = my_id;
    weights[r * top_k + lane] = wt;
  }
}

}  // namespace

void launch_moe_route(const float* logits, const float* bias, const RouteParams& p, int64_t rows, int32_t* ids,
                      float* weights, cudaStream_t stream) {
  if (rows == 0) return;
  if (p.n_group == 1 && p.n_experts <= 512 && p.top_k <= 32 && p.top_k <= p.n_experts) {
    const unsigned blocks = unsigned(ceil_div(rows, kRouteWarps));
    const int epl = int(ceil_div(p.n_experts, 32));
    auto go = [&](auto kernel) {
      launch(kernel, dim3(blocks), dim3(32 * kRouteWarps), 0, stream, "moe_route", logits, bias, p.n_experts, p.top_k,
             p.norm_topk_prob, p.scaling, rows, ids, weights);
    };
    if (epl <= 1) go(route_warp_kernel<1>);
    else if (epl <= 2) go(route_warp_kernel<2>);
    else if (epl <= 4) go(route_warp_kernel<4>);
    else if (epl <= 8) go(route_warp_kernel<8>);
    else go(route_warp_kernel<16>);
    return;
  }
  const size_t smem = size_t(2 * p.n_experts + p.n_group) * sizeof(float) + size_t(p.n_experts + p.n_group);
  check(smem <= 48 * 1024, "moe_route (cuda): ", p.n_experts, " experts exceed the kernel's shared memory");
  route_kernel<<<unsigned(std::min<int64_t>(rows, 65535)), kThreads, smem, stream>>>(
      logits, bias, p.n_experts, p.top_k, p.n_group, p.topk_group, p.norm_topk_prob, p.scaling, rows, ids, weights);
  check_launch("moe_route");
}

}  // namespace tandem::cuda
