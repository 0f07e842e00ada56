// Dense BF16/F16 weights on the tensor cores (mma.sync.m16n8k16, fp32 accumulate): the weights are
// the A operand (16 output features × 16 k), the activations the B operand (16 k × 8 rows), so a
// GEMV of 1…16 rows reads each weight byte once for all of them. The order of every sum is the
// contract of dense_tc.cuh; the GEMV and the two GEMM tilings below keep it exactly.
#include "dense_tc.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "tandem/cuda/async_copy.cuh"
#include "tandem/cuda/device_bits.cuh"
#include "tandem/cuda/gather_plan.cuh"
#include "tandem/cuda/stream_scratch.cuh"
#include "tandem/cuda/tensor_core.cuh"

namespace tandem::cuda::dense_tc {

namespace {

constexpr int kStepsPerChunk = kChunk / 16;

// Per weight type: the element, the mma, and two fp32 values packed into one operand register (the
// first in the low half, which the fragment takes as the lower k).
template <WType T>
struct Op;
template <>
struct Op<WType::BF16> {
  using E = __nv_bfloat16;
  static constexpr bool kScaled = false;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma16816_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
  }
};
template <>
struct Op<WType::F16> {
  using E = __half;
  static constexpr bool kScaled = true;
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    const __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __half22float2(*reinterpret_cast<const __half2*>(&u));
  }
  static __device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma16816(d, a[0], a[1], a[2], a[3], b0, b1);
  }
};

// x = hi + mid + lo for the four x of one lane's step (k = 4t … 4t+3), as the B registers {b0, b1} of
// each term. Each remainder is exact in fp32, and three 8-bit (BF16) or 11-bit (F16) terms carry all
// of an fp32 x's 24 bits (two BF16 terms left ~1e-5 of the logits on the conformance fixtures: the
// fp32 reference's tolerance is 5e-6).
template <WType T>
__device__ __forceinline__ void split4(float4 v, uint32_t (&h)[2], uint32_t (&m)[2], uint32_t (&l)[2]) {
  h[0] = Op<T>::pack(v.x, v.y);
  h[1] = Op<T>::pack(v.z, v.w);
  const float2 a = Op<T>::unpack(h[0]), b = Op<T>::unpack(h[1]);
  const float4 r = make_float4(v.x - a.x, v.y - a.y, v.z - b.x, v.w - b.y);
  m[0] = Op<T>::pack(r.x, r.y);
  m[1] = Op<T>::pack(r.z, r.w);
  const float2 c = Op<T>::unpack(m[0]), d = Op<T>::unpack(m[1]);
  l[0] = Op<T>::pack(r.x - c.x, r.y - c.y);
  l[1] = Op<T>::pack(r.z - d.x, r.w - d.y);
}

// acc[i] += A · hi(x_i), then A · mid(x_i), then A · lo(x_i), for the x tiles i of one step: the step
// of the contract.
template <WType T>
__device__ __forceinline__ void mma_hi_lo(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&h)[2],
                                          const uint32_t (&m)[2], const uint32_t (&l)[2]) {
  Op<T>::mma(acc, a, h[0], h[1]);
  Op<T>::mma(acc, a, m[0], m[1]);
  Op<T>::mma(acc, a, l[0], l[1]);
}

__device__ __forceinline__ float4 scaled(float4 v, float s) { return make_float4(v.x * s, v.y * s, v.z * s, v.w * s); }
__device__ __forceinline__ float absmax4(float4 v) {
  return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}
// Four x at p (vec: p is 16-byte aligned).
__device__ __forceinline__ float4 load_x4(const float* p, bool vec) {
  if (vec) return *reinterpret_cast<const float4*>(p);
  return make_float4(p[0], p[1], p[2], p[3]);
}
// The F16 scale of a chunk whose largest |x| has biased exponent e (only the exponent matters).
__device__ __forceinline__ Pow2Scale scale_of_exp(uint32_t e) { return pow2_scale<14>(__uint_as_float(e << 23)); }

// ---- GEMV: 1…16 rows (NT = 1 or 2 tiles of 8) ----
// A block holds `mts` weight m-tiles of 16 rows (blockDim.x = 32·kws·mts, at most 16 warps); the kws
// warps of an m-tile take its chunks in turn (round rd: chunk rd·kws + kw), each one chunk's whole
// weight slice in registers (16 steps × two 8-byte loads a lane), the next chunk's step s loaded as
// soon as this one's step s has gone into the mma chain; the round's partials go through shared
// memory and the m-tile's first warp adds them to its total in chunk order.
// x: with XD = 0 each step loads its x where it uses it (one L1/L2 round trip in every step of the
// chain: a one-row call spent most of its time there); with XD > 0 (BF16, 16-byte aligned x) a
// warp-private ring of XD steps of x in shared memory is filled by cp.async XD − 1 steps ahead,
// across chunk and round boundaries, so the chain reads x at shared-memory latency. Lane (g, t)
// copies exactly the 16 bytes it later reads (row g, k = 4t … 4t+3), so no barrier is needed.
constexpr int kMaxWarps = 16, kMaxMts = 4;

template <int NT, int XD>
constexpr size_t gemv_ring_bytes(int warps) {
  return size_t(warps) * size_t(XD) * NT * 32 * sizeof(float4);
}

template <WType T, int NT, int XD>
__global__ void __launch_bounds__(32 * kMaxWarps) gemv_tc(const typename Op<T>::E* __restrict__ w, int64_t m,
                                                          int64_t k, const float* __restrict__ x, int n, bool xvec,
                                                          int kws, float* __restrict__ y) {
  static_assert(XD == 0 || !Op<T>::kScaled, "the F16 scale needs the whole chunk of x before its first step");
  __shared__ float part[2][kMaxWarps][NT * 4][32];
  extern __shared__ __align__(16) unsigned char ring_smem[];
  const int lane = int(threadIdx.x & 31), wi = int(threadIdx.x >> 5), mt = wi / kws, kw = wi % kws;
  const int mts = int(blockDim.x) / (32 * kws);
  const int g = lane >> 2, t = lane & 3;
  const int64_t o0 = (int64_t(blockIdx.x) * mts + mt) * 16;
  const bool live = o0 < m;
  const int64_t ra = o0 + g, rb = ra + 8;
  const bool va = ra < m, vb = rb < m;
  const typename Op<T>::E* wa = w + (va ? ra : 0) * k + 4 * t;
  const typename Op<T>::E* wb = w + (vb ? rb : 0) * k + 4 * t;
  const int64_t steps = (k + 15) / 16, chunks = (steps + kStepsPerChunk - 1) / kStepsPerChunk;
  const int64_t rounds = (chunks + kws - 1) / kws;
  const float* xr[NT];
  bool xok[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    xok[nt] = nt * 8 + g < n;
    xr[nt] = x + (xok[nt] ? nt * 8 + g : 0) * k + 4 * t;
  }
  float tot[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) tot[nt][0] = tot[nt][1] = tot[nt][2] = tot[nt][3] = 0.0f;
  // Chunk j's weights: la[s], lb[s] hold step s (rows g and g+8, k = 4t … 4t+3; zero past m or k).
  uint2 la[kStepsPerChunk], lb[kStepsPerChunk];
  auto fetch = [&](int64_t jj, int s) {
    const int64_t e = jj * kChunk + s * 16;
    const bool in = live && jj < chunks && e + 4 * t < k;  // k % 8 == 0: a lane's four are all in or out
    la[s] = in && va ? ldg_stream64(wa + e) : make_uint2(0, 0);
    lb[s] = in && vb ? ldg_stream64(wb + e) : make_uint2(0, 0);
  };
  // The x ring (XD > 0): slot u % XD of this warp holds the warp's u-th step (round u / 16, step u % 16).
  float4* const ring = reinterpret_cast<float4*>(ring_smem) + size_t(wi) * XD * NT * 32;
  auto xfetch = [&](int64_t u) {
    if constexpr (XD > 0) {
      const int64_t jj = (u / kStepsPerChunk) * kws + kw, e = jj * kChunk + (u % kStepsPerChunk) * 16;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const bool ok = live && jj < chunks && xok[nt] && e + 4 * t < k;
        cp_async16_zfill(ring + (int(u % XD) * NT + nt) * 32 + lane, ok ? static_cast<const void*>(xr[nt] + e) : x,
                         ok ? 16u : 0u);
      }
      cp_async_commit();
    }
  };
#pragma unroll
  for (int s = 0; s < kStepsPerChunk; ++s) fetch(kw, s);
  cuda::pdl_wait();  // the first chunk's weights are in flight; x may come from the previous kernel
  cuda::pdl_trigger();
  if constexpr (XD > 0)
    for (int u = 0; u < XD - 1; ++u) xfetch(u);
  for (int64_t rd = 0; rd < rounds; ++rd) {
    const int64_t j = rd * kws + kw;
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    const bool busy = live && j < chunks;  // warp-uniform
    if (busy || XD > 0) {  // the ring advances in every round so that its step count stays uniform
      const int64_t e0 = j * kChunk;  // first k of the chunk
      float up[NT], down[NT];
      if constexpr (Op<T>::kScaled) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          float mx = 0.0f;
#pragma unroll
          for (int s = 0; s < kStepsPerChunk; ++s) {
            const int64_t e = e0 + s * 16;
            if (xok[nt] && e + 4 * t < k) mx = fmaxf(mx, absmax4(load_x4(xr[nt] + e, xvec)));
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const Pow2Scale sc = scale_of_exp((__float_as_uint(mx) >> 23) & 0xFF);
          up[nt] = sc.up, down[nt] = sc.down;
        }
      }
#pragma unroll
      for (int s = 0; s < kStepsPerChunk; ++s) {
        const int64_t e = e0 + s * 16;
        float4 xv[NT];
        if constexpr (XD > 0) {
          const int64_t u = rd * kStepsPerChunk + s;
          xfetch(u + XD - 1);
          cp_async_wait<XD - 1>();  // step u's group (this lane's own copies) has landed
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) xv[nt] = ring[(int(u % XD) * NT + nt) * 32 + lane];
        } else {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            xv[nt] = xok[nt] && e + 4 * t < k ? load_x4(xr[nt] + e, xvec) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        if (busy && e < k) {  // warp-uniform: the step exists
          const uint32_t a[4] = {la[s].x, lb[s].x, la[s].y, lb[s].y};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            float4 v = xv[nt];
            if constexpr (Op<T>::kScaled) v = scaled(v, up[nt]);
            uint32_t h[2], md[2], l[2];
            split4<T>(v, h, md, l);
            mma_hi_lo<T>(acc[nt], a, h, md, l);
          }
        }
        if (busy) fetch(j + kws, s);  // the warp's next chunk streams in while this one computes
      }
      if constexpr (Op<T>::kScaled) {
        // acc columns 2t, 2t+1 are x rows whose scale lanes 4·(2t) and 4·(2t+1) hold.
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float d0 = __shfl_sync(0xffffffffu, down[nt], 8 * t), d1 = __shfl_sync(0xffffffffu, down[nt], 8 * t + 4);
          acc[nt][0] *= d0, acc[nt][1] *= d1, acc[nt][2] *= d0, acc[nt][3] *= d1;
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) part[rd & 1][wi][nt * 4 + i][lane] = acc[nt][i];
    __syncthreads();  // one barrier a round: the other buffer's readers finished before this one
    if (kw == 0 && live)
      for (int q = 0; q < kws; ++q) {
        if (rd * kws + q >= chunks) break;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) tot[nt][i] = tot[nt][i] + part[rd & 1][mt * kws + q][nt * 4 + i][lane];
      }
  }
  if constexpr (XD > 0) cp_async_wait<0>();  // no copy may still target shared memory at exit
  if (kw != 0 || !live) return;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t o = o0 + g + (i >> 1) * 8;
      const int r = nt * 8 + 2 * t + (i & 1);
      if (o < m && r < n) y[int64_t(r) * m + o] = tot[nt][i];
    }
}

// ---- GEMM: more than 16 rows ----
// Block tile BM weight rows × BN x rows, k in stages of 32 (two steps) through a ST-deep cp.async
// ring: the weight tile as bf16/f16 rows of 64 bytes, x as fp32 rows of 128 bytes, both with their
// 16-byte pieces XOR-swizzled so that the fragment reads (8 bytes a lane of weights, 16 of x, in the
// contract's k permutation) hit distinct banks. A warp owns MTW × NTW mma tiles; each keeps its
// chunk's chain in `acc` and the sum of chunks in `tot`, folded at every 8th stage. F16: the prologue
// stores the biased exponent of each (x row, chunk)'s largest |x| in shared memory.
constexpr int kBk = 32;

template <int WM, int WN, int MTW, int NTW, int ST>
struct Tiling {
  static constexpr int kBm = WM * MTW * 16, kBn = WN * NTW * 8, kThreads = WM * WN * 32;
  static constexpr int kABytes = kBm * kBk * 2, kBBytes = kBn * kBk * 4;
  static constexpr size_t kTileBytes = size_t(ST) * (kABytes + kBBytes);
  static_assert(kBm * 4 % kThreads == 0 && kBn * 8 % kThreads == 0, "whole 16-byte pieces a thread");
};

// The grouped gather's plan (tandem/cuda/gather_plan.cuh): G = true reads it, blockIdx.y is a tile.
struct GroupedPlan {
  const int32_t* items = nullptr;  // sorted items (row r of y = W[e] · x[r / per_x])
  const int32_t* tile_e = nullptr;
  const int32_t* tile_start = nullptr;
  const int32_t* tile_len = nullptr;
  const int32_t* ntiles = nullptr;
  int per_x = 1;
};

// G (the grouped gather): the block's tile names an expert (w is expert 0 of E stacked [m, k]) and up
// to BN sorted items; its x rows are items / per_x and its y rows the items. The weights then depend
// on the plan the previous kernel wrote, so they are requested after the wait.
template <WType T, int WM, int WN, int MTW, int NTW, int ST, bool G = false>
__global__ void __launch_bounds__(WM* WN * 32, 1)
    gemm_tc(const typename Op<T>::E* __restrict__ w, int64_t m, int64_t k, const float* __restrict__ x, int64_t n,
            bool xvec, float* __restrict__ y, GroupedPlan gp) {
  using Ti = Tiling<WM, WN, MTW, NTW, ST>;
  constexpr int BM = Ti::kBm, BN = Ti::kBn, NTH = Ti::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* const as = smem;
  unsigned char* const bs = smem + ST * Ti::kABytes;
  uint8_t* const ex = bs + ST * Ti::kBBytes;  // F16 only: [BN][chunks]
  __shared__ int64_t col_x[G ? BN : 1], col_y[G ? BN : 1];
  const int tid = int(threadIdx.x), lane = tid & 31, wi = tid >> 5, wm = wi % WM, wn = wi / WM;
  const int g = lane >> 2, t = lane & 3;
  const int64_t m0 = int64_t(blockIdx.x) * BM, n0 = G ? 0 : int64_t(blockIdx.y) * BN;
  const int64_t steps = (k + 15) / 16, nst = (k + kBk - 1) / kBk;
  const int64_t chunks = (steps + kStepsPerChunk - 1) / kStepsPerChunk;
  // The block's x rows: local row i < rows_here is x row xr(i) and y row yr(i).
  int64_t rows_here = G ? 0 : (n - n0 < BN ? n - n0 : int64_t(BN));
  auto xr = [&](int i) -> int64_t {
    if constexpr (G) return col_x[i];
    else return n0 + i;
  };
  auto yr = [&](int i) -> int64_t {
    if constexpr (G) return col_y[i];
    else return n0 + i;
  };

  auto load_a = [&](int64_t st) {
    unsigned char* dst = as + (st % ST) * Ti::kABytes;
    const int64_t k0 = st * kBk;
#pragma unroll
    for (int i = 0; i < BM * 4 / NTH; ++i) {
      const int idx = tid + i * NTH, row = idx >> 2, c = idx & 3;
      const int64_t gr = m0 + row, gk = k0 + c * 8;
      const bool ok = gr < m && gk < k;
      cp_async16_zfill(dst + row * 64 + ((c ^ (((row >> 1) & 1) << 1)) << 4),
                       ok ? static_cast<const void*>(w + gr * k + gk) : static_cast<const void*>(w), ok ? 16u : 0u);
    }
  };
  auto load_b = [&](int64_t st) {
    unsigned char* dst = bs + (st % ST) * Ti::kBBytes;
    const int64_t k0 = st * kBk;
#pragma unroll
    for (int i = 0; i < BN * 8 / NTH; ++i) {
      const int idx = tid + i * NTH, row = idx >> 3, c = idx & 7;
      const int64_t gk = k0 + c * 4;
      const bool ok = row < rows_here && gk < k;
      const float* src = ok ? x + xr(row) * k + gk : x;
      unsigned char* d = dst + row * 128 + ((c ^ ((row & 1) << 2)) << 4);
      if (xvec) {
        cp_async16_zfill(d, src, ok ? 16u : 0u);
      } else {
        *reinterpret_cast<float4*>(d) = ok ? load_x4(src, false) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  };

  // Weights first (they never depend on the previous kernel), then the wait, then x. The grouped
  // form learns its expert from the plan: the wait, the tile, then the weights.
  if constexpr (!G) {
    for (int s = 0; s < ST - 1; ++s)
      if (s < nst) load_a(s);
    cuda::pdl_wait();
    cuda::pdl_trigger();
  } else {
    cuda::pdl_wait();
    cuda::pdl_trigger();
    const int tile = int(blockIdx.y);
    if (tile >= *gp.ntiles) return;  // the whole block: fewer tiles than the grid was sized for
    const int start = gp.tile_start[tile];
    rows_here = gp.tile_len[tile];
    w += int64_t(gp.tile_e[tile]) * m * k;
    for (int c = tid; c < BN; c += NTH) {
      const int64_t item = gp.items[start + min(c, int(rows_here) - 1)];
      col_x[c] = item / gp.per_x, col_y[c] = item;
    }
    __syncthreads();
    for (int s = 0; s < ST - 1; ++s)
      if (s < nst) load_a(s);
  }
  if constexpr (Op<T>::kScaled) {
    for (int64_t task = wi; task < int64_t(BN) * chunks; task += NTH / 32) {
      const int row = int(task / chunks);
      const int64_t c = task % chunks;
      float mx = 0.0f;
      if (row < rows_here)
        for (int e = lane * 4; e < kChunk; e += 128) {
          const int64_t gk = c * kChunk + e;
          if (gk < k) mx = fmaxf(mx, absmax4(load_x4(x + xr(row) * k + gk, xvec)));
        }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      if (lane == 0) ex[int64_t(row) * chunks + c] = uint8_t((__float_as_uint(mx) >> 23) & 0xFF);
    }
  }
  for (int s = 0; s < ST - 1; ++s) {
    if (s < nst) load_b(s);
    cp_async_commit();
  }

  float acc[MTW][NTW][4], tot[MTW][NTW][4];
#pragma unroll
  for (int a = 0; a < MTW; ++a)
#pragma unroll
    for (int b = 0; b < NTW; ++b)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[a][b][i] = tot[a][b][i] = 0.0f;

  for (int64_t st = 0; st < nst; ++st) {
    cp_async_wait<ST - 2>();
    __syncthreads();  // stage st landed for all; the slot stage st − 1 used is free
    if (st + ST - 1 < nst) load_a(st + ST - 1), load_b(st + ST - 1);
    cp_async_commit();
    const unsigned char* a_s = as + (st % ST) * Ti::kABytes;
    const unsigned char* b_s = bs + (st % ST) * Ti::kBBytes;
    const int64_t chunk = st / (kChunk / kBk);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (st * 2 + h >= steps) break;  // k % 32 == 8 or 16: the last stage has one step
      uint32_t a[MTW][4];
#pragma unroll
      for (int i = 0; i < MTW; ++i) {
        const int row = (wm * MTW + i) * 16 + g, c = 2 * h + (t >> 1);
        const int off = row * 64 + ((c ^ (((row >> 1) & 1) << 1)) << 4) + 8 * (t & 1);  // row + 8: same swizzle
        const uint2 lo = *reinterpret_cast<const uint2*>(a_s + off);
        const uint2 hi = *reinterpret_cast<const uint2*>(a_s + off + 8 * 64);
        a[i][0] = lo.x, a[i][1] = hi.x, a[i][2] = lo.y, a[i][3] = hi.y;
      }
#pragma unroll
      for (int j = 0; j < NTW; ++j) {
        const int row = (wn * NTW + j) * 8 + g, c = 4 * h + t;
        float4 v = *reinterpret_cast<const float4*>(b_s + row * 128 + ((c ^ ((row & 1) << 2)) << 4));
        if constexpr (Op<T>::kScaled) v = scaled(v, scale_of_exp(ex[int64_t(row) * chunks + chunk]).up);
        uint32_t hh[2], mm[2], ll[2];
        split4<T>(v, hh, mm, ll);
#pragma unroll
        for (int i = 0; i < MTW; ++i) mma_hi_lo<T>(acc[i][j], a[i], hh, mm, ll);
      }
    }
    if ((st + 1) % (kChunk / kBk) == 0 || st == nst - 1) {  // the chunk's chain is done
#pragma unroll
      for (int j = 0; j < NTW; ++j) {
        float d0 = 1.0f, d1 = 1.0f;
        if constexpr (Op<T>::kScaled) {
          const int row = (wn * NTW + j) * 8 + 2 * t;
          d0 = scale_of_exp(ex[int64_t(row) * chunks + chunk]).down;
          d1 = scale_of_exp(ex[int64_t(row + 1) * chunks + chunk]).down;
        }
#pragma unroll
        for (int i = 0; i < MTW; ++i) {
          float* c = acc[i][j];
          if constexpr (Op<T>::kScaled) c[0] *= d0, c[1] *= d1, c[2] *= d0, c[3] *= d1;
#pragma unroll
          for (int q = 0; q < 4; ++q) tot[i][j][q] = tot[i][j][q] + c[q], c[q] = 0.0f;
        }
      }
    }
  }
  cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < MTW; ++i)
#pragma unroll
    for (int j = 0; j < NTW; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t o = m0 + (wm * MTW + i) * 16 + g + (q >> 1) * 8;
        const int rl = (wn * NTW + j) * 8 + 2 * t + (q & 1);
        if (o < m && rl < rows_here) y[yr(rl) * m + o] = tot[i][j][q];
      }
}

// The most F16 chunks a GEMM block's exponent table holds (k ≤ 65536); above, F16 stays on SIMT.
constexpr int64_t kMaxF16Chunks = 256;

// The opt-in above 48 KB of dynamic shared memory, once per device for each kernel (it is a property
// of the device's function).
template <auto Kernel>
void opt_in_smem() {
  static std::mutex mu;
  static uint64_t done = 0;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "dense tc: device");
  std::lock_guard<std::mutex> lock(mu);
  if (dev < 64 && !(done >> dev & 1)) {
    int optin = 0;
    check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "dense tc: smem");
    cudaFuncAttributes fa{};
    check_cuda(cudaFuncGetAttributes(&fa, Kernel), "dense tc: kernel attributes");
    // The limit is on dynamic bytes: what the static arrays (the GEMV's partials) leave of the opt-in.
    const int dynamic = optin - int(fa.sharedSizeBytes);
    check_cuda(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic),
               "dense tc: smem opt-in");
    done |= uint64_t(1) << dev;
  }
}

template <WType T, int WM, int WN, int MTW, int NTW, int ST>
void launch_gemm(const typename Op<T>::E* w, int64_t m, int64_t k, const float* x, int64_t n, bool xvec, float* y,
                 cudaStream_t s) {
  using Ti = Tiling<WM, WN, MTW, NTW, ST>;
  const int64_t chunks = ceil_div(ceil_div(k, 16), kStepsPerChunk);
  const size_t smem = Ti::kTileBytes + (Op<T>::kScaled ? size_t(Ti::kBn) * size_t(chunks) : 0);
  constexpr auto kernel = gemm_tc<T, WM, WN, MTW, NTW, ST>;
  opt_in_smem<kernel>();
  const dim3 grid(unsigned(ceil_div(m, Ti::kBm)), unsigned(ceil_div(n, Ti::kBn)));
  check(ceil_div(n, Ti::kBn) <= 65535, "matmul (cuda): ", n, " rows exceed one launch");
  cuda::launch(kernel, grid, dim3(Ti::kThreads), smem, s, "dense matmul (tensor-core gemm)", w, m, k, x, n, xvec, y,
               GroupedPlan{});
}

// The grouped gather on the 128 × 128 tiling: the plan (items sorted by expert, tiles of ≤ 128 items)
// in stream-ordered scratch, then one launch over (m tiles) × (the most tiles the plan can have).
template <WType T>
void launch_gather(const typename Op<T>::E* w, int n_experts, int64_t m, int64_t k, const float* x,
                   const int32_t* ids, int per_x, int64_t rows, float* y, cudaStream_t s) {
  using Ti = Tiling<4, 2, 2, 8, 4>;
  const int64_t max_tiles = plan_max_tiles(rows, n_experts, Ti::kBn);
  check(max_tiles <= 65535, "gather_matmul (cuda): ", rows, " items need up to ", max_tiles, " tiles, expected ≤ 65535");
  const int64_t chunks = ceil_div(ceil_div(k, 16), kStepsPerChunk);
  const size_t items_bytes = (size_t(rows) * 4 + 255) / 256 * 256, tiles_bytes = (size_t(max_tiles) * 12 + 255) / 256 * 256;
  StreamScratch ws(items_bytes + tiles_bytes + 256, 0, "gather_matmul (cuda): allocate the plan");
  char* base = static_cast<char*>(ws.get());
  GroupedPlan gp;
  int32_t* items = reinterpret_cast<int32_t*>(base);
  int32_t* tile_e = reinterpret_cast<int32_t*>(base + items_bytes);
  int32_t* tile_start = tile_e + max_tiles;
  int32_t* tile_len = tile_start + max_tiles;
  int32_t* ntiles = reinterpret_cast<int32_t*>(base + items_bytes + tiles_bytes);
  launch_gather_plan<Ti::kBn, Op<T>>(ids, rows, n_experts, kGroupedMaxExperts, m, y, items, tile_e, tile_start,
                                     tile_len, ntiles, s, "dense gather plan");
  gp.items = items, gp.tile_e = tile_e, gp.tile_start = tile_start, gp.tile_len = tile_len, gp.ntiles = ntiles;
  gp.per_x = per_x;
  const size_t smem = Ti::kTileBytes + (Op<T>::kScaled ? size_t(Ti::kBn) * size_t(chunks) : 0);
  constexpr auto kernel = gemm_tc<T, 4, 2, 2, 8, 4, true>;
  opt_in_smem<kernel>();
  const bool xvec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const dim3 grid(unsigned(ceil_div(m, int64_t(Ti::kBm))), unsigned(max_tiles));
  cuda::launch(kernel, grid, dim3(Ti::kThreads), smem, s, "dense gather_matmul (tensor-core grouped gemm)", w, m, k, x,
               rows, xvec, y, gp);
}

// The selectable kernel choices (TANDEM_DENSE_TC_VARIANT, set_dense_tc_variant): the GEMV's x path
// (XD = 0: x loaded in each step; 8 or 16: the cp.async ring of that depth, BF16 with aligned x only,
// F16 and unaligned x keep XD = 0) and the GEMM tiling of 17…64 rows (m32: 32 weight rows × 32 or 64
// x rows, four warps, an 8-deep ring, so that [4096, ·] still has 128 blocks; otherwise the 64 × 64
// tiling of larger batches). Every choice computes the contract, so the bits never depend on it.
struct Variant {
  const char* name;
  int xd;
  bool m32;
};
constexpr Variant kVariants[] = {{"base", 0, false}, {"x8", 8, false},    {"x16", 16, false},
                                 {"m32", 0, true},   {"x8m32", 8, true}, {"x16m32", 16, true}};
constexpr int kVariantCount = int(sizeof kVariants / sizeof kVariants[0]);
// m32: the 32-row tiling paid 1.3–2.2× at 17…64 rows on the H200; the x ring did not (one row 0–20 %
// slower: x's latency was not what bound it), so the default keeps XD = 0 (docs/benchmarks.md, 2026-12-03).
constexpr int kDefaultVariant = 3;  // m32

int variant_by_name(const char* name) {
  for (int i = 0; i < kVariantCount; ++i)
    if (std::strcmp(kVariants[i].name, name) == 0) return i;
  return -1;
}
std::atomic<int>& variant_slot() {
  static std::atomic<int> v{[] {
    const char* e = std::getenv("TANDEM_DENSE_TC_VARIANT");
    if (!e || !*e) return kDefaultVariant;
    const int i = variant_by_name(e);
    check(i >= 0, "TANDEM_DENSE_TC_VARIANT: expected one of base, x8, x16, m32, x8m32, x16m32, found \"", e, "\"");
    return i;
  }()};
  return v;
}

template <WType T, int NT, int XD>
void launch_gemv(const typename Op<T>::E* w, int64_t m, int64_t k, const float* x, int n, bool xvec, float* y,
                 cudaStream_t s) {
  // m-tiles per block: the most (more reuse of each x chunk in L1) that still gives every SM two
  // blocks; then warps per m-tile (4 … 16/mts) until the grid holds ~8 warps an SM or each warp has
  // only two chunks left (the small router: 16 warps on each of its 31 m-tiles); with an x ring, no
  // more warps than 128 KB of rings hold.
  const int sms = sm_count();
  const int64_t tiles = ceil_div(m, 16), chunks = ceil_div(ceil_div(k, 16), kStepsPerChunk);
  constexpr size_t kRingBudget = size_t(128) << 10;
  int mts = kMaxMts;
  while (mts > 1 && ceil_div(tiles, mts) < 2 * sms) mts /= 2;
  const int64_t blocks = ceil_div(tiles, mts);
  int kws = 4;
  while (kws * 2 * mts <= kMaxWarps && blocks * mts * kws < 8 * int64_t(sms) && chunks >= 2 * kws &&
         gemv_ring_bytes<NT, XD>(kws * 2 * mts) <= kRingBudget)
    kws *= 2;
  while (kws > 1 && gemv_ring_bytes<NT, XD>(kws * mts) > kRingBudget) kws /= 2;
  while (mts > 1 && gemv_ring_bytes<NT, XD>(kws * mts) > kRingBudget) mts /= 2;
  const int64_t grid = ceil_div(tiles, mts);
  constexpr auto kernel = gemv_tc<T, NT, XD>;
  const size_t smem = gemv_ring_bytes<NT, XD>(kws * mts);
  if constexpr (XD > 0) opt_in_smem<kernel>();
  cuda::launch(kernel, dim3(unsigned(grid)), dim3(unsigned(32 * kws * mts)), smem, s,
               "dense matmul (tensor-core gemv)", w, m, k, x, n, xvec, kws, y);
}

template <WType T, int XD>
void gemv_of(const typename Op<T>::E* w, int64_t m, int64_t k, const float* x, int n, bool xvec, float* y,
             cudaStream_t s) {
  if (n <= 8) return launch_gemv<T, 1, XD>(w, m, k, x, n, xvec, y, s);
  launch_gemv<T, 2, XD>(w, m, k, x, n, xvec, y, s);
}

template <WType T>
void matmul_typed(const void* wp, int64_t m, int64_t k, const float* x, int64_t n, float* y, cudaStream_t s) {
  using E = typename Op<T>::E;
  const E* w = static_cast<const E*>(wp);
  const bool xvec = reinterpret_cast<uintptr_t>(x) % 16 == 0;  // k % 8 == 0: every row is then aligned too
  const Variant v = kVariants[variant_slot().load(std::memory_order_relaxed)];
  if (n <= 16) {
    if constexpr (!Op<T>::kScaled) {
      if (xvec && v.xd == 8) return gemv_of<T, 8>(w, m, k, x, int(n), xvec, y, s);
      if (xvec && v.xd == 16) return gemv_of<T, 16>(w, m, k, x, int(n), xvec, y, s);
    }
    return gemv_of<T, 0>(w, m, k, x, int(n), xvec, y, s);
  }
  // 32-row tiles up to 32 rows; 33…64 rows only where the 64 × 64 tiling leaves SMs idle (measured on
  // the H200, 2026-12-03: [4096, 4096] at 64 rows 83.6 vs 105.6 µs, but [12288, 4096] 208.9 vs 146.4).
  if (v.m32 && n <= 32) return launch_gemm<T, 1, 4, 2, 1, 8>(w, m, k, x, n, xvec, y, s);
  if (v.m32 && n <= 64 && ceil_div(m, 64) < sm_count()) return launch_gemm<T, 1, 4, 2, 2, 8>(w, m, k, x, n, xvec, y, s);
  // 128 × 128 tiles once they fill the SMs (prefill), 64 × 64 below (catch-up and verify batches).
  if (ceil_div(m, 128) * ceil_div(n, 128) >= sm_count())
    launch_gemm<T, 4, 2, 2, 8, 4>(w, m, k, x, n, xvec, y, s);
  else
    launch_gemm<T, 2, 2, 2, 4, 4>(w, m, k, x, n, xvec, y, s);
}

}  // namespace

bool eligible(WType t, const void* w, int64_t k) {
  if (t != WType::BF16 && t != WType::F16) return false;
  if (k <= 0 || k % 8 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0) return false;
  return t != WType::F16 || ceil_div(ceil_div(k, 16), kStepsPerChunk) <= kMaxF16Chunks;
}

void matmul(WType t, const void* w, int64_t m, int64_t k, const float* x, int64_t n, float* y, cudaStream_t stream) {
  if (t == WType::BF16) return matmul_typed<WType::BF16>(w, m, k, x, n, y, stream);
  return matmul_typed<WType::F16>(w, m, k, x, n, y, stream);
}

std::atomic<bool>& grouped_slot() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TANDEM_CUDA_DENSE_GROUPED");
    const std::string v = e ? e : "";
    check(v.empty() || v == "0" || v == "1", "TANDEM_CUDA_DENSE_GROUPED: expected 0 or 1, found \"", v, "\"");
    return v != "0";
  }()};
  return on;
}
bool grouped_gather_enabled() { return grouped_slot().load(std::memory_order_relaxed); }

void gather(WType t, const void* w, int n_experts, int64_t m, int64_t k, const float* x, const int32_t* ids, int per_x,
            int64_t rows, float* y, cudaStream_t stream) {
  if (t == WType::BF16)
    return launch_gather<WType::BF16>(static_cast<const __nv_bfloat16*>(w), n_experts, m, k, x, ids, per_x, rows, y,
                                      stream);
  launch_gather<WType::F16>(static_cast<const __half*>(w), n_experts, m, k, x, ids, per_x, rows, y, stream);
}

}  // namespace tandem::cuda::dense_tc

namespace tandem::cuda {

int dense_tc_variant_count() { return dense_tc::kVariantCount; }
const char* dense_tc_variant_name(int i) {
  return i >= 0 && i < dense_tc::kVariantCount ? dense_tc::kVariants[i].name : nullptr;
}
const char* dense_tc_variant() { return dense_tc::kVariants[dense_tc::variant_slot().load()].name; }
bool dense_grouped_gather() { return dense_tc::grouped_gather_enabled(); }
void set_dense_grouped_gather(bool on) { dense_tc::grouped_slot().store(on); }
void set_dense_tc_variant(const char* name) {
  const int i = dense_tc::variant_by_name(name);
  check(i >= 0, "dense tc variant: expected one of base, x8, x16, m32, x8m32, x16m32, found \"", name, "\"");
  dense_tc::variant_slot().store(i);
}

}  // namespace tandem::cuda
