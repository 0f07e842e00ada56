// The CUDA backend's top_k_logprobs (tandem/backend.h): each row split into chunks of kTopChunk logits, one
// block per (chunk, row) for its max, Σ exp(l − max) and top-k; then one block per row merges the chunks in
// chunk order. The chunking depends on the row's width only, so a row's bits never depend on the rows
// beside it or on the order the blocks ran in.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tandem/cuda/util.cuh"
#include "kernels_cuda.cuh"

namespace tandem::cuda {
namespace {

constexpr int kTopThreads = 256;
constexpr int kTopWarps = kTopThreads / 32;
constexpr int kTopPer = 16;                          // logits per thread, held in registers
constexpr int kTopChunk = kTopThreads * kTopPer;     // logits per block of the first kernel
constexpr int kMergePer = 8;                         // candidates per merge thread held in registers

// The partials of one (row, chunk), in the workspace: sums (double) first, then maxima, values, ids.
struct TopKParts {
  double* sum;  // [rows·chunks] Σ exp(l − m) over the chunk
  float* max;   // [rows·chunks] m: the chunk's largest non-NaN logit (−inf when none)
  float* val;   // [rows·chunks·k] the chunk's top-k, in top-k order
  int* id;      // [rows·chunks·k] their ids; −1 = no entry (fewer than k non-NaN logits)
};

TopKParts parts(void* ws, int64_t entries, int k) {
  char* p = static_cast<char*>(ws);
  TopKParts t;
  t.sum = reinterpret_cast<double*>(p);
  t.max = reinterpret_cast<float*>(p + entries * 8);
  t.val = reinterpret_cast<float*>(p + entries * 12);
  t.id = reinterpret_cast<int*>(p + entries * 12 + entries * k * 4);
  return t;
}

// (v, i) before (v2, i2) in top-k order: larger value, then lower id; i < 0 is no entry. A total order
// on entries (ids are distinct), so any reduction tree picks the same best.
__device__ __forceinline__ bool before(float v, int i, float v2, int i2) {
  if (i < 0) return false;
  if (i2 < 0) return true;
  return v > v2 || (v == v2 && i < i2);
}
// Whether logit x of id i comes after the pick (pv, pi) in top-k order; false for NaN, so NaNs are never
// picked.
__device__ __forceinline__ bool after(float x, int i, float pv, int pi) { return x < pv || (x == pv && i > pi); }

__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (before(ov, oi, v, i)) v = ov, i = oi;
  }
}

// Grid (chunks, rows). Each thread holds kTopPer logits; each warp picks its top-k from them in k rounds
// (the best entry after the previous pick), then warp 0 merges the warps' lists the same way.
__global__ void top_k_chunk_kernel(const float* logits, int64_t V, int k, TopKParts out) {
  __shared__ float scratch[32];
  __shared__ double dscratch[32];
  __shared__ float wv[kTopWarps * Backend::kMaxTopK];
  __shared__ int wi[kTopWarps * Backend::kMaxTopK];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.y, e = r * gridDim.x + blockIdx.x;
  const float* l = logits + r * V;
  const int64_t base = int64_t(blockIdx.x) * kTopChunk + threadIdx.x;
  float x[kTopPer];
  float mx = -INFINITY;
#pragma unroll
  for (int t = 0; t < kTopPer; ++t) {
    const int64_t i = base + int64_t(t) * kTopThreads;
    x[t] = i < V ? l[i] : NAN;  // past the row: NaN, never picked (and left out of the sum below)
    mx = fmaxf(mx, x[t]);
  }
  mx = block_max(mx, scratch);
  // −inf adds 0 even when the chunk's max is −inf (the row's max may not be); a NaN adds NaN.
  double s = 0.0;
#pragma unroll
  for (int t = 0; t < kTopPer; ++t)
    if (base + int64_t(t) * kTopThreads < V && x[t] != -INFINITY) s += double(expf(x[t] - mx));
  s = block_sum(s, dscratch);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float pv = INFINITY;
  int pi = -1;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int bi = -1;
#pragma unroll
    for (int t = 0; t < kTopPer; ++t) {
      const int id = int(base + int64_t(t) * kTopThreads);
      if (after(x[t], id, pv, pi) && before(x[t], id, bv, bi)) bv = x[t], bi = id;
    }
    warp_best(bv, bi);
    if (lane == 0) wv[warp * k + j] = bv, wi[warp * k + j] = bi;
    if (bi >= 0) pv = bv, pi = bi;  // none left: the later rounds find none either
  }
  __syncthreads();
  if (warp != 0) return;
  if (lane == 0) out.max[e] = mx, out.sum[e] = s;
  pv = INFINITY, pi = -1;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int bi = -1;
    for (int c = lane; c < kTopWarps * k; c += 32)
      if (after(wv[c], wi[c], pv, pi) && before(wv[c], wi[c], bv, bi)) bv = wv[c], bi = wi[c];
    warp_best(bv, bi);
    if (lane == 0) out.val[e * k + j] = bv, out.id[e * k + j] = bi;
    if (bi >= 0) pv = bv, pi = bi;
  }
}

// Block-wide best entry (every thread gets it); `sv`, `si` hold a float and an int per warp.
__device__ __forceinline__ void block_best(float& v, int& i, float* sv, int* si) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_best(v, i);
  __syncthreads();  // the previous call's reads are done
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  v = -INFINITY, i = -1;
  for (int w = 0; w < kTopWarps; ++w)
    if (before(sv[w], si[w], v, i)) v = sv[w], i = si[w];
}

// One block per row: the row's max over the chunks' maxima, Σ_c exp(m_c − M)·sum_c in chunk order (a
// fixed tree), lse = M + log Σ, then k rounds over the chunks' candidates.
__global__ void top_k_merge_kernel(TopKParts in, int chunks, int k, int32_t* ids, float* logp) {
  __shared__ float scratch[32];
  __shared__ double dscratch[32];
  __shared__ float sv[kTopWarps];
  __shared__ int si[kTopWarps];
  pdl_wait();
  pdl_trigger();
  const int64_t r = blockIdx.x, e0 = r * chunks;
  float M = -INFINITY;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) M = fmaxf(M, in.max[e0 + c]);
  M = block_max(M, scratch);
  double s = 0.0;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const float m = in.max[e0 + c];
    // A chunk of only −inf and NaN: weight 0, so it adds 0, or NaN when it held a NaN.
    const double w = m == -INFINITY ? 0.0 : exp(double(m) - double(M));
    s += w * in.sum[e0 + c];
  }
  s = block_sum(s, dscratch);
  // Every logit −inf or NaN: log_softmax is undefined (NaN), as max + log Σ exp(l − max) gives.
  const float lse = M == -INFINITY ? NAN : M + float(log(s));
  const int C = chunks * k;
  const float* cv = in.val + e0 * k;
  const int* ci = in.id + e0 * k;
  float rv[kMergePer];
  int ri[kMergePer];
  const bool held = C <= kTopThreads * kMergePer;
#pragma unroll
  for (int t = 0; t < kMergePer; ++t) {
    const int c = threadIdx.x + t * kTopThreads;
    rv[t] = held && c < C ? cv[c] : -INFINITY;
    ri[t] = held && c < C ? ci[c] : -1;
  }
  float pv = INFINITY;
  int pi = -1;
  for (int j = 0; j < k; ++j) {
    float bv = -INFINITY;
    int bi = -1;
    if (held) {
#pragma unroll
      for (int t = 0; t < kMergePer; ++t)
        if (after(rv[t], ri[t], pv, pi) && before(rv[t], ri[t], bv, bi)) bv = rv[t], bi = ri[t];
    } else {
      for (int c = threadIdx.x; c < C; c += kTopThreads)
        if (after(cv[c], ci[c], pv, pi) && before(cv[c], ci[c], bv, bi)) bv = cv[c], bi = ci[c];
    }
    block_best(bv, bi, sv, si);
    if (threadIdx.x == 0) ids[r * k + j] = bi, logp[r * k + j] = bv - lse;  // none: −inf − lse
    if (bi >= 0) pv = bv, pi = bi;
  }
}

int64_t top_k_chunks(int64_t vocab) { return ceil_div(vocab, kTopChunk); }

}  // namespace

size_t top_k_workspace_bytes(int64_t rows, int64_t vocab, int k) {
  const int64_t entries = rows * top_k_chunks(vocab);
  return size_t(entries) * (12 + 8 * size_t(k));
}

void launch_top_k_logprobs(const float* logits, int64_t rows, int64_t vocab, int k, int32_t* ids, float* logp,
                           void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (rows == 0) return;
  check(workspace_bytes >= top_k_workspace_bytes(rows, vocab, k), "top_k_logprobs: workspace of ", workspace_bytes,
        " bytes, ", top_k_workspace_bytes(rows, vocab, k), " needed");
  const int64_t chunks = top_k_chunks(vocab);
  const TopKParts p = parts(workspace, rows * chunks, k);
  launch(top_k_chunk_kernel, dim3(unsigned(chunks), unsigned(rows)), dim3(kTopThreads), 0, stream,
         "top_k_logprobs (chunks)", logits, vocab, k, p);
  launch(top_k_merge_kernel, dim3(unsigned(rows)), dim3(kTopThreads), 0, stream, "top_k_logprobs (merge)", p,
         int(chunks), k, ids, logp);
}

}  // namespace tandem::cuda
