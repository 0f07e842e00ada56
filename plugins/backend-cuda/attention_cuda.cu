// Causal GQA attention over the f32 KV cache with an online fp32 softmax over tiles of keys. Decode
// and verify passes (n ≤ kAttentionSplitRows) split the keys of each row into kAttentionSplits
// ranges, one block per (kv head, split, chunk of (row, head) pairs) sharing each loaded tile among
// the query heads of the group and the rows of the chunk, then merge the partials; their tiling and
// reduction trees depend only on the row's own length, so a row's result is batch invariant. Longer
// passes (prefill) run the flash kernel on tensor cores (attention_prefill_cuda.cu), or, for head
// dims above its largest instance (128), one SIMT block per (query row, head) here.
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

size_t attention_workspace_bytes(int64_t n, int nq, int hd) {
  if (n > kAttentionSplitRows) return 0;
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
    if (launch_attention_prefill(q, k_cache, v_cache, n, pos0, nq, nkv, hd, out, stream, pos0_device)) return;
    // hd > 128: the flash kernel's registers (16 × hd outputs per warp) would not fit.
    const size_t smem = size_t(hd + kTile) * sizeof(float);
    dim3 grid(unsigned(nq), unsigned(std::min<int64_t>(n, 65535)));
    attention_kernel<<<grid, kThreads, smem, stream>>>(q, k_cache, v_cache, n, pos0, pos0_device, nq, nkv, hd, scale,
                                                       out);
    check_launch("attention");
    return;
  }
  const size_t need = attention_workspace_bytes(n, nq, hd);
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
  split(q, k_cache, v_cache, n, pos0, nq, nkv, hd, scale, part_o, part_m, part_l, stream, pos0_device);
  attention_merge_kernel<<<dim3(unsigned(nq), unsigned(n)), kMergeThreads, 0, stream>>>(part_o, part_m, part_l, pos0,
                                                                                       pos0_device, nq, hd, out);
  check_launch("attention_merge");
}

}  // namespace tandem::cuda
