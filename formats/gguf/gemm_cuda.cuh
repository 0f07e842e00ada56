// Prefill on the tensor cores for the block types with an Mma decoder (mma_cuda.cuh: every GGUF type
// with CUDA kernels): the GEMM y[n, m] = x[n, k] · W[m, k]ᵀ for n > 16 and the grouped expert gather. A block owns
// 128 weight rows × 128 activation rows over the whole k and decodes each weight tile once for all
// its activation rows (the GEMV decodes it once per 16). Decode and verify (n ≤ 16) never come here.
// Owner: callers own every pointer and the workspace. Thread: one caller per stream. Sync: launches
// are queued on the stream; nothing here synchronizes.
//
// Numbers. Each activation row is scaled by one power of two so that its largest magnitude lies in
// [2^14, 2^15) and split x' = hi + lo in fp16 (gemm_split_kernel, in the k order of Mma<Q>::place);
// weights are decoded to their exact small values as in the tensor-core GEMV. Per 32-element group
// (per 16 where the type scales per 16) the tensor cores sum q·hi + q·lo, every product exact in fp32,
// and the warp folds the group in as acc = fma(s, t, acc), groups in k order (Q4_K/Q5_K also
// acc = fma(−min, Σ x', acc), Σ x' summed once per row and group by the split kernel); the row's
// power of two and the tensor's scale multiply once at the end. An element keeps ~22 significant
// bits (absolute 2^−38 of its row's largest where fp16 runs out of range): far below the fp32
// rounding of the sums.
// Each output depends only on its weight row, its activation row and k — not on n, on the tile or on
// which rows share it — so a row has the same bits in every prefill pass and in the grouped gather
// (a gathered row equals its expert's GEMM row). They are not the decode GEMVs' bits (another order).
#pragma once
#include "formats/gguf/mma_cuda.cuh"
#include "tandem/cuda/gather_plan.cuh"

namespace tandem::gguf::kcuda {

constexpr int kGemmBM = 128;  // weight rows per block: 4 warp rows of 32 (two m16 tiles)
constexpr int kGemmBN = 128;  // activation rows per block: 2 warp columns of 64 (eight n8 tiles)
constexpr int kGemmThreads = 256;
constexpr int kGemmStep = 64;     // elements per pipeline step (two groups)
constexpr int kGemmStages = 2;    // staged activation steps (cp.async ring)
constexpr int kGemmColBytes = 2 * 128 + 16;  // one column's step (2 groups × 4 lane classes × hi|lo) + 16:
                                             // eight columns' 16-byte reads then hit distinct banks; a
                                             // type with a min keeps the step's group sums there

// Weights stream in chunks of whole blocks, at least one step long; a step is a part of a chunk.
template <class Q>
__host__ __device__ constexpr int gemm_chunk_elems() {
  return Q::kElems > kGemmStep ? Q::kElems : kGemmStep;
}
template <class Q>
__host__ __device__ constexpr int gemm_chunk_bytes() {
  return gemm_chunk_elems<Q>() / Q::kElems * Q::kBytes;
}
template <class Q>
__host__ __device__ constexpr int gemm_wrow_bytes() {  // a row's chunk in the ring: misalignment and slack
  return (gemm_chunk_bytes<Q>() + 32 + 15) / 16 * 16;
}
template <class Q>
__host__ __device__ constexpr int gemm_steps_per_chunk() {
  return gemm_chunk_elems<Q>() / kGemmStep;
}
// Weight ring slots: chunk c is requested while step SPC·c − (stages − 1) is computed, so the slot it
// reuses must have been read for the last time before that.
template <class Q>
__host__ __device__ constexpr int gemm_wslots() {
  return 1 + (kGemmStages - 1 + gemm_steps_per_chunk<Q>() - 1) / gemm_steps_per_chunk<Q>();
}
template <class Q, int BM = kGemmBM>
inline size_t gemm_smem_bytes() {
  return size_t(table_bytes<Q>()) + size_t(kGemmStages) * kGemmBN * kGemmColBytes +
         size_t(gemm_wslots<Q>()) * BM * gemm_wrow_bytes<Q>() + 3 * kGemmBN * 4;
}

// Warp rows of a block: 4 (128 weight rows × 128 activation rows, warps 32 × 64), 2 (64 × 128, warps
// 32 × 32) or 1 (32 × 128, warps 32 × 16). A warp decodes its two m16 tiles per group whatever its
// width, so narrow warps cost more decoding per mma; they pay where the 128-row tiling leaves SMs
// idle (a short chunk on a matrix of few rows: Bolt's out_proj has 32 tiles of 128 rows, its latent
// projection 8). Each output is one lane's fma chain over the groups in k order in every tiling, so
// the bits do not depend on it. The choice: the widest tiling with at least 1.8 blocks an SM (about
// one full wave at two blocks an SM), else 32 rows. On the H200 (2026-12-04, bench_gguf_cuda
// --narrow, µs for 4 / 2 / 1 warp rows): NVFP4 out_proj [4096, 8192] n = 128 518 / 314 / 239, n = 512
// 520 / 323 / 505; the latent [1024, 4096] n = 512 265 / 162 / 123; Q4_K out_proj n = 512 585 / 511 /
// 870 — one wave of 8-warp blocks an SM idles half the machine, two waves of 32-row blocks pay their
// extra decoding. TANDEM_GGUF_GEMM_WM (1, 2 or 4; read at each call, so that tests can switch it)
// forces one.
// A tiling's shape: BM weight rows a block, warps of 32 rows × CW columns (NT n8 tiles), and how
// many of warp column wn's n8 tiles hold some of a tile's ncols columns (warp-uniform).
template <int WM>
struct GemmTiling {
  static constexpr int BM = 32 * WM, CW = kGemmBN * WM / 8, NT = CW / 8;
  __device__ static int nt_active(int ncols, int wn) {
    return ncols > wn * CW ? min(NT, (ncols - wn * CW + 7) / 8) : 0;
  }
};
inline int gemm_warp_rows(int64_t m, int64_t n) {
  if (const char* f = std::getenv("TANDEM_GGUF_GEMM_WM"); f && *f) {
    const int v = std::atoi(f);
    check(v == 1 || v == 2 || v == 4, "TANDEM_GGUF_GEMM_WM is '", f, "', expected 1, 2 or 4");
    return v;
  }
  const int64_t col_tiles = cuda::ceil_div(n, int64_t(kGemmBN)), sms = cuda::sm_count();
  for (int wm : {4, 2})
    if (5 * cuda::ceil_div(m, int64_t(32 * wm)) * col_tiles >= 9 * sms) return wm;
  return 1;
}
// Bytes per split activation row: k rounded up to whole steps, 4 bytes (hi, lo) per element; for a
// type with a min (Q4_K, Q5_K) then 16 bytes a step, the step's two group sums Σ x' and 8 of padding.
__host__ __device__ inline int64_t gemm_xstride(int64_t k) { return (k + kGemmStep - 1) / kGemmStep * kGemmStep * 4; }
template <class Q>
__host__ __device__ inline int64_t gemm_xstride_of(int64_t k) {
  return gemm_xstride(k) + (Mma<Q>::kHasMin ? (k + kGemmStep - 1) / kGemmStep * 16 : 0);
}
inline int64_t gemm_max_tiles(int64_t items, int n_experts) { return cuda::plan_max_tiles(items, n_experts, kGemmBN); }

struct GemmArgs {
  CudaMatmulArgs p;                  // weights, shape, y, scale, epilogue; the gather's fields
  const unsigned char* xs = nullptr;  // split activations, rows of xstride bytes
  const float* xdown = nullptr;       // per split row: the inverse of its power of two
  int64_t xstride = 0;
  // The grouped gather: the items sorted by expert, and per tile its expert, first sorted item and
  // item count; ntiles on the device.
  const int32_t* items = nullptr;
  const int32_t* tile_e = nullptr;
  const int32_t* tile_start = nullptr;
  const int32_t* tile_len = nullptr;
  const int32_t* ntiles = nullptr;
};

// One group of a warp's 2 m16 × nt_active (≤ NT) n8 tiles, shared by the block GEMM and the one-copy GEMM
// (gemm_tc_cuda.cuh): each m16 tile's A fragments and scales times the staged activations of the
// lane's first column at xg (hi, lo; the next n8 tile's column 8 · kGemmColBytes further).
template <bool kScalePerStep, int NT>
__device__ __forceinline__ void gemm_group_mma(float (&acc)[2][NT][4], const uint32_t (&wa)[2][4],
                                               const uint32_t (&wb)[2][4], const float (&sa)[2][2],
                                               const float (&sb)[2][2], const unsigned char* xg, int nt_active) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (nt >= nt_active) break;
    const unsigned char* sg = xg + nt * 8 * kGemmColBytes;
    const uint4 hi = *reinterpret_cast<const uint4*>(sg), lo = *reinterpret_cast<const uint4*>(sg + 16);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) mma_tile_step<kScalePerStep>(acc[mt][nt], wa[mt], wb[mt], row_scales_of(sa[mt], sb[mt]).v, hi, lo);
  }
}

// gemm_group_mma for one m16 tile (the other's decode not yet live): the same steps, so the same bits.
// With kMin (Q4_K, Q5_K: one scale and one min a group) also acc = fma(−min, Σ x', acc) after the step,
// Σ x' the group's sum that gemm_split_kernel stored with the step (xsum: the lane's first column's).
template <bool kScalePerStep, bool kMin = false, int NT = 8>
__device__ __forceinline__ void gemm_tile_mma(float (&ac8)[NT][4], const uint32_t (&wa)[4], const uint32_t (&wb)[4],
                                              const float (&sa)[2], const float (&sb)[2], const unsigned char* xg,
                                              int nt_active, const float* oa = nullptr, const float* ob = nullptr,
                                              const unsigned char* xsum = nullptr) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (nt >= nt_active) break;
    const unsigned char* sg = xg + nt * 8 * kGemmColBytes;
    const uint4 hi = *reinterpret_cast<const uint4*>(sg), lo = *reinterpret_cast<const uint4*>(sg + 16);
    float* ac = ac8[nt];
    mma_tile_step<kScalePerStep>(ac, wa, wb, row_scales_of(sa, sb).v, hi, lo);
    if constexpr (kMin) {
      // The lane's columns 2q, 2q + 1 of this n8 tile: their group sums from the staged step.
      const float s0 = *reinterpret_cast<const float*>(xsum + nt * 8 * kGemmColBytes);
      const float s1 = *reinterpret_cast<const float*>(xsum + (nt * 8 + 1) * kGemmColBytes);
      ac[0] = fmaf(-oa[0], s0, ac[0]);
      ac[1] = fmaf(-oa[0], s1, ac[1]);
      ac[2] = fmaf(-ob[0], s0, ac[2]);
      ac[3] = fmaf(-ob[0], s1, ac[3]);
    }
  }
}

// A warp's outputs: lane (g, q) holds rows g, g + 8 of each m16 tile (o_lane: its first) and columns
// 2q, 2q + 1 of each n8 tile (c_lane: its first), column c going to y row col_y[c] scaled by
// col_down[c] · scale.
template <int NT>
__device__ __forceinline__ void gemm_store(const float (&acc)[2][NT][4], int nt_active, int64_t o_lane, int c_lane,
                                           int ncols, int64_t m, const int* col_y, const float* col_down,
                                           float scale, float* y, int epilogue) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt >= nt_active) break;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t o = o_lane + mt * 16 + 8 * (i >> 1);
        const int cc = c_lane + nt * 8 + (i & 1);
        if (cc < ncols && o < m) store_out(y + int64_t(col_y[cc]) * m + o, acc[mt][nt][i] * col_down[cc] * scale, epilogue);
      }
    }
}

// Row r of x, scaled by a power of two 2^−e (max |x'| in [2^14, 2^15)) and split into fp16 hi + lo:
// per 32-element group 128 bytes, lane class q's 8 hi then 8 lo halves in Mma<Q>::place order (the
// GEMV's staging layout), zero past k to whole steps; xdown[r] = 2^e. One block per row. For a type
// with a min, also each group's Σ (hi + lo) (a warp's butterfly sum: fixed order, so a row's sums
// never depend on n), two floats a step after the halves (gemm_xstride_of).
template <class Q>
__global__ void __launch_bounds__(256) gemm_split_kernel(const float* x, int64_t k, int64_t rows, int64_t xstride,
                                                         unsigned char* xs, float* xdown) {
  __shared__ float red[32];
  cuda::pdl_wait();
  cuda::pdl_trigger();
  const int tid = int(threadIdx.x);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * k;
    float mx = 0.0f;
    for (int64_t j = tid; j < k; j += 256) mx = fmaxf(mx, fabsf(xr[j]));
    mx = cuda::block_max(mx, red);
    const cuda::Pow2Scale sc = cuda::pow2_scale<14>(mx);
    unsigned char* out = xs + r * xstride;
    const int64_t elems = gemm_xstride(k) / 4;  // whole steps: every warp is in or out of the loop
    for (int64_t j = tid; j < elems; j += 256) {
      __half hi, lo;
      cuda::split_hi_lo(j < k ? xr[j] * sc.up : 0.0f, hi, lo);
      int qq, sl;
      Mma<Q>::place(int(j & 31), qq, sl);
      __half* seg = reinterpret_cast<__half*>(out + (j >> 5) * 128 + qq * 32);
      seg[sl] = hi;
      seg[8 + sl] = lo;
      if constexpr (Mma<Q>::kHasMin) {  // the warp holds group j / 32
        const float sum = cuda::warp_sum(__half2float(hi) + __half2float(lo));
        if ((tid & 31) == 0) {
          const int64_t grp = j >> 5;
          reinterpret_cast<float*>(out + elems * 4 + (grp >> 1) * 16)[grp & 1] = sum;
        }
      }
    }
    if (tid == 0) xdown[r] = sc.down;
  }
}


// Block (x, y): weight rows BM·x .. +BM (BM = 32·WM) and activation tile y (the rows 128·y .. +128 of
// x; grouped: tile y of the plan, up to 128 items of one expert). Warp (wm, wn) computes 32 weight
// rows × CW columns (CW = 128·WM / 8): per group it decodes its two m16 tiles' A fragments from the
// weight ring and runs them against up to CW / 8 n8 tiles of staged activations. Weights arrive in
// chunks of whole blocks, the activations in steps of 64 elements, both through cp.async rings; a
// step's group sums fold into the accumulators in k order.
template <class Q, bool Grouped, int WM = 4>
__global__ void __launch_bounds__(kGemmThreads, 2) gemm_kernel(const GemmArgs a) {
  using M = Mma<Q>;
  using T = GemmTiling<WM>;
  constexpr int BM = T::BM, CW = T::CW, NT = T::NT;
  constexpr int CB = gemm_chunk_bytes<Q>(), SB = gemm_wrow_bytes<Q>(), SPC = gemm_steps_per_chunk<Q>();
  constexpr int WS = gemm_wslots<Q>(), D = kGemmStages;
  constexpr int PPR = (15 + CB + 15) / 16;  // 16-byte pieces that cover a row's chunk at any misalignment
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* act = smem + table_bytes<Q>();
  unsigned char* wring = act + size_t(D) * kGemmBN * kGemmColBytes;
  int* col_x = reinterpret_cast<int*>(wring + size_t(WS) * BM * SB);
  int* col_y = col_x + kGemmBN;
  float* col_down = reinterpret_cast<float*>(col_y + kGemmBN);

  const CudaMatmulArgs& p = a.p;
  const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int wm = warp % WM, wn = warp / WM;
  const int64_t o0 = int64_t(blockIdx.x) * BM;
  const int groups = int(p.k / 32), nsteps = (groups + 1) / 2;
  const int64_t row_bytes = p.row_bytes;
  const uint8_t* w = p.w;
  float scale = p.scale;
  int ncols = 0;

  // Chunk c of the block's rows (rows past m repeat the last) into slot c mod WS.
  auto issue_w = [&](int c) {
    const int64_t b0 = int64_t(c) * CB;
    const int len = int(min(int64_t(CB), row_bytes - b0));
    unsigned char* dst = wring + (c % WS) * BM * SB;
    for (int i = tid; i < BM * PPR; i += kGemmThreads) {
      const int r = i / PPR, pc = i % PPR;
      const uint8_t* src = w + min(o0 + r, p.m - 1) * row_bytes + b0;
      const int mis = int(reinterpret_cast<uintptr_t>(src) & 15);
      if (pc < (mis + len + 15) >> 4) cp_async16(dst + r * SB + 16 * pc, src - mis + 16 * pc);
    }
  };
  // Step s of the tile's columns, whole n8 tiles (columns past ncols repeat the last) into slot s mod D;
  // with a min also the step's 16 bytes of group sums, into the column's last 16 bytes.
  const int64_t sums_at = gemm_xstride(p.k);
  auto issue_x = [&](int s) {
    unsigned char* dst = act + (s % D) * kGemmBN * kGemmColBytes;
    const int cols = (ncols + 7) & ~7;
    for (int i = tid; i < cols * 16; i += kGemmThreads) {
      const int c = i >> 4, pc = i & 15;
      cp_async16(dst + c * kGemmColBytes + 16 * pc, a.xs + int64_t(col_x[c]) * a.xstride + int64_t(s) * 256 + 16 * pc);
    }
    if constexpr (M::kHasMin)
      for (int c = tid; c < cols; c += kGemmThreads)
        cp_async16(dst + c * kGemmColBytes + 256, a.xs + int64_t(col_x[c]) * a.xstride + sums_at + int64_t(s) * 16);
  };

  // Weights are never written by a pass: a matmul requests its first chunks before the wait.
  if constexpr (!Grouped) {
    for (int s = 0; s < D - 1 && s < nsteps; ++s)
      if (s % SPC == 0) issue_w(s / SPC);
  }
  const Tables tab = init_tables<Q>(smem, p.grid);
  cuda::pdl_wait();
  cuda::pdl_trigger();
  if constexpr (Grouped) {
    const int t = int(blockIdx.y);
    if (t >= *a.ntiles) return;  // the whole block: fewer tiles than the bound the grid was sized by
    const int e = a.tile_e[t], start = a.tile_start[t];
    ncols = a.tile_len[t];
    w += int64_t(e) * p.expert_bytes;
    if (p.expert_scale) scale = p.expert_scale[e];
    for (int c = tid; c < kGemmBN; c += kGemmThreads) {
      const int item = a.items[start + min(c, ncols - 1)];
      const int xr = item / p.per_x;
      col_x[c] = xr, col_y[c] = item, col_down[c] = a.xdown[xr];
    }
  } else {
    const int64_t c0 = int64_t(blockIdx.y) * kGemmBN;
    ncols = int(min(int64_t(kGemmBN), p.n - c0));
    for (int c = tid; c < kGemmBN; c += kGemmThreads) {
      const int r = int(c0 + min(c, ncols - 1));
      col_x[c] = r, col_y[c] = r, col_down[c] = a.xdown[r];
    }
  }
  __syncthreads();
  for (int s = 0; s < D - 1; ++s) {
    if (s < nsteps) {
      if (Grouped && s % SPC == 0) issue_w(s / SPC);
      issue_x(s);
    }
    cp_async_commit();
  }

  // The lane's rows r = wm·32 + 16·mt + g + 8h: their chunk misalignment is (base + c·CB) mod 16.
  uint32_t rbase[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    rbase[i] = uint32_t(reinterpret_cast<uintptr_t>(w + min(o0 + wm * 32 + (i >> 1) * 16 + g + 8 * (i & 1), p.m - 1) *
                                                            row_bytes));
  const int nt_active = T::nt_active(ncols, wn);
  float acc[2][NT][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

  for (int s = 0; s < nsteps; ++s) {
    cp_async_wait<D - 2>();
    __syncthreads();  // step s has landed for every thread; step s − 1's slots are free
    if (s + D - 1 < nsteps) {
      if ((s + D - 1) % SPC == 0) issue_w((s + D - 1) / SPC);
      issue_x(s + D - 1);
    }
    cp_async_commit();
    if (nt_active == 0) continue;
    const int c = s / SPC;
    const unsigned char* wst = wring + (c % WS) * BM * SB;
    const unsigned char* xst = act + (s % D) * kGemmBN * kGemmColBytes;
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) {
      if (2 * s + gi >= groups) break;
      const int u = (s % SPC) * 2 + gi;  // the group within the chunk
      uint32_t wa[2][4], wb[2][4];
      float sa[2][2], sb[2][2];
      const unsigned char* xg = xst + (wn * CW + g) * kGemmColBytes + gi * 128 + q * 32;
      if constexpr (M::kHasMin) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int r = wm * 32 + mt * 16 + g;
          float oa[2], ob[2];
          M::group(wst + r * SB + ((rbase[2 * mt] + uint32_t(c) * CB) & 15u), u, q, tab, wa[mt], sa[mt], oa);
          M::group(wst + (r + 8) * SB + ((rbase[2 * mt + 1] + uint32_t(c) * CB) & 15u), u, q, tab, wb[mt], sb[mt], ob);
          gemm_tile_mma<false, true>(acc[mt], wa[mt], wb[mt], sa[mt], sb[mt], xg, nt_active, oa, ob,
                                     xst + (wn * CW + 2 * q) * kGemmColBytes + 256 + gi * 4);
        }
      } else if constexpr (M::kTileByTile) {
        // One m16 tile at a time, so that one tile's decode is live at once (MmaFromDec's whole units
        // and Q6_K: both tiles at once spill at the 128-register bound).
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int r = wm * 32 + mt * 16 + g;
          M::group(wst + r * SB + ((rbase[2 * mt] + uint32_t(c) * CB) & 15u), u, q, tab, wa[mt], sa[mt]);
          M::group(wst + (r + 8) * SB + ((rbase[2 * mt + 1] + uint32_t(c) * CB) & 15u), u, q, tab, wb[mt], sb[mt]);
          gemm_tile_mma<M::kScalePerStep>(acc[mt], wa[mt], wb[mt], sa[mt], sb[mt], xg, nt_active);
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int r = wm * 32 + mt * 16 + g;
          M::group(wst + r * SB + ((rbase[2 * mt] + uint32_t(c) * CB) & 15u), u, q, tab, wa[mt], sa[mt]);
          M::group(wst + (r + 8) * SB + ((rbase[2 * mt + 1] + uint32_t(c) * CB) & 15u), u, q, tab, wb[mt], sb[mt]);
        }
        gemm_group_mma<M::kScalePerStep>(acc, wa, wb, sa, sb, xg, nt_active);
      }
    }
  }
  cp_async_wait<0>();  // only empty groups can be pending
  // Lane (g, q) holds rows g, g + 8 of each m16 tile and columns 2q, 2q + 1 of each n8 tile.
  gemm_store(acc, nt_active, o0 + wm * 32 + g, wn * CW + 2 * q, ncols, p.m, col_y, col_down, scale, p.y, p.epilogue);
}

// The workspace of gemm_entry: the split activations and their scales; for a gather also the sorted
// items and the tiles.
struct GemmWorkspace {
  size_t xs = 0, xdown = 0, items = 0, tiles = 0, ntiles = 0, total = 0;
};
inline size_t gemm_align(size_t b) { return (b + 255) / 256 * 256; }
template <class Q>
GemmWorkspace gemm_workspace_layout(const CudaMatmulArgs& a) {
  const bool grouped = a.ids != nullptr;
  const int64_t xrows = grouped ? a.n / a.per_x : a.n;
  GemmWorkspace l;
  l.xs = 0;
  l.xdown = gemm_align(size_t(xrows) * size_t(gemm_xstride_of<Q>(a.k)));
  l.items = l.xdown + gemm_align(size_t(xrows) * 4);
  l.total = l.items;
  if (grouped) {
    l.tiles = l.items + gemm_align(size_t(a.n) * 4);
    l.ntiles = l.tiles + gemm_align(3 * size_t(gemm_max_tiles(a.n, a.n_experts)) * 4);
    l.total = l.ntiles + 256;
  }
  return l;
}
template <class Q>
size_t gemm_workspace(const CudaMatmulArgs& a) {
  return gemm_workspace_layout<Q>(a).total;
}

// y = x · Wᵀ (ids null: a.n rows) or the grouped gather (ids: a.n items of x rows a.n / per_x).
template <class Q>
void gemm_entry(const CudaMatmulArgs& a, void* workspace, cudaStream_t s) {
  if (a.n == 0 || a.m == 0) return;
  check(a.k % 32 == 0 && a.row_bytes == a.k / Q::kElems * Q::kBytes, "gguf (cuda): bad row geometry");
  const bool grouped = a.ids != nullptr;
  const int64_t xrows = grouped ? a.n / a.per_x : a.n;
  check(!grouped || (a.per_x >= 1 && a.n % a.per_x == 0), "gguf gemm: ", a.n, " gathered rows are not a multiple of ",
        a.per_x, " per activation row");
  check(!grouped || (a.n_experts >= 1 && a.n_experts <= kCudaGatherGemmMaxExperts), "gguf gemm: ", a.n_experts,
        " experts, expected 1 .. ", kCudaGatherGemmMaxExperts);
  check(a.n < (int64_t(1) << 31), "gguf gemm: ", a.n, " rows, expected fewer than 2^31");
  const GemmWorkspace l = gemm_workspace_layout<Q>(a);
  char* ws = static_cast<char*>(workspace);
  GemmArgs g;
  g.p = a;
  g.xs = reinterpret_cast<unsigned char*>(ws + l.xs);
  g.xdown = reinterpret_cast<float*>(ws + l.xdown);
  g.xstride = gemm_xstride_of<Q>(a.k);
  cuda::launch(gemm_split_kernel<Q>, dim3(unsigned(std::min<int64_t>(xrows, 8192))), dim3(256), 0, s,
               "gguf gemm split", a.x, a.k, xrows, g.xstride, reinterpret_cast<unsigned char*>(ws + l.xs),
               reinterpret_cast<float*>(ws + l.xdown));
  int64_t tiles_y = cuda::ceil_div(a.n, int64_t(kGemmBN));
  if (grouped) {
    const int64_t max_tiles = gemm_max_tiles(a.n, a.n_experts);
    check(max_tiles <= 65535, "gguf gemm: ", a.n, " gathered rows need up to ", max_tiles, " tiles, expected ≤ 65535");
    int32_t* items = reinterpret_cast<int32_t*>(ws + l.items);
    int32_t* tile_e = reinterpret_cast<int32_t*>(ws + l.tiles);
    int32_t* tile_start = tile_e + max_tiles;
    int32_t* tile_len = tile_start + max_tiles;
    int32_t* ntiles = reinterpret_cast<int32_t*>(ws + l.ntiles);
    cuda::launch_gather_plan<kGemmBN, Q>(a.ids, a.n, a.n_experts, kCudaGatherGemmMaxExperts, a.m, a.y, items, tile_e,
                                         tile_start, tile_len, ntiles, s, "gguf gather plan");
    g.items = items, g.tile_e = tile_e, g.tile_start = tile_start, g.tile_len = tile_len, g.ntiles = ntiles;
    tiles_y = max_tiles;
  }
  static bool configured = false;  // the engine thread loads and runs; the attribute is per function
  if (!configured) {
    for (auto k : {gemm_kernel<Q, true>, gemm_kernel<Q, false>})
      cuda::check_cuda(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(gemm_smem_bytes<Q>())),
                       "gguf gemm: shared memory attribute");
    cuda::check_cuda(cudaFuncSetAttribute(gemm_kernel<Q, false, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(gemm_smem_bytes<Q, 64>())),
                     "gguf gemm: shared memory attribute");
    cuda::check_cuda(cudaFuncSetAttribute(gemm_kernel<Q, false, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(gemm_smem_bytes<Q, 32>())),
                     "gguf gemm: shared memory attribute");
    configured = true;
  }
  // Grouped gathers keep the 128-row tiling: their plan's tiles already spread over the experts.
  const int wm = grouped ? 4 : gemm_warp_rows(a.m, a.n);
  auto kernel = grouped ? gemm_kernel<Q, true> : gemm_kernel<Q, false>;
  size_t smem = gemm_smem_bytes<Q>();
  if (wm == 2) kernel = gemm_kernel<Q, false, 2>, smem = gemm_smem_bytes<Q, 64>();
  if (wm == 1) kernel = gemm_kernel<Q, false, 1>, smem = gemm_smem_bytes<Q, 32>();
  const dim3 grid(unsigned(cuda::ceil_div(a.m, int64_t(32 * wm))), unsigned(tiles_y));
  cuda::launch(kernel, grid, dim3(kGemmThreads), smem, s, grouped ? "gguf gather gemm" : "gguf gemm", g);
}

// The CudaQuantOps entries: the GEMM where the type has an Mma decoder, else none.
template <class Q>
constexpr auto gemm_of() {
  if constexpr (HasMma<Q>::value) return &gemm_entry<Q>;
  else return static_cast<void (*)(const CudaMatmulArgs&, void*, cudaStream_t)>(nullptr);
}
template <class Q>
constexpr auto gemm_workspace_of() {
  if constexpr (HasMma<Q>::value) return &gemm_workspace<Q>;
  else return static_cast<size_t (*)(const CudaMatmulArgs&)>(nullptr);
}

}  // namespace tandem::gguf::kcuda

// One type's launchers, in a generated file per type (formats/gguf/CMakeLists.txt): CudaQuantOps for
// decoder kcuda::Dec##T: matmul through matmul_entry, the prefill GEMM where the type has one.
#define TANDEM_GGUF_CUDA_INSTANCE(T)                                                                    \
  namespace tandem::gguf {                                                                              \
  const CudaQuantOps& cuda_ops_##T() {                                                                  \
    static const CudaQuantOps ops = {#T,                                                                \
                                     kcuda::matmul_entry<kcuda::Dec##T>,                                \
                                     kcuda::gather_impl<kcuda::Dec##T>,                                 \
                                     kcuda::rows_impl<kcuda::Dec##T>,                                   \
                                     kcuda::gemm_workspace_of<kcuda::Dec##T>(),                         \
                                     kcuda::gemm_of<kcuda::Dec##T>()};                                  \
    return ops;                                                                                         \
  }                                                                                                     \
  }
