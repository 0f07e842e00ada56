// The Nemotron-H sigmoid router on the GPU (spec/nemotron_h.md § 5): one block per token. Selection
// runs as top_k rounds of a block argmax with the CPU's order (score descending, lower id on ties),
// so ids match the CPU kernel; weights are summed by one thread in slot order, as there.
#include <algorithm>
#include <cmath>

#include "tandem/cuda/util.cuh"
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
// l keeps the sigmoids and selection keys of experts l, l + 32, … in registers. The keys become
// order-preserving 32-bit integers, and the top_k-th largest of them, T, is found by a search over
// its bits, two at a time (16 steps of three warp-wide counts). The selection is then every expert
// above T and, in id order, as many of those at T as complete top_k: the CPU's set (key descending,
// lower id on ties). Its top_k members are ranked among themselves for their slots, and every lane
// adds the weights in slot order, as the CPU does, so ids and weights match it. (The previous kernel
// took one slot per round, each a register tree and a warp argmax: ~250 dependent instructions per
// slot on one warp.)
constexpr int kRouteWarps = 4;

// Larger key → larger integer; −0 counts as +0 (equal keys stay equal). 0 marks "no expert": every
// key is ≥ −INF, which maps to 0x007FFFFF (NaN keys are −INF already: rank_key).
__device__ __forceinline__ uint32_t ordered_bits(float f) {
  const uint32_t b = __float_as_uint(f + 0.0f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

template <int EPL>
__device__ __forceinline__ int count_at_least(const uint32_t (&u)[EPL], uint32_t c) {
  int n0 = 0, n1 = 0;  // two chains
#pragma unroll
  for (int i = 0; i < EPL; i += 2) {
    n0 += u[i] >= c;
    if (i + 1 < EPL) n1 += u[i + 1] >= c;
  }
  return n0 + n1;
}

template <int EPL>
__global__ void __launch_bounds__(32 * kRouteWarps) route_warp_kernel(const float* logits, const float* bias, int E,
                                                                      int top_k, bool norm, float scaling, int64_t rows,
                                                                      int32_t* ids, float* weights) {
  __shared__ uint32_t cand_u[kRouteWarps][32];
  __shared__ int cand_id[kRouteWarps][32], slot_id[kRouteWarps][32];
  __shared__ float cand_s[kRouteWarps][32], slot_s[kRouteWarps][32];
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int64_t r = int64_t(blockIdx.x) * kRouteWarps + w;
  if (r >= rows) return;
  const unsigned full = 0xffffffffu, below = (1u << lane) - 1u;
  const float* lr = logits + r * E;
  float s[EPL];
  uint32_t u[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int j = lane + 32 * i;
    s[i] = 0.0f, u[i] = 0u;
    if (j < E) {
      s[i] = 1.0f / (1.0f + expf(-lr[j]));
      u[i] = ordered_bits(rank_key(bias ? s[i] + bias[j] : s[i]));
    }
  }
  // T = the largest t with at least top_k keys ≥ t (top_k ≤ E: a real expert's key, so T > 0).
  uint32_t t = 0;
#pragma unroll 1
  for (int b = 30; b >= 0; b -= 2) {
    const uint32_t c1 = t | (1u << b), c2 = t | (2u << b), c3 = t | (3u << b);
    const int n1 = __reduce_add_sync(full, count_at_least(u, c1));
    const int n2 = __reduce_add_sync(full, count_at_least(u, c2));
    const int n3 = __reduce_add_sync(full, count_at_least(u, c3));
    t = n3 >= top_k ? c3 : n2 >= top_k ? c2 : n1 >= top_k ? c1 : t;
  }
  int above = 0;
#pragma unroll
  for (int i = 0; i < EPL; ++i) above += u[i] > t;
  const int need = top_k - __reduce_add_sync(full, above);  // ≥ 1 experts at T, lowest ids first
  // Expert lane + 32i comes before lane' + 32i' when i < i', or i = i' and lane < lane': the
  // candidates at T are ranked (and the selection packed) in id order by one ballot per i.
  int ties = 0, packed = 0;
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const bool at = u[i] == t;
    const unsigned tb = __ballot_sync(full, at);
    const bool chosen = u[i] > t || (at && ties + __popc(tb & below) < need);
    ties += __popc(tb);
    const unsigned cb = __ballot_sync(full, chosen);
    if (chosen) {
      const int p = packed + __popc(cb & below);
      cand_u[w][p] = u[i], cand_id[w][p] = lane + 32 * i, cand_s[w][p] = s[i];
    }
    packed += __popc(cb);
  }
  __syncwarp();
  // Candidate lane's slot: how many candidates rank before it (key descending, lower id on ties).
  if (lane < top_k) {
    const uint32_t mu = cand_u[w][lane];
    const int mid = cand_id[w][lane];
    int slot = 0;
    for (int q = 0; q < top_k; ++q) {
      const uint32_t uq = cand_u[w][q];
      slot += uq > mu || (uq == mu && cand_id[w][q] < mid);
    }
    slot_id[w][slot] = mid, slot_s[w][slot] = cand_s[w][lane];
  }
  __syncwarp();
  if (lane < top_k) {
    float sum = 0.0f;
    for (int q = 0; q < top_k; ++q) sum += slot_s[w][q];
    float wt = slot_s[w][lane];
    if (norm) wt /= sum + 1e-20f;
    wt *= scaling;
    ids[r * top_k + lane] = slot_id[w][lane];
    weights[r * top_k + lane] = wt;
  }
}

// Ungrouped routing of wide layers (E > 64), one block per token: the E selection keys as 64-bit
// words (order-preserving key bits above, the complement of the id below, so that a larger word is a
// larger key or, on equal keys, a lower id) sorted descending by a bitonic network in shared memory;
// the first top_k words are the CPU's selection in its slot order. log2(N)·(log2(N)+1)/2 stages of one
// compare-exchange per thread and a barrier: ~45 short stages for 512, where the warp kernel's bit
// search is 16 dependent rounds of three warp-wide counts on one warp of the block. Weights are
// summed in slot order by each slot's thread, as in the warp kernel and on the CPU.
template <int N>
__global__ void __launch_bounds__(N / 2) route_sort_kernel(const float* logits, const float* bias, int E, int top_k,
                                                           bool norm, float scaling, int64_t rows, int32_t* ids,
                                                           float* weights) {
  __shared__ unsigned long long key[N];
  __shared__ float sig[N];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x;
  if (r >= rows) return;
  const float* lr = logits + r * E;
  for (int j = threadIdx.x; j < N; j += N / 2) {
    unsigned long long k = 0;  // padding: below every expert (whose key bits are ≥ 0x007FFFFF)
    if (j < E) {
      const float sj = 1.0f / (1.0f + expf(-lr[j]));
      sig[j] = sj;
      k = (static_cast<unsigned long long>(ordered_bits(rank_key(bias ? sj + bias[j] : sj))) << 32) |
          (0xFFFFFFFFu - static_cast<uint32_t>(j));
    }
    key[j] = k;
  }
#pragma unroll 1
  for (int size = 2; size <= N; size <<= 1) {
#pragma unroll 1
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      const int t = threadIdx.x;
      const int i = 2 * t - (t & (stride - 1)), j = i + stride;
      const bool desc = (i & size) == 0;
      const unsigned long long a = key[i], b = key[j];
      if ((a < b) == desc) key[i] = b, key[j] = a;
    }
  }
  __syncthreads();
  if (threadIdx.x < top_k) {
    float sum = 0.0f;
    for (int q = 0; q < top_k; ++q) sum += sig[0xFFFFFFFFu - static_cast<uint32_t>(key[q])];
    const int id = int(0xFFFFFFFFu - static_cast<uint32_t>(key[threadIdx.x]));
    float wt = sig[id];
    if (norm) wt /= sum + 1e-20f;
    wt *= scaling;
    ids[r * top_k + threadIdx.x] = id;
    weights[r * top_k + threadIdx.x] = wt;
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
    if (epl <= 2) {
      if (epl <= 1) go(route_warp_kernel<1>);
      else go(route_warp_kernel<2>);
      return;
    }
    auto sort = [&](auto kernel, int n) {
      launch(kernel, dim3(unsigned(rows)), dim3(unsigned(n / 2)), 0, stream, "moe_route", logits, bias, p.n_experts,
             p.top_k, p.norm_topk_prob, p.scaling, rows, ids, weights);
    };
    if (p.n_experts <= 128) sort(route_sort_kernel<128>, 128);
    else if (p.n_experts <= 256) sort(route_sort_kernel<256>, 256);
    else sort(route_sort_kernel<512>, 512);
    return;
  }
  const size_t smem = size_t(2 * p.n_experts + p.n_group) * sizeof(float) + size_t(p.n_experts + p.n_group);
  check(smem <= 48 * 1024, "moe_route (cuda): ", p.n_experts, " experts exceed the kernel's shared memory");
  route_kernel<<<unsigned(std::min<int64_t>(rows, 65535)), kThreads, smem, stream>>>(
      logits, bias, p.n_experts, p.top_k, p.n_group, p.topk_group, p.norm_topk_prob, p.scaling, rows, ids, weights);
  check_launch("moe_route");
}

}  // namespace tandem::cuda
