// Prototype (issue #17, not wired into the model): the tensor-core GEMV of gemv_tc_cuda.cuh for
// IQ2_XXS weights (Bolt's routed and shared experts), for 1–16 activation rows, and a grouped MoE
// gather that reads each selected expert once for all the rows that chose it.
// Owner: callers own every pointer (repacked weights, tables, workspace). Thread: one caller per
// stream. Sync: launches are queued; nothing here synchronizes.
//
// k order. A dot product allows any permutation of k applied to weights and activations alike. Within
// each 256-element block, k16 steps 2j and 2j + 1 hold sub-block j (32 elements); lane (g, q) holds grid
// entry q of rows g and g + 8, its elements e = 0..7 at step 2j + e / 4, A columns 2q + e % 2 +
// 8·((e / 2) % 2) (iq2tc_k). So one grid lookup, one sign mask and one scale give a lane four whole
// A registers per row, and the B fragment of lane (g, q) at step 2j + h is the four consecutive
// activations 32j + 8q + 4h .. + 3 (hi and lo halves side by side in shared memory).
//
// Repacked layout (repack_iq2_xxs_tc, host; k a multiple of 256, rows padded to 16-row tiles with
// d = 0). qs: per (tile t, block b), lane, one u32 per sub-block j, as two 16-byte words:
// qs[(((t·blocks + b)·2 + j / 4)·32 + lane)·16 + 4·(j % 4)]; word j holds grid index (bits 0–7) and
// 7-bit sign (8–14) of row g, the same of row g + 8 at bits 16–30, and bits 15 and 31 carry the
// 4-bit sub-block scales: lane q keeps the 16 bits of sub-blocks 2q, 2q + 1 (nibble 2·jj + rr: sub-block
// 2q + jj, row g + 8·rr), bit i in word i / 2 (bit 15 if i even, 31 if odd); a warp shuffle gathers
// them. d: per (tile, block, g) one u32, the fp16 d of row g | that of row g + 8 << 16. Bytes are
// exactly the file's (66 per 256 per row) when m is a multiple of 16.
//
// Numbers. Weight = d·(0.5 + s4)/4·grid·sign = (d/8)·q with q = grid·(2·s4 + 1)·sign an integer of
// magnitude ≤ 43·31 = 1333, exact in fp16 (grid half × odd half, one HMUL2; sign by XOR). Each block of
// an activation row is scaled by a power of two into [2^14, 2^15) and split x' = hi + lo in fp16
// (mma_cuda.cuh). Per block the tensor cores sum q·hi + q·lo over 16 steps into a fresh fp32 fragment t,
// and the lane folds it in as acc = fma(t, (d_row/8)·2^e_col, acc) (the factor exact), blocks in k order;
// slices (4 blocks) are added in slice order by the last warp of a tile to finish (gemv_tc_cuda.cuh).
// Every output's bits depend on its weight row, its activation row and k alone: not on n, not on which
// column of the tile it sat in, not on which warp ran which slice. So the gather's (row, slot) output
// equals the dense kernel's output of that expert for that row alone, bit for bit.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf/gemv_tc_cuda.cuh"
#include "tandem/tensor.h"

namespace tandem::gguf {
namespace iq2tc_tables_detail {
#include "iq_tables.inc"
}  // namespace iq2tc_tables_detail

namespace kcuda {

constexpr int kIq2SliceBlocks = 4;  // 256-element blocks per slice (the last slice may hold fewer)
constexpr int kIq2TableBytes = 256 * 16 + 128 * 16;
constexpr int kIq2MaxSlots = 32;  // gather slots per row (a bit mask per activation row)

// Geometry of a repacked [m, k] IQ2_XXS weight.
struct Iq2TcShape {
  int64_t m = 0, k = 0;
  int64_t tiles = 0, blocks = 0, slices = 0;  // blocks: per row (k / 256)
  size_t qs_bytes() const { return size_t(tiles * blocks) * 1024; }
  size_t d_bytes() const { return size_t(tiles * blocks) * 32; }
  size_t bytes() const { return qs_bytes() + d_bytes(); }
  // Workspace for `items` launch items (dense 1, a gather 16·slots): a counter per (item, tile),
  // zero before the first launch (every launch leaves them zero), then, when k spans several slices,
  // items × slices × 16 rows × (16·tiles) fp32 partials.
  size_t counter_bytes(int64_t items = 1) const { return (size_t(items * tiles) * 4 + 255) / 256 * 256; }
  size_t workspace_bytes(int64_t items = 1) const {
    return counter_bytes(items) + (slices > 1 ? size_t(items * slices * kTcMaxRows * tiles * 16) * 4 : 0);
  }
};
inline Iq2TcShape iq2tc_shape(int64_t m, int64_t k) {
  Iq2TcShape s;
  s.m = m, s.k = k;
  s.tiles = (m + 15) / 16;
  s.blocks = k / 256;
  s.slices = (s.blocks + kIq2SliceBlocks - 1) / kIq2SliceBlocks;
  return s;
}

// The k offset within a block of step st (0..15), A column c (0..15) of lane q = (c % 8) / 2.
TANDEM_HD int iq2tc_k(int st, int c) {
  const int j = st >> 1, hs = st & 1, q = (c & 7) >> 1, e = 4 * hs + 2 * (c >> 3) + (c & 1);
  return 32 * j + 8 * q + e;
}
// A lane's grid index and 7-bit sign of row g + 8·rr in its word of one sub-block.
TANDEM_HD uint32_t iq2tc_idx(uint32_t w, int rr) { return (w >> (16 * rr)) & 255u; }
TANDEM_HD uint32_t iq2tc_sign(uint32_t w, int rr) { return (w >> (16 * rr + 8)) & 127u; }
// The 16 scale bits a lane carries in its eight words of one block.
TANDEM_HD uint32_t iq2tc_scale_bits(const uint32_t (&w)[8]) {
  uint32_t v = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) v |= ((w[j] >> 15) & 1u) << (2 * j) | ((w[j] >> 31) & 1u) << (2 * j + 1);
  return v;
}
// Sub-block j's scale of row g + 8·rr from the four lanes' bits sq[q'] (q' = 0..3 of the lane's g).
TANDEM_HD uint32_t iq2tc_scale(const uint32_t (&sq)[4], int j, int rr) {
  return (sq[j >> 1] >> (8 * (j & 1) + 4 * rr)) & 15u;
}

// The lookup tables the kernel copies to shared memory: 256 grid entries as 8 fp16 values (element e
// in half e), then 128 sign patterns as 8 fp16 sign masks (0x8000 where the element is negated).
inline std::vector<uint8_t> iq2tc_tables() {
  std::vector<uint8_t> t(kIq2TableBytes);
  for (int i = 0; i < 256; ++i)
    for (int e = 0; e < 8; ++e) {
      const uint16_t h = f32_to_f16(float(uint8_t(iq2tc_tables_detail::iq2xxs_grid[i] >> (8 * e))));
      std::memcpy(t.data() + 16 * i + 2 * e, &h, 2);
    }
  for (int s = 0; s < 128; ++s)
    for (int e = 0; e < 8; ++e) {
      const uint16_t h = (iq2tc_tables_detail::ksigns_iq2xs[s] >> e) & 1 ? 0x8000 : 0;
      std::memcpy(t.data() + 4096 + 16 * s + 2 * e, &h, 2);
    }
  return t;
}

// IQ2_XXS rows (GGUF blocks of 66 bytes, k / 256 per row) into the layout above: qs, then d.
inline std::vector<uint8_t> repack_iq2_xxs_tc(const uint8_t* blocks, int64_t m, int64_t k, const std::string& name) {
  check(k > 0 && k % 256 == 0 && m > 0, "gguf tc gemv: IQ2_XXS tensor '", name,
        "' needs k a positive multiple of 256 and m > 0, found [", m, ", ", k, "]");
  const Iq2TcShape s = iq2tc_shape(m, k);
  const int64_t row_bytes = s.blocks * 66;
  std::vector<uint8_t> out(s.bytes(), 0);
  uint8_t* qs = out.data();
  uint8_t* dd = out.data() + s.qs_bytes();
  auto blk = [&](int64_t row, int64_t b) { return blocks + row * row_bytes + b * 66; };
  auto a1 = [&](int64_t row, int64_t b, int j) -> uint32_t {  // sub-block j's signs and scale
    uint32_t v;
    std::memcpy(&v, blk(row, b) + 6 + 8 * j, 4);
    return v;
  };
  for (int64_t t = 0; t < s.tiles; ++t)
    for (int64_t b = 0; b < s.blocks; ++b) {
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, q = lane & 3;
        uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sbits = 0;
        for (int rr = 0; rr < 2; ++rr) {
          const int64_t row = 16 * t + g + 8 * rr;
          if (row >= m) continue;
          for (int j = 0; j < 8; ++j) {
            const uint32_t idx = blk(row, b)[2 + 8 * j + q], sg = (a1(row, b, j) >> (7 * q)) & 127u;
            w[j] |= (idx | sg << 8) << (16 * rr);
          }
          for (int jj = 0; jj < 2; ++jj) sbits |= (a1(row, b, 2 * q + jj) >> 28) << (4 * (2 * jj + rr));
        }
        for (int i = 0; i < 16; ++i) w[i >> 1] |= ((sbits >> i) & 1u) << (i & 1 ? 31 : 15);
        for (int j = 0; j < 8; ++j)
          std::memcpy(qs + (((t * s.blocks + b) * 2 + j / 4) * 32 + lane) * 16 + 4 * (j % 4), &w[j], 4);
      }
      for (int g = 0; g < 8; ++g) {
        uint32_t v = 0;
        for (int rr = 0; rr < 2; ++rr) {
          const int64_t row = 16 * t + g + 8 * rr;
          uint16_t d = 0;
          if (row < m) std::memcpy(&d, blk(row, b), 2);
          v |= uint32_t(d) << (16 * rr);
        }
        std::memcpy(dd + ((t * s.blocks + b) * 8 + g) * 4, &v, 4);
      }
    }
  return out;
}

struct Iq2TcArgs {
  const uint8_t* w = nullptr;     // device: the repacked weight (of expert 0 for a gather)
  int64_t expert_bytes = 0;       // gather: bytes between experts' repacked weights
  const uint4* tables = nullptr;  // device: iq2tc_tables()
  int64_t m = 0, k = 0, qs_bytes = 0;
  int tiles = 0, blocks = 0, slices = 0;
  const float* x = nullptr;  // device, n rows of k (16-byte aligned)
  float* y = nullptr;        // device: dense n rows of m; gather n·slots rows of m
  int n = 0;                 // 1..16 activation rows
  float scale = 1.0f;
  int epilogue = 0;  // as CudaMatmulArgs
  // Gather: row c·slots + s of y = W[ids[c·slots + s]] · x[c]; an id outside [0, n_experts) leaves its
  // row NaN; expert_scale (n_experts floats) replaces `scale`.
  const int32_t* ids = nullptr;
  int slots = 0, n_experts = 0;
  const float* expert_scale = nullptr;
  unsigned* count = nullptr;  // workspace
  float* part = nullptr;
  int tiles_per_warp = 1;
};

__device__ __forceinline__ uint32_t iq2tc_ldg32(const uint8_t* p) {
  uint32_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// Shared memory: tables | NT n8 tiles × 64 steps × 8 columns × 4 lanes of {hi b0, hi b1, lo b0, lo b1}
// | the block factors 2^e of 16 rows × 4 blocks | 16 slot masks.
__host__ __device__ constexpr size_t iq2tc_smem_bytes(int nt) {
  return kIq2TableBytes + size_t(nt) * kTcSliceSteps * 8 * 4 * 16 + 16 * kIq2SliceBlocks * 4 + 16 * 4;
}

// grid (x: groups of kTcWarps warps, y: slices, z: gather items). Warp w of block x owns tiles
// x·kTcWarps + w + i·gridDim.x·kTcWarps, i < tiles_per_warp; with PIPE (tiles_per_warp > 1) the next
// tile's weights are loaded while the current one computes (36 more registers; without it the
// kernel fits 128 registers with fewer spills). A gather item (slot c·slots + s) runs only if it is its expert's first
// occurrence in ids; it then multiplies every row that chose the expert.
template <int NT, bool PIPE>
__global__ void __launch_bounds__(kTcThreads, 2) gemv_tc_iq2_kernel(Iq2TcArgs p) {
  constexpr int B = kIq2SliceBlocks;
  extern __shared__ __align__(16) unsigned char smem[];
  uint4* grid_t = reinterpret_cast<uint4*>(smem);
  const uint4* sign_t = grid_t + 256;
  uint4* xs = reinterpret_cast<uint4*>(smem + kIq2TableBytes);
  float* es = reinterpret_cast<float*>(smem + kIq2TableBytes + size_t(NT) * kTcSliceSteps * 8 * 4 * 16);
  uint32_t* slot_mask = reinterpret_cast<uint32_t*>(es + 16 * B);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int slice = blockIdx.y, item = blockIdx.z;
  const int nw = gridDim.x * kTcWarps, gw = blockIdx.x * kTcWarps + warp;
  const int b0 = slice * B, nb = min(B, p.blocks - b0);
  const bool gather = p.ids != nullptr;
  for (int i = threadIdx.x; i < kIq2TableBytes / 16; i += kTcThreads) grid_t[i] = p.tables[i];

  const uint8_t* w = p.w;
  auto load = [&](int t, uint4 (&qv)[B][2], uint32_t (&dv)[B]) {
    if (t >= p.tiles) return;
#pragma unroll
    for (int b = 0; b < B; ++b)
      if (b < nb) {
        const int64_t tb = int64_t(t) * p.blocks + b0 + b;
        qv[b][0] = tc_ldg(w + ((tb * 2) * 32 + lane) * 16);
        qv[b][1] = tc_ldg(w + ((tb * 2 + 1) * 32 + lane) * 16);
        dv[b] = iq2tc_ldg32(w + p.qs_bytes + (tb * 8 + g) * 4);
      }
  };
  auto tile_of = [&](int i) { return gw + i * nw; };
  uint4 qa[B][2], qb[B][2];  // qb: PIPE only
  uint32_t da[B], db[B];
  if (!gather) load(tile_of(0), qa, da);  // weights are never written by a pass: before the wait
  cuda::pdl_wait();
  cuda::pdl_trigger();

  float scale = p.scale;
  if (gather) {
    // The item's expert, whether an earlier item has it, and which rows (and slots) chose it.
    __shared__ int earlier;
    if (threadIdx.x == 0) earlier = 0;
    if (threadIdx.x < 16) slot_mask[threadIdx.x] = 0;
    __syncthreads();
    const int32_t e = p.ids[item];
    const int items = p.n * p.slots;
    for (int j = threadIdx.x; j < items; j += kTcThreads)
      if (p.ids[j] == e) {
        if (j < item) earlier = 1;
        atomicOr(slot_mask + j / p.slots, 1u << (j % p.slots));
      }
    __syncthreads();
    if (e < 0 || e >= p.n_experts) {
      if (slice == 0)
        for (int i = 0; i < p.tiles_per_warp; ++i) {
          const int64_t row = int64_t(tile_of(i)) * 16 + lane;
          if (lane < 16 && tile_of(i) < p.tiles && row < p.m) p.y[int64_t(item) * p.m + row] = __int_as_float(0x7fc00000);
        }
      return;
    }
    if (earlier) return;  // block-uniform
    w += int64_t(e) * p.expert_bytes;
    if (p.expert_scale) scale = p.expert_scale[e];
    load(tile_of(0), qa, da);
  } else if (threadIdx.x < 16) {
    slot_mask[threadIdx.x] = threadIdx.x < p.n ? 1u : 0u;
  }
  __syncthreads();

  // Stage the slice's activations: one warp per (row, block), eight consecutive elements per lane.
  for (int pr = warp; pr < 16 * nb; pr += kTcWarps) {
    const int r = pr / nb, jb = pr % nb;
    if (r >= p.n || slot_mask[r] == 0) continue;  // warp-uniform
    const float4* src = reinterpret_cast<const float4*>(p.x + int64_t(r) * p.k + int64_t(b0 + jb) * 256 + 8 * lane);
    const float4 u = src[0], v = src[1];
    const float e8[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
    float mx = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) mx = fmaxf(mx, fabsf(e8[i]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const cuda::Pow2Scale sc = cuda::pow2_scale<14>(mx);
    const int j = lane >> 2, ql = lane & 3;
#pragma unroll
    for (int hs = 0; hs < 2; ++hs) {
      __half hl[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) cuda::split_hi_lo(e8[4 * hs + i] * sc.up, hl[i], hl[4 + i]);
      uint4 rec;
      std::memcpy(&rec, hl, 16);
      xs[((size_t(r >> 3) * kTcSliceSteps + jb * 16 + 2 * j + hs) * 8 + (r & 7)) * 4 + ql] = rec;
    }
    if (lane == 0) es[r * B + jb] = sc.down;
  }
  __syncthreads();

  const int64_t pstride = int64_t(p.tiles) * 16;
  auto col_of = [&](int nt, int i) { return 8 * nt + 2 * q + (i & 1); };
  auto row_of = [&](int t, int i) { return int64_t(t) * 16 + g + 8 * (i >> 1); };
  bool bcol[NT];  // this lane's B column holds a staged row
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) bcol[nt] = 8 * nt + g < p.n && slot_mask[8 * nt + g] != 0;
  auto store = [&](int col, int64_t row, float v) {
    if (!gather) {
      store_out(p.y + int64_t(col) * p.m + row, v * scale, p.epilogue);
      return;
    }
    for (uint32_t mk = slot_mask[col]; mk; mk &= mk - 1)
      store_out(p.y + (int64_t(col) * p.slots + __ffs(mk) - 1) * p.m + row, v * scale, p.epilogue);
  };
  unsigned* count = p.count + int64_t(item) * p.tiles;
  float* part = p.part + int64_t(item) * p.slices * kTcMaxRows * pstride;

  auto compute = [&](int t, const uint4 (&qv)[B][2], const uint32_t (&dv)[B]) {
    if (t >= p.tiles) return;  // warp-uniform
    float acc[NT][4];
    tc_zero(acc);
#pragma unroll
    for (int b = 0; b < B; ++b) {
      if (b >= nb) break;
      const uint32_t wd[8] = {qv[b][0].x, qv[b][0].y, qv[b][0].z, qv[b][0].w,
                              qv[b][1].x, qv[b][1].y, qv[b][1].z, qv[b][1].w};
      const uint32_t mine = iq2tc_scale_bits(wd);
      uint32_t sq[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) sq[i] = __shfl_sync(0xffffffffu, mine, (lane & ~3) | i);
      float tt[NT][4];
      tc_zero(tt);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t a[2][4];  // rows g, g + 8: elements (0, 1), (2, 3), (4, 5), (6, 7) of the lane's entry
#pragma unroll
        for (int rr = 0; rr < 2; ++rr) {
          const uint4 gv = grid_t[iq2tc_idx(wd[j], rr)], sv = sign_t[iq2tc_sign(wd[j], rr)];
          const __half2 m2 = __half2half2(__int2half_rn(int(2 * iq2tc_scale(sq, j, rr) + 1)));
          a[rr][0] = tc_u32(__hmul2(tc_h2(gv.x ^ sv.x), m2));
          a[rr][1] = tc_u32(__hmul2(tc_h2(gv.y ^ sv.y), m2));
          a[rr][2] = tc_u32(__hmul2(tc_h2(gv.z ^ sv.z), m2));
          a[rr][3] = tc_u32(__hmul2(tc_h2(gv.w ^ sv.w), m2));
        }
#pragma unroll
        for (int hs = 0; hs < 2; ++hs) {
          const int st = b * 16 + 2 * j + hs;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            uint4 bv = make_uint4(0, 0, 0, 0);
            if (bcol[nt]) bv = xs[((size_t(nt) * kTcSliceSteps + st) * 8 + g) * 4 + q];
            cuda::mma16816(tt[nt], a[0][2 * hs], a[1][2 * hs], a[0][2 * hs + 1], a[1][2 * hs + 1], bv.x, bv.y);
            cuda::mma16816(tt[nt], a[0][2 * hs], a[1][2 * hs], a[0][2 * hs + 1], a[1][2 * hs + 1], bv.z, bv.w);
          }
        }
      }
      const float d0 = f16_bits(dv[b] & 0xFFFFu) * 0.125f, d1 = f16_bits(dv[b] >> 16) * 0.125f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int c0 = 8 * nt + 2 * q;
        const float e0 = c0 < p.n ? es[c0 * B + b] : 0.0f, e1 = c0 + 1 < p.n ? es[(c0 + 1) * B + b] : 0.0f;
        acc[nt][0] = fmaf(tt[nt][0], d0 * e0, acc[nt][0]);
        acc[nt][1] = fmaf(tt[nt][1], d0 * e1, acc[nt][1]);
        acc[nt][2] = fmaf(tt[nt][2], d1 * e0, acc[nt][2]);
        acc[nt][3] = fmaf(tt[nt][3], d1 * e1, acc[nt][3]);
      }
    }
    // The slice is done: stored directly when it is the only one, else its partial out and the last of
    // the tile's slices adds them all in slice order.
    const bool only = p.slices == 1;
    unsigned last = only;
    if (!only) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (col_of(nt, i) < p.n)
            part[(int64_t(slice) * kTcMaxRows + col_of(nt, i)) * pstride + row_of(t, i)] = acc[nt][i];
      __threadfence();
      __syncwarp();
      if (lane == 0) last = atomicAdd(count + t, 1u) == unsigned(p.slices - 1);
      last = __shfl_sync(0xffffffffu, last, 0);
      if (last) __threadfence();
    }
    if (last) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = col_of(nt, i);
          const int64_t row = row_of(t, i);
          if (col >= p.n || row >= p.m || !slot_mask[col]) continue;
          float v = acc[nt][i];
          if (!only) {
            const float* pp = part + int64_t(col) * pstride + row;
            v = __ldcg(pp);
            for (int s = 1; s < p.slices; ++s) v += __ldcg(pp + int64_t(s) * kTcMaxRows * pstride);
          }
          store(col, row, v);
        }
      if (lane == 0 && !only) count[t] = 0;
    }
  };

  if constexpr (PIPE) {
#pragma unroll 1
    for (int i = 0; i < p.tiles_per_warp; i += 2) {
      load(tile_of(i + 1), qb, db);
      compute(tile_of(i), qa, da);
      if (i + 1 >= p.tiles_per_warp) break;
      load(tile_of(i + 2), qa, da);
      compute(tile_of(i + 1), qb, db);
    }
  } else {
#pragma unroll 1
    for (int i = 0; i < p.tiles_per_warp; ++i) {
      if (i > 0) load(tile_of(i), qa, da);
      compute(tile_of(i), qa, da);
    }
  }
}

// Tiles per warp for this device: every (tile, slice, item) once, with the grid resident at once.
inline int iq2tc_tiles_per_warp(const Iq2TcShape& s, int nt, int64_t items) {
  static int per_sm[3] = {0, 0, 0};
  const int sms = cuda::sm_count();
  if (per_sm[nt] == 0) {
    auto kernel = nt == 1 ? gemv_tc_iq2_kernel<1, false> : gemv_tc_iq2_kernel<2, false>;
    cuda::check_cuda(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[nt], kernel, kTcThreads, iq2tc_smem_bytes(nt)),
        "gguf tc gemv iq2: occupancy");
    per_sm[nt] = std::max(per_sm[nt], 1);
  }
  const int64_t warps = int64_t(sms) * per_sm[nt] * kTcWarps;
  return int(std::max<int64_t>(1, (s.tiles * s.slices * items + warps - 1) / warps));
}

inline void iq2tc_launch(Iq2TcArgs a, const Iq2TcShape& s, int64_t items, int tiles_per_warp, cudaStream_t stream) {
  static bool configured = false;
  if (!configured) {
    for (auto kernel : {gemv_tc_iq2_kernel<1, false>, gemv_tc_iq2_kernel<2, false>, gemv_tc_iq2_kernel<1, true>,
                        gemv_tc_iq2_kernel<2, true>})
      cuda::check_cuda(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(iq2tc_smem_bytes(2))),
          "gguf tc gemv iq2: shared memory attribute");
    configured = true;
  }
  const int nt = a.n > 8 ? 2 : 1;
  a.tiles_per_warp = tiles_per_warp > 0 ? tiles_per_warp : iq2tc_tiles_per_warp(s, nt, items);
  const int64_t warps = (s.tiles + a.tiles_per_warp - 1) / a.tiles_per_warp;
  const dim3 grid(unsigned((warps + kTcWarps - 1) / kTcWarps), unsigned(s.slices), unsigned(items));
  const bool pipe = a.tiles_per_warp > 1;
  auto kernel = nt == 1 ? (pipe ? gemv_tc_iq2_kernel<1, true> : gemv_tc_iq2_kernel<1, false>)
                        : (pipe ? gemv_tc_iq2_kernel<2, true> : gemv_tc_iq2_kernel<2, false>);
  cuda::launch(kernel, grid, dim3(kTcThreads), iq2tc_smem_bytes(nt), stream, "gguf tc gemv iq2", a);
}

inline Iq2TcArgs iq2tc_args(const uint8_t* w, const Iq2TcShape& s, const void* tables, float scale, int epilogue,
                            void* workspace, int64_t items) {
  Iq2TcArgs a;
  a.w = w, a.tables = static_cast<const uint4*>(tables);
  a.m = s.m, a.k = s.k, a.qs_bytes = int64_t(s.qs_bytes());
  a.tiles = int(s.tiles), a.blocks = int(s.blocks), a.slices = int(s.slices);
  a.scale = scale, a.epilogue = epilogue;
  a.count = static_cast<unsigned*>(workspace);
  a.part = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + s.counter_bytes(items));
  return a;
}

// y[n, m] = scale · x[n, k] · Wᵀ for a repacked weight at `w` (shape s), n ≥ 0 (slabs of 16 rows,
// each row with the bits it would have alone). tables: iq2tc_tables() on the device. workspace:
// s.workspace_bytes(), its counters zero before the first launch on it (they are left zero); one
// launch at a time per workspace (stream order). tiles_per_warp 0: iq2tc_tiles_per_warp.
inline void launch_gemv_tc_iq2(const uint8_t* w, const Iq2TcShape& s, const void* tables, const float* x, float* y,
                               int64_t n, float scale, int epilogue, void* workspace, cudaStream_t stream,
                               int tiles_per_warp = 0) {
  check(reinterpret_cast<uintptr_t>(x) % 16 == 0, "gguf tc gemv iq2: activations must be 16-byte aligned");
  for (int64_t r0 = 0; r0 < n; r0 += kTcMaxRows) {
    Iq2TcArgs a = iq2tc_args(w, s, tables, scale, epilogue, workspace, 1);
    a.x = x + r0 * s.k, a.y = y + r0 * s.m;
    a.n = int(std::min<int64_t>(kTcMaxRows, n - r0));
    iq2tc_launch(a, s, 1, tiles_per_warp, stream);
  }
}

// The grouped MoE gather: row t·slots + j of y[tokens·slots, m] = scale_e · W_e · x[t] with e =
// ids[t·slots + j] (device ids), each expert's weights read once per 16 tokens for every token that
// chose it. experts: n_experts repacked weights of shape s, expert_bytes apart (≥ s.bytes());
// expert_scale: device, n_experts floats, or null for `scale`. An id outside [0, n_experts) leaves its
// row NaN. workspace: s.workspace_bytes(16·slots) (counters as launch_gemv_tc_iq2). Every output has
// the bits launch_gemv_tc_iq2 gives that expert and token alone.
inline void launch_gather_tc_iq2(const uint8_t* experts, int64_t expert_bytes, int n_experts, const float* expert_scale,
                                 const Iq2TcShape& s, const void* tables, const float* x, const int32_t* ids,
                                 int slots, float* y, int64_t tokens, float scale, int epilogue, void* workspace,
                                 cudaStream_t stream, int tiles_per_warp = 0) {
  check(reinterpret_cast<uintptr_t>(x) % 16 == 0, "gguf tc gather iq2: activations must be 16-byte aligned");
  check(slots >= 1 && slots <= kIq2MaxSlots, "gguf tc gather iq2: slots per row must be 1..", kIq2MaxSlots,
        ", found ", slots);
  for (int64_t r0 = 0; r0 < tokens; r0 += kTcMaxRows) {
    const int n = int(std::min<int64_t>(kTcMaxRows, tokens - r0));
    Iq2TcArgs a = iq2tc_args(experts, s, tables, scale, epilogue, workspace, int64_t(kTcMaxRows) * slots);
    a.expert_bytes = expert_bytes, a.n_experts = n_experts, a.expert_scale = expert_scale;
    a.x = x + r0 * s.k, a.y = y + r0 * slots * s.m, a.ids = ids + r0 * slots, a.slots = slots, a.n = n;
    iq2tc_launch(a, s, int64_t(n) * slots, tiles_per_warp, stream);
  }
}

}  // namespace kcuda
}  // namespace tandem::gguf
