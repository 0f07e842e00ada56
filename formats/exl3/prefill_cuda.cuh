// The fused EXL3 prefill GEMM (dense prefill and the grouped expert gather): the trellis decoded in
// the GEMM's main loop, instantiated per K in generated files (formats/exl3/cuda.cmake) beside
// kernels_cuda.cuh's. matmul_cuda.cu dispatches to it unless TANDEM_EXL3_PREFILL=old.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: launches are queued on the
// stream; nothing here synchronizes.
#pragma once
#include "formats/exl3/kernels_cuda.cuh"

namespace tandem::exl3::kcuda {

// ---- TANDEM_EXL3_PREFILL=old keeps kernels_cuda.cuh's decode_kernel, gemm_tc_kernel (matmul_cuda.cu) and gather_gemm_kernel ----
// One kernel for the dense prefill GEMM and the grouped gather: block (c, t) computes 64 rows (dense:
// rows t·64 ..; gather: tile t of group_rows_kernel's table, up to 64 rows of one expert) × the 256
// output columns c·256 .. (16 strips; warp w owns strips 2w, 2w + 1 over all 64 rows). Per 128-block
// of k a stage holds the rows' split input (as GemmStage) and the 8 × 16 tiles' raw trellis words,
// both copied with cp.async kPfStages − 1 blocks ahead of the mma; each warp decodes its two strips'
// A fragments from the staged words (tile_lane_states, as the tensor-core GEMV) once per tile for all
// 64 rows. The products, their order (per 128-block: tile by tile, hi then lo, one fp32 sum per output
// on the tensor cores) and the fold (fma with the block's scale, in k order) are gemm_tc_kernel's, so
// every output has its bits. The epilogue is rotate_out's, fused: the 64 × 256 sums go to shared
// memory and each warp applies the output Hadamard, ×svh, + bias and the epilogue per (row, 128 cols).
constexpr int kPfBn = 256;
constexpr int kPfStrips = kPfBn / 16;
// Stages: 3 with a 128-block scale (one block an SM: 193 registers), 2 with a row scale (G: 126
// registers, two blocks an SM).
template <bool G>
constexpr int kPfStagesOf = G ? 2 : 3;
constexpr int kPfZRow = kPfBn + 4;  // floats per z row in the epilogue: lanes (g, q) of a store hit 32 banks
template <int K, bool G = false>
struct PfLayout {
  static constexpr int kStages = kPfStagesOf<G>;
  static constexpr int kWords = 8 * kPfStrips * 8 * K;  // 8 tile rows × 16 strips × 8K words
  static constexpr size_t kStageBytes = sizeof(GemmStage) + size_t(kWords) * 4;
  static constexpr size_t kZBytes = size_t(kBm) * kPfZRow * 4;
  static constexpr size_t kBytes = kStages * kStageBytes > kZBytes ? kStages * kStageBytes : kZBytes;
};

struct PrefillArgs {
  const uint32_t* w = nullptr;  // trellis words (expert 0 for the gather)
  int64_t expert_words = 0;     // gather: words per expert
  int strips = 0;               // n / 16
  const __half* xhi = nullptr;  // split input [rows][k] (rotate_split_kernel)
  const __half* xlo = nullptr;
  const float* xsc = nullptr;   // [rows][k / 128]
  int64_t k = 0, n = 0;
  int64_t rows = 0;             // dense: rows of x and y
  const int* list = nullptr;    // gather: rows grouped by expert (null: dense)
  const int4* tiles = nullptr;  // gather: per tile {expert, first list index, rows (1..64), 0}
  const int* ntiles = nullptr;  // gather: tiles in the table (blocks past it return)
  const float* svh = nullptr;   // [E][n]
  const float* bias = nullptr;  // [E][out_features] or null
  int64_t out_features = 0;
  float* y = nullptr;
  int epilogue = 0;
  bool row_scale = false;  // PrefillImpl::kRowScale: xsc holds one scale a row (every 128-block the same)
};

__device__ __forceinline__ unsigned smem_addr(const void* p) { return unsigned(__cvta_generic_to_shared(p)); }
// 4 bytes (both addresses 4-byte aligned), through L1.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem) {
  const unsigned s = smem_addr(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem) : "memory");
}

// G (PrefillImpl::kRowScale): every 128-block of a row has the row's scale, so the products accumulate
// on the tensor cores over all of k in acc itself (no per-block partial t and fold: half the
// accumulator registers) and the scale multiplies the sums once, in the epilogue.
template <int K, int CB, bool G>
__global__ void __launch_bounds__(256, G ? 2 : 1) prefill_gemm_kernel(const PrefillArgs a) {
  extern __shared__ __align__(16) unsigned char pf_smem[];
  using L = PfLayout<K, G>;
  constexpr int kPfStages = L::kStages;
  constexpr int kW = 8 * K;  // words per tile
  __shared__ int rows_s[kBm];
  __shared__ float sv_s[kPfBn], bi_s[kPfBn];  // the block's columns of svh and bias, for the epilogue
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  int e = 0, start, gn;
  if (a.list) {
    if (int(blockIdx.y) >= *a.ntiles) return;
    const int4 t = a.tiles[blockIdx.y];
    e = t.x, start = t.y, gn = t.z;
  } else {
    start = int(blockIdx.y) * kBm;
    gn = int(a.rows - start < kBm ? a.rows - start : int64_t(kBm));
  }
  if (tid < kBm) rows_s[tid] = a.list ? a.list[start + (tid < gn ? tid : 0)] : start + (tid < gn ? tid : 0);
  __syncthreads();
  const int j0 = int(blockIdx.x) * kPfStrips;
  const int vs = min(kPfStrips, a.strips - j0);  // valid strips of the block (8 or 16 for n % 128 == 0)
  const bool act0 = 2 * warp < vs, act1 = 2 * warp + 1 < vs;
  const int nbn = (gn + 7) / 8;
  const int64_t nhb = a.k / kHad;
  const uint32_t* we = a.w + int64_t(e) * a.expert_words + int64_t(j0) * kW;
  const int64_t tile_stride = int64_t(a.strips) * kW;  // words between tile rows i and i + 1
  // This thread's input pieces: rows tid/16 + 16m (m = 0..3), piece tid % 16, in hi and lo.
  int64_t xoff[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) xoff[m] = int64_t(rows_s[tid / 16 + 16 * m]) * a.k + (tid % 16) * 8;
  const int64_t sc_off = tid < kBm ? int64_t(rows_s[tid]) * nhb : 0;
  const int wchunks = 8 * vs * (kW / 4), per_tt = vs * (kW / 4);
  auto stage = [&](int64_t b) {
    unsigned char* base = pf_smem + size_t(b % kPfStages) * L::kStageBytes;
    GemmStage& st = *reinterpret_cast<GemmStage*>(base);
    uint32_t* words = reinterpret_cast<uint32_t*>(base + sizeof(GemmStage));
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int rr = tid / 16 + 16 * m, col = (tid % 16) * 8;
      cp_async16(smem_addr(&st.hi[rr][col]), a.xhi + xoff[m] + b * kHad);
      cp_async16(smem_addr(&st.lo[rr][col]), a.xlo + xoff[m] + b * kHad);
    }
    if (tid < kBm) cp_async4(&st.sc[tid], a.xsc + sc_off + b);
    for (int p = tid; p < wchunks; p += 256) {
      const int tt = p / per_tt, c = p % per_tt;
      cp_async16(smem_addr(words + (tt * kPfStrips) * kW + c * 4), we + (b * 8 + tt) * tile_stride + c * 4);
    }
    cp_async_commit();
  };
  const LaneWords lw = lane_words<K>(lane);
  float acc[2][8][4] = {};
  stage(0);
  if constexpr (kPfStages == 3) {
    if (nhb > 1) stage(1);
    else cp_async_commit();
  }
  {  // while the first stages are in flight (the loop's first barrier publishes them)
    const int64_t col = int64_t(j0) * 16 + tid;
    sv_s[tid] = col < a.n ? a.svh[int64_t(e) * a.n + col] : 0.0f;
    bi_s[tid] = a.bias && col < a.out_features ? a.bias[int64_t(e) * a.out_features + col] : 0.0f;
  }
  for (int64_t b = 0; b < nhb; ++b) {
    cp_async_wait<kPfStages - 2>();
    // Stage b is visible; every warp is done with stage b − 1, whose slot stage b + kPfStages − 1 takes.
    __syncthreads();
    if (b + kPfStages - 1 < nhb) stage(b + kPfStages - 1);
    else cp_async_commit();  // an empty group keeps the wait count uniform
    const unsigned char* base = pf_smem + size_t(b % kPfStages) * L::kStageBytes;
    const GemmStage& cur = *reinterpret_cast<const GemmStage*>(base);
    const uint32_t* words = reinterpret_cast<const uint32_t*>(base + sizeof(GemmStage)) + (2 * warp) * kW;
    if (!act0) continue;
    float tb[2][8][4] = {};
    float(&t)[2][8][4] = G ? acc : tb;
#pragma unroll
    for (int tt = 0; tt < 8; ++tt) {
      uint4 af0, af1 = make_uint4(0, 0, 0, 0);
      {
        uint32_t s[8];
        tile_lane_states<K>(words + tt * kPfStrips * kW, lw, lw.off, s);
        af0 = a_fragment<CB>(s);
      }
      if (act1) {
        uint32_t s[8];
        tile_lane_states<K>(words + tt * kPfStrips * kW + kW, lw, lw.off, s);
        af1 = a_fragment<CB>(s);
      }
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        if (nb >= nbn) break;
        uint32_t f[4];
        stage_fragments(cur, nb, tt, lane, f);
        cuda::mma16816(t[0][nb], af0.x, af0.y, af0.z, af0.w, f[0], f[1]);
        cuda::mma16816(t[0][nb], af0.x, af0.y, af0.z, af0.w, f[2], f[3]);
        if (act1) {
          cuda::mma16816(t[1][nb], af1.x, af1.y, af1.z, af1.w, f[0], f[1]);
          cuda::mma16816(t[1][nb], af1.x, af1.y, af1.z, af1.w, f[2], f[3]);
        }
      }
    }
    if constexpr (!G) {
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        if (nb >= nbn) break;
        fold_scaled(t[0][nb], cur, nb, lane, acc[0][nb]);
        fold_scaled(t[1][nb], cur, nb, lane, acc[1][nb]);
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the stages are free: z takes their place
  float* zs = reinterpret_cast<float*>(pf_smem);
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    if (!(s ? act1 : act0)) continue;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      if (nb >= nbn) break;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rr = nb * 8 + 2 * q + h, col = 32 * warp + 16 * s + g;
        const float d = G ? a.xsc[int64_t(rows_s[rr]) * nhb] : 1.0f;  // the row's scale (G), exact: 2^−e
        zs[rr * kPfZRow + col] = G ? acc[s][nb][h] * d : acc[s][nb][h];
        zs[rr * kPfZRow + col + 8] = G ? acc[s][nb][2 + h] * d : acc[s][nb][2 + h];
      }
    }
  }
  __syncthreads();
  // Indexed by output column, as finish_output reads them: shared memory, not an L2 round trip a row.
  const float* sv = sv_s - int64_t(j0) * 16;
  const float* bi = a.bias ? bi_s - int64_t(j0) * 16 : nullptr;
  const int halves = vs > 8 ? 2 : 1;
  for (int it = warp; it < gn * halves; it += 8) {
    const int rr = it / halves, hf = it % halves;
    const float4 z = *reinterpret_cast<const float4*>(zs + rr * kPfZRow + hf * kHad + lane * 4);
    float v[4] = {z.x, z.y, z.z, z.w};
    const int64_t c0 = int64_t(j0) * 16 + hf * kHad + lane * 4;
    finish_output(v, lane, c0, sv, bi, a.out_features, a.y + int64_t(rows_s[rr]) * a.out_features, a.epilogue);
  }
}

// prefill_gemm_kernel over `grid` (n/256 rounded up, row tiles); `cb` picks the instance.
template <int K>
void launch_prefill_k(const PrefillArgs& a, int cb, dim3 grid, cudaStream_t stream) {
  auto go = [&](auto kernel, size_t bytes) {
    // Every call: the codebook instances share this lambda's type (one function-pointer type), so a
    // function-local static would set the limit for whichever instance ran first only.
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    kernel<<<grid, 256, bytes, stream>>>(a);
  };
  const size_t b0 = PfLayout<K, false>::kBytes, b1 = PfLayout<K, true>::kBytes;
  if (cb == kCbMul1) a.row_scale ? go(prefill_gemm_kernel<K, kCbMul1, true>, b1) : go(prefill_gemm_kernel<K, kCbMul1, false>, b0);
  else if (cb == kCbMcg) a.row_scale ? go(prefill_gemm_kernel<K, kCbMcg, true>, b1) : go(prefill_gemm_kernel<K, kCbMcg, false>, b0);
  else a.row_scale ? go(prefill_gemm_kernel<K, kCb3Inst, true>, b1) : go(prefill_gemm_kernel<K, kCb3Inst, false>, b0);
}

#define TANDEM_EXL3_PREFILL_INSTANCE(K) template void launch_prefill_k<K>(const PrefillArgs&, int, dim3, cudaStream_t);
#define TANDEM_EXL3_PREFILL_EXTERN(K) \
  extern template void launch_prefill_k<K>(const PrefillArgs&, int, dim3, cudaStream_t);

}  // namespace tandem::exl3::kcuda
