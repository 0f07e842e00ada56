// Causal GQA attention over the f32 KV cache: one block per (query row, head) with an online fp32
// softmax over tiles of keys. A block reads only its own query and cache rows 0 .. pos0+i, with the
// same tiling and reduction trees for any n, so a row's result is batch invariant.
#include <algorithm>
#include <cmath>

#include "tandem/cuda/util.cuh"
#include "kernels_cuda.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps; also the key tile length
constexpr int kWarps = kThreads / 32;
constexpr int kTile = kThreads;
constexpr int kDimsPerThread = kMaxHeadDim / kThreads;

__global__ void attention_kernel(const float* q, const float* kc, const float* vc, int64_t n, int64_t pos0_arg,
                                 const int64_t* pos0_device, int nq, int nkv, int hd, float scale, float* out) {
  const int64_t pos0 = pos0_device ? *pos0_device : pos0_arg;
  extern __shared__ float smem[];
  float* qs = smem;          // [hd]
  float* ps = qs + hd;       // [kTile] scores, then probabilities
  __shared__ float scratch[32];
  const int h = blockIdx.x;
  const int64_t kw = int64_t(nkv) * hd, qw = int64_t(nq) * hd;
  const int64_t kv_off = int64_t(h / (nq / nkv)) * hd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  for (int64_t i = blockIdx.y; i < n; i += gridDim.y) {
    const int64_t len = pos0 + i + 1;
    const float* qh = q + i * qw + int64_t(h) * hd;
    __syncthreads();  // qs/ps of the previous row are no longer read
    for (int d = threadIdx.x; d < hd; d += kThreads) qs[d] = qh[d];
    float o[kDimsPerThread];
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) o[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    __syncthreads();

    for (int64_t p0 = 0; p0 < len; p0 += kTile) {
      const int tl = len - p0 < kTile ? int(len - p0) : kTile;
      // Scores: warp w takes keys w, w+4, …; lanes split the head dimension, then a butterfly sum.
      for (int j = warp; j < tl; j += kWarps) {
        const float* kr = kc + (p0 + j) * kw + kv_off;
        float acc = 0.0f;
        for (int d = lane; d < hd; d += 32) acc = fmaf(qs[d], kr[d], acc);
        acc = warp_sum(acc);
        if (lane == 0) ps[j] = acc * scale;
      }
      __syncthreads();
      const float s = threadIdx.x < tl ? ps[threadIdx.x] : -INFINITY;
      const float m_new = fmaxf(m, block_max(s, scratch));
      const float e = threadIdx.x < tl ? expf(s - m_new) : 0.0f;
      const float corr = expf(m - m_new);  // 0 on the first tile (m = −inf)
      const float tile_sum = block_sum(e, scratch);
      ps[threadIdx.x] = e;  // every thread read its score before block_sum's barriers
      l = l * corr + tile_sum;
      m = m_new;
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kDimsPerThread; ++c) {
        const int d = threadIdx.x + c * kThreads;
        if (d < hd) {
          float acc = o[c] * corr;
          const float* vr = vc + p0 * kw + kv_off + d;
          for (int j = 0; j < tl; ++j) acc = fmaf(ps[j], vr[j * kw], acc);
          o[c] = acc;
        }
      }
      __syncthreads();  // ps is rewritten by the next tile
    }
    const float inv = 1.0f / l;
    float* orow = out + i * qw + int64_t(h) * hd;
#pragma unroll
    for (int c = 0; c < kDimsPerThread; ++c) {
      const int d = threadIdx.x + c * kThreads;
      if (d < hd) orow[d] = o[c] * inv;
    }
  }
}

// Element i of the n·kw new values of k and of v into the cache rows from *pos0.
__global__ void kv_append_kernel(const float* k, const float* v, int64_t n, int64_t kw, const int64_t* pos0,
                                 float* kc, float* vc) {
  const int64_t off = *pos0 * kw, total = n * kw;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    kc[off + i] = k[i];
    vc[off + i] = v[i];
  }
}

}  // namespace

void launch_kv_append(const float* k, const float* v, int64_t n, int64_t kw, const int64_t* pos0_device,
                      float* k_cache, float* v_cache, cudaStream_t stream) {
  if (n == 0 || kw == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(n * kw, 256), 65535));
  kv_append_kernel<<<blocks, 256, 0, stream>>>(k, v, n, kw, pos0_device, k_cache, v_cache);
  check_launch("kv_append");
}

void launch_attention(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int nq,
                      int nkv, int hd, float* out, cudaStream_t stream, const int64_t* pos0_device) {
  if (n == 0) return;
  check(hd <= kMaxHeadDim, "attention (cuda): head_dim ", hd, " exceeds the kernel's limit ", kMaxHeadDim);
  const size_t smem = size_t(hd + kTile) * sizeof(float);
  dim3 grid(unsigned(nq), unsigned(std::min<int64_t>(n, 65535)));
  attention_kernel<<<grid, kThreads, smem, stream>>>(q, k_cache, v_cache, n, pos0, pos0_device, nq, nkv, hd,
                                                     1.0f / sqrtf(float(hd)), out);
  check_launch("attention");
}

}  // namespace tandem::cuda
