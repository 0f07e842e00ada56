// The CUDA twin of kernels_cpu.h: device helpers the per-type decoders share (kquants_cuda.cuh,
// iquants_cuda.cuh) and the generic kernels they plug into — the GEMV that serves matmul and the
// expert gather, and the row decoder behind get_rows and dequantize.
// Owner: callers own every pointer. Thread: one caller per stream. Sync: launches are queued on the
// stream; nothing here synchronizes.
//
// A decoder Q describes one block type; a block is kElems / 32 units of 32 elements:
//   kElems, kBytes    block geometry (spec/formats.md § 2.4)
//   kExact            true: `half` yields the weights themselves; false: weight = scale·q, one scale
//                     per group of 8
//   kGridBytes        the lookup grid, copied from global to shared memory once per block
//   kSigns            7 or 8: a table of byte selectors for a group's sign pattern (grid8_signed)
//   kLut              the 16 values of a 4-bit code as floats (1 = IQ4, 2 = FP4, which also gets the
//                     256 UE4M3 scales): 16 words in 16 banks, so a warp's lookups never conflict
//   Unit, load(block, unit)             the raw fields of one unit, in registers
//   half<P>(unit, tables, q[16], s[2])  two of the unit's four groups: q[8g+j] and s[g] for the
//                                       elements off(P, g) + j, g = 0, 1
// The weight decode must reproduce the CPU decoder's arithmetic operation for operation (dequantize
// is compared bit for bit); the module builds with --fmad=false, so nothing contracts behind it.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tandem/cuda/async_copy.cuh"
#include "tandem/cuda/device_bits.cuh"
#include "tandem/cuda/util.cuh"
#include "quant_cuda.cuh"
#include "tandem/error.h"

namespace tandem::gguf::kcuda {

// Decoders and their helpers are host-callable too: the host build emulates the few intrinsics, so
// a CPU-only test (tests/formats/gguf/cuda/test_decode_host.cu) checks every decoder bit for bit.
#define TANDEM_HD __host__ __device__ __forceinline__

using cuda::cp_async16;
using cuda::cp_async_commit;
using cuda::cp_async_wait;
using cuda::funnel_r;
using cuda::prmt;
TANDEM_HD uint32_t popc(uint32_t v) {
#ifdef __CUDA_ARCH__
  return __popc(v);
#else
  return uint32_t(__builtin_popcount(v));
#endif
}
TANDEM_HD float as_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// w >> s for s ≥ 0, w << −s otherwise (s constant after unrolling): a field scaled to a byte offset.
TANDEM_HD uint32_t shr(uint32_t w, int s) { return s >= 0 ? w >> s : w << -s; }
// Table entries at a byte offset (the shift that extracts an index scales it too).
TANDEM_HD uint64_t at64(const uint64_t* t, uint32_t off) {
  return *reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(t) + off);
}
TANDEM_HD uint32_t at32(const uint32_t* t, uint32_t off) {
  return *reinterpret_cast<const uint32_t*>(reinterpret_cast<const char*>(t) + off);
}
TANDEM_HD float atf(const float* t, uint32_t off) {
  return *reinterpret_cast<const float*>(reinterpret_cast<const char*>(t) + off);
}

// 0.5·UE4M3(x) exactly as the CPU table: bit 7 ignored except that 0x00 and 0x7F give 0.
TANDEM_HD float ue4m3_half(uint32_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const uint32_t e = (x >> 3) & 0xF, m = x & 7;
  if (e == 0) return float(m) * 0x1p-10f;
  return float(8 + m) * as_float((e + 127 - 11) << 23);
}

// ---- field access: blocks sit at 2-byte alignment at least (every block size is even) ----

TANDEM_HD uint32_t ld8(const uint8_t* p) { return *p; }
TANDEM_HD uint32_t ld16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
TANDEM_HD uint32_t ld32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
TANDEM_HD uint32_t ld16x2(const uint8_t* p) { return ld16(p) | ld16(p + 2) << 16; }  // a u32 at 2-byte alignment

// N consecutive u32 words starting at a 2-byte aligned address: N+1 aligned loads and a funnel shift
// each. Reads up to 4 bytes past the last word; buffers keep slack for it.
template <int N>
TANDEM_HD void ld32_run(const uint8_t* p, uint32_t (&out)[N]) {
  // Pointer arithmetic, not an integer round trip: shared-memory loads stay LDS.
  const uint32_t mis = uint32_t(reinterpret_cast<uintptr_t>(p)) & 3;
  const uint32_t* q = reinterpret_cast<const uint32_t*>(p - mis);
  uint32_t w[N + 1];
#pragma unroll
  for (int i = 0; i <= N; ++i) w[i] = q[i];
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = funnel_r(w[i], w[i + 1], mis * 8);
}

TANDEM_HD float f16_bits(uint32_t h) {
  __half_raw r;
  r.x = uint16_t(h);
  return __half2float(__half(r));
}

// Byte B of w as a float, through the exponent trick (I2F runs at a quarter of the FMA rate):
// 0x4B0000bb is 2^23 + bb exactly.
template <int B>
TANDEM_HD float byte_u(uint32_t w) {
  return as_float(prmt(w, 0x4B000000u, 0x7440u | B)) - 8388608.0f;
}
// Byte B minus `bias` (exactly representable small integers).
template <int B>
TANDEM_HD float byte_minus(uint32_t w, float magic_plus_bias) {
  return as_float(prmt(w, 0x4B000000u, 0x7440u | B)) - magic_plus_bias;
}
// Byte B of w read as int8 (w must be pre-xored with 0x80808080 by the caller).
template <int B>
TANDEM_HD float byte_s(uint32_t w_xor80) {
  return byte_minus<B>(w_xor80, 8388736.0f);  // 2^23 + 128
}

// Four grid bytes w (every byte < 128) with their signs, through one half of a selector pair from
// Tables::sgn: __byte_perm picks each byte from 128 + g or 128 − g (no carries or borrows between
// bytes), so the result is the signed values biased by 128.
TANDEM_HD uint32_t signed4_biased(uint32_t w, uint32_t sel16) {
  return prmt(w | 0x80808080u, 0x80808080u - w, sel16);
}
// 8 grid bytes (lo = elements 0–3, hi = 4–7) with their signs (selectors sel & 0xFFFF, sel >> 16);
// the exponent trick takes the 128 off again.
TANDEM_HD void grid8_signed(uint32_t lo, uint32_t hi, uint32_t sel, float* q) {
  const uint32_t a = signed4_biased(lo, sel & 0xFFFF), b = signed4_biased(hi, sel >> 16);
  q[0] = byte_s<0>(a), q[1] = byte_s<1>(a), q[2] = byte_s<2>(a), q[3] = byte_s<3>(a);
  q[4] = byte_s<0>(b), q[5] = byte_s<1>(b), q[6] = byte_s<2>(b), q[7] = byte_s<3>(b);
}

// The 8 4-bit codes of w through the 16-entry table: q[j] from the low nibble of byte j, q[8+j] from
// its high nibble, j < 4 (the nibbles shifted to byte offsets four at a time).
TANDEM_HD void nibbles8(uint32_t w, const float* lut, float* q) {
  const uint32_t lo = (w << 2) & 0x3C3C3C3Cu, hi = (w >> 2) & 0x3C3C3C3Cu;
  q[0] = atf(lut, prmt(lo, 0, 0x4440)), q[1] = atf(lut, prmt(lo, 0, 0x4441));
  q[2] = atf(lut, prmt(lo, 0, 0x4442)), q[3] = atf(lut, prmt(lo, 0, 0x4443));
  q[8] = atf(lut, prmt(hi, 0, 0x4440)), q[9] = atf(lut, prmt(hi, 0, 0x4441));
  q[10] = atf(lut, prmt(hi, 0, 0x4442)), q[11] = atf(lut, prmt(hi, 0, 0x4443));
}

// ksigns_iq2xs[i]: the 7 stored sign bits plus an eighth that makes the count even.
TANDEM_HD uint32_t ksigns(uint32_t s7) { return s7 | ((popc(s7) & 1u) << 7); }

// Groups in element order: half P holds groups 2P and 2P+1.
struct InOrder {
  __host__ __device__ static constexpr int off(int P, int g) { return 16 * P + 8 * g; }
};
// IQ4 bytes hold elements j (low nibble) and j+16 (high nibble): half P holds groups P and P+2.
struct NibbleSplit16 {
  __host__ __device__ static constexpr int off(int P, int g) { return 8 * P + 16 * g; }
};

// ---- lookup tables in shared memory ----

struct Tables {
  const uint64_t* g64 = nullptr;
  const uint32_t* g32 = nullptr;
  const uint32_t* sgn = nullptr;  // sign pattern → two __byte_perm selectors (elements 0–3 | 4–7 << 16)
  const float* lut = nullptr;  // 4-bit code → value
  const float* e4 = nullptr;   // UE4M3 byte → 0.5·value (NVFP4 block scales)
};

template <class Q>
__host__ __device__ constexpr int grid_bytes16() {
  return (Q::kGridBytes + 15) / 16 * 16;
}
template <class Q>
__host__ __device__ constexpr int table_bytes() {
  return grid_bytes16<Q>() + (Q::kSigns ? 4 << Q::kSigns : 0) + (Q::kLut ? 16 * 4 : 0) + (Q::kLut == 2 ? 256 * 4 : 0);
}

// Fills the tables at `smem` (table_bytes<Q>() bytes) as thread `tid` of `nt`; the grid comes from
// global memory.
template <class Q>
TANDEM_HD Tables fill_tables(unsigned char* smem, const void* grid, int tid, int nt) {
  Tables t;
  if constexpr (Q::kGridBytes > 0) {
    const uint4* src = static_cast<const uint4*>(grid);
    uint4* dst = reinterpret_cast<uint4*>(smem);
    for (int i = tid; i < Q::kGridBytes / 16; i += nt) dst[i] = src[i];
    t.g64 = reinterpret_cast<const uint64_t*>(smem);
    t.g32 = reinterpret_cast<const uint32_t*>(smem);
  }
  if constexpr (Q::kSigns != 0) {
    uint32_t* sg = reinterpret_cast<uint32_t*>(smem + grid_bytes16<Q>());
    for (int i = tid; i < (1 << Q::kSigns); i += nt) {
      const uint32_t s8 = Q::kSigns == 7 ? ksigns(uint32_t(i)) : uint32_t(i);
      uint32_t sel = 0;
      for (int j = 0; j < 8; ++j) sel |= uint32_t((j & 3) + 4 * ((s8 >> j) & 1)) << (4 * (j & 3) + 16 * (j >> 2));
      sg[i] = sel;
    }
    t.sgn = sg;
  }
  if constexpr (Q::kLut != 0) {
    // kvalues_iq4nl and kvalues_fp4 (2×E2M1) as int8, four to a word (no array: it would live in
    // local memory).
    const bool iq4 = Q::kLut == 1;
    float* lut = reinterpret_cast<float*>(smem + grid_bytes16<Q>() + (Q::kSigns ? 4 << Q::kSigns : 0));
    for (int i = tid; i < 16; i += nt) {
      const uint32_t w = i < 4    ? (iq4 ? 0xBFAD9881u : 0x03020100u)
                         : i < 8  ? (iq4 ? 0xF6EADDCFu : 0x0C080604u)
                         : i < 12 ? (iq4 ? 0x26190D01u : 0xFDFEFF00u)
                                  : (iq4 ? 0x71594535u : 0xF4F8FAFCu);
      lut[i] = float(int8_t(uint8_t(w >> (8 * (i & 3)))));
    }
    t.lut = lut;
    if constexpr (Q::kLut == 2) {
      float* e4 = lut + 16;
      for (int i = tid; i < 256; i += nt) e4[i] = ue4m3_half(uint32_t(i));
      t.e4 = e4;
    }
  }
  return t;
}

// All threads of the block call it (it synchronizes).
template <class Q>
__device__ __forceinline__ Tables init_tables(unsigned char* smem, const void* grid) {
  const Tables t = fill_tables<Q>(smem, grid, threadIdx.x, blockDim.x);
  __syncthreads();
  return t;
}

// ---- the GEMV ----
// A block of kWarps warps; each warp owns R consecutive weight rows. A row is cut into chunks of
// 1024 elements = 32 units of 32: lane l takes unit l of every chunk, so lane l sums elements
// 32·(32c + l) + (0..31) over the chunks c in order, group by group (8 fused multiply-adds, then one
// for the group scale), and the warp adds its lanes with an xor butterfly. None of that depends on
// the number of activation rows, which only decides how many accumulators each lane keeps.
// Each warp streams its rows through a private ring of S shared-memory stages (cp.async of aligned
// 16-byte pieces, so any block size and row alignment is read coalesced); the activations of the
// current x chunk sit in shared memory, each 32-element unit padded to 36 floats so that the lanes'
// 16-byte reads are free of bank conflicts.

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChunkElems = 1024;
constexpr int kUnitStride = 36;  // floats per 32-element unit of x in shared memory
constexpr int kMaxRows = 16;     // activation rows per GEMV launch (a slab, for prefill)
constexpr int kXFloats = 16384;  // shared activations per block: NR rows × (kXFloats / NR) elements

template <class Q>
__host__ __device__ constexpr int64_t chunk_bytes() {
  return int64_t(kChunkElems / Q::kElems) * Q::kBytes;
}
template <class Q>
__host__ __device__ constexpr int stage_bytes() {
  return int((chunk_bytes<Q>() + 32 + 15) / 16 * 16);
}
// Rows per warp: at one activation row four weight rows share each activation load; with more rows
// two keep the accumulators in registers. Stages: three keep more bytes in flight, two for wide
// blocks to bound shared memory.
template <class Q, int NR>
__host__ __device__ constexpr int rows_per_warp() {
  return NR == 1 ? 4 : 2;
}
template <class Q, int NR>
__host__ __device__ constexpr int stages() {
  return kWarps * 3 * rows_per_warp<Q, NR>() * stage_bytes<Q>() <= 64 * 1024 ? 3 : 2;
}
inline int64_t x_chunk(int nr_max, int64_t k) {
  const int64_t cap = kXFloats / nr_max;
  return std::min<int64_t>(cap, (k + kChunkElems - 1) / kChunkElems * kChunkElems);
}
template <class Q, int NR>
inline size_t gemv_smem_bytes(int64_t xc) {
  return size_t(table_bytes<Q>()) + size_t(NR) * size_t(xc / 32 * kUnitStride) * 4 +
         size_t(kWarps) * stages<Q, NR>() * rows_per_warp<Q, NR>() * stage_bytes<Q>();
}

template <class Q>
__device__ __forceinline__ float dot_group(const float* q, float s, const float4& a, const float4& b, float acc) {
  float t = q[0] * a.x;
  t = fmaf(q[1], a.y, t);
  t = fmaf(q[2], a.z, t);
  t = fmaf(q[3], a.w, t);
  t = fmaf(q[4], b.x, t);
  t = fmaf(q[5], b.y, t);
  t = fmaf(q[6], b.z, t);
  t = fmaf(q[7], b.w, t);
  if constexpr (Q::kExact) return acc + t;
  else return fmaf(s, t, acc);
}

struct XPair {
  float4 a0, b0, a1, b1;  // group 0 (elements 0–3, 4–7), group 1
};
template <class Q, int P>
__device__ __forceinline__ XPair load_x(const float* xu) {
  XPair v;
  v.a0 = *reinterpret_cast<const float4*>(xu + Q::off(P, 0));
  v.b0 = *reinterpret_cast<const float4*>(xu + Q::off(P, 0) + 4);
  v.a1 = *reinterpret_cast<const float4*>(xu + Q::off(P, 1));
  v.b1 = *reinterpret_cast<const float4*>(xu + Q::off(P, 1) + 4);
  return v;
}

template <class Q, int NR, int R, int P>
__device__ __forceinline__ void half_dot(const typename Q::Unit (&un)[R], const Tables& tab, const float* xu,
                                         int x_stride, int nr, float (&acc)[NR][R]) {
  if constexpr (NR == 1) {  // decode and use one row at a time: fewer live registers
    const XPair x = load_x<Q, P>(xu);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      float q[16], s[2];
      Q::template half<P>(un[i], tab, q, s);
      acc[0][i] = dot_group<Q>(q, s[0], x.a0, x.b0, acc[0][i]);
      acc[0][i] = dot_group<Q>(q + 8, s[1], x.a1, x.b1, acc[0][i]);
    }
  } else {  // decode every row once, then stream the activation rows past them
    float q[R][16], s[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) Q::template half<P>(un[i], tab, q[i], s[i]);
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      if (r >= nr) break;
      const XPair x = load_x<Q, P>(xu + r * x_stride);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        acc[r][i] = dot_group<Q>(q[i], s[i][0], x.a0, x.b0, acc[r][i]);
        acc[r][i] = dot_group<Q>(q[i] + 8, s[i][1], x.a1, x.b1, acc[r][i]);
      }
    }
  }
}

// One launch: blockIdx.x (striding by gridDim.x) picks row groups of kWarps·R weight rows, blockIdx.y
// (striding by gridDim.y) an item: a slab of up to NR activation rows (matmul) or one gathered row
// (ids non-null, NR = 1). A block takes each of its items through all of its row groups, so the
// lookup tables are filled once per block and, when one activation chunk holds the whole row
// (xc ≥ k), x is loaded once per item. Per row group, a warp's rows stream as one sequence of
// 1024-element chunks through its ring, S − 1 chunks ahead, across the activation chunks (xc
// elements: a block barrier and a reload of x every xc / 1024 chunks). A row group's first chunks are
// requested before its item's activations are loaded and, for matmul's first, before the lookup
// tables, so their latencies overlap (and, launched programmatically, the previous kernel's tail).
// Each output is one warp's sum in one order, whatever gridDim.
template <class Q, int NR>
__global__ void __launch_bounds__(kThreads) gemv_kernel(CudaMatmulArgs p, int64_t xc) {
  constexpr int R = rows_per_warp<Q, NR>(), S = stages<Q, NR>();
  constexpr int64_t CB = chunk_bytes<Q>();
  constexpr int SB = stage_bytes<Q>();
  constexpr int UPB = Q::kElems / 32;  // units per block
  extern __shared__ __align__(16) unsigned char smem[];
  float* xs = reinterpret_cast<float*>(smem + table_bytes<Q>());
  const int x_stride = int(xc / 32) * kUnitStride;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  unsigned char* ring = smem + table_bytes<Q>() + size_t(NR) * size_t(x_stride) * 4 + size_t(warp) * S * R * SB;

  const int units = int(p.k / 32);
  const int64_t row_bytes = p.row_bytes;
  const int64_t items = p.ids ? p.n : (p.n + NR - 1) / NR;
  const int64_t n_rg = (p.m + int64_t(kWarps) * R - 1) / (int64_t(kWarps) * R);  // row groups
  const int nch = int((p.k + kChunkElems - 1) / kChunkElems);  // chunks per row
  const int cpx = int(xc / kChunkElems);                        // chunks per activation chunk
  const bool whole_x = cpx >= nch;                              // x loaded once per item

  // The warp's rows in the current row group: o0 .. o0 + R − 1 of an expert's (or the) weights w,
  // rows past m repeating the last.
  int64_t o0 = (int64_t(blockIdx.x) * kWarps + warp) * R;
  const uint8_t* rows[R];
  auto rows_of = [&](const uint8_t* w) {
#pragma unroll
    for (int i = 0; i < R; ++i) rows[i] = w + min(o0 + i, p.m - 1) * row_bytes;
  };
  // Chunk c of row i: CB bytes from rows[i] + c·CB (fewer at the row's end), copied as the aligned
  // 16-byte pieces that cover it; the chunk starts `mis` bytes into its slot.
  auto misalign = [&](int i, int c) {
    return int((uint32_t(reinterpret_cast<uintptr_t>(rows[i])) + uint32_t(c) * uint32_t(CB)) & 15);
  };
  auto issue = [&](int c, int slot) {
    const int64_t b0 = int64_t(c) * CB;
    const int len = int(min(CB, row_bytes - b0));
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int mis = misalign(i, c);
      const uint8_t* lo = rows[i] + b0 - mis;
      const int pieces = (mis + len + 15) >> 4;
      unsigned char* dst = ring + (slot * R + i) * SB;
      for (int q = lane; q < pieces; q += 32) cp_async16(dst + 16 * q, lo + 16 * q);
    }
  };
  auto prologue = [&] {
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < nch) issue(s, s);
      cp_async_commit();
    }
  };
  // Activations xbeg .. xbeg + xlen − 1 of the item's nr rows into shared memory (all threads).
  auto load_xs = [&](const float* x, int nr, int64_t xbeg, int64_t xlen) {
    __syncthreads();  // the previous activations are no longer read
    for (int r = 0; r < nr; ++r)
      for (int e = threadIdx.x; e < int(xlen); e += kThreads)
        xs[r * x_stride + (e >> 5) * kUnitStride + (e & 31)] = x[r * p.k + xbeg + e];
    __syncthreads();
  };

  // Weights and lookup grids are never written by a pass: they may be read before pdl_wait(); the
  // expert ids, x and y only after it.
  int64_t item = blockIdx.y;
  bool prefetched = false;
  if (!p.ids && item < items && o0 < p.m) {
    rows_of(p.w);
    prologue(), prefetched = true;
  }
  const Tables tab = init_tables<Q>(smem, p.grid);
  cuda::pdl_wait();
  cuda::pdl_trigger();  // after the wait: one kernel ahead at most, not a chain of waiting grids

  for (; item < items; item += gridDim.y) {
    const float* x;
    float* y;
    int nr;
    if (p.ids) {
      nr = 1;
      x = p.x + (item / p.per_x) * p.k;
      y = p.y + item * p.m;
    } else {
      nr = int(min(int64_t(NR), p.n - item * NR));
      x = p.x + item * NR * p.k;
      y = p.y + item * NR * p.m;
    }
    // The item's weights and output scale. An expert id out of range (the same for the whole block)
    // leaves the item's rows NaN, and every warp skips its barriers alike.
    const uint8_t* w = p.w;
    float scale = p.scale;
    bool valid = true;
    if (p.ids) {
      const int32_t e = p.ids[item];
      valid = e >= 0 && e < p.n_experts;
      if (valid) {
        w += int64_t(e) * p.expert_bytes;
        if (p.expert_scale) scale = p.expert_scale[e];
      }
    }
    bool x_loaded = false;
    for (int64_t rg = blockIdx.x; rg < n_rg; rg += gridDim.x) {
      o0 = (rg * kWarps + warp) * R;
      const bool active = o0 < p.m;
      if (!valid) {
        if (active && lane < R && o0 + lane < p.m) y[o0 + lane] = __int_as_float(0x7fc00000);
        continue;
      }
      if (!prefetched && active) {
        rows_of(w);
        prologue();
      }
      prefetched = false;
      if (whole_x && !x_loaded) {
        load_xs(x, nr, 0, min(xc, p.k));
        x_loaded = true;
      }
      float acc[NR][R];
#pragma unroll
      for (int r = 0; r < NR; ++r)
#pragma unroll
        for (int i = 0; i < R; ++i) acc[r][i] = 0.0f;

      int slot = 0, refill = S - 1;  // the slots of chunks c and c + S − 1
      int cx = whole_x ? 0 : cpx;    // chunk c's index within its activation chunk (no division in the loop)
      for (int c = 0; c < nch; ++c) {
        if (cx == cpx) {
          cx = 0;
          const int64_t xbeg = int64_t(c) * kChunkElems;
          load_xs(x, nr, xbeg, min(xc, p.k - xbeg));
        }
        const int ci = cx++;
        if (!active) continue;
        if (c + S - 1 < nch) issue(c + S - 1, refill);
        cp_async_commit();
        cp_async_wait<S - 1>();
        __syncwarp();
        const int u = c * 32 + lane;
        if (u < units) {
          typename Q::Unit un[R];
#pragma unroll
          for (int i = 0; i < R; ++i)
            un[i] = Q::load(ring + (slot * R + i) * SB + misalign(i, c) + (lane / UPB) * Q::kBytes, lane % UPB);
          const float* xu = xs + (ci * 32 + lane) * kUnitStride;
          half_dot<Q, NR, R, 0>(un, tab, xu, x_stride, nr, acc);
          half_dot<Q, NR, R, 1>(un, tab, xu, x_stride, nr, acc);
        }
        __syncwarp();  // the slot is refilled next iteration (or by the next row group's prologue)
        slot = slot + 1 == S ? 0 : slot + 1;
        refill = refill + 1 == S ? 0 : refill + 1;
      }
      if (active) {
#pragma unroll
        for (int r = 0; r < NR; ++r) {
          if (r >= nr) break;
#pragma unroll
          for (int i = 0; i < R; ++i) {
            const float s = cuda::warp_sum(acc[r][i]);
            if (lane == 0 && o0 + i < p.m) store_out(y + r * p.m + o0 + i, s * scale, p.epilogue);
          }
        }
      }
    }
  }
}

// ---- rows: dequantize whole rows; one thread per 32-element unit ----

template <class Q, int P>
TANDEM_HD void rows_half(const typename Q::Unit& un, const Tables& tab, float scale, float* out) {
  float q[16], s[2];
  Q::template half<P>(un, tab, q, s);
#pragma unroll
  for (int g = 0; g < 2; ++g)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float v = Q::kExact ? q[8 * g + j] : s[g] * q[8 * g + j];
      if (scale != 1.0f) v *= scale;
      out[Q::off(P, g) + j] = v;
    }
}

template <class Q>
__global__ void __launch_bounds__(256) rows_kernel(CudaRowsArgs p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const Tables tab = init_tables<Q>(smem, p.grid);
  constexpr int UPB = Q::kElems / 32;
  const int64_t units = p.k / 32, total = p.n * units;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = t / units, u = t % units;
    const int64_t src = p.by_id ? int64_t(p.ids[row]) : p.row0 + row;
    const uint8_t* blk = p.w + src * p.row_bytes + (u / UPB) * Q::kBytes;
    const typename Q::Unit un = Q::load(blk, int(u % UPB));
    float* out = p.out + row * p.k + u * 32;
    rows_half<Q, 0>(un, tab, p.scale, out);
    rows_half<Q, 1>(un, tab, p.scale, out);
  }
}

// ---- host launchers ----

// Blocks a many-item gather aims at: 4 blocks per SM on a 132-SM H200. A verify pass gathers
// tokens × experts items; with one row group per block its thousands of small blocks would be
// dominated by fixed costs (tables, the first weight round trip, loading x).
constexpr int64_t kGatherBlocks = 528;

// rg_per_block row groups per block (gridDim.x = n_rg / rg_per_block, rounded up); matmul keeps one.
template <class Q, int NR>
void launch_gemv(const CudaMatmulArgs& a, int64_t items, cudaStream_t s, int64_t rg_per_block = 1) {
  constexpr int R = rows_per_warp<Q, NR>();
  const int64_t xc = x_chunk(NR, a.k);
  const size_t smem = gemv_smem_bytes<Q, NR>(xc);
  static bool configured = false;  // the engine thread loads and runs; the attribute is per function
  if (!configured) {
    cuda::check_cuda(cudaFuncSetAttribute(gemv_kernel<Q, NR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(gemv_smem_bytes<Q, NR>(kXFloats / NR))),
                     "gguf gemv: shared memory attribute");
    configured = true;
  }
  const int64_t n_rg = cuda::ceil_div(a.m, int64_t(kWarps) * R);
  const dim3 grid(unsigned(cuda::ceil_div(n_rg, rg_per_block)), unsigned(std::min<int64_t>(items, 65535)));
  cuda::launch(gemv_kernel<Q, NR>, grid, dim3(kThreads), smem, s, "gguf gemv", a, xc);
}

template <class Q>
void matmul_impl(const CudaMatmulArgs& a, cudaStream_t s) {
  if (a.n == 0 || a.m == 0) return;
  check(a.k % 32 == 0 && a.row_bytes == a.k / Q::kElems * Q::kBytes, "gguf (cuda): bad row geometry");
  if (a.n == 1) launch_gemv<Q, 1>(a, 1, s);
  else if (a.n <= 4) launch_gemv<Q, 4>(a, 1, s);
  else launch_gemv<Q, kMaxRows>(a, (a.n + kMaxRows - 1) / kMaxRows, s);
}

// Gather: enough row groups per block that n_rg · items / rg_per_block ≈ kGatherBlocks (one when
// fewer items than that fill the machine).
template <class Q>
void gather_impl(const CudaMatmulArgs& a, cudaStream_t s) {
  if (a.n == 0 || a.m == 0) return;
  const int64_t n_rg = cuda::ceil_div(a.m, int64_t(kWarps) * rows_per_warp<Q, 1>());
  const int64_t rg_per_block = std::max<int64_t>(1, std::min<int64_t>(n_rg, n_rg * a.n / kGatherBlocks));
  launch_gemv<Q, 1>(a, a.n, s, rg_per_block);
}

template <class Q>
void rows_impl(const CudaRowsArgs& a, cudaStream_t s) {
  if (a.n == 0 || a.k == 0) return;
  const int64_t total = a.n * (a.k / 32);
  const unsigned blocks = unsigned(std::min<int64_t>(cuda::ceil_div(total, 256), 4096));
  rows_kernel<Q><<<blocks, 256, table_bytes<Q>(), s>>>(a);
  cuda::check_launch("gguf rows");
}

}  // namespace tandem::gguf::kcuda
