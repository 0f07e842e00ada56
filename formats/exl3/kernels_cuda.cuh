// EXL3 CUDA kernels that are instantiated per K (bits per weight) in generated files: the two GEMVs
// (the tensor-core one serves a matmul of n ≤ 16 rows, the fp32 one the expert gather, and either
// both when TANDEM_EXL3_GEMV=fp32), and the tile decoder behind prefill. The prefill rotations and
// GEMM and the dispatch live in matmul_cuda.cu.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: launches are queued on the
// stream; nothing here synchronizes.
//
// fp32 GEMV work split. A warp owns one 16-column strip j of Ŵ and the k tiles of one split; the 8 warps
// of a block own 8 adjacent strips (one 128-column output Hadamard block), so the block's loads for
// one tile row are contiguous. Per step a warp loads 32 / (2K) tiles with one 16-byte load per lane
// into its shared-memory slot (kGemvDepth steps are in flight), then every lane decodes its 8
// weights of each tile (the tensor-core fragment: input rows r0, r0+1, r0+8, r0+9 of output columns
// lane/4 and lane/4+8) from three of the tile's words and multiplies them with the activations,
// which are in the matching order (one float4 per row and tile): rotated by the block itself into
// shared memory (FuseIn) or by rotate_in beforehand.
// Batch invariance: the split count depends on the weight's shape only, each row has its own
// accumulators with a fixed per-lane order, the lane reduction is a fixed xor butterfly, and the
// last block of a column block to finish sums the splits in split order (whichever block that is):
// row r's bits never depend on n or on the other rows.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tandem/cuda/util.cuh"
#include "tandem/cuda/tensor_core.cuh"
#include "formats/exl3/decode_cuda.cuh"

namespace tandem::exl3::kcuda {

constexpr int kGemvWarps = 8;    // 8 strips of 16 columns: one 128-point output Hadamard block
constexpr int kGemvMaxRows = 16;
constexpr int kGemvDepth = 4;    // loads in flight per lane (steps prefetched ahead)
constexpr int kHad = 128;
constexpr int kFuseInBytes = 32 << 10;  // largest per-block rotated input kept in shared memory

// In-place 128-point FWHT of a warp's 128 values, 4 per lane (lane l holds 4l .. 4l+3), butterflies in
// the CPU's order (h = 1, 2, …, 64), then the 1/√128 scale.
__device__ __forceinline__ void fwht128(float (&v)[4], int lane) {
  float a = v[0], b = v[1], c = v[2], d = v[3];
  v[0] = a + b, v[1] = a - b, v[2] = c + d, v[3] = c - d;
  a = v[0], b = v[1], c = v[2], d = v[3];
  v[0] = a + c, v[1] = b + d, v[2] = a - c, v[3] = b - d;
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
    const bool upper = (lane & h) != 0;
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const float p = __shfl_xor_sync(0xffffffffu, v[m], h);
      v[m] = upper ? p - v[m] : v[m] + p;
    }
  }
  const float scale = 0.08838834764831845f;  // float(1/√128), as the CPU's 1.0f / std::sqrt(128.0f)
#pragma unroll
  for (int m = 0; m < 4; ++m) v[m] *= scale;
}

// The last step of every matmul: a lane's 4 columns c0.. of one row, summed over the splits, go
// through the output Hadamard (the warp's 128 columns), ×svh and + bias, trimmed to out_features.
// The epilogue (DeviceWeights::epilogue) then applies the backend's relu2 or add arithmetic.
__device__ __forceinline__ void finish_output(float (&v)[4], int lane, int64_t c0, const float* sv, const float* bi,
                                              int64_t out_features, float* yr, int epilogue) {
  fwht128(v, lane);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int64_t c = c0 + m;
    if (c >= out_features) continue;
    float o = v[m] * sv[c];
    if (bi) o += bi[c];
    if (epilogue == 1) {
      const float r = o < 0.0f ? 0.0f : o;  // NaN stays NaN, as in relu2
      o = r * r;
    } else if (epilogue == 2) {
      o = yr[c] + o;
    }
    yr[c] = o;
  }
}

// Where element e (0..127) of a rotated 128-block goes in a lane's fragment: tile e/16, lane class
// q, and value `reg` of the class's four (inputs 2q, 2q+1, 2q+8, 2q+9 of the tile).
struct FragSlot {
  int tile, q, reg;
};
__device__ __forceinline__ FragSlot frag_slot(int e) {
  const int rho = e % 16;
  return {e / 16, (rho % 8) / 2, (rho / 8) * 2 + rho % 2};
}
// Element e's index in the fp32 GEMV's fragment order: per 16-row tile, lane class q = 0..3 holds
// tile rows 2q, 2q+1, 2q+8, 2q+9 as one float4.
__device__ __forceinline__ int fragment_at(int e) {
  const FragSlot f = frag_slot(e);
  return f.tile * 16 + f.q * 4 + f.reg;
}

// Lane's values 4·lane .. 4·lane+3 of the rotated 128-block b of x row xr (zero-extended past
// in_features, times su).
__device__ __forceinline__ void rotated_values(const float* x, int64_t in_features, int64_t xr, const float* su,
                                               int64_t b, int lane, float (&v)[4]) {
  const int64_t i0 = b * kHad + lane * 4;
  const float* xp = x + xr * in_features + i0;
  if (i0 + 3 < in_features && ((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(su + i0)) & 15) == 0) {
    // One 16-byte load each: the same products as below.
    const float4 xv = *reinterpret_cast<const float4*>(xp), sv = *reinterpret_cast<const float4*>(su + i0);
    v[0] = xv.x * sv.x, v[1] = xv.y * sv.y, v[2] = xv.z * sv.z, v[3] = xv.w * sv.w;
  } else {
#pragma unroll
    for (int m = 0; m < 4; ++m) v[m] = i0 + m < in_features ? xp[m] * su[i0 + m] : 0.0f;
  }
  fwht128(v, lane);
}

// The warp's rotated 128-block b of x row xr into out (fragment order when `fragment`).
__device__ __forceinline__ void rotate_block(const float* x, int64_t in_features, int64_t xr, const float* su,
                                             int64_t b, int lane, bool fragment, float* out) {
  float v[4];
  rotated_values(x, in_features, xr, su, b, lane, v);
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const int e = lane * 4 + m;
    out[fragment ? fragment_at(e) : e] = v[m];
  }
}

struct GemvArgs {
  const uint32_t* w = nullptr;  // trellis words (expert 0 for the gather)
  int64_t expert_words = 0;     // gather: words per expert
  int tiles_k = 0, strips = 0;  // k/16, n/16
  int tiles_per_split = 0;      // split s covers tiles [s·tps, min((s+1)·tps, tiles_k))
  int splits = 1;               // gridDim.y
  // Input: rotated activations in fragment order (rows of k) from rotate_in, or (FuseIn) x and suh,
  // rotated by each block for its own k range.
  const float* xh = nullptr;
  const float* x = nullptr;
  int64_t in_features = 0;
  int per_x = 1;                // gather: output rows per x row
  const float* suh = nullptr;   // [E][k]
  int64_t k = 0, n = 0;         // padded dimensions
  float* part = nullptr;        // partial sums [splits][part_rows][n] (splits > 1)
  unsigned* counters = nullptr; // splits > 1: one per (row for the gather, block column); zero in and out
  int rows = 0;                 // matmul: valid rows (≤ the instance's N); gather: unused
  int part_rows = 0;            // rows per split in `part`
  const int32_t* ids = nullptr; // gather: expert of each row (device)
  int n_experts = 0;
  const float* svh = nullptr;   // [E][n]
  const float* bias = nullptr;  // [E][out_features] or null
  int64_t out_features = 0;
  float* y = nullptr;           // [rows][out_features]
  int epilogue = 0;             // DeviceWeights::epilogue
  int round_hb = 0;             // tensor-core GEMV: 128-blocks of staged input per round (tc_round_hb)
};

// Ŵ tiles to fp16 for the strips [strip0, strip0 + cols/16), in the prefill GEMM's fragment order:
// strip s (of the chunk) and tile row i at out[(s · tiles_k + i) · 32 + lane], a lane's 8 values as
// its mma.m16n8k16 A fragment (16 output columns × 16 inputs, the format's own lane order).
struct DecodeArgs {
  const uint32_t* w = nullptr;
  int tiles_k = 0, strips = 0;
  int strip0 = 0, cols = 0;
  uint4* out = nullptr;
};

// ---- pieces both GEMVs share ----

// Asks L2 for the 128-byte line at p (no register result).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }
// Lanes 0..3: asks L2 for the svh and bias lines of the block's 128 output columns (expert e), which
// the block finishing the column reads last — a DRAM round trip at the very end otherwise. (The fp32
// gathers, which learn their expert only after pdl_wait, measured 2 % slower with it: not used there.)
__device__ __forceinline__ void prefetch_output(const GemvArgs& a, int e, int lane) {
  if (lane >= 4) return;
  const int64_t c = int64_t(blockIdx.x) * kHad + lane * 32;
  if (c < a.n) prefetch_l2(a.svh + int64_t(e) * a.n + c);
  if (a.bias && c < a.out_features) prefetch_l2(a.bias + int64_t(e) * a.out_features + c);
}

// Gather: the block's output row and expert (after pdl_wait: ids are written by the previous
// kernel); false, with the row written NaN, when the id is out of range.
__device__ __forceinline__ bool gather_expert(const GemvArgs& a, int& row0, int& e) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  row0 = int(blockIdx.z);
  e = a.ids[row0];
  if (e >= 0 && e < a.n_experts) return true;
  const int64_t c = int64_t(blockIdx.x) * kHad + threadIdx.x;
  if (blockIdx.y == 0 && threadIdx.x < kHad && c < a.out_features)
    a.y[int64_t(row0) * a.out_features + c] = __int_as_float(0x7fffffff);
  return false;
}

// A warp's weight stream over strip j: the G tiles of the step starting at tile i0, one 16-byte piece
// per lane (zeros past the split's end ie); streaming loads, the words are read once.
template <int K>
struct TileLoads {
  static constexpr int kWords = 8 * K, kPer = 2 * K, G = 32 / kPer;
  const uint32_t* w;
  int strips, j, ie;
  bool active;
  int g_load, piece;
  __device__ TileLoads(const uint32_t* w_, int strips_, int j_, int ie_, bool active_, int lane)
      : w(w_), strips(strips_), j(j_), ie(ie_), active(active_), g_load(lane / kPer), piece(lane % kPer) {}
  __device__ uint4 operator()(int i0) const {
    uint4 v = make_uint4(0, 0, 0, 0);
    if (active && g_load < G && i0 + g_load < ie)
      v = __ldcs(reinterpret_cast<const uint4*>(w + (int64_t(i0 + g_load) * strips + j) * kWords) + piece);
    return v;
  }
  // The step's pieces into the warp's slot.
  __device__ void store(uint32_t* sm, const uint4& v) const {
    if (g_load < G) reinterpret_cast<uint4*>(sm)[g_load * kPer + piece] = v;
  }
};

// A block's share of a GEMV launch as both kernels see it: warp w owns strip j = blockIdx.x·8 + w
// (active when it exists), split blockIdx.y the tiles [ib, ie); a gather's block also has its row
// and expert, and its weights start at that expert (ok = false: the row was written NaN, leave).
template <bool Gather>
struct GemvBlock {
  int warp, lane, j, ib, ie, row0 = 0, e = 0;
  bool active, ok = true;
  const uint32_t* w;
  __device__ explicit GemvBlock(const GemvArgs& a)
      : warp(int(threadIdx.x) / 32),
        lane(int(threadIdx.x) % 32),
        j(int(blockIdx.x) * kGemvWarps + int(threadIdx.x) / 32),
        ib(int(blockIdx.y) * a.tiles_per_split),
        ie(min(int(blockIdx.y) * a.tiles_per_split + a.tiles_per_split, a.tiles_k)),
        active(int(blockIdx.x) * kGemvWarps + int(threadIdx.x) / 32 < a.strips),
        w(a.w) {
    if (Gather) {
      ok = gather_expert(a, row0, e);
      if (ok) w += int64_t(e) * a.expert_words;
    }
  }
};

// After the block wrote its split's partials: true for the last block of the column block to arrive
// (which then finishes it), false for the others; the counter is reset for the next call.
__device__ __forceinline__ bool last_split(const GemvArgs& a, int row0, bool gather, int& is_last) {
  // The barrier orders every thread's partials before thread 0's release; its acquire (of all the
  // splits' releases) is ordered before the other threads' reads by the second barrier.
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* c = a.counters + (gather ? int64_t(row0) * gridDim.x : 0) + blockIdx.x;
    unsigned prev;
    asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;\n" : "=r"(prev) : "l"(c) : "memory");
    is_last = prev == unsigned(a.splits - 1);
    if (is_last) *c = 0;  // every split has arrived: ready for the next call
  }
  __syncthreads();
  return is_last != 0;
}

// Output: warp w finishes rows w, w + 8 of the block's 128 columns (as rotate_out does), from zs
// (one split) or the splits' partials summed in split order.
__device__ __forceinline__ void finish_rows(const GemvArgs& a, const float (*zs)[kHad], int nrows, int row0,
                                            bool gather, int e, int warp, int lane) {
  const int64_t c0 = int64_t(blockIdx.x) * kHad + lane * 4;
  const float* sv = a.svh + int64_t(e) * a.n;
  const float* bi = a.bias ? a.bias + int64_t(e) * a.out_features : nullptr;
  for (int r = warp; r < nrows; r += kGemvWarps) {
    const int row = gather ? row0 : r;
    float v[4];
    if (a.splits == 1) {
      const float4 z = *reinterpret_cast<const float4*>(&zs[r][lane * 4]);
      v[0] = z.x, v[1] = z.y, v[2] = z.z, v[3] = z.w;
    } else {
      const float* p = a.part + int64_t(row) * a.n + c0;
      const float4 z0 = __ldcg(reinterpret_cast<const float4*>(p));
      v[0] = z0.x, v[1] = z0.y, v[2] = z0.z, v[3] = z0.w;
      for (int s = 1; s < a.splits; ++s) {
        const float4 z = __ldcg(reinterpret_cast<const float4*>(p + int64_t(s) * a.part_rows * a.n));
        v[0] += z.x, v[1] += z.y, v[2] += z.z, v[3] += z.w;
      }
    }
    finish_output(v, lane, c0, sv, bi, a.out_features, a.y + int64_t(row) * a.out_features, a.epilogue);
  }
}

// One launch per matmul (rows ≤ 16) or gather: block (x, s[, row]) owns the 128 output columns x·128..
// and split s of the k tiles. With FuseIn it first rotates the input blocks its split covers into
// shared memory (the same arithmetic as rotate_in, so the same bits). Its weight loads run
// kGemvDepth steps ahead. The last block of a column block to finish (an atomic counter, after a
// fence) sums the splits' partials in split order, applies the output Hadamard, svh and bias, and
// writes y; with one split the block does so from shared memory.
template <int K, int CB, int N, bool Gather, bool FuseIn>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(const GemvArgs a) {
  constexpr int kWords = 8 * K;      // u32 words per tile
  constexpr int kPer = 2 * K;        // 16-byte pieces per tile
  constexpr int G = 32 / kPer;       // tiles per step
  __shared__ __align__(16) uint32_t smem[kGemvWarps][G * kWords];
  __shared__ __align__(16) float zs[N][kHad];
  __shared__ int is_last;
  extern __shared__ __align__(16) float xs[];  // FuseIn: [N][nhb · 128]
  // Launched programmatically (tandem/cuda/util.cuh): the trellis words may be read before pdl_wait(), the
  // expert ids, activations and the shared partials only after it.
  const GemvBlock<Gather> blk(a);
  if (!blk.ok) return;
  const int warp = blk.warp, lane = blk.lane, j = blk.j, ib = blk.ib, ie = blk.ie, row0 = blk.row0, e = blk.e;
  const bool active = blk.active;
  const LaneWords lw = lane_words<K>(lane);
  uint32_t* sm = smem[warp];
  const TileLoads<K> load(blk.w, a.strips, j, ie, active, lane);
  uint4 buf[kGemvDepth];
#pragma unroll
  for (int d = 0; d < kGemvDepth; ++d) buf[d] = load(ib + d * G);
  if (!Gather) cuda::pdl_wait(), cuda::pdl_trigger();

  const int nrows = Gather ? 1 : a.rows;
  const float* xb;       // row 0's activations of tile i at xb + i·16 (+ lane class)
  int64_t xstride;       // floats between rows
  if (FuseIn) {
    const int hb0 = ib / 8, nhb = (ie + 7) / 8 - hb0;
    const float* su = a.suh + int64_t(e) * a.k;
    for (int t = warp; t < N * nhb; t += kGemvWarps) {
      const int r = t / nhb, hb = t % nhb;
      float* out = xs + int64_t(r) * nhb * kHad + hb * kHad;
      if (r < nrows) {
        rotate_block(a.x, a.in_features, Gather ? row0 / a.per_x : r, su, hb0 + hb, lane, true, out);
      } else {
#pragma unroll
        for (int m = 0; m < 4; ++m) out[lane * 4 + m] = 0.0f;
      }
    }
    __syncthreads();
    xb = xs - int64_t(hb0) * kHad + (lane & 3) * 4;
    xstride = int64_t(nhb) * kHad;
  } else {
    xb = a.xh + int64_t(row0) * a.k + (lane & 3) * 4;
    xstride = a.k;
  }

  float acc[N][2];
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r][0] = acc[r][1] = 0.0f;
  if (active) {
    for (int i0 = ib; i0 < ie; i0 += G) {
      __syncwarp();
      load.store(sm, buf[0]);
      __syncwarp();
#pragma unroll
      for (int d = 0; d + 1 < kGemvDepth; ++d) buf[d] = buf[d + 1];
      buf[kGemvDepth - 1] = load(i0 + kGemvDepth * G);  // in flight while the next steps decode
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (i0 + g >= ie) break;
        const uint32_t* t = sm + g * kWords;
        uint32_t s[8];
        // All three words: skipping the unused third (tile_lane_states) made the gathers 2 % slower.
        lane_states<K>(t[lw.w0], t[lw.w1], t[lw.w2], lw.off, s);
        float v[8];
        states_to_floats<CB>(s, v);
        const float* xp = xb + int64_t(i0 + g) * 16;
#pragma unroll
        for (int r = 0; r < N; ++r) {
          const float4 x = *reinterpret_cast<const float4*>(xp + int64_t(r) * xstride);
          float c0 = acc[r][0], c1 = acc[r][1];
          c0 = fmaf(x.x, v[0], c0), c1 = fmaf(x.x, v[4], c1);
          c0 = fmaf(x.y, v[1], c0), c1 = fmaf(x.y, v[5], c1);
          c0 = fmaf(x.z, v[2], c0), c1 = fmaf(x.z, v[6], c1);
          c0 = fmaf(x.w, v[3], c0), c1 = fmaf(x.w, v[7], c1);
          acc[r][0] = c0, acc[r][1] = c1;
        }
      }
    }
  }
  // The four lanes of a column (lane & 3) hold the partial sums of its 16 input rows: an xor
  // butterfly leaves the same bits in all four; lane q then writes the rows r ≡ q (mod 4).
  const int cw = warp * 16 + lane / 4;  // column within the block's 128
#pragma unroll
  for (int r = 0; r < N; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v = acc[r][h];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      acc[r][h] = v;
    }
  }
  const int S = a.splits;
  if (S == 1) {
#pragma unroll
    for (int r = 0; r < N; ++r)
      if ((r & 3) == (lane & 3)) zs[r][cw] = acc[r][0], zs[r][cw + 8] = acc[r][1];
    __syncthreads();
  } else {
    float* out = a.part + int64_t(blockIdx.y) * a.part_rows * a.n + int64_t(blockIdx.x) * kHad + cw;
#pragma unroll
    for (int r = 0; r < N; ++r) {
      const int row = Gather ? row0 : r;
      if ((r & 3) == (lane & 3) && r < nrows && active) {
        out[int64_t(row) * a.n] = acc[r][0];
        out[int64_t(row) * a.n + 8] = acc[r][1];
      }
    }
    if (!last_split(a, row0, Gather, is_last)) return;
  }
  finish_rows(a, zs, nrows, row0, Gather, e, warp, lane);
}

// ---- the tensor-core GEMV (rows ≤ 16) ----
// Same work split and output path as gemv_kernel (a warp owns one 16-column strip and the k tiles of
// one split), but the products run on mma.sync.m16n8k16 (fp16 × fp16 → fp32) with the weights as the
// A operand: Ŵᵀ of one tile is 16 output columns × 16 inputs, and a lane's 8 decoded weights are
// exactly its A fragment (the format's lane order). The activations are B (16 inputs × 8 rows), so
// one tile costs 2 mma for up to 8 rows (hi and lo, below) and 4 for 9–16.
// Activations: each (row, 128-block) of the rotated input is scaled by a power of two that puts its
// largest magnitude in [2^14, 2^15) and split x' = hi + lo (two fp16, ~22 significant bits); the
// weights are exact fp16, so every product is exact. Per 128-block the tensor cores sum hi·w and
// lo·w into t; at its end the lane folds t into its accumulators times the block's 2^−e. An output
// element sees only its own row of B and a row's scale only its own values: nothing depends on n.
// Weights: each warp streams its strip a 128-block (8 tiles, 256·K bytes) at a time with cp.async
// into its own ring of TcRing<K>::D slots, D − 1 blocks ahead of the decode.
// Activations are staged per round of `round_hb` 128-blocks, per tile, row and lane class q:
// hi(2q, 2q+1), hi(2q+8, 2q+9), lo(...), lo(...) as 8 halves, so a lane's B fragment is one 16-byte
// load. The round size bounds shared memory and changes no arithmetic. Splits cover whole 128-blocks
// (plan_gemv rounds tiles_per_split to a multiple of 8).
// Ring slots per warp: 2–3 KB of weights requested ahead of the decode.
__host__ __device__ constexpr int tc_ring_depth(int K) { return K == 1 ? 8 : K == 2 ? 6 : K <= 4 ? 4 : 3; }
template <int K>
struct TcRing {
  static constexpr int kSlotWords = 64 * K;  // 8 tiles of 8·K words
  static constexpr int D = tc_ring_depth(K);
  static constexpr int kPieces = 16 * K;     // 16-byte pieces per slot
  static constexpr int kPerLane = (kPieces + 31) / 32;
};
constexpr int kTcStageBytes = 18 << 10;  // staged activations per round
// Staged bytes per 128-block and row: 8 tiles × 4 lane classes × 16 B (fp16 hi, lo), twice that for
// the int8 GEMV (two limbs of 4 byte-replicated values), each (tile, row) padded by 16 bytes: the
// staging stores of the 8 tiles a warp writes at once then fall in 8 different 16-byte bank groups
// (unpadded, 128 or 64 bytes apart, they were 8- and 4-way bank conflicts), and a lane's fragment
// stays at a constant offset per tile.
__host__ __device__ constexpr int tc_stage_row(bool i8) { return i8 ? 144 : 80; }
__host__ __device__ constexpr int tc_stage_bytes(bool i8) { return 8 * tc_stage_row(i8); }
__host__ __device__ constexpr int tc_round_hb(int rows_pad, bool i8) {
  return kTcStageBytes / (tc_stage_bytes(i8) * rows_pad) < 64 ? kTcStageBytes / (tc_stage_bytes(i8) * rows_pad) : 64;
}
// Dynamic shared memory of one block: the warps' rings, the staged round of `round_hb` 128-blocks
// (at most tc_round_hb, at most the split), the outputs, the round's scales (and int8 bias terms).
__host__ __device__ constexpr size_t tc_smem_bytes(int K, int rows_pad, int round_hb, bool i8) {
  return size_t(kGemvWarps) * tc_ring_depth(K) * 256 * size_t(K) +
         size_t(round_hb) * tc_stage_bytes(i8) * size_t(rows_pad) + size_t(rows_pad) * kHad * 4 +
         size_t(round_hb) * rows_pad * 4 * (i8 ? 2 : 1);
}

// 16 bytes from global gmem to the shared-memory address s (a 32-bit shared-window address).
__device__ __forceinline__ void cp_async16(unsigned s, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

template <int K, int CB, int N, bool I8>
__global__ void __launch_bounds__(kGemvWarps * 32, N > 8 ? 3 : 4) gemv_tc_kernel(const GemvArgs a) {
  static_assert(!I8 || CB == kCbMul1, "the int8 GEMV is mul1's affine form");
  using Ring = TcRing<K>;
  // n-blocks of 8 B columns: fp16 one per 8 rows; int8 one per 4 rows (a row's two limbs are columns).
  constexpr int D = Ring::D, NB = I8 ? (2 * N + 7) / 8 : (N > 8 ? 2 : 1);
  constexpr int kStage = tc_stage_bytes(I8), kRow = tc_stage_row(I8);
  const int R = a.round_hb;
  extern __shared__ __align__(16) unsigned char tc_smem[];
  uint32_t* ring = reinterpret_cast<uint32_t*>(tc_smem);  // [warp][D][kSlotWords]
  // fp16: [R·8 tiles][N][4 q][16 B] + 16 B; int8: [R·8 tiles][N][2 limbs][4 q][16 B] + 16 B
  unsigned char* xstage = tc_smem + size_t(kGemvWarps) * D * Ring::kSlotWords * 4;
  float(*zs)[kHad] = reinterpret_cast<float(*)[kHad]>(xstage + size_t(R) * kStage * N);  // [N][128]
  float* xscale = &zs[N][0];                                                               // [R][N]
  float* xbias = xscale + R * N;  // int8: [R][N] kMul1Bias · the block's limb sum
  __shared__ int is_last;
  const GemvBlock<false> blk(a);
  const int warp = blk.warp, lane = blk.lane;
  const int g = lane / 4, q = lane % 4;
  const bool active = blk.active;
  const int hb_begin = blk.ib / 8, hb_end = blk.ie / 8;  // whole 128-blocks (plan_gemv)
  const LaneWords lw = lane_words<K>(lane);  // K = 4 and 8 need only the words (paired_states)
  const uint32_t* my_ring = ring + warp * D * Ring::kSlotWords;
  // The ring is filled and read in block order: the next block to request (its source pointers, one
  // per 16-byte piece the lane copies, and its slot) and the next slot to decode roll forward.
  // Piece p = lane + 32m of a slot is word 4p of the slot: tile p / 2K, 16-byte piece p % 2K.
  const int64_t hb_words = int64_t(8) * a.strips * (8 * K);
  const uint32_t* src[Ring::kPerLane];
#pragma unroll
  for (int m = 0; m < Ring::kPerLane; ++m) {
    const int p = lane + 32 * m;
    src[m] = blk.w + int64_t(blk.j) * (8 * K) + int64_t(hb_begin) * hb_words +
             int64_t(p / (2 * K)) * a.strips * (8 * K) + (p % (2 * K)) * 4;
  }
  const unsigned ring_s = unsigned(__cvta_generic_to_shared(my_ring)) + 16u * unsigned(lane);
  int next_hb = hb_begin, wslot = 0, rslot = 0;
  auto issue = [&]() {  // the next 128-block of the strip into its slot (an empty group past the end)
    if (active && next_hb < hb_end) {
      const unsigned dst = ring_s + unsigned(wslot) * (Ring::kSlotWords * 4);
#pragma unroll
      for (int m = 0; m < Ring::kPerLane; ++m)
        if (Ring::kPieces % 32 == 0 || lane + 32 * m < Ring::kPieces) cp_async16(dst + 512u * m, src[m]);
    }
#pragma unroll
    for (int m = 0; m < Ring::kPerLane; ++m) src[m] += hb_words;
    ++next_hb, wslot = wslot + 1 == D ? 0 : wslot + 1;
    cp_async_commit();
  };
#pragma unroll
  for (int d = 0; d < D - 1; ++d) issue();
  // suh and svh do not depend on the previous kernel: ask L2 for the block's lines before waiting on it
  // (each would otherwise be a DRAM round trip after the wait, on the launch's critical path).
  if (warp == 0) {
    const int64_t su0 = int64_t(hb_begin) * kHad, su_n = int64_t(hb_end - hb_begin) * kHad;
    for (int64_t i = int64_t(lane) * 32; i < su_n; i += 32 * 32) prefetch_l2(a.suh + su0 + i);
  } else if (warp == 1) {
    prefetch_output(a, 0, lane);
  }
  cuda::pdl_wait(), cuda::pdl_trigger();

  const int nrows = a.rows;
  const float* su = a.suh;
  float acc[NB][4] = {};
  for (int cs = hb_begin; cs < hb_end; cs += R) {
    const int nhb = min(R, hb_end - cs);
    __syncthreads();  // the previous round's staged input is no longer read
    for (int task = warp; task < N * nhb; task += kGemvWarps) {
      const int r = task / nhb, hh = task % nhb;
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (r < nrows) rotated_values(a.x, a.in_features, r, su, cs + hh, lane, v);
      float mx = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      if constexpr (I8) {
        // x ≈ down/128 · (128·q1 + q2), the limbs byte-replicated (one per byte of a weight's product).
        const cuda::Pow2Scale sc = i8_scale(mx);  // per (row, 128-block)
        int qsum = 0;
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const FragSlot f = frag_slot(lane * 4 + m);
          int q1, q2;
          split_i8(v[m] * sc.up, q1, q2);
          qsum += 128 * q1 + q2;
          uint32_t* base = reinterpret_cast<uint32_t*>(xstage + (size_t(hh * 8 + f.tile) * N + r) * kRow + f.q * 16);
          base[f.reg] = (uint32_t(q1) & 0xFFu) * 0x01010101u;
          base[16 + f.reg] = (uint32_t(q2) & 0xFFu) * 0x01010101u;
        }
        qsum = __reduce_add_sync(0xffffffffu, qsum);
        if (lane == 0) xscale[hh * N + r] = sc.down * (1.0f / 128.0f), xbias[hh * N + r] = kMul1Bias * float(qsum);
        continue;
      }
      const cuda::Pow2Scale sc = cuda::pow2_scale<14>(mx);  // per (row, 128-block)
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const FragSlot f = frag_slot(lane * 4 + m);
        __half hi, lo;
        cuda::split_hi_lo(v[m] * sc.up, hi, lo);
        __half* base = reinterpret_cast<__half*>(xstage + (size_t(hh * 8 + f.tile) * N + r) * kRow + f.q * 16);
        base[f.reg] = hi;
        base[4 + f.reg] = lo;
      }
      if (lane == 0) xscale[hh * N + r] = sc.down;
    }
    __syncthreads();
    if (!active) continue;
    for (int hh = 0; hh < nhb; ++hh) {
      issue();  // block cs + hh + D − 1, into the slot read one block ago (the __syncwarp below)
      cp_async_wait<D - 1>();
      __syncwarp();
      const uint32_t* sw = my_ring + rslot * Ring::kSlotWords;
      rslot = rslot + 1 == D ? 0 : rslot + 1;
      const unsigned char* xh = xstage + size_t(hh) * kStage * N;
      if constexpr (I8) {
        // Σ over the block of limb · byte, per byte of each weight's mul1 product x = s·0x83DCD12D:
        // a lane's 8 products are its A fragments of two m16n8k32 (inputs 2q, 2q+1 | 2q+8, 2q+9 as k
        // groups q and q+4), and B column g is row (nb·4 + g/2), limb g & 1.
        int t8[NB][4] = {};
#pragma unroll
        for (int tt = 0; tt < 8; ++tt) {
          const uint32_t* tw = sw + tt * (8 * K);
          uint32_t x[8];
          tile_lane_states<K>(tw, lw, lw.off, x);
#pragma unroll
          for (int m = 0; m < 8; ++m) x[m] *= 0x83DCD12Du;
#pragma unroll
          for (int nb = 0; nb < NB; ++nb) {
            const int rb = (nb * 4 + g / 2) % N;  // lanes past the rows read a row they discard
            const uint4 xv = *reinterpret_cast<const uint4*>(xh + size_t(tt * N + rb) * kRow + (g & 1) * 64 + q * 16);
            cuda::mma16832_u8s8(t8[nb], x[0], x[4], x[1], x[5], xv.x, xv.y);
            cuda::mma16832_u8s8(t8[nb], x[2], x[6], x[3], x[7], xv.z, xv.w);
          }
        }
        __syncwarp();
        // Lane (g, q) holds row nb·4 + q of output columns g (t8 0, 1: limbs) and g + 8 (2, 3). The
        // block's Σ x·v = down/128 · (kMul1Scale · Σ(128·q1 + q2)·bs + kMul1Bias · Σ(128·q1 + q2)).
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int rr = min(nb * 4 + q, N - 1);
          const float dn = xscale[hh * N + rr], cb = xbias[hh * N + rr];
          const float s0 = fmaf(float(t8[nb][0]), 128.0f, float(t8[nb][1]));
          const float s2 = fmaf(float(t8[nb][2]), 128.0f, float(t8[nb][3]));
          acc[nb][0] = fmaf(fmaf(kMul1Scale, s0, cb), dn, acc[nb][0]);
          acc[nb][1] = fmaf(fmaf(kMul1Scale, s2, cb), dn, acc[nb][1]);
        }
        continue;
      }
      float t[2][NB][4] = {};  // hi and lo products: two accumulation chains
#pragma unroll
      for (int tt = 0; tt < 8; ++tt) {
        const uint32_t* tw = sw + tt * (8 * K);
        uint32_t st[8];
        tile_lane_states<K>(tw, lw, lw.off, st);
        const uint4 a = a_fragment<CB>(st);
#pragma unroll
        for (int nb = 0; nb < NB; ++nb) {
          const int rb = (nb * 8 + g) % N;  // B column g: row nb·8 + g (lanes past N read a row they discard)
          const uint4 xv = *reinterpret_cast<const uint4*>(xh + size_t(tt * N + rb) * kRow + q * 16);
          cuda::mma16816(t[0][nb], a.x, a.y, a.z, a.w, xv.x, xv.y);  // hi
          cuda::mma16816(t[1][nb], a.x, a.y, a.z, a.w, xv.z, xv.w);  // lo
        }
      }
      __syncwarp();  // every lane is done with the slot before it is refilled
      // Lane (g, q) holds rows 2q, 2q + 1 (+8 for nb = 1) of output columns g, g + 8.
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const float d0 = xscale[hh * N + min(nb * 8 + 2 * q, N - 1)];
        const float d1 = xscale[hh * N + min(nb * 8 + 2 * q + 1, N - 1)];
        acc[nb][0] = fmaf(t[0][nb][0] + t[1][nb][0], d0, acc[nb][0]);
        acc[nb][1] = fmaf(t[0][nb][1] + t[1][nb][1], d1, acc[nb][1]);
        acc[nb][2] = fmaf(t[0][nb][2] + t[1][nb][2], d0, acc[nb][2]);
        acc[nb][3] = fmaf(t[0][nb][3] + t[1][nb][3], d1, acc[nb][3]);
      }
    }
  }
  cp_async_wait<0>();  // nothing may land in shared memory after the block leaves
  const int S = a.splits;
  const int cw = warp * 16 + g;  // column within the block's 128 (and cw + 8)
  // A lane's (row, column g, column g + 8) values: fp16 rows nb·8 + 2q + h in acc h and 2 + h; int8 row
  // nb·4 + q in acc 0 and 1.
  constexpr int H = I8 ? 1 : 2;
  auto row_of = [&](int nb, int h) { return I8 ? nb * 4 + q : nb * 8 + 2 * q + h; };
  if (S == 1) {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int h = 0; h < H; ++h) {
        const int r = row_of(nb, h);
        if (r < nrows) zs[r][cw] = acc[nb][h], zs[r][cw + 8] = acc[nb][H + h];
      }
    __syncthreads();
  } else {
    float* out = a.part + int64_t(blockIdx.y) * a.part_rows * a.n + int64_t(blockIdx.x) * kHad + cw;
    if (active) {
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
#pragma unroll
        for (int h = 0; h < H; ++h) {
          const int r = row_of(nb, h);
          if (r >= nrows) continue;
          out[int64_t(r) * a.n] = acc[nb][h];
          out[int64_t(r) * a.n + 8] = acc[nb][H + h];
        }
    }
    if (!last_split(a, 0, false, is_last)) return;
  }
  finish_rows(a, zs, nrows, 0, false, 0, warp, lane);
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
  a.out[(int64_t(jj) * a.tiles_k + i) * 32 + lane] = a_fragment<CB>(s);
}

// ---- prefill: tensor-core GEMMs on the fp16 hi + lo split input ----
// The input of a prefill GEMM: per row, rotated (×suh, 128-point Hadamard) and split per 128-block
// into fp16 hi + lo after a power-of-two scale into [2^14, 2^15), whose inverse is kept per (row,
// block): [rows][k] halves twice, [rows][k/128] floats (matmul_cuda.cu's rotate_split_kernel). Blocks
// of 64 rows stage it one 128-block at a time (two stages, cp.async) and read B fragments with
// ldmatrix; each 128-block's hi and lo products are summed on the tensor cores and folded into the
// output times the block's scale, so every product is exact and each output sums in k order.
constexpr int kBm = 64;
constexpr int kXRow = kHad + 8;  // staged halves per row: 272 bytes, so ldmatrix's 8 rows hit 32 banks
struct GemmStage {
  __half hi[kBm][kXRow], lo[kBm][kXRow];
  float sc[kBm];
};
// 128-block b of the 64 rows row_of(0 .. 63) into st (256 threads; one commit group).
template <class RowOf>
__device__ __forceinline__ void stage_x(GemmStage& st, const __half* xhi, const __half* xlo, const float* xsc,
                                        int64_t k, int64_t b, RowOf row_of) {
  for (int p = int(threadIdx.x); p < 2 * kBm * 16; p += 256) {  // 64 rows × 16 pieces of 16 bytes, twice
    const int arr = p / (kBm * 16), rr = (p / 16) % kBm, piece = p % 16;
    const __half* src = (arr ? xlo : xhi) + row_of(rr) * k + b * kHad + piece * 8;
    cp_async16(unsigned(__cvta_generic_to_shared(arr ? &st.lo[rr][piece * 8] : &st.hi[rr][piece * 8])), src);
  }
  if (threadIdx.x < kBm) st.sc[threadIdx.x] = xsc[row_of(int(threadIdx.x)) * (k / kHad) + b];
  cp_async_commit();
}
// B fragments of n-block nb (rows nb·8 .. +8 of the stage) at tile tt of the staged 128-block:
// f0, f1 hi (inputs 2q, 2q+1 | 2q+8, 2q+9 of row g), f2, f3 lo.
__device__ __forceinline__ void stage_fragments(const GemmStage& st, int nb, int tt, int lane, uint32_t (&f)[4]) {
  const int lm = lane / 8, row = nb * 8 + lane % 8, col = tt * 16 + (lm & 1) * 8;
  cuda::ldmatrix_x4(f, lm < 2 ? &st.hi[row][col] : &st.lo[row][col]);
}

// acc += the 128-block's sums t of n-block nb times their rows' scales: lane (g, q) holds rows
// nb·8 + 2q, 2q + 1 (t 0, 2 and 1, 3) of columns g (t 0, 1) and g + 8 (t 2, 3).
__device__ __forceinline__ void fold_scaled(const float (&t)[4], const GemmStage& st, int nb, int lane,
                                            float (&acc)[4]) {
  const float d0 = st.sc[nb * 8 + 2 * (lane % 4)], d1 = st.sc[nb * 8 + 2 * (lane % 4) + 1];
  acc[0] = fmaf(t[0], d0, acc[0]);
  acc[1] = fmaf(t[1], d1, acc[1]);
  acc[2] = fmaf(t[2], d0, acc[2]);
  acc[3] = fmaf(t[3], d1, acc[3]);
}

// body(stage, b) for the 128-blocks b = 0 .. k/128 − 1 of the 64 rows row_of(0 .. 63), each staged
// while the one before it is read (two stages); body runs between two block barriers.
template <class RowOf, class Body>
__device__ __forceinline__ void for_staged_blocks(GemmStage* st, const __half* xhi, const __half* xlo,
                                                  const float* xsc, int64_t k, RowOf row_of, Body body) {
  const int64_t nhb = k / kHad;
  stage_x(st[0], xhi, xlo, xsc, k, 0, row_of);
  for (int64_t b = 0; b < nhb; ++b) {
    if (b + 1 < nhb) {
      stage_x(st[(b + 1) & 1], xhi, xlo, xsc, k, b + 1, row_of);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    body(static_cast<const GemmStage&>(st[b & 1]), b);
    __syncthreads();  // the stage is refilled next round
  }
}

// Prefill gathers (more rows than a verify pass has, launch_gather_matmul): block (c, e) computes the
// rows whose id is e, output columns c·128 .. +128. It lists them (ascending), then per group of 64
// stages their split input (as above) while each warp decodes its 16-column strip's A fragments
// straight from the expert's trellis words, once per tile for all the group's rows: an expert's
// weights are decoded once per 64 of its rows instead of once per row. z [rows][n].
struct GatherGemmArgs {
  const uint32_t* w = nullptr;
  int64_t expert_words = 0;
  int strips = 0, n_experts = 0;
  const int32_t* ids = nullptr;
  int rows = 0;
  const __half* xhi = nullptr;
  const __half* xlo = nullptr;
  const float* xsc = nullptr;
  int64_t k = 0, n = 0;
  float* z = nullptr;
};
constexpr int kGatherRowChunk = 4096;  // gather rows per launch (bounds the workspace and the row list)
__host__ __device__ constexpr size_t gather_gemm_smem(int rows) { return 2 * sizeof(GemmStage) + size_t(rows) * 4; }

template <int K, int CB>
__global__ void __launch_bounds__(256) gather_gemm_kernel(const GatherGemmArgs a) {
  extern __shared__ __align__(16) unsigned char gg_smem[];
  GemmStage* st = reinterpret_cast<GemmStage*>(gg_smem);  // [2]
  int* list = reinterpret_cast<int*>(gg_smem + 2 * sizeof(GemmStage));
  __shared__ int wcount[kGemvWarps];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  const int e = int(blockIdx.y);
  const unsigned below = (1u << lane) - 1u;
  // The expert's rows in ascending order: per round of 256 rows, a ballot per warp and the warps' counts.
  int nrows = 0;
  for (int r0 = 0; r0 < a.rows; r0 += 256) {
    const int r = r0 + int(threadIdx.x);
    const bool mine = r < a.rows && a.ids[r] == e;
    const unsigned bal = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) wcount[warp] = __popc(bal);
    __syncthreads();
    int off = nrows, total = 0;
    for (int w = 0; w < kGemvWarps; ++w) off += w < warp ? wcount[w] : 0, total += wcount[w];
    if (mine) list[off + __popc(bal & below)] = r;
    nrows += total;
    __syncthreads();
  }
  if (nrows == 0) return;
  const int strip = int(blockIdx.x) * kGemvWarps + warp;  // n is a multiple of 128: every warp has one
  const uint32_t* wt = a.w + int64_t(e) * a.expert_words + int64_t(strip) * (8 * K);
  const int64_t tile_stride = int64_t(a.strips) * (8 * K);  // words between tile rows i and i + 1
  const LaneWords lw = lane_words<K>(lane);
  for (int g0 = 0; g0 < nrows; g0 += kBm) {
    const int gn = min(kBm, nrows - g0), nbn = (gn + 7) / 8;
    auto row_of = [&](int rr) { return int64_t(list[g0 + (rr < gn ? rr : 0)]); };
    float acc[8][4] = {};
    for_staged_blocks(st, a.xhi, a.xlo, a.xsc, a.k, row_of, [&](const GemmStage& cur, int64_t b) {
      float t[8][4] = {};
#pragma unroll
      for (int tt = 0; tt < 8; ++tt) {
        const uint32_t* tp = wt + (b * 8 + tt) * tile_stride;
        uint32_t s[8];
        lane_states<K>(__ldg(tp + lw.w0), __ldg(tp + lw.w1), __ldg(tp + lw.w2), lw.off, s);
        const uint4 af = a_fragment<CB>(s);
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
          if (nb >= nbn) break;
          uint32_t f[4];
          stage_fragments(cur, nb, tt, lane, f);
          cuda::mma16816(t[nb], af.x, af.y, af.z, af.w, f[0], f[1]);
          cuda::mma16816(t[nb], af.x, af.y, af.z, af.w, f[2], f[3]);
        }
      }
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        if (nb >= nbn) break;
        fold_scaled(t[nb], cur, nb, lane, acc[nb]);
      }
    });
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int rr = nb * 8 + 2 * q + h;
        if (rr >= gn) continue;
        float* zr = a.z + int64_t(list[g0 + rr]) * a.n + int64_t(strip) * 16 + g;
        zr[0] = acc[nb][h];
        zr[8] = acc[nb][2 + h];
      }
  }
}

// Launches for one K; `cb`, `rows_pad` (1, 2, 4, 8, 16), gather and fuse_in pick the instance
// (fuse_in only for rows_pad ≤ 4); `smem` is the dynamic shared memory (FuseIn). Defined below,
// instantiated once per K in a generated file.
template <int K>
void launch_gemv_k(const GemvArgs& a, int cb, int rows_pad, bool gather, bool fuse_in, dim3 grid, size_t smem,
                   cudaStream_t stream);
// The tensor-core GEMV (gemv_tc_kernel) for a matmul of rows_pad ≤ 16 rows; `i8` (mul1 only): the
// int8 form.
template <int K>
void launch_gemv_tc_k(const GemvArgs& a, int cb, int rows_pad, bool i8, dim3 grid, cudaStream_t stream);
template <int K>
void launch_decode_k(const DecodeArgs& a, int cb, cudaStream_t stream);
// gather_gemm_kernel over grid (n/128, experts).
template <int K>
void launch_gather_gemm_k(const GatherGemmArgs& a, int cb, cudaStream_t stream);

template <int K, int CB>
void launch_gemv_kc(const GemvArgs& a, int rows_pad, bool gather, bool fuse_in, dim3 grid, size_t smem,
                    cudaStream_t stream) {
  const dim3 block(kGemvWarps * 32);
  if (gather) {
    if (fuse_in) cuda::launch(gemv_kernel<K, CB, 1, true, true>, grid, block, smem, stream, "exl3 gemv", a);
    else cuda::launch(gemv_kernel<K, CB, 1, true, false>, grid, block, 0, stream, "exl3 gemv", a);
    return;
  }
  if (fuse_in) {
    switch (rows_pad) {
      case 1: cuda::launch(gemv_kernel<K, CB, 1, false, true>, grid, block, smem, stream, "exl3 gemv", a); return;
      case 2: cuda::launch(gemv_kernel<K, CB, 2, false, true>, grid, block, smem, stream, "exl3 gemv", a); return;
      case 4: cuda::launch(gemv_kernel<K, CB, 4, false, true>, grid, block, smem, stream, "exl3 gemv", a); return;
      default: break;
    }
  }
  switch (rows_pad) {
    case 1: cuda::launch(gemv_kernel<K, CB, 1, false, false>, grid, block, 0, stream, "exl3 gemv", a); break;
    case 2: cuda::launch(gemv_kernel<K, CB, 2, false, false>, grid, block, 0, stream, "exl3 gemv", a); break;
    case 4: cuda::launch(gemv_kernel<K, CB, 4, false, false>, grid, block, 0, stream, "exl3 gemv", a); break;
    case 8: cuda::launch(gemv_kernel<K, CB, 8, false, false>, grid, block, 0, stream, "exl3 gemv", a); break;
    default: cuda::launch(gemv_kernel<K, CB, 16, false, false>, grid, block, 0, stream, "exl3 gemv", a); break;
  }
}

template <int K>
void launch_gemv_k(const GemvArgs& a, int cb, int rows_pad, bool gather, bool fuse_in, dim3 grid, size_t smem,
                   cudaStream_t stream) {
  if (cb == kCbMul1) launch_gemv_kc<K, kCbMul1>(a, rows_pad, gather, fuse_in, grid, smem, stream);
  else if (cb == kCbMcg) launch_gemv_kc<K, kCbMcg>(a, rows_pad, gather, fuse_in, grid, smem, stream);
  else launch_gemv_kc<K, kCb3Inst>(a, rows_pad, gather, fuse_in, grid, smem, stream);
}

template <int K, int CB, int N, bool I8>
void launch_gemv_tc_inst(const GemvArgs& a, dim3 grid, cudaStream_t stream) {
  static const bool attr = [] {  // above 48 KB the kernel must opt in; it wants shared memory, not L1
    const auto k = gemv_tc_kernel<K, CB, N, I8>;
    return cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                int(tc_smem_bytes(K, N, tc_round_hb(N, I8), I8))) == cudaSuccess &&
           cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100) == cudaSuccess;
  }();
  (void)attr;
  cuda::launch(gemv_tc_kernel<K, CB, N, I8>, grid, dim3(kGemvWarps * 32), tc_smem_bytes(K, N, a.round_hb, I8),
               stream, I8 ? "exl3 gemv (int8 mma)" : "exl3 gemv (mma)", a);
}

template <int K, int CB, bool I8>
void launch_gemv_tc_kc(const GemvArgs& a, int rows_pad, dim3 grid, cudaStream_t stream) {
  switch (rows_pad) {
    case 1: launch_gemv_tc_inst<K, CB, 1, I8>(a, grid, stream); break;
    case 2: launch_gemv_tc_inst<K, CB, 2, I8>(a, grid, stream); break;
    case 4: launch_gemv_tc_inst<K, CB, 4, I8>(a, grid, stream); break;
    case 8: launch_gemv_tc_inst<K, CB, 8, I8>(a, grid, stream); break;
    default: launch_gemv_tc_inst<K, CB, 16, I8>(a, grid, stream); break;
  }
}

template <int K>
void launch_gemv_tc_k(const GemvArgs& a, int cb, int rows_pad, bool i8, dim3 grid, cudaStream_t stream) {
  if (cb == kCbMul1 && i8) launch_gemv_tc_kc<K, kCbMul1, true>(a, rows_pad, grid, stream);
  else if (cb == kCbMul1) launch_gemv_tc_kc<K, kCbMul1, false>(a, rows_pad, grid, stream);
  else if (cb == kCbMcg) launch_gemv_tc_kc<K, kCbMcg, false>(a, rows_pad, grid, stream);
  else launch_gemv_tc_kc<K, kCb3Inst, false>(a, rows_pad, grid, stream);
}

template <int K>
void launch_decode_k(const DecodeArgs& a, int cb, cudaStream_t stream) {
  const int warps = a.tiles_k * (a.cols / 16);
  const unsigned blocks = unsigned((warps + 7) / 8);
  if (cb == kCbMul1) decode_kernel<K, kCbMul1><<<blocks, 256, 0, stream>>>(a);
  else if (cb == kCbMcg) decode_kernel<K, kCbMcg><<<blocks, 256, 0, stream>>>(a);
  else decode_kernel<K, kCb3Inst><<<blocks, 256, 0, stream>>>(a);
}

template <int K>
void launch_gather_gemm_k(const GatherGemmArgs& a, int cb, cudaStream_t stream) {
  const dim3 grid(unsigned(a.n / kHad), unsigned(a.n_experts));
  const size_t smem = gather_gemm_smem(a.rows);
  auto go = [&](auto kernel) {
    // Every call (the codebook instances share this lambda's type, so a static would serve only the
    // first), for the largest row list (a launch has at most kGatherRowChunk rows).
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(gather_gemm_smem(kGatherRowChunk)));
    if (smem > gather_gemm_smem(kGatherRowChunk))  // a round of more rows (per_x above the chunk)
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    kernel<<<grid, 256, smem, stream>>>(a);
  };
  if (cb == kCbMul1) go(gather_gemm_kernel<K, kCbMul1>);
  else if (cb == kCbMcg) go(gather_gemm_kernel<K, kCbMcg>);
  else go(gather_gemm_kernel<K, kCb3Inst>);
}

#define TANDEM_EXL3_CUDA_INSTANCE(K)                                                                          \
  template void launch_gemv_k<K>(const GemvArgs&, int, int, bool, bool, dim3, size_t, cudaStream_t);          \
  template void launch_gemv_tc_k<K>(const GemvArgs&, int, int, bool, dim3, cudaStream_t);                       \
  template void launch_decode_k<K>(const DecodeArgs&, int, cudaStream_t);                                      \
  template void launch_gather_gemm_k<K>(const GatherGemmArgs&, int, cudaStream_t);

#define TANDEM_EXL3_CUDA_EXTERN(K)                                                                            \
  extern template void launch_gemv_k<K>(const GemvArgs&, int, int, bool, bool, dim3, size_t, cudaStream_t);   \
  extern template void launch_gemv_tc_k<K>(const GemvArgs&, int, int, bool, dim3, cudaStream_t);                \
  extern template void launch_decode_k<K>(const DecodeArgs&, int, cudaStream_t);                               \
  extern template void launch_gather_gemm_k<K>(const GatherGemmArgs&, int, cudaStream_t);

}  // namespace tandem::exl3::kcuda
