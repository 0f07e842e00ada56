// Flash-style causal GQA attention for prefill passes (n > kAttentionSplitRows) on tensor cores, over
// the f32 KV cache: one pass over the keys with an online fp32 softmax, no n² scratch.
//
// Precision: fp16 hi + lo. The cache is f32 and the CPU reference computes in fp32; one fp16 (or
// tf32) product keeps 11 significant bits, which after the softmax would be an error of 1e-3 in the
// output. Each operand is scaled by a power of two (its largest magnitude into [2^14, 2^15): exact,
// and the hi parts stay far from fp16's range ends), then split x = hi + lo with hi = fp16(x), lo =
// fp16(x − hi), about 22 significant bits, and a·b is taken as lo·hi + hi·lo + hi·hi in fp32
// accumulators (lo·lo, 2^-22 relative, dropped) on mma.sync.m16n8k16: the accuracy of 3xTF32 at half
// its tensor work, since an fp16 product of k = 16 costs what a tf32 one of k = 8 does. The scales:
// Q per (row, head) pair, K per 64-key tile, V per kv head over the whole pass (one scale, so the
// output accumulators never change scale), P (in [0, 1]) by 2^14 so that small probabilities keep
// their bits instead of falling into fp16's subnormals. Scales fold into the score multiplier and the
// final division.
//
// Two passes. split_kv converts the keys [0, pos0 + n) of the cache once per call into the workspace
// (attention_prefill_workspace_bytes): K as hi and lo tiles [64 keys][HD] with one scale per tile, V
// transposed [HD][64 keys] (so that P·V's B fragments, like Q·Kᵀ's, are rows of 16-bit elements along
// k), rows past the pass and dims past hd zero. The flash kernel stages those tiles with cp.async and
// reads Q·Kᵀ's B fragments, hi and lo, with one ldmatrix_x4 (P·V's with 32-bit loads: registers).
//
// Tiling. For kv head g the n·group (row, query head) pairs are numbered pair = row·group + h (h the
// head within the group) and cut into tiles of kRows = 64 consecutive pairs; one block of 4 warps per
// (tile, kv head), warp w owning pairs 16w … 16w+15 as the M side of the mma. All query heads of a
// group that fall in a tile share its K/V tiles (GQA: with 16 heads per kv head a tile is 4 rows × 16
// heads). Each warp keeps its Q fragments (hi and lo) in registers. The block walks keys [0, pos0 +
// last row + 1) in tiles of kKeys = 64: S = Q·Kᵀ (16 × 64 per warp), the causal mask (key ≤ pos0 +
// row of the pair) on the tiles that reach past the block's first row, the running max and sum per
// pair, then O += P·V (16 × HD per warp). The score accumulators of two 8-key steps are P's A
// fragment for one 16-key step as they stand (the layouts of mma.m16n8k16 line up). V of a tile loads
// while its scores are computed, K of the next tile while P·V runs. Blocks run the heaviest tiles
// (last rows) first. Offsets are int64 (262k keys · nkv · hd overflows int32). HD is the instance's
// head dim (16, 32, 64, 128); a smaller hd runs zero-padded in the next instance, a larger one on the
// SIMT kernel (attention_cuda.cu).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels_cuda.cuh"
#include "tandem/cuda/async_copy.cuh"
#include "tandem/cuda/device_bits.cuh"
#include "tandem/cuda/tensor_core.cuh"
#include "tandem/cuda/util.cuh"

namespace tandem::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // (row, head) pairs per block
constexpr int kKeys = 64;           // keys per tile
constexpr int kKeySteps = kKeys / 8;
constexpr float kPScale = 16384.0f;  // P's scale before its split (2^14: p ≤ 1 stays ≤ 2^14)

// The instance for head dim hd (0: none, hd > 128).
inline int instance_dim(int hd) { return hd <= 16 ? 16 : hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : 0; }

// The workspace of a pass over `keys` keys for instance HD: four half arrays of nkv · tiles · 64 · HD
// (K hi, K lo, V hi, V lo), then the K tiles' down-scales [nkv][tiles] and the V maxima [nkv].
struct Split {
  __half *khi, *klo, *vhi, *vlo;
  float* kdown;
  unsigned* vmax;  // bits of max |v| per kv head (non-negative floats order as unsigned ints)
  int tiles;
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t split_bytes(int64_t keys, int nkv, int HD) {
  const size_t tiles = size_t(ceil_div(keys, kKeys));
  return 4 * align256(size_t(nkv) * tiles * kKeys * HD * sizeof(__half)) +
         align256(size_t(nkv) * tiles * sizeof(float)) + align256(size_t(nkv) * sizeof(unsigned));
}

Split carve(void* ws, int64_t keys, int nkv, int HD) {
  Split s;
  s.tiles = int(ceil_div(keys, kKeys));
  const size_t half_bytes = align256(size_t(nkv) * s.tiles * kKeys * HD * sizeof(__half));
  char* p = static_cast<char*>(ws);
  s.khi = reinterpret_cast<__half*>(p), p += half_bytes;
  s.klo = reinterpret_cast<__half*>(p), p += half_bytes;
  s.vhi = reinterpret_cast<__half*>(p), p += half_bytes;
  s.vlo = reinterpret_cast<__half*>(p), p += half_bytes;
  s.kdown = reinterpret_cast<float*>(p), p += align256(size_t(nkv) * s.tiles * sizeof(float));
  s.vmax = reinterpret_cast<unsigned*>(p);
  return s;
}

// (a, b) → hi, lo as half2 bit patterns (a in the low half: the lower k index of a fragment word).
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 hf = __half22float2(h);
  const __half2 l = __floats2half2_rn(a - hf.x, b - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// Block (tile t, kv head g): the tile's max |k| and K hi/lo at its scale; max |v| into vmax[g].
template <int HD>
__global__ void __launch_bounds__(kThreads) split_k_kernel(const float* kc, const float* vc, int64_t keys, int nkv,
                                                           int hd, Split s) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, g = blockIdx.y;
  const int64_t k0 = int64_t(t) * kKeys, kw = int64_t(nkv) * hd;
  const int rows = int(keys - k0 < kKeys ? keys - k0 : kKeys);
  float mk = 0.f, mv = 0.f;
  for (int e = threadIdx.x; e < rows * hd; e += kThreads) {
    const int64_t i = (k0 + e / hd) * kw + int64_t(g) * hd + e % hd;
    mk = fmaxf(mk, fabsf(kc[i]));
    mv = fmaxf(mv, fabsf(vc[i]));
  }
  mk = block_max(mk, scratch);
  mv = block_max(mv, scratch);
  const Pow2Scale ps = pow2_scale<14>(mk);
  const size_t tile = size_t(g) * s.tiles + t;
  if (threadIdx.x == 0) {
    s.kdown[tile] = ps.down;
    atomicMax(s.vmax + g, __float_as_uint(mv));
  }
  uint32_t* hi = reinterpret_cast<uint32_t*>(s.khi + tile * kKeys * HD);
  uint32_t* lo = reinterpret_cast<uint32_t*>(s.klo + tile * kKeys * HD);
  for (int e = threadIdx.x; e < kKeys * HD / 2; e += kThreads) {
    const int r = 2 * e / HD, d = 2 * e % HD;
    const float* row = kc + (k0 + r) * kw + int64_t(g) * hd;
    const float a = r < rows && d < hd ? row[d] * ps.up : 0.f, b = r < rows && d + 1 < hd ? row[d + 1] * ps.up : 0.f;
    split2(a, b, hi[e], lo[e]);
  }
}

// Block (tile t, kv head g): V hi/lo transposed [HD][64] at the kv head's scale (after split_k_kernel).
template <int HD>
__global__ void __launch_bounds__(kThreads) split_v_kernel(const float* vc, int64_t keys, int nkv, int hd, Split s) {
  __shared__ float tile_v[kKeys][HD + 1];
  const int t = blockIdx.x, g = blockIdx.y;
  const int64_t k0 = int64_t(t) * kKeys, kw = int64_t(nkv) * hd;
  const int rows = int(keys - k0 < kKeys ? keys - k0 : kKeys);
  const float up = pow2_scale<14>(__uint_as_float(s.vmax[g])).up;
  for (int e = threadIdx.x; e < kKeys * HD; e += kThreads) {
    const int r = e / HD, d = e % HD;
    tile_v[r][d] = r < rows && d < hd ? vc[(k0 + r) * kw + int64_t(g) * hd + d] * up : 0.f;
  }
  __syncthreads();
  const size_t tile = size_t(g) * s.tiles + t;
  uint32_t* hi = reinterpret_cast<uint32_t*>(s.vhi + tile * kKeys * HD);
  uint32_t* lo = reinterpret_cast<uint32_t*>(s.vlo + tile * kKeys * HD);
  for (int e = threadIdx.x; e < HD * kKeys / 2; e += kThreads) {
    const int d = e / (kKeys / 2), r = 2 * (e % (kKeys / 2));
    split2(tile_v[r][d], tile_v[r + 1][d], hi[e], lo[e]);
  }
}

template <int HD>
struct FlashLayout {
  // K rows and V (transposed) rows in halves: ldmatrix's 8 rows of 16 bytes fall in 32 distinct
  // banks when the row is ≡ 16 bytes mod 128 (HD + 8 and 64 + 8 halves).
  static constexpr int kKStride = HD + 8;
  static constexpr int kVStride = kKeys + 8;
  static constexpr int kKHalves = kKeys * kKStride, kVHalves = HD * kVStride;
  static constexpr size_t kBytes = size_t(2 * kKHalves + 2 * kVHalves) * sizeof(__half);
};

template <int HD>
__global__ void __launch_bounds__(kThreads, 2)
    attention_flash_kernel(const float* q, Split sp, int64_t n, int64_t pos0, int nq, int nkv, int hd,
                           float scale_log2, float* out) {
  using L = FlashLayout<HD>;
  constexpr int kD16 = HD / 16, kD8 = HD / 8;
  const int group = nq / nkv;
  const int64_t pairs = n * group, tiles = (pairs + kRows - 1) / kRows;
  const int g = int(blockIdx.x % unsigned(nkv));
  const int64_t tile = tiles - 1 - int64_t(blockIdx.x / unsigned(nkv));
  const int64_t first = tile * kRows, last = (first + kRows < pairs ? first + kRows : pairs) - 1;
  const int64_t qw = int64_t(nq) * hd;
  const int keys = int(pos0 + last / group + 1);       // the block reads keys [0, keys) (< 2^31: checked)
  const int unmasked = int(pos0 + first / group + 1);  // keys below this are visible to every pair

  extern __shared__ float4 flash_smem4[];
  __half* kh = reinterpret_cast<__half*>(flash_smem4);  // [kKeys][kKStride]
  __half* kl = kh + L::kKHalves;
  __half* vh = kl + L::kKHalves;  // [HD][kVStride]: V transposed
  __half* vl = vh + L::kVHalves;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
  const size_t tile0 = size_t(g) * sp.tiles;
  // This lane's row address for ldmatrix_x4 of K: lanes 8m … 8m + 7 name keys 0 … 7 of matrix m, which
  // is hi (m = 0, 1) or lo (m = 2, 3), dims 0 … 7 (m even) or 8 … 15 (m odd) of a 16-dim step.
  const int lm = lane >> 3;
  const unsigned k_rows = unsigned(__cvta_generic_to_shared((lm < 2 ? kh : kl) + (lane & 7) * L::kKStride + 8 * (lm & 1)));

  auto stage_k = [&](int t0) {
    constexpr int kChunks = HD / 8;  // 16-byte chunks per row
    const size_t src = (tile0 + size_t(t0 / kKeys)) * kKeys * HD;
    for (int e = threadIdx.x; e < kKeys * kChunks; e += kThreads) {
      const int r = e / kChunks, c = 8 * (e % kChunks);
      cp_async16(kh + r * L::kKStride + c, sp.khi + src + r * HD + c);
      cp_async16(kl + r * L::kKStride + c, sp.klo + src + r * HD + c);
    }
  };
  auto stage_v = [&](int t0) {
    constexpr int kChunks = kKeys / 8;
    const size_t src = (tile0 + size_t(t0 / kKeys)) * kKeys * HD;
    for (int e = threadIdx.x; e < HD * kChunks; e += kThreads) {
      const int d = e / kChunks, c = 8 * (e % kChunks);
      cp_async16(vh + d * L::kVStride + c, sp.vhi + src + d * kKeys + c);
      cp_async16(vl + d * L::kVStride + c, sp.vlo + src + d * kKeys + c);
    }
  };
  stage_k(0);
  cp_async_commit();

  // The address of pair `pair`'s row of q or out.
  auto pair_offset = [&](int64_t pair) { return (pair / group) * qw + int64_t(g * group + int(pair % group)) * hd; };

  // This lane's two pairs (rows gq and gq+8 of the warp's 16): their Q fragments at their own scale,
  // and their key limits. A pair past the last takes the last's limit; its q is zero and its output
  // is not written. Fragment word c of dim step kd: c = 0 → dims 16kd + 2tq, +1 (row gq); 1 → the
  // same for row gq+8; 2, 3 → dims + 8.
  uint32_t qh[kD16][4], ql[kD16][4];
  float qmul[2];
  int lim[2];
  {
    float x[2][kD16][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t pair = first + warp * 16 + gq + 8 * r;
      lim[r] = int(pos0 + (pair < last ? pair : last) / group + 1);
      const float* qr = q + pair_offset(pair <= last ? pair : last);
      float mx = 0.f;
#pragma unroll
      for (int kd = 0; kd < kD16; ++kd)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = 16 * kd + 2 * tq + (c & 1) + 8 * (c >> 1);
          x[r][kd][c] = pair <= last && d < hd ? qr[d] : 0.f;
          mx = fmaxf(mx, fabsf(x[r][kd][c]));
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const Pow2Scale ps = pow2_scale<14>(mx);
      qmul[r] = scale_log2 * ps.down;
#pragma unroll
      for (int kd = 0; kd < kD16; ++kd)
#pragma unroll
        for (int c = 0; c < 4; ++c) x[r][kd][c] *= ps.up;
    }
#pragma unroll
    for (int kd = 0; kd < kD16; ++kd) {
      split2(x[0][kd][0], x[0][kd][1], qh[kd][0], ql[kd][0]);
      split2(x[1][kd][0], x[1][kd][1], qh[kd][1], ql[kd][1]);
      split2(x[0][kd][2], x[0][kd][3], qh[kd][2], ql[kd][2]);
      split2(x[1][kd][2], x[1][kd][3], qh[kd][3], ql[kd][3]);
    }
  }
  const float vdown = pow2_scale<14>(__uint_as_float(sp.vmax[g])).down;

  float o[kD8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int nd = 0; nd < kD8; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;

  for (int t0 = 0; t0 < keys; t0 += kKeys) {
    cp_async_wait<0>();
    __syncthreads();  // K of this tile visible; every warp is done with the previous V
    stage_v(t0);
    cp_async_commit();

    // S = Q·Kᵀ at the scales of Q's pairs and K's tile; 8-key steps past the pass's last key are
    // skipped (their scores stay 0, masked below).
    float s[kKeySteps][4];
#pragma unroll
    for (int j = 0; j < kKeySteps; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kd = 0; kd < kD16; ++kd) {
#pragma unroll
      for (int j = 0; j < kKeySteps; ++j) {
        if (t0 + 8 * j >= keys) break;
        uint32_t b[4];  // hi dims 16kd + 2tq, +1 | +8, +9 of key 8j + gq; then lo
        ldmatrix_x4(b, k_rows + unsigned((8 * j * L::kKStride + 16 * kd) * sizeof(__half)));
        mma16816(s[j], ql[kd][0], ql[kd][1], ql[kd][2], ql[kd][3], b[0], b[1]);
        mma16816(s[j], qh[kd][0], qh[kd][1], qh[kd][2], qh[kd][3], b[2], b[3]);
        mma16816(s[j], qh[kd][0], qh[kd][1], qh[kd][2], qh[kd][3], b[0], b[1]);
      }
    }

    // Online softmax in base 2 (scale_log2 = log2(e)/√hd, times the pair's and the tile's
    // down-scales). Lane (gq, tq) holds keys 8j+2tq, +1 of its two pairs; a pair's row spans the 4
    // lanes of a quad. Key 0 is visible to every pair, so m is finite from the first tile on and
    // exp2(−inf − m) = 0 for masked keys.
    const float kdown = sp.kdown[tile0 + size_t(t0 / kKeys)];
    const float mul[2] = {qmul[0] * kdown, qmul[1] * kdown};
    const bool masked = t0 + kKeys > unmasked;
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < kKeySteps; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = c >> 1;
        float x = s[j][c] * mul[r];
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
        s[j][c] = p * kPScale;
        l[c >> 1] += p;
      }
#pragma unroll
    for (int nd = 0; nd < kD8; ++nd)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[nd][c] *= corr[c >> 1];

    __syncthreads();  // every warp is done reading this K tile
    if (t0 + kKeys < keys) stage_k(t0 + kKeys);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's V has landed; the next K may still be in flight
    __syncthreads();

    // O += P·V over 16-key steps: P's A fragment is the score accumulators of steps 2jj, 2jj+1.
#pragma unroll
    for (int jj = 0; jj < kKeySteps / 2; ++jj) {
      if (t0 + 16 * jj >= keys) break;
      uint32_t ah[4], al[4];
      split2(s[2 * jj][0], s[2 * jj][1], ah[0], al[0]);
      split2(s[2 * jj][2], s[2 * jj][3], ah[1], al[1]);
      split2(s[2 * jj + 1][0], s[2 * jj + 1][1], ah[2], al[2]);
      split2(s[2 * jj + 1][2], s[2 * jj + 1][3], ah[3], al[3]);
#pragma unroll
      for (int nd = 0; nd < kD8; ++nd) {
        // Keys 16jj + 2tq, +1 | +8, +9 of dim 8nd + gq, hi then lo: plain 32-bit loads here (as
        // ldmatrix_x4 the HD = 128 instance would spill: 255 registers).
        const int at = (8 * nd + gq) * L::kVStride + 16 * jj + 2 * tq;
        uint32_t b[4];
        b[0] = *reinterpret_cast<const uint32_t*>(vh + at), b[1] = *reinterpret_cast<const uint32_t*>(vh + at + 8);
        b[2] = *reinterpret_cast<const uint32_t*>(vl + at), b[3] = *reinterpret_cast<const uint32_t*>(vl + at + 8);
        mma16816(o[nd], al[0], al[1], al[2], al[3], b[0], b[1]);
        mma16816(o[nd], ah[0], ah[1], ah[2], ah[3], b[2], b[3]);
        mma16816(o[nd], ah[0], ah[1], ah[2], ah[3], b[0], b[1]);
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
    const float inv = vdown / (kPScale * sum);  // o holds Σ 2^14·p · v·2^vup
    float* orow = out + pair_offset(pair);
#pragma unroll
    for (int nd = 0; nd < kD8; ++nd) {
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
                  int nkv, int hd, float* out, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  opt_in_flash();
  const int64_t keys = pos0 + n;
  const size_t need = split_bytes(keys, nkv, HD);
  check(workspace && workspace_bytes >= need, "attention (flash): workspace of ", workspace_bytes, " bytes for ",
        keys, " keys, expected at least ", need);
  check(nkv <= 65535 && keys <= INT32_MAX, "attention (flash): ", keys, " keys of ", nkv,
        " kv heads exceed the kernel's int32 key count or the split grid");
  const int64_t blocks = ceil_div(n * (nq / nkv), kRows) * nkv;
  check(blocks <= INT32_MAX, "attention (flash): ", n, " rows of ", nq, " heads need ", blocks,
        " blocks, more than a grid holds");
  const Split sp = carve(workspace, keys, nkv, HD);
  check_cuda(cudaMemsetAsync(sp.vmax, 0, size_t(nkv) * sizeof(unsigned), stream), "attention (flash): clear vmax");
  const dim3 split_grid{unsigned(sp.tiles), unsigned(nkv)};
  split_k_kernel<HD><<<split_grid, kThreads, 0, stream>>>(k_cache, v_cache, keys, nkv, hd, sp);
  check_launch("attention_split_k");
  split_v_kernel<HD><<<split_grid, kThreads, 0, stream>>>(v_cache, keys, nkv, hd, sp);
  check_launch("attention_split_v");
  const float scale_log2 = 1.4426950408889634f / sqrtf(float(hd));  // log2(e)/√hd
  attention_flash_kernel<HD><<<unsigned(blocks), kThreads, FlashLayout<HD>::kBytes, stream>>>(
      q, sp, n, pos0, nq, nkv, hd, scale_log2, out);
  check_launch("attention_flash");
}

}  // namespace

void prepare_attention_prefill() { opt_in_flash(); }

size_t attention_prefill_workspace_bytes(int64_t keys, int nkv, int hd) {
  const int HD = instance_dim(hd);
  return HD == 0 || keys <= 0 ? 0 : split_bytes(keys, nkv, HD);
}

bool launch_attention_prefill(const float* q, const float* k_cache, const float* v_cache, int64_t n, int64_t pos0,
                              int nq, int nkv, int hd, float* out, void* workspace, size_t workspace_bytes,
                              cudaStream_t stream) {
  const int HD = instance_dim(hd);
  if (HD == 0) return false;
  if (n == 0) return true;
  const auto flash = HD == 16 ? launch_flash<16> : HD == 32 ? launch_flash<32> : HD == 64 ? launch_flash<64>
                                                                                          : launch_flash<128>;
  flash(q, k_cache, v_cache, n, pos0, nq, nkv, hd, out, workspace, workspace_bytes, stream);
  return true;
}

}  // namespace tandem::cuda
