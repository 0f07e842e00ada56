// Causal GQA attention over the f32 KV cache with an online fp32 softmax over tiles of keys. Decode
// and verify passes (n ≤ kAttentionSplitRows) split the keys of each row into kAttentionSplits
// ranges, then merge the partials: on tensor cores (3xTF32) for groups of ≤ 16 query heads and head
// dims ≤ 128, one block per (row, split, kv head); otherwise in fp32 SIMT, one block per (kv head,
// split, chunk of (row, head) pairs) sharing each loaded tile among the query heads of the group and
// the rows of the chunk. Their tiling and reduction trees depend only on the row's own length, so a
// row's result is batch invariant. Longer
// passes (prefill) run the flash kernel on tensor cores (attention_prefill_cuda.cu), or, for head
// dims above its largest instance (128), one SIMT block per (query row, head) here.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "tandem/cuda/tensor_core.cuh"
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

// ---- split-KV attention for decode and verify passes (n ≤ kAttentionSplitRows) ----
// Block (chunk, split s, kv head g) holds up to kChunk (row, query head) pairs of head group g: it
// loads each key tile of its split into shared memory once for all of them and keeps, per pair, the
// running max m, sum l and unnormalized output o. Row i's split boundaries depend only on its length
// len = pos0+i+1 (split_size), never on n or on the rows beside it, so its bits do not either.

constexpr int kSplitWarps = 8;
constexpr int kSplitThreads = kSplitWarps * 32;
constexpr int kKeyTile = 32;  // one key per lane when scoring

// Keys per split for a row of len keys: a multiple of the tile, so every split starts on a tile.
__host__ __device__ __forceinline__ int64_t split_size(int64_t len) {
  const int64_t per = (len + kAttentionSplits - 1) / kAttentionSplits;
  return (per + kKeyTile - 1) / kKeyTile * kKeyTile;
}

// kDims = ceil(hd/32) rounded to a power of two: the head dimensions each lane keeps of o.
template <int kDims>
struct SplitConfig {
  static constexpr int kSlots = kDims >= 16 ? 1 : kDims >= 8 ? 2 : 4;  // pairs per warp
  static constexpr int kChunk = kSplitWarps * kSlots;                  // pairs per block
};

__host__ __device__ __forceinline__ int padded_dim(int hd) { return (hd + 3) & ~3; }
// Row stride of the key tile: an odd number of float4s, so the lanes' 16-byte reads of 8
// consecutive rows fall in distinct banks.
__host__ __device__ __forceinline__ int key_stride(int hd) { return ((padded_dim(hd) / 4) | 1) * 4; }
inline size_t split_smem_bytes(int chunk, int hd) {
  return (size_t(chunk) * padded_dim(hd) + size_t(kKeyTile) * (key_stride(hd) + padded_dim(hd))) * sizeof(float);
}

// Keys [lo, hi) of split s for row i; empty when lo ≥ hi.
__device__ __forceinline__ void split_range(int64_t i, int64_t pos0, int s, int64_t& lo, int64_t& hi) {
  const int64_t len = pos0 + i + 1, sz = split_size(len);
  lo = int64_t(s) * sz;
  hi = lo + sz < len ? lo + sz : len;
}

template <int kDims>
__global__ void __launch_bounds__(kSplitThreads, 2)
    attention_split_kernel(const float* q, const float* kc, const float* vc, int64_t n, int64_t pos0_arg,
                           const int64_t* pos0_device, int nq, int nkv, int hd, float scale, bool vec, float* part_o,
                           float* part_m, float* part_l) {
  constexpr int P = SplitConfig<kDims>::kSlots, kChunk = SplitConfig<kDims>::kChunk;
  const int64_t pos0 = pos0_device ? *pos0_device : pos0_arg;
  // Chunks vary fastest, so the blocks that read the same split run close together (L2 hits).
  const int s = blockIdx.y, g = blockIdx.z, group = nq / nkv;
  const int pairs = int(n) * group, first = int(blockIdx.x) * kChunk;  // pair = row·group + head in group
  const int hd4 = padded_dim(hd), kst = key_stride(hd), tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t kw = int64_t(nkv) * hd, qw = int64_t(nq) * hd;
  extern __shared__ float4 smem4[];
  float* qs = reinterpret_cast<float*>(smem4);  // [kChunk][hd4], zero past hd and past the last pair
  float* ks = qs + kChunk * hd4;                // [kKeyTile][kst]
  float* vs = ks + kKeyTile * kst;              // [kKeyTile][hd4]

  for (int e = tid; e < kChunk * hd4; e += kSplitThreads) {
    const int c = e / hd4, d = e % hd4;
    const int pair = first + c;
    float x = 0.0f;
    if (pair < pairs && d < hd) x = q[int64_t(pair / group) * qw + int64_t(g * group + pair % group) * hd + d];
    qs[e] = x;
  }
  // The tiles this block visits: from the first pair's split start to the last pair's split end
  // (both grow with the row), skipping, by a block-wide vote, tiles that no pair of the chunk needs.
  // The rows of one pass differ in length by < kAttentionSplits, so their split sizes differ by at
  // most a tile and the hull of split s spans at most s tiles more than one split.
  const int last = (first + kChunk < pairs ? first + kChunk : pairs) - 1;
  int64_t hull_lo, hull_hi, unused;
  split_range(first / group, pos0, s, hull_lo, unused);
  split_range(last / group, pos0, s, unused, hull_hi);
  int64_t vote_lo = 1, vote_hi = 0;  // thread t votes for pair first+t
  if (tid < kChunk && first + tid < pairs) split_range((first + tid) / group, pos0, s, vote_lo, vote_hi);
  // Row of each slot's pair (−1: no pair); its key range is recomputed per tile, which is cheaper
  // than holding it in registers.
  int row[P];
  float m[P], l[P], o[P][kDims];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int pair = first + warp * P + p;
    row[p] = pair < pairs ? pair / group : -1;
    m[p] = -INFINITY, l[p] = 0.0f;
#pragma unroll
    for (int c = 0; c < kDims; ++c) o[p][c] = 0.0f;
  }

  // Every thread runs the same trip count (hull bounds are block-wide), so all reach the barriers.
  for (int64_t t0 = hull_lo; t0 < hull_hi; t0 += kKeyTile) {
    // Also the barrier after which the previous tile is no longer read and qs is visible.
    if (!__syncthreads_or(vote_lo <= t0 && t0 < vote_hi)) continue;
    // Keys below hull_hi (≤ the last row's length) are in the cache; the rest of the tile is zero.
    for (int e = tid; e < kKeyTile * (hd4 / 4); e += kSplitThreads) {
      const int r = e / (hd4 / 4), d = (e % (hd4 / 4)) * 4;
      const int64_t key = t0 + r;
      float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
      if (key < hull_hi) {
        const int64_t off = key * kw + int64_t(g) * hd + d;
        if (vec) {
          kx = *reinterpret_cast<const float4*>(kc + off);
          vx = *reinterpret_cast<const float4*>(vc + off);
        } else {
          kx.x = kc[off], vx.x = vc[off];
          if (d + 1 < hd) kx.y = kc[off + 1], vx.y = vc[off + 1];
          if (d + 2 < hd) kx.z = kc[off + 2], vx.z = vc[off + 2];
          if (d + 3 < hd) kx.w = kc[off + 3], vx.w = vc[off + 3];
        }
      }
      *reinterpret_cast<float4*>(ks + r * kst + d) = kx;
      *reinterpret_cast<float4*>(vs + r * hd4 + d) = vx;
    }
    __syncthreads();

    // Everything below is per warp and per pair (warp-uniform branches, no block barrier): a pair's
    // arithmetic is the same whichever slot, warp, block or pass it lands in.
    int cnt[P], cmax = 0;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      int64_t lo = 1, hi = 0;
      if (row[p] >= 0) split_range(row[p], pos0, s, lo, hi);
      cnt[p] = lo <= t0 && t0 < hi ? int(hi - t0 < kKeyTile ? hi - t0 : kKeyTile) : 0;
      cmax = cnt[p] > cmax ? cnt[p] : cmax;
    }
    if (cmax == 0) continue;
    float acc[P];
#pragma unroll
    for (int p = 0; p < P; ++p) acc[p] = 0.0f;
    const float4* kr = reinterpret_cast<const float4*>(ks + lane * kst);
    for (int d4 = 0; d4 < hd4 / 4; ++d4) {
      const float4 kx = kr[d4];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const float4 qx = reinterpret_cast<const float4*>(qs + (warp * P + p) * hd4)[d4];
        acc[p] = fmaf(qx.x, kx.x, acc[p]);
        acc[p] = fmaf(qx.y, kx.y, acc[p]);
        acc[p] = fmaf(qx.z, kx.z, acc[p]);
        acc[p] = fmaf(qx.w, kx.w, acc[p]);
      }
    }
    float e[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      e[p] = 0.0f;
      if (cnt[p] == 0) continue;
      const float sc = lane < cnt[p] ? acc[p] * scale : -INFINITY;
      const float m_new = fmaxf(m[p], warp_max(sc));
      e[p] = lane < cnt[p] ? expf(sc - m_new) : 0.0f;
      const float corr = expf(m[p] - m_new);  // 0 on the pair's first tile (m = −inf)
      l[p] = fmaf(l[p], corr, warp_sum(e[p]));
      m[p] = m_new;
#pragma unroll
      for (int c = 0; c < kDims; ++c) o[p][c] *= corr;
    }
    // Keys past a pair's count are skipped, not weighted by 0: 0·v could turn an o of −0 into +0.
    for (int j = 0; j < cmax; ++j) {
      float vj[kDims];
#pragma unroll
      for (int c = 0; c < kDims; ++c) {
        const int d = lane + 32 * c;
        vj[c] = d < hd ? vs[j * hd4 + d] : 0.0f;
      }
#pragma unroll
      for (int p = 0; p < P; ++p) {
        if (j >= cnt[p]) continue;
        const float pj = __shfl_sync(0xffffffffu, e[p], j);
#pragma unroll
        for (int c = 0; c < kDims; ++c) o[p][c] = fmaf(pj, vj[c], o[p][c]);
      }
    }
  }

  // Partials of the pairs whose split is not empty; the merge reads exactly those (s < splits(len)).
#pragma unroll
  for (int p = 0; p < P; ++p) {
    if (row[p] < 0) continue;
    int64_t lo, hi;
    split_range(row[p], pos0, s, lo, hi);
    if (lo >= hi) continue;
    const int pair = first + warp * P + p;
    const int64_t idx = (int64_t(row[p]) * nq + g * group + pair % group) * kAttentionSplits + s;
    if (lane == 0) part_m[idx] = m[p], part_l[idx] = l[p];
#pragma unroll
    for (int c = 0; c < kDims; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) part_o[idx * hd + d] = o[p][c];
    }
  }
}

// ---- split-KV attention on tensor cores (3xTF32), groups of ≤ 16 query heads, hd ≤ 128 ----
// One block per (row i, split s, kv head g): the group's query heads are the M side of
// mma.sync.m16n8k8 (zero rows past the group), each of the block's 4 warps walks a quarter of the
// split's keys (split_size/4, a multiple of 8) in steps of 8 keys with its own online softmax, and the
// block combines the four in warp order before it writes the split's partial (the SIMT kernel's
// layout, so the same merge follows). Every boundary is a function of the row's length alone: a row's
// bits do not depend on n or on the rows beside it. K and V go from global memory straight into the
// B fragments (no shared-memory tile): with the head dims permuted, lane (g, t) of a quad-row holds
// dims [HD/4·t, HD/4·(t+1)) of key g for Q·Kᵀ (k = t ↔ dim HD/4·t + 2·step, k = t+4 ↔ +1), and for
// P·V dims [HD/8·g, HD/8·(g+1)) of keys 2t and 2t+1 (n-tile j, column n ↔ dim HD/8·n + j; the k
// index of the score accumulator is key 2t for k = t and 2t+1 for k = t+4, as in the flash kernel),
// so each lane's loads are contiguous 16-byte vectors. Q's A fragments, split hi + lo, are staged once
// per block in fragment order. Precision as the flash kernel (about 2^-20 relative per product).
constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr float kLn2 = 0.6931471805599453f;

template <int HD>
struct TcSplit {
  static constexpr int kSteps = HD / 8;   // k-steps of Q·Kᵀ and n-tiles of P·V
  static constexpr int kKDims = HD / 4;   // dims of one key a lane holds for Q·Kᵀ
  static constexpr int kVDims = HD / 8;   // dims of one value row a lane holds for P·V
  static constexpr size_t kQBytes = size_t(2 * kSteps * 128) * sizeof(float);
  static constexpr size_t kMergeBytes = size_t(kTcWarps * (16 * HD + 32)) * sizeof(float);
  static constexpr size_t kBytes = kQBytes > kMergeBytes ? kQBytes : kMergeBytes;
};

// `count` floats (a multiple of 4) from src into r; zeros where the float4 starts at a dim ≥ hd or
// when !ok.
template <int kCount>
__device__ __forceinline__ void load_dims(float (&r)[kCount], const float* src, int dim0, int hd, bool ok) {
#pragma unroll
  for (int j = 0; j < kCount / 4; ++j) {
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (ok && dim0 + 4 * j < hd) x = __ldg(reinterpret_cast<const float4*>(src) + j);
    r[4 * j] = x.x, r[4 * j + 1] = x.y, r[4 * j + 2] = x.z, r[4 * j + 3] = x.w;
  }
}

template <int HD, bool kPrefetch>
__global__ void __launch_bounds__(kTcThreads, kPrefetch ? 2 : 3)
    attention_split_tc_kernel(const float* q, const float* kc, const float* vc, int64_t pos0_arg,
                              const int64_t* pos0_device, int nq, int nkv, int hd, float scale_log2,
                              float* part_o, float* part_m, float* part_l) {
  using C = TcSplit<HD>;
  const int64_t pos0 = pos0_device ? *pos0_device : pos0_arg;
  // Rows vary fastest, so the blocks that read the same split of a verify pass run together (L2).
  const int64_t i = blockIdx.x;
  const int s = blockIdx.y, g = blockIdx.z, group = nq / nkv;
  int64_t lo, hi;
  split_range(i, pos0, s, lo, hi);
  if (lo >= hi) return;  // the merge reads only the row's non-empty splits
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
  const int64_t kw = int64_t(nkv) * hd;

  extern __shared__ float4 tc_smem4[];
  float* smem = reinterpret_cast<float*>(tc_smem4);
  float* qh = smem;                   // [kSteps][32 lanes][4]: A fragments, tf32 hi
  float* ql = qh + C::kSteps * 128;   // the lo parts
  const float* qrow = q + i * int64_t(nq) * hd + int64_t(g) * group * hd;
  for (int e = threadIdx.x; e < C::kSteps * 128; e += kTcThreads) {
    const int step = e >> 7, ln = (e >> 2) & 31, c = e & 3;
    const int head = (ln >> 2) + 8 * (c & 1), dim = C::kKDims * (ln & 3) + 2 * step + (c >> 1);
    const float x = head < group && dim < hd ? qrow[int64_t(head) * hd + dim] : 0.0f;
    uint32_t h, l;
    split_tf32(x, h, l);
    qh[e] = __uint_as_float(h), ql[e] = __uint_as_float(l);
  }
  __syncthreads();

  const int64_t quarter = split_size(pos0 + i + 1) / kTcWarps;
  const int64_t wlo = lo + warp * quarter, whi = wlo + quarter < hi ? wlo + quarter : hi;
  const float* kbase = kc + int64_t(g) * hd;
  const float* vbase = vc + int64_t(g) * hd;
  float o[C::kSteps][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < C::kSteps; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  // This lane's K and V fragments of the 8 keys from k0 (zeros past whi).
  auto load_step = [&](int64_t k0, float(&kr)[C::kKDims], float(&v0)[C::kVDims], float(&v1)[C::kVDims]) {
    const int64_t kkey = k0 + gq, vkey = k0 + 2 * tq;
    load_dims(kr, kbase + kkey * kw + C::kKDims * tq, C::kKDims * tq, hd, kkey < whi);
    load_dims(v0, vbase + vkey * kw + C::kVDims * gq, C::kVDims * gq, hd, vkey < whi);
    load_dims(v1, vbase + (vkey + 1) * kw + C::kVDims * gq, C::kVDims * gq, hd, vkey + 1 < whi);
  };
  float kr[C::kKDims], v0[C::kVDims], v1[C::kVDims];
  if (kPrefetch && wlo < whi) load_step(wlo, kr, v0, v1);
  for (int64_t k0 = wlo; k0 < whi; k0 += 8) {
    // With kPrefetch the next step's loads are in flight while this one computes.
    float nk[C::kKDims], nv0[C::kVDims], nv1[C::kVDims];
    if (kPrefetch) {
      if (k0 + 8 < whi) load_step(k0 + 8, nk, nv0, nv1);
    } else {
      load_step(k0, kr, v0, v1);
    }

    float sc[4] = {0.f, 0.f, 0.f, 0.f};  // heads gq, gq+8 × keys k0+2tq, +1
#pragma unroll
    for (int step = 0; step < C::kSteps; ++step) {
      const float4 h4 = reinterpret_cast<const float4*>(qh)[step * 32 + lane];
      const float4 l4 = reinterpret_cast<const float4*>(ql)[step * 32 + lane];
      const uint32_t ah[4] = {__float_as_uint(h4.x), __float_as_uint(h4.y), __float_as_uint(h4.z),
                              __float_as_uint(h4.w)};
      const uint32_t al[4] = {__float_as_uint(l4.x), __float_as_uint(l4.y), __float_as_uint(l4.z),
                              __float_as_uint(l4.w)};
      uint32_t bh0, bh1, bl0, bl1;
      split_tf32(kr[2 * step], bh0, bl0);
      split_tf32(kr[2 * step + 1], bh1, bl1);
      mma1688_3xtf32(sc, ah, al, bh0, bh1, bl0, bl1);
    }
    // Online softmax in base 2; a head's row spans the 4 lanes of a quad. Every step has a key
    // below whi, so the running max is finite from the first step on.
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      float x = sc[c] * scale_log2;
      if (k0 + 2 * tq + (c & 1) >= whi) x = -INFINITY;
      sc[c] = x;
      mx[c >> 1] = fmaxf(mx[c >> 1], x);
    }
    float corr[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      corr[r] = exp2f(m[r] - mx[r]);  // 0 on the warp's first step (m = −inf)
      m[r] = mx[r];
      l[r] *= corr[r];
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float p = exp2f(sc[c] - m[c >> 1]);
      sc[c] = p;
      l[c >> 1] += p;
    }
    uint32_t ph[4], pl[4];
    split_tf32(sc[0], ph[0], pl[0]);
    split_tf32(sc[2], ph[1], pl[1]);
    split_tf32(sc[1], ph[2], pl[2]);
    split_tf32(sc[3], ph[3], pl[3]);
#pragma unroll
    for (int j = 0; j < C::kSteps; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) o[j][c] *= corr[c >> 1];
      uint32_t bh0, bh1, bl0, bl1;
      split_tf32(v0[j], bh0, bl0);
      split_tf32(v1[j], bh1, bl1);
      mma1688_3xtf32(o[j], ph, pl, bh0, bh1, bl0, bl1);
    }
    if (kPrefetch) {
#pragma unroll
      for (int j = 0; j < C::kKDims; ++j) kr[j] = nk[j];
#pragma unroll
      for (int j = 0; j < C::kVDims; ++j) v0[j] = nv0[j], v1[j] = nv1[j];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }

  // The four quarters, combined in warp order (an empty quarter has m = −inf and is skipped).
  __syncthreads();  // Q's fragments are no longer read: the merge buffers alias them
  float* mo = smem;                     // [warps][16 heads][HD]
  float* mm = mo + kTcWarps * 16 * HD;  // [warps][16]
  float* ml = mm + kTcWarps * 16;       // [warps][16]
#pragma unroll
  for (int j = 0; j < C::kSteps; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int head = gq + 8 * (c >> 1), dim = C::kVDims * (2 * tq + (c & 1)) + j;
      mo[(warp * 16 + head) * HD + dim] = o[j][c];
    }
  if (tq == 0) {
    mm[warp * 16 + gq] = m[0], mm[warp * 16 + gq + 8] = m[1];
    ml[warp * 16 + gq] = l[0], ml[warp * 16 + gq + 8] = l[1];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < group * hd; e += kTcThreads) {
    const int h = e / hd, d = e % hd;
    float mxw = -INFINITY;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) mxw = fmaxf(mxw, mm[w * 16 + h]);
    float sum = 0.f, acc = 0.f;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      const float mw = mm[w * 16 + h];
      if (mw == -INFINITY) continue;
      const float wt = exp2f(mw - mxw);
      sum = fmaf(wt, ml[w * 16 + h], sum);
      acc = fmaf(wt, mo[(w * 16 + h) * HD + d], acc);
    }
    const int64_t idx = (i * nq + g * group + h) * kAttentionSplits + s;
    part_o[idx * hd + d] = acc;
    if (d == 0) part_m[idx] = mxw * kLn2, part_l[idx] = sum;  // the merge weighs splits by e^part_m
  }
}

template <int HD>
void launch_split_tc(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int nq,
                     int nkv, int hd, float* part_o, float* part_m, float* part_l, cudaStream_t stream,
                     const int64_t* pos0_device) {
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(hd));  // log2(e)/√hd
  const dim3 grid{unsigned(n), unsigned(kAttentionSplits), unsigned(nkv)};
  // TANDEM_CUDA_ATTN_PREFETCH=0: no loads ahead (fewer registers, more blocks per SM); read once.
  static const bool prefetch = [] {
    const char* e = std::getenv("TANDEM_CUDA_ATTN_PREFETCH");
    return !(e && std::string(e) == "0");
  }();
  const auto kernel = prefetch ? attention_split_tc_kernel<HD, true> : attention_split_tc_kernel<HD, false>;
  kernel<<<grid, kTcThreads, TcSplit<HD>::kBytes, stream>>>(q, k_cache, v_cache, pos0, pos0_device, nq, nkv, hd,
                                                            scale_log2, part_o, part_m, part_l);
  check_launch("attention_split_tc");
}

// The tensor-core split kernel takes groups of ≤ 16 query heads and 16-byte aligned cache rows of
// 32 < hd ≤ 128 floats (hd % 4 == 0); TANDEM_CUDA_ATTN_SIMT=1 keeps every pass on the SIMT kernel.
bool split_tc_fits(const float* k_cache, const float* v_cache, int nq, int nkv, int hd) {
  return nq / nkv <= 16 && hd % 4 == 0 && hd >= 8 && hd <= 128 && reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(v_cache) % 16 == 0 && !env_is_one("TANDEM_CUDA_ATTN_SIMT");
}

// One block per (query head, row): the row's non-empty splits combined in split order.
constexpr int kMergeThreads = 128;
__global__ void __launch_bounds__(kMergeThreads)
    attention_merge_kernel(const float* part_o, const float* part_m, const float* part_l, int64_t pos0_arg,
                           const int64_t* pos0_device, int nq, int hd, float* out) {
  const int64_t pos0 = pos0_device ? *pos0_device : pos0_arg;
  const int h = blockIdx.x;
  const int64_t i = blockIdx.y, len = pos0 + i + 1, sz = split_size(len);
  const int splits = int((len + sz - 1) / sz);
  const int64_t base = (i * nq + h) * kAttentionSplits;
  __shared__ float w[kAttentionSplits];
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, part_m[base + s]);
  for (int s = threadIdx.x; s < splits; s += kMergeThreads) w[s] = expf(part_m[base + s] - mx);
  __syncthreads();
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum = fmaf(w[s], part_l[base + s], sum);
  const float inv = 1.0f / sum;
  float* orow = out + i * int64_t(nq) * hd + int64_t(h) * hd;
  for (int d = threadIdx.x; d < hd; d += kMergeThreads) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc = fmaf(w[s], part_o[(base + s) * hd + d], acc);
    orow[d] = acc * inv;
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

size_t attention_workspace_bytes(int64_t n, int64_t pos0, int nq, int nkv, int hd) {
  if (n > kAttentionSplitRows) return attention_prefill_workspace_bytes(pos0 + n, nkv, hd);
  return size_t(n) * size_t(nq) * kAttentionSplits * (size_t(hd) + 2) * sizeof(float);
}

namespace {

// Opts the instance in to its largest need (hd = 32·kDims) past the default 48 KB, or to all the
// device allows (launch_split names a head_dim that needs more).
template <int kDims>
void opt_in_smem(int limit) {
  const size_t bytes = std::min(split_smem_bytes(SplitConfig<kDims>::kChunk, 32 * kDims), size_t(limit));
  check_cuda(cudaFuncSetAttribute(attention_split_kernel<kDims>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(bytes)),
             "attention: cudaFuncSetAttribute");
}

// The device's opt-in shared memory per block; the instances are set up on the first call (one
// device per process).
int split_smem_limit() {
  static const int limit = [] {
    int dev = 0, v = 0;
    check_cuda(cudaGetDevice(&dev), "attention: cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
               "attention: cudaDeviceGetAttribute");
    opt_in_smem<1>(v), opt_in_smem<2>(v), opt_in_smem<4>(v), opt_in_smem<8>(v), opt_in_smem<16>(v);
    return v;
  }();
  return limit;
}

template <int kDims>
void launch_split(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int nq,
                  int nkv, int hd, float scale, float* part_o, float* part_m, float* part_l, cudaStream_t stream,
                  const int64_t* pos0_device) {
  constexpr int kChunk = SplitConfig<kDims>::kChunk;
  const size_t smem = split_smem_bytes(kChunk, hd);
  check(smem <= size_t(split_smem_limit()), "attention (cuda): head_dim ", hd, " needs ", smem,
        " bytes of shared memory per block, the device allows ", split_smem_limit());
  const bool vec = hd % 4 == 0 && reinterpret_cast<uintptr_t>(k_cache) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(v_cache) % 16 == 0;
  const int64_t chunks = ceil_div(n * (nq / nkv), kChunk);
  check(nkv <= 65535, "attention (cuda): ", nkv, " kv heads exceed the split grid's 65535");
  const dim3 grid{unsigned(chunks), unsigned(kAttentionSplits), unsigned(nkv)};
  attention_split_kernel<kDims><<<grid, kSplitThreads, smem, stream>>>(
      q, k_cache, v_cache, n, pos0, pos0_device, nq, nkv, hd, scale, vec, part_o, part_m, part_l);
  check_launch("attention_split");
}

}  // namespace

void prepare_attention() {
  (void)split_smem_limit();
  prepare_attention_prefill();
}

void launch_attention(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0, int nq,
                      int nkv, int hd, float* out, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                      const int64_t* pos0_device) {
  if (n == 0) return;
  check(hd <= kMaxHeadDim, "attention (cuda): head_dim ", hd, " exceeds the kernel's limit ", kMaxHeadDim);
  const float scale = 1.0f / sqrtf(float(hd));
  if (n > kAttentionSplitRows) {
    if (launch_attention_prefill(q, k_cache, v_cache, n, pos0, nq, nkv, hd, out, workspace, workspace_bytes, stream))
      return;
    // hd > 128: the flash kernel's registers (16 × hd outputs per warp) would not fit.
    const size_t smem = size_t(hd + kTile) * sizeof(float);
    dim3 grid(unsigned(nq), unsigned(std::min<int64_t>(n, 65535)));
    attention_kernel<<<grid, kThreads, smem, stream>>>(q, k_cache, v_cache, n, pos0, pos0_device, nq, nkv, hd, scale,
                                                       out);
    check_launch("attention");
    return;
  }
  const size_t need = attention_workspace_bytes(n, pos0, nq, nkv, hd);
  check(workspace && workspace_bytes >= need, "attention (cuda): workspace of ", workspace_bytes, " bytes for ", n,
        " rows, expected at least ", need);
  const int64_t cells = n * nq * kAttentionSplits;
  float* part_o = static_cast<float*>(workspace);
  float* part_m = part_o + cells * hd;
  float* part_l = part_m + cells;
  const int kd = (hd + 31) / 32;
  const auto split = kd <= 1 ? launch_split<1>
                     : kd <= 2 ? launch_split<2>
                     : kd <= 4 ? launch_split<4>
                     : kd <= 8 ? launch_split<8>
                               : launch_split<16>;
  if (split_tc_fits(k_cache, v_cache, nq, nkv, hd)) {
    const auto tc = hd <= 32 ? launch_split_tc<32> : hd <= 64 ? launch_split_tc<64> : launch_split_tc<128>;
    tc(q, k_cache, v_cache, n, pos0, nq, nkv, hd, part_o, part_m, part_l, stream, pos0_device);
  } else {
    split(q, k_cache, v_cache, n, pos0, nq, nkv, hd, scale, part_o, part_m, part_l, stream, pos0_device);
  }
  attention_merge_kernel<<<dim3(unsigned(nq), unsigned(n)), kMergeThreads, 0, stream>>>(part_o, part_m, part_l, pos0,
                                                                                       pos0_device, nq, hd, out);
  check_launch("attention_merge");
}

}  // namespace tandem::cuda
