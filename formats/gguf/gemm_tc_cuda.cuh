// The prefill GEMM (n ≥ 17) and the row decoder (get_rows, dequantize) of dense NVFP4 and Q8_0 from
// the fragment-order repack of gemv_tc_cuda.cuh, so that such a matrix keeps one device copy (issue
// #18). Owner: callers own every pointer and the workspace. Thread: one caller per stream. Sync:
// launches are queued on the stream; nothing here synchronizes.
//
// Numbers: gemm_cuda.cuh's contract, bit for bit. The activations are split by its
// gemm_split_kernel (per-row power of two, fp16 hi + lo, in Mma<Q>::place's k order), every mma
// multiplies the same weight integers against the same activation halves at the same k positions as
// gemm_kernel, and the per-group fmas fold in the same order, so every output equals the file-block
// GEMM's. NVFP4: the repacked code e·2^−14 times 2^15 (one HMUL2, exact) is the block decoder's
// 2·E2M1 integer, and place already is the repack's k order; the scale 0.5·e4m3(repacked byte) is
// ue4m3_half of the file's byte (the repack clears bit 7 and maps 0x7F to 0, as ue4m3_half does;
// only 0xFF differs, which GgufCudaTensor checks for at load). Q8_0: place gives lane q the elements
// 8q .. 8q + 7 of each k32 block, the repack gives it 2q, 2q + 1 (+ 8, 16, 24): a 4 × 4 transpose of
// 32-bit words among the four lanes of a quad (quad_transpose, four shuffles) turns one layout into
// the other, and the biased bytes convert with gemm_kernel's own h2_of_biased.
//
// Tiling: gemm_kernel's (128 weight rows × 128 activation rows a block, warp (wm, wn) 32 × 64, or the
// narrower ones of gemm_warp_rows). Per 64-element step a block stages its 8 (4, 2) tiles' repacked
// words (NVFP4 512 bytes, Q8_0 1024 bytes a tile: one 16-byte word per lane and k16 step pair or quad)
// and the tile's scale records of the step's 8-step group (128 bytes) with cp.async, in the
// activations' ring; each lane then reads its A fragments as whole 16-byte words (conflict-free: a
// warp reads 512 contiguous bytes).
#pragma once
#include "formats/gguf/gemm_cuda.cuh"
#include "formats/gguf/gemv_tc_cuda.cuh"

namespace tandem::gguf::kcuda {

// One exchange round of the quad transpose: the partner is lane q ^ Bit (Bit 2, then 1). A 4 × 4
// matrix of words, row = lane q of the quad, column = word j, becomes its transpose: after both rounds
// word j of lane q is the original word q of lane j. Round 2 swaps the off-diagonal 2 × 2 blocks,
// round 1 transposes each 2 × 2 block. `upper`: lane q has the bit set.
template <int Bit>
TANDEM_HD void quad_send(const uint32_t (&w)[4], bool upper, uint32_t (&send)[2]) {
  if (Bit == 2) send[0] = upper ? w[0] : w[2], send[1] = upper ? w[1] : w[3];
  else send[0] = upper ? w[0] : w[1], send[1] = upper ? w[2] : w[3];
}
template <int Bit>
TANDEM_HD void quad_recv(uint32_t (&w)[4], bool upper, const uint32_t (&got)[2]) {
  if (Bit == 2) {
    if (upper) w[0] = got[0], w[1] = got[1];
    else w[2] = got[0], w[3] = got[1];
  } else {
    if (upper) w[0] = got[0], w[2] = got[1];
    else w[1] = got[0], w[3] = got[1];
  }
}
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int q) {
  uint32_t s[2], r[2];
  quad_send<2>(w, q & 2, s);
  r[0] = __shfl_xor_sync(0xffffffffu, s[0], 2), r[1] = __shfl_xor_sync(0xffffffffu, s[1], 2);
  quad_recv<2>(w, q & 2, r);
  quad_send<1>(w, q & 1, s);
  r[0] = __shfl_xor_sync(0xffffffffu, s[0], 1), r[1] = __shfl_xor_sync(0xffffffffu, s[1], 1);
  quad_recv<1>(w, q & 1, r);
}

// The weight side per type: the bytes a tile stages per 64-element step (at `word_at`) and `group`,
// which forms gemm_kernel's M::group outputs (wa: row g's four A registers, wb: row g + 8's, sa / sb
// their scales) for group gi of step s from the staged tile (words, then the 128-byte scale records).
struct GemmTcNvfp4 {
  using Q = DecNVFP4;
  static constexpr TcType kType = TcType::NVFP4;
  static constexpr int kStepBytes = 512;  // one 16-byte word per lane: steps 4s .. 4s + 3
  TANDEM_HD static int64_t word_at(int64_t t, int64_t steps, int64_t s) { return (t * (steps / 4) + s) * 512; }
  __device__ static void group(const unsigned char* tile, int s, int gi, int lane, uint32_t (&wa)[4],
                               uint32_t (&wb)[4], float (&sa)[2], float (&sb)[2]) {
    const uint4 v = *reinterpret_cast<const uint4*>(tile + 16 * lane);
    const uint32_t words[2] = {gi ? v.z : v.x, gi ? v.w : v.y};
    // Scale bytes of steps 4s + 2gi + js (js = 0, 1) within their 8-step record: rows g, g + 8 each.
    const uint32_t sw = *reinterpret_cast<const uint32_t*>(tile + kStepBytes + 16 * (lane >> 2) + 4 * (2 * (s & 1) + gi));
    uint32_t h[2];
    e4m3x4_to_h2(sw, h[0], h[1]);
#pragma unroll
    for (int js = 0; js < 2; ++js) {
      uint32_t a[4];
      tc_unpack(words[js], a);
#pragma unroll
      for (int r = 0; r < 4; ++r) a[r] = tc_u32(__hmul2(tc_h2(a[r]), tc_h2(0x78007800u)));  // × 2^15: 2·E2M1
      wa[2 * js] = a[0], wb[2 * js] = a[1], wa[2 * js + 1] = a[2], wb[2 * js + 1] = a[3];
      sa[js] = 0.5f * __low2float(tc_h2(h[js]));
      sb[js] = 0.5f * __high2float(tc_h2(h[js]));
    }
  }
};
struct GemmTcQ8 {
  using Q = DecQ8_0;
  static constexpr TcType kType = TcType::Q8_0;
  static constexpr int kStepBytes = 1024;  // two k32 blocks, one 16-byte word per lane each
  TANDEM_HD static int64_t word_at(int64_t t, int64_t steps, int64_t s) { return (t * (steps / 2) + 2 * s) * 512; }
  __device__ static void group(const unsigned char* tile, int s, int gi, int lane, uint32_t (&wa)[4],
                               uint32_t (&wb)[4], float (&sa)[2], float (&sb)[2]) {
    const uint4 v = *reinterpret_cast<const uint4*>(tile + 512 * gi + 16 * lane);
    uint32_t w[4] = {v.x, v.y, v.z, v.w};
    quad_transpose(w, lane & 3);  // word j: rows g (low half) and g + 8 of elements 8q + 2j, + 1
#pragma unroll
    for (int j = 0; j < 4; ++j) wa[j] = h2_of_biased(w[j], 0x4140), wb[j] = h2_of_biased(w[j], 0x4342);
    const __half2 d =
        tc_h2(*reinterpret_cast<const uint32_t*>(tile + kStepBytes + 16 * (lane >> 2) + 4 * ((2 * s + gi) & 3)));
    sa[0] = sa[1] = __low2float(d);
    sb[0] = sb[1] = __high2float(d);
  }
};

template <class W>
__host__ __device__ constexpr int gemm_tc_tile_bytes() {
  return W::kStepBytes + 128;
}
template <class W, int WM = 4>  // WM: gemm_warp_rows' tiling, 2·WM 16-row tiles staged a step
inline size_t gemm_tc_smem_bytes() {
  return size_t(kGemmStages) * kGemmBN * kGemmColBytes + size_t(kGemmStages) * 2 * WM * gemm_tc_tile_bytes<W>() +
         3 * kGemmBN * 4;
}

struct GemmTcArgs {
  const uint8_t* nib = nullptr;  // the repacked weight (nib, then sc)
  const uint8_t* sc = nullptr;
  int64_t m = 0, k = 0, steps = 0, tiles = 0;
  float* y = nullptr;
  int64_t n = 0;
  float scale = 1.0f;
  int epilogue = 0;
  const unsigned char* xs = nullptr;  // gemm_split_kernel's output
  const float* xdown = nullptr;
  int64_t xstride = 0;
};

// Block (x, y): weight tiles TT·x .. TT·x + TT − 1 (TT = 2·WM), activation rows 128y .. +128;
// gemm_kernel's loop (and its tilings) with the weight ring replaced by the staged repacked words
// (same slots as the activations' ring).
template <class W, int WM = 4>
__global__ void __launch_bounds__(kGemmThreads, 2) gemm_tc_kernel(const GemmTcArgs a) {
  using M = Mma<typename W::Q>;
  constexpr int D = kGemmStages, TB = gemm_tc_tile_bytes<W>();
  using T = GemmTiling<WM>;
  constexpr int TT = 2 * WM, BM = T::BM, CW = T::CW, NT = T::NT;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* act = smem;
  unsigned char* wring = act + size_t(D) * kGemmBN * kGemmColBytes;
  int* col_x = reinterpret_cast<int*>(wring + size_t(D) * TT * TB);
  float* col_down = reinterpret_cast<float*>(col_x + 2 * kGemmBN);

  const int tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2, q = lane & 3;
  const int wm = warp % WM, wn = warp / WM;
  const int64_t o0 = int64_t(blockIdx.x) * BM, t0 = int64_t(blockIdx.x) * TT;
  const int groups = int(a.k / 32), nsteps = (groups + 1) / 2;
  const int64_t octs = a.steps / kTcGroupSteps;
  int ncols = 0;

  // Step s of the block's tiles (tiles past the last repeat it) into slot s mod D.
  auto issue_w = [&](int s) {
    constexpr int WP = W::kStepBytes / 16, PP = WP + 8;  // 16-byte pieces a tile: words, then records
    unsigned char* dst = wring + (s % D) * TT * TB;
    for (int i = tid; i < TT * PP; i += kGemmThreads) {
      const int tl = i / PP, pc = i % PP;
      const int64_t t = min(t0 + tl, a.tiles - 1);
      const uint8_t* src = pc < WP ? a.nib + W::word_at(t, a.steps, s) + 16 * pc
                                   : a.sc + ((t * octs + s / 2) * 8 + (pc - WP)) * 16;
      cp_async16(dst + tl * TB + 16 * pc, src);
    }
  };
  auto issue_x = [&](int s) {
    unsigned char* dst = act + (s % D) * kGemmBN * kGemmColBytes;
    const int cols = (ncols + 7) & ~7;
    for (int i = tid; i < cols * 16; i += kGemmThreads) {
      const int c = i >> 4, pc = i & 15;
      cp_async16(dst + c * kGemmColBytes + 16 * pc, a.xs + int64_t(col_x[c]) * a.xstride + int64_t(s) * 256 + 16 * pc);
    }
  };

  // Weights are never written by a pass: the first steps are requested before the wait.
  for (int s = 0; s < D - 1 && s < nsteps; ++s) issue_w(s);
  cuda::pdl_wait();
  cuda::pdl_trigger();
  {
    const int64_t c0 = int64_t(blockIdx.y) * kGemmBN;
    ncols = int(min(int64_t(kGemmBN), a.n - c0));
    for (int c = tid; c < kGemmBN; c += kGemmThreads) {
      const int r = int(c0 + min(c, ncols - 1));
      col_x[c] = r, col_down[c] = a.xdown[r];
    }
  }
  __syncthreads();
  for (int s = 0; s < D - 1; ++s) {
    if (s < nsteps) issue_x(s);
    cp_async_commit();
  }

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
      issue_w(s + D - 1);
      issue_x(s + D - 1);
    }
    cp_async_commit();
    if (nt_active == 0) continue;  // warp-uniform: the quad shuffles below see whole warps
    const unsigned char* wst = wring + (s % D) * TT * TB;
    const unsigned char* xst = act + (s % D) * kGemmBN * kGemmColBytes;
#pragma unroll
    for (int gi = 0; gi < 2; ++gi) {
      if (2 * s + gi >= groups) break;
      uint32_t wa[2][4], wb[2][4];
      float sa[2][2], sb[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) W::group(wst + (wm * 2 + mt) * TB, s, gi, lane, wa[mt], wb[mt], sa[mt], sb[mt]);
      gemm_group_mma<M::kScalePerStep>(acc, wa, wb, sa, sb, xst + (wn * CW + g) * kGemmColBytes + gi * 128 + q * 32, nt_active);
    }
  }
  cp_async_wait<0>();  // only empty groups can be pending
  gemm_store(acc, nt_active, o0 + wm * 32 + g, wn * CW + 2 * q, ncols, a.m, col_x, col_down, a.scale, a.y, a.epilogue);
}

// The workspace of launch_gemm_tc: gemm_cuda.cuh's for a plain matmul of n rows of k (the one-copy
// types have no min, so any of them gives the layout).
inline size_t gemm_tc_workspace(int64_t n, int64_t k) {
  CudaMatmulArgs a;
  a.n = n, a.k = k;
  return gemm_workspace<DecQ8_0>(a);
}

template <class W>
void launch_gemm_tc_as(const GemmTcArgs& g, const float* x, void* workspace, cudaStream_t s) {
  CudaMatmulArgs wa;
  wa.n = g.n, wa.k = g.k;
  static_assert(!Mma<typename W::Q>::kHasMin, "gguf tc gemm: the one-copy kernel folds no min");
  const GemmWorkspace l = gemm_workspace_layout<typename W::Q>(wa);
  char* ws = static_cast<char*>(workspace);
  GemmTcArgs a = g;
  a.xs = reinterpret_cast<unsigned char*>(ws + l.xs);
  a.xdown = reinterpret_cast<float*>(ws + l.xdown);
  a.xstride = gemm_xstride_of<typename W::Q>(g.k);
  cuda::launch(gemm_split_kernel<typename W::Q>, dim3(unsigned(std::min<int64_t>(g.n, 8192))), dim3(256), 0, s,
               "gguf tc gemm split", x, g.k, g.n, a.xstride, reinterpret_cast<unsigned char*>(ws + l.xs),
               reinterpret_cast<float*>(ws + l.xdown));
  static const cudaError_t attr = [] {
    cudaError_t e = cudaFuncSetAttribute(gemm_tc_kernel<W, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(gemm_tc_smem_bytes<W, 4>()));
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(gemm_tc_kernel<W, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(gemm_tc_smem_bytes<W, 2>()));
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(gemm_tc_kernel<W, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(gemm_tc_smem_bytes<W, 1>()));
    return e;
  }();
  cuda::check_cuda(attr, "gguf tc gemm: shared memory attribute");
  const int wm = gemm_warp_rows(g.m, g.n);
  auto kernel = gemm_tc_kernel<W, 4>;
  size_t smem = gemm_tc_smem_bytes<W, 4>();
  if (wm == 2) kernel = gemm_tc_kernel<W, 2>, smem = gemm_tc_smem_bytes<W, 2>();
  if (wm == 1) kernel = gemm_tc_kernel<W, 1>, smem = gemm_tc_smem_bytes<W, 1>();
  const dim3 grid(unsigned(cuda::ceil_div(g.m, int64_t(32 * wm))), unsigned(cuda::ceil_div(g.n, int64_t(kGemmBN))));
  cuda::launch(kernel, grid, dim3(kGemmThreads), smem, s, "gguf tc gemm", a);
}

// y[n, m] = scale · x[n, k] · Wᵀ (n ≥ 1; GgufCudaTensor sends n ≥ kCudaGemmMinRows) for a repacked
// weight at `w` (shape sh): the bits of gemm_cuda.cuh's GEMM on the file's blocks. workspace:
// gemm_tc_workspace(n, k) bytes, any contents, the caller's until the kernels finish.
inline void launch_gemm_tc(const uint8_t* w, const TcShape& sh, const float* x, float* y, int64_t n, float scale,
                           int epilogue, void* workspace, cudaStream_t s) {
  if (n == 0 || sh.m == 0) return;
  check(sh.k % 32 == 0 && n < (int64_t(1) << 31), "gguf tc gemm: k ", sh.k, " (expected a multiple of 32), n ", n);
  GemmTcArgs g;
  g.nib = w, g.sc = w + sh.nib_bytes();
  g.m = sh.m, g.k = sh.k, g.steps = sh.steps, g.tiles = sh.tiles;
  g.y = y, g.n = n, g.scale = scale, g.epilogue = epilogue;
  if (sh.type == TcType::NVFP4) launch_gemm_tc_as<GemmTcNvfp4>(g, x, workspace, s);
  else launch_gemm_tc_as<GemmTcQ8>(g, x, workspace, s);
}

// ---- rows from the repacked copy ----

// Element (row, kk) of a repacked weight as the block decoders give it (rows_kernel: s·q, then the
// sidecar scale when it is not 1): NVFP4 ue4m3_half(scale byte)·2·E2M1, Q8_0 d·q. The CPU reference
// and the kernel's body.
TANDEM_HD float tc_element(const uint8_t* w, const TcShape& sh, int64_t row, int64_t kk, float scale) {
  const int64_t t = row >> 4, st = kk >> 4, octs = sh.steps / kTcGroupSteps;
  const int rr = int(row & 15), p = int(kk & 15);
  const int g = rr & 7, q = (p >> 1) & 3, h = p & 1, r = (rr >> 3) + 2 * (p >> 3), lane = 4 * g + q;
  const uint8_t* rec = w + sh.nib_bytes() + ((t * octs + st / kTcGroupSteps) * 8 + g) * 16;
  float v;
  if (sh.type == TcType::NVFP4) {
    uint32_t word;
    std::memcpy(&word, w + ((t * (sh.steps / 4) + st / 4) * 32 + lane) * 16 + 4 * (st % 4), 4);
    const uint32_t code = (((word >> tc_sign_bit(r, h)) & 1u) << 3) | ((word >> tc_mag_bit(r, h)) & 7u);
    const uint32_t e = code & 7;  // 2·E2M1 magnitude: 0, 1, 2, 3, 4, 6, 8, 12
    const float mag = float(e < 5 ? e : e == 5 ? 6 : e == 6 ? 8 : 12);
    v = ue4m3_half(rec[2 * (st % 8) + (r & 1)]) * (code & 8 && e ? -mag : mag);  // the file's −0 decodes as +0
  } else {
    const uint8_t b = w[((t * (sh.steps / 2) + st / 2) * 32 + lane) * 16 + 8 * (st % 2) + 2 * r + h];
    uint16_t d;
    std::memcpy(&d, rec + 4 * ((st % 8) / 2) + 2 * (r & 1), 2);
    v = f16_bits(d) * float(int(b) - 128);
  }
  if (scale != 1.0f) v *= scale;
  return v;
}

struct TcRowsArgs {
  const uint8_t* w = nullptr;
  TcShape shape;
  int64_t n = 0;  // rows out
  bool by_id = false;
  int32_t ids[kCudaRowIdsPerLaunch] = {};  // host ids carried in the launch (by_id)
  float scale = 1.0f;
  float* out = nullptr;  // device, n rows of shape.k
};

__global__ void __launch_bounds__(256) tc_rows_kernel(const TcRowsArgs p) {
  const int64_t k = p.shape.k, total = p.n * k;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, kk = i % k;
    p.out[i] = tc_element(p.w, p.shape, p.by_id ? int64_t(p.ids[r]) : r, kk, p.scale);
  }
}

// out = rows ids[0..n) (ids on the host, in range: the caller checks) or, ids null, all m rows, of the
// repacked weight at w, scaled: the block path's rows bit for bit.
inline void launch_tc_rows(const uint8_t* w, const TcShape& sh, const int32_t* ids, int64_t n, float scale, float* out,
                           cudaStream_t s) {
  TcRowsArgs a;
  a.w = w, a.shape = sh, a.scale = scale;
  const int64_t rows = ids ? n : sh.m;
  for (int64_t i0 = 0; i0 < rows; i0 += ids ? kCudaRowIdsPerLaunch : rows) {
    a.n = ids ? std::min<int64_t>(kCudaRowIdsPerLaunch, rows - i0) : rows;
    a.by_id = ids != nullptr;
    if (ids) std::memcpy(a.ids, ids + i0, size_t(a.n) * sizeof(int32_t));
    a.out = out + i0 * sh.k;
    const int64_t total = a.n * sh.k;
    if (total == 0) continue;
    tc_rows_kernel<<<unsigned(std::min<int64_t>(cuda::ceil_div(total, 256), 8192)), 256, 0, s>>>(a);
    cuda::check_launch("gguf tc rows");
  }
}

// Whether the repack of these NVFP4 blocks keeps every value: a scale byte 0xFF (ue4m3_half 240, not
// an E4M3 number) has no repacked code (the repack and the tc GEMV read it as 0). Q8_0 always does.
inline bool tc_repack_is_lossless(TcType type, const uint8_t* blocks, int64_t m, int64_t k) {
  if (type != TcType::NVFP4) return true;
  const int64_t nblocks = m * (k / 64);
  for (int64_t b = 0; b < nblocks; ++b)
    for (int i = 0; i < 4; ++i)
      if (blocks[b * 36 + i] == 0xFF) return false;
  return true;
}

}  // namespace tandem::gguf::kcuda
