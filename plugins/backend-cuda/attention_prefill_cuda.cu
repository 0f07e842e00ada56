// Flash-style causal GQA attention for prefill passes (n > kAttentionSplitRows) on tensor cores, over
// the f32 KV cache: one pass over the keys with an online fp32 softmax, no n² scratch.
//
// Tiling. For kv head g the n·group (row, query head) pairs are numbered pair = row·group + h (h the
// head within the group) and cut into tiles of kRows = 64 consecutive pairs; one block of 4 warps per
// (tile, kv head), warp w owning pairs 16w … 16w+15 as the M side of mma.sync.m16n8k8. All query heads
// of a group that fall in a tile share its K/V tiles (GQA: with 16 heads per kv head a tile is 4 rows
// × 16 heads). The block walks keys [0, pos0 + last row + 1) in tiles of kKeys = 64 staged in shared
// memory (cp.async): S = Q·Kᵀ (16 × 64 per warp, in registers), the causal mask (key ≤ pos0 + row of
// the pair) on the tiles that reach past the block's first row, the running max and sum per pair, then
// O += P·V (16 × HD per warp, in registers). V of a tile loads while its scores are computed, K of the
// next tile while P·V runs. The scores' accumulator layout is reused as P's A fragment by numbering
// the k index of each 8-key step as keys 2t, 2t+1 (lane t of a quad): no shuffles, and the same
// permutation of the head dims turns the Q and K fragment reads into float2 loads.
// Blocks run the heaviest tiles (last rows) first. Offsets are int64 (262k keys · nkv · hd overflows
// int32). HD is the instance's head dim (16, 32, 64, 128); a smaller hd runs zero-padded in the next
// instance, a larger one on the SIMT kernel (attention_cuda.cu).
//
// Precision: 3xTF32. The cache is f32 and the CPU reference computes in fp32; a plain tf32 product
// keeps 11 significant bits (about 5e-4 relative), which after the softmax would be an error of 1e-3
// in the output, far from fp32. Each operand is split x = hi + lo (split_tf32) and a·b taken as
// hi·hi + hi·lo + lo·hi in fp32 accumulators: about 2^-20 relative per product, near fp32's 2^-24, at
// 3× the tensor work, which is still far faster than the SIMT kernel.
#include <algorithm>
#include <cmath>

#include "kernels_cuda.cuh"
#include "tandem/cuda/async_copy.cuh"
#include "tandem/cuda/tensor_core.cuh"
#include "tandem/cuda/util.cuh"

namespace tandem::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // (row, head) pairs per block
constexpr int kKeys = 64;           // keys per tile
constexpr int kKeySteps = kKeys / 8;

template <int HD>
struct FlashLayout {
  // Q and K rows: the float2 fragment reads of a half-warp (4 rows × 8 floats) fall in 32 distinct
  // banks when the stride is ≡ 8 mod 32.
  static constexpr int kQStride = HD + 8;
  // V rows: the scalar reads of a warp (rows 0, 2, 4, 6 × 8 columns) do when 2·stride ≡ 8 mod 32.
  static constexpr int kVStride = HD + 4;
  static constexpr size_t kBytes = size_t(kRows * kQStride + kKeys * kQStride + kKeys * kVStride) * sizeof(float);
};

// Block-wide: kCount rows of HD floats into shared memory at `dst` (row stride `stride`): row r from
// src(r) (hd floats in global memory; null past the valid rows), zeros past hd and in rows without a
// source (a key past the pass reads 0, never the poisoned or unwritten cache rows behind it). With
// `vec` (hd % 4 == 0, 16-byte aligned rows) the copies are cp.async and land at cp_async_wait; else
// they are plain loads and stores, visible after the next barrier like the zeros.
template <int HD, int kCount, class Src>
__device__ __forceinline__ void stage(float* dst, int stride, int hd, bool vec, Src src) {
  constexpr int kChunks = HD / 4;
  for (int e = threadIdx.x; e < kCount * kChunks; e += kThreads) {
    const int r = e / kChunks, d = (e % kChunks) * 4;
    float* s = dst + r * stride + d;
    const float* g = src(r);
    if (g && vec && d < hd) {
      cp_async16(s, g + d);
      continue;
    }
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (g) {
      if (d < hd) x.x = g[d];
      if (d + 1 < hd) x.y = g[d + 1];
      if (d + 2 < hd) x.z = g[d + 2];
      if (d + 3 < hd) x.w = g[d + 3];
    }
    *reinterpret_cast<float4*>(s) = x;
  }
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 2)
    attention_flash_kernel(const float* q, const float* kc, const float* vc, int64_t n, int64_t pos0_arg,
                           const int64_t* pos0_device, int nq, int nkv, int hd, float scale_log2, bool vec,
                           float* out) {
  using L = FlashLayout<HD>;
  constexpr int kDimSteps = HD / 8;
  const int64_t pos0 = pos0_device ? *pos0_device : pos0_arg;
  const int group = nq / nkv;
  const int64_t pairs = n * group, tiles = (pairs + kRows - 1) / kRows;
  const int g = int(blockIdx.x % unsigned(nkv));
  const int64_t tile = tiles - 1 - int64_t(blockIdx.x / unsigned(nkv));
  const int64_t first = tile * kRows, last = (first + kRows < pairs ? first + kRows : pairs) - 1;
  const int64_t kw = int64_t(nkv) * hd, qw = int64_t(nq) * hd;
  const int64_t keys = pos0 + last / group + 1;     // the block reads keys [0, keys)
  const int64_t unmasked = pos0 + first / group + 1;  // keys below this are visible to every pair

  extern __shared__ float4 flash_smem4[];
  float* qs = reinterpret_cast<float*>(flash_smem4);  // [kRows][kQStride]
  float* ks = qs + kRows * L::kQStride;               // [kKeys][kQStride]
  float* vs = ks + kKeys * L::kQStride;               // [kKeys][kVStride]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;

  // The address of pair `pair`'s row of q or out.
  auto pair_offset = [&](int64_t pair) { return (pair / group) * qw + int64_t(g * group + int(pair % group)) * hd; };
  auto kv_rows = [&](const float* cache, int64_t t0) {
    return [=](int r) -> const float* {
      const int64_t key = t0 + r;
      return key < keys ? cache + key * kw + int64_t(g) * hd : nullptr;
    };
  };
  stage<HD, kRows>(qs, L::kQStride, hd, vec,
                   [&](int r) -> const float* { return first + r <= last ? q + pair_offset(first + r) : nullptr; });
  stage<HD, kKeys>(ks, L::kQStride, hd, vec, kv_rows(kc, 0));
  cp_async_commit();

  // This lane's two pairs (rows gq and gq+8 of the warp's 16): their key limits. A pair past the
  // last takes the last's limit; its q is zero and its output is not written.
  int64_t lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t pair = first + warp * 16 + gq + 8 * r;
    lim[r] = pos0 + (pair < last ? pair : last) / group + 1;
  }
  float o[kDimSteps][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int nd = 0; nd < kDimSteps; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;

  for (int64_t t0 = 0; t0 < keys; t0 += kKeys) {
    cp_async_wait<0>();
    __syncthreads();  // K of this tile (and Q) visible; every warp is done with the previous V
    stage<HD, kKeys>(vs, L::kVStride, hd, vec, kv_rows(vc, t0));
    cp_async_commit();

    // S = Q·Kᵀ; 8-key steps past the pass's last key are skipped (their scores stay 0, masked below).
    float s[kKeySteps][4];
#pragma unroll
    for (int j = 0; j < kKeySteps; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < kDimSteps; ++kd) {
      const float* qa = qs + (warp * 16 + gq) * L::kQStride + 8 * kd + 2 * tq;
      const float2 q0 = *reinterpret_cast<const float2*>(qa);
      const float2 q1 = *reinterpret_cast<const float2*>(qa + 8 * L::kQStride);
      uint32_t ah[4], al[4];  // k = t ↔ dim 8kd+2t, k = t+4 ↔ dim 8kd+2t+1
      split_tf32(q0.x, ah[0], al[0]);
      split_tf32(q1.x, ah[1], al[1]);
      split_tf32(q0.y, ah[2], al[2]);
      split_tf32(q1.y, ah[3], al[3]);
#pragma unroll
      for (int j = 0; j < kKeySteps; ++j) {
        if (t0 + 8 * j >= keys) break;
        const float2 kx = *reinterpret_cast<const float2*>(ks + (8 * j + gq) * L::kQStride + 8 * kd + 2 * tq);
        uint32_t bh0, bh1, bl0, bl1;
        split_tf32(kx.x, bh0, bl0);
        split_tf32(kx.y, bh1, bl1);
        mma1688_3xtf32(s[j], ah, al, bh0, bh1, bl0, bl1);
      }
    }

    // Online softmax in base 2 (scale_log2 = log2(e)/√hd). Lane (gq, tq) holds keys 8j+2tq, +1 of its
    // two pairs; a pair's row spans the 4 lanes of a quad. Key 0 is visible to every pair, so m is
    // finite from the first tile on and exp2(−inf − m) = 0 for masked keys.
    const bool masked = t0 + kKeys > unmasked;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < kKeySteps; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c >> 1;
        float x = s[j][c] * scale_log2;
        if (masked && t0 + 8 * j + 2 * tq + (c & 1) >= lim[r]) x = -INFINITY;
        s[j][c] = x;
        mx[r] = fmaxf(mx[r], x);
      }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      corr[r] = exp2f(m[r] - mx[r]);  // 0 on the first tile (m = −inf)
      m[r] = mx[r];
      l[r] *= corr[r];  // this lane's share of the sum; the quad's shares are added at the end
    }
#pragma unroll
    for (int j = 0; j < kKeySteps; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = exp2f(s[j][c] - m[c >> 1]);
        s[j][c] = p;
        l[c >> 1] += p;
      }
#pragma unroll
    for (int nd = 0; nd < kDimSteps; ++nd)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[nd][c] *= corr[c >> 1];

    __syncthreads();  // every warp is done reading this K tile
    if (t0 + kKeys < keys) stage<HD, kKeys>(ks, L::kQStride, hd, vec, kv_rows(kc, t0 + kKeys));
    cp_async_commit();
    cp_async_wait<1>();  // this tile's V has landed; the next K may still be in flight
    __syncthreads();

    // O += P·V: the k index of step j is key 8j+2t (k = t) and 8j+2t+1 (k = t+4), so P's A fragment
    // is the score accumulator as it stands.
#pragma unroll
    for (int j = 0; j < kKeySteps; ++j) {
      if (t0 + 8 * j >= keys) break;
      uint32_t ah[4], al[4];
      split_tf32(s[j][0], ah[0], al[0]);
      split_tf32(s[j][2], ah[1], al[1]);
      split_tf32(s[j][1], ah[2], al[2]);
      split_tf32(s[j][3], ah[3], al[3]);
      const float* vr = vs + (8 * j + 2 * tq) * L::kVStride + gq;
#pragma unroll
      for (int nd = 0; nd < kDimSteps; ++nd) {
        uint32_t bh0, bh1, bl0, bl1;
        split_tf32(vr[8 * nd], bh0, bl0);
        split_tf32(vr[L::kVStride + 8 * nd], bh1, bl1);
        mma1688_3xtf32(o[nd], ah, al, bh0, bh1, bl0, bl1);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int64_t pair = first + warp * 16 + gq + 8 * r;
    if (pair > last) continue;
    const float inv = 1.0f / sum;
    float* orow = out + pair_offset(pair);
#pragma unroll
    for (int nd = 0; nd < kDimSteps; ++nd) {
      const int d = 8 * nd + 2 * tq;
      if (d < hd) orow[d] = o[nd][2 * r] * inv;
      if (d + 1 < hd) orow[d + 1] = o[nd][2 * r + 1] * inv;
    }
  }
}

// Opts every instance in to its shared memory past the default 48 KB, once per process (one device).
void opt_in_flash() {
  static const bool done = [] {
    auto set = [](auto kernel, size_t bytes) {
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
                 "attention (flash): cudaFuncSetAttribute");
    };
    set(attention_flash_kernel<16>, FlashLayout<16>::kBytes);
    set(attention_flash_kernel<32>, FlashLayout<32>::kBytes);
    set(attention_flash_kernel<64>, FlashLayout<64>::kBytes);
    set(attention_flash_kernel<128>, FlashLayout<128>::kBytes);
    return true;
  }();
  (void)done;
}

template <int HD>
void launch_flash(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int nq,
                  int nkv, int hd, float* out, cudaStream_t stream, const int64_t* pos0_device) {
  opt_in_flash();
  const bool vec = hd % 4 == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 && reinterpret_cast<uintptr_t>(v_cache) % 16 == 0;
  const int64_t blocks = ceil_div(n * (nq / nkv), kRows) * nkv;
  check(blocks <= INT32_MAX, "attention (flash): ", n, " rows of ", nq, " heads need ", blocks,
        " blocks, more than a grid holds");
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(hd));  // log2(e)/√hd
  attention_flash_kernel<HD><<<unsigned(blocks), kThreads, FlashLayout<HD>::kBytes, stream>>>(
      q, k_cache, v_cache, n, pos0, pos0_device, nq, nkv, hd, scale_log2, vec, out);
  check_launch("attention_flash");
}

}  // namespace

void prepare_attention_prefill() { opt_in_flash(); }

bool launch_attention_prefill(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0,
                              int nq, int nkv, int hd, float* out, cudaStream_t stream, const int64_t* pos0_device) {
  if (hd > 128) return false;
  if (n == 0) return true;
  const auto flash = hd <= 16 ? launch_flash<16> : hd <= 32 ? launch_flash<32> : hd <= 64 ? launch_flash<64>
                                                                                          : launch_flash<128>;
  flash(q, k_cache, v_cache, n, pos0, nq, nkv, hd, out, stream, pos0_device);
  return true;
}

}  // namespace tandem::cuda
