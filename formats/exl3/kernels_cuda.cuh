// EXL3 CUDA kernels that are instantiated per K (bits per weight) in generated files: the GEMV that
// serves matmul for n ≤ 16 rows and the expert gather, and the tile decoder behind prefill. The
// rotations, the reductions and the dispatch live in exl3_kernels_cuda.cu.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: launches are queued on the
// stream; nothing here synchronizes.
//
// GEMV work split. A warp owns one 16-column strip j of Ŵ and the k tiles of one split; the 8 warps
// of a block own 8 adjacent strips, so the block's loads for one tile row are contiguous. Per step a
// warp loads 32 / (2K) tiles with one 16-byte load per lane into its shared-memory slot, then every
// lane decodes its 8 weights of each tile (the tensor-core fragment: input rows r0, r0+1, r0+8, r0+9
// of output columns lane/4 and lane/4+8) from three of the tile's words and multiplies them with
// the activations, which the input rotation wrote in the matching order (one float4 per row and tile).
// Batch invariance: the split count depends on the weight's shape only, each row has its own
// accumulators with a fixed per-lane order, the lane reduction is a fixed xor butterfly, and the
// splits are summed in split order by the output kernel: row r's bits never depend on n or on the
// other rows.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "formats/exl3/decode_cuda.cuh"

namespace tandem::exl3::kcuda {

constexpr int kGemvWarps = 8;
constexpr int kGemvMaxRows = 16;

struct GemvArgs {
  const uint32_t* w = nullptr;  // trellis words (expert 0 for the gather)
  int64_t expert_words = 0;     // gather: words per expert
  int tiles_k = 0, strips = 0;  // k/16, n/16
  int tiles_per_split = 0;      // split s covers tiles [s·tps, min((s+1)·tps, tiles_k))
  const float* xh = nullptr;    // rotated activations in fragment order, rows of k
  int64_t k = 0, n = 0;         // padded dimensions
  float* part = nullptr;        // partial sums [splits][part_rows][n]
  int rows = 0;                 // matmul: valid rows (≤ the instance's N); gather: unused
  int part_rows = 0;            // rows per split in `part`
  const int32_t* ids = nullptr; // gather: expert of each row (device)
  int n_experts = 0;
};

// Ŵ tiles to fp16, row-major [k][cols] for the strips [strip0, strip0 + cols/16).
struct DecodeArgs {
  const uint32_t* w = nullptr;
  int tiles_k = 0, strips = 0;
  int strip0 = 0, cols = 0;
  __half* out = nullptr;
};

template <int K, int CB, int N, bool Gather>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const GemvArgs a) {
  constexpr int kWords = 8 * K;      // u32 words per tile
  constexpr int kPer = 2 * K;        // 16-byte pieces per tile
  constexpr int G = 32 / kPer;       // tiles per step
  __shared__ __align__(16) uint32_t smem[kGemvWarps][G * kWords];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int j = int(blockIdx.x) * kGemvWarps + warp;
  if (j >= a.strips) return;
  const int ib = int(blockIdx.y) * a.tiles_per_split;
  const int ie = min(ib + a.tiles_per_split, a.tiles_k);
  const uint32_t* w = a.w;
  int row0 = 0;
  if (Gather) {
    row0 = int(blockIdx.z);
    const int e = a.ids[row0];
    if (e < 0 || e >= a.n_experts) return;  // the output kernel writes NaN for this row
    w += int64_t(e) * a.expert_words;
  }
  const float* xh = a.xh + int64_t(row0) * a.k + (lane & 3) * 4;
  const LaneWords lw = lane_words<K>(lane);
  uint32_t* sm = smem[warp];
  const int g_load = lane / kPer, piece = lane % kPer;
  auto load = [&](int i0) {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (g_load < G && i0 + g_load < ie)
      v = __ldcs(reinterpret_cast<const uint4*>(w + (int64_t(i0 + g_load) * a.strips + j) * kWords) + piece);
    return v;
  };
  float acc[N][2];
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r][0] = acc[r][1] = 0.0f;
  uint4 cur = load(ib);
  for (int i0 = ib; i0 < ie; i0 += G) {
    __syncwarp();
    if (g_load < G) reinterpret_cast<uint4*>(sm)[g_load * kPer + piece] = cur;
    __syncwarp();
    cur = load(i0 + G);  // in flight while this step decodes
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (i0 + g >= ie) break;
      const uint32_t* t = sm + g * kWords;
      uint32_t s[8];
      lane_states<K>(t[lw.w0], t[lw.w1], t[lw.w2], lw.off, s);
      float v[8];
      states_to_floats<CB>(s, v);
      const float* xp = xh + int64_t(i0 + g) * 16;
#pragma unroll
      for (int r = 0; r < N; ++r) {
        const float4 x = *reinterpret_cast<const float4*>(xp + int64_t(r) * a.k);
        float c0 = acc[r][0], c1 = acc[r][1];
        c0 = fmaf(x.x, v[0], c0), c1 = fmaf(x.x, v[4], c1);
        c0 = fmaf(x.y, v[1], c0), c1 = fmaf(x.y, v[5], c1);
        c0 = fmaf(x.z, v[2], c0), c1 = fmaf(x.z, v[6], c1);
        c0 = fmaf(x.w, v[3], c0), c1 = fmaf(x.w, v[7], c1);
        acc[r][0] = c0, acc[r][1] = c1;
      }
    }
  }
  // The four lanes of a column (lane & 3) hold the partial sums of its 16 input rows: an xor
  // butterfly leaves the same bits in all four; lane q then writes the rows r ≡ q (mod 4).
  const int64_t col = int64_t(j) * 16 + lane / 4;
  float* out = a.part + int64_t(blockIdx.y) * a.part_rows * a.n;
#pragma unroll
  for (int r = 0; r < N; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v = acc[r][h];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      acc[r][h] = v;
    }
    const int row = Gather ? row0 : r;
    if ((r & 3) == (lane & 3) && (Gather || r < a.rows)) {
      out[int64_t(row) * a.n + col] = acc[r][0];
      out[int64_t(row) * a.n + col + 8] = acc[r][1];
    }
  }
}

// One warp per tile: lane t decodes stream positions 8t .. 8t+7 and writes them at their elements.
template <int K, int CB>
__global__ void decode_kernel(const DecodeArgs a) {
  const int warp = int(blockIdx.x) * (int(blockDim.x) / 32) + int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int strips = a.cols / 16;
  if (warp >= a.tiles_k * strips) return;
  const int i = warp / strips, jj = warp % strips;
  const uint32_t* t = a.w + (int64_t(i) * a.strips + a.strip0 + jj) * (8 * K);
  const LaneWords lw = lane_words<K>(lane);
  uint32_t s[8];
  lane_states<K>(__ldg(t + lw.w0), __ldg(t + lw.w1), __ldg(t + lw.w2), lw.off, s);
  const int r0 = (lane % 4) * 2, c0 = lane / 4;
#pragma unroll
  for (int q = 0; q < 8; q += 2) {
    const uint32_t h = state_pair_f16<CB>(s[q], s[q + 1]);
    // jj = q, q+1: rows r0 + {0,1,8,9}[q % 4 ..], column c0 (+8 for q ≥ 4)
    const int c = c0 + (q >= 4 ? 8 : 0);
    const int ra = r0 + ((q % 4) == 0 ? 0 : 8);
    __half_raw lo, hi;
    lo.x = uint16_t(h & 0xFFFFu), hi.x = uint16_t(h >> 16);
    a.out[(int64_t(i) * 16 + ra) * a.cols + int64_t(jj) * 16 + c] = __half(lo);
    a.out[(int64_t(i) * 16 + ra + 1) * a.cols + int64_t(jj) * 16 + c] = __half(hi);
  }
}

// Launches for one K; `cb` and `rows_pad` (1, 2, 4, 8, 16) pick the instance. Defined below,
// instantiated once per K in a generated file.
template <int K>
void launch_gemv_k(const GemvArgs& a, int cb, int rows_pad, bool gather, dim3 grid, cudaStream_t stream);
template <int K>
void launch_decode_k(const DecodeArgs& a, int cb, cudaStream_t stream);

template <int K, int CB>
void launch_gemv_kc(const GemvArgs& a, int rows_pad, bool gather, dim3 grid, cudaStream_t stream) {
  const dim3 block(kGemvWarps * 32);
  if (gather) {
    gemv_kernel<K, CB, 1, true><<<grid, block, 0, stream>>>(a);
    return;
  }
  switch (rows_pad) {
    case 1: gemv_kernel<K, CB, 1, false><<<grid, block, 0, stream>>>(a); break;
    case 2: gemv_kernel<K, CB, 2, false><<<grid, block, 0, stream>>>(a); break;
    case 4: gemv_kernel<K, CB, 4, false><<<grid, block, 0, stream>>>(a); break;
    case 8: gemv_kernel<K, CB, 8, false><<<grid, block, 0, stream>>>(a); break;
    default: gemv_kernel<K, CB, 16, false><<<grid, block, 0, stream>>>(a); break;
  }
}

template <int K>
void launch_gemv_k(const GemvArgs& a, int cb, int rows_pad, bool gather, dim3 grid, cudaStream_t stream) {
  if (cb == kCbMul1) launch_gemv_kc<K, kCbMul1>(a, rows_pad, gather, grid, stream);
  else if (cb == kCbMcg) launch_gemv_kc<K, kCbMcg>(a, rows_pad, gather, grid, stream);
  else launch_gemv_kc<K, kCb3Inst>(a, rows_pad, gather, grid, stream);
}

template <int K>
void launch_decode_k(const DecodeArgs& a, int cb, cudaStream_t stream) {
  const int warps = a.tiles_k * (a.cols / 16);
  const unsigned blocks = unsigned((warps + 7) / 8);
  if (cb == kCbMul1) decode_kernel<K, kCbMul1><<<blocks, 256, 0, stream>>>(a);
  else if (cb == kCbMcg) decode_kernel<K, kCbMcg><<<blocks, 256, 0, stream>>>(a);
  else decode_kernel<K, kCb3Inst><<<blocks, 256, 0, stream>>>(a);
}

#define TANDEM_EXL3_CUDA_INSTANCE(K)                                                                          \
  template void launch_gemv_k<K>(const GemvArgs&, int, int, bool, dim3, cudaStream_t);                        \
  template void launch_decode_k<K>(const DecodeArgs&, int, cudaStream_t);

#define TANDEM_EXL3_CUDA_EXTERN(K)                                                                            \
  extern template void launch_gemv_k<K>(const GemvArgs&, int, int, bool, dim3, cudaStream_t);                 \
  extern template void launch_decode_k<K>(const DecodeArgs&, int, cudaStream_t);

}  // namespace tandem::exl3::kcuda
