// A decode/verify GEMV for 1–16 activation rows on mma.sync m16n8k16 (issue #17) that reads NVFP4
// or Q8_0 weights repacked at load time into fragment order, so that each lane streams its A
// fragments straight from global memory into registers (coalesced 16-byte loads, no shared memory for
// weights, several groups in flight per warp). GgufCudaTensor (gguf_format_cuda.cu) keeps this copy
// beside the file's blocks for dense matrices and runs every pass of 1..16 rows here.
// Owner: callers own every pointer (repacked weights, workspace). Thread: one caller per stream.
// Sync: launches are queued; nothing here synchronizes.
//
// Repacked layout, NVFP4 (repack_nvfp4_tc, host). Rows are padded to 16-row tiles, k to slices of
// kTcSliceSteps k16 steps (1024 elements), with zero weights. For tile t and k16 step st, lane
// (g = lane / 4, q = lane % 4) holds one 32-bit word of the eight nibbles its A fragment wants
// (rows g, g + 8; k = 2q, 2q + 1, 2q + 8, 2q + 9), bits placed so that tc_unpack turns them into the
// four half2 registers with a mask and a shift or two: register r's E2M1 code e (sign bit 3, magnitude
// bits 2..0) becomes the fp16 bits sign→15, magnitude→11..9, i.e. exactly e·2^−14. Four steps of a lane
// are one 16-byte word: nib[((t·steps/4 + st/4)·32 + lane)·16 + 4·(st % 4)]. Scales: per tile and
// group of 8 steps, one 16-byte record per g holding, for steps 2i, 2i + 1, the UE4M3 bytes of rows g
// and g + 8 (bit 7 cleared, the NaN code 0x7F as 0), so one cvt.e4m3x2 gives the half2 (s_g, s_g+8).
//
// Repacked layout, Q8_0 (repack_q8_0_tc): the same tiles, slices and fragment elements, one byte each
// (the int8 with its top bit flipped, q + 128; padding 0x80), byte 2r + h of a lane-step's 8 bytes
// being register r's half h; two steps (one k32 block) of a lane are one 16-byte word:
// nib[((t·steps/2 + st/2)·32 + lane)·16 + 8·(st % 2)]. tc_unpack_q8 puts each byte under the fp16
// exponent of 1024 (1024 + q + 128, exact) and one HSUB2 of 1152 leaves q. Scales: per tile and group
// of 8 steps, one 16-byte record per g holding, for k32 block i of the group, the fp16 d of rows g and
// g + 8 (a half2; padding 0).
//
// Numbers. NVFP4: weight = E2M1·UE4M3 has at most 6 significant bits and lies in [2^−10, 2688]:
// e·2^−14·s is exact in fp16 (one HMUL2 per register). Q8_0: q is exact in fp16 and its d is applied
// in fp32 to a fresh fragment per k32 block, in block order. Each 128-element group of an activation
// row is scaled by a power of two into [2^14, 2^15) and split x' = hi + lo in fp16 (as mma_cuda.cuh).
// Per group the tensor cores sum w·hi + w·lo over 8 steps into a fresh fp32 fragment t, and the lane
// folds it in as acc = fma(t, 2^(14 − e)·c, acc) (c: 2^14 for NVFP4's e·2^−14 codes, 1 for Q8_0),
// groups in k order. A warp owns one (tile, slice): its acc is the slice's partial for every output it
// holds. Partials go to a workspace; the last warp of a tile to finish (a counter per tile) adds the
// slices in slice order. Every output's bits depend on its weight row, its activation row and k alone:
// not on n, not on which warp or block ran which slice.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "formats/gguf/kernels_cuda.cuh"
#include "tandem/cuda/tensor_core.cuh"

namespace tandem::gguf::kcuda {

constexpr int kTcWarps = 8;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr int kTcSliceSteps = 64;  // k16 steps per slice: one warp's run, one reduction term
constexpr int kTcGroupSteps = 8;   // steps per activation scale and per register stage
constexpr int kTcMaxRows = 16;     // activation rows per launch (two n8 tiles)

enum class TcType { NVFP4, Q8_0 };

// The weight types with a repacked copy: NVFP4 and Q8_0 (a GGUF type name), else null.
inline const TcType* tc_type_of(const std::string& name) {
  static const TcType nvfp4 = TcType::NVFP4, q8 = TcType::Q8_0;
  return name == "NVFP4" ? &nvfp4 : name == "Q8_0" ? &q8 : nullptr;
}

// Geometry of a repacked [m, k] weight.
struct TcShape {
  TcType type = TcType::NVFP4;
  int64_t m = 0, k = 0;
  int64_t tiles = 0, slices = 0, steps = 0;  // steps: padded k / 16
  TANDEM_HD size_t lane_step_bytes() const { return type == TcType::NVFP4 ? 4 : 8; }
  TANDEM_HD size_t nib_bytes() const { return size_t(tiles * steps) * 32 * lane_step_bytes(); }
  size_t sc_bytes() const { return size_t(tiles * (steps / kTcGroupSteps)) * 128; }
  size_t bytes() const { return nib_bytes() + sc_bytes(); }
  // Workspace: slices × 16 rows × (16·tiles) fp32 partials (any contents), and a counter per tile
  // (zero before the first launch; every launch leaves them zero).
  size_t workspace_bytes() const { return size_t(slices * kTcMaxRows * tiles * 16) * 4; }
  size_t counters() const { return size_t(tiles); }
};
inline TcShape tc_shape(TcType type, int64_t m, int64_t k) {
  TcShape s;
  s.type = type;
  s.m = m, s.k = k;
  s.tiles = (m + 15) / 16;
  s.slices = (k + 16 * kTcSliceSteps - 1) / (16 * kTcSliceSteps);
  s.steps = s.slices * kTcSliceSteps;
  return s;
}

// Fragment element (register r, half h) of lane `lane` at step st of tile t: its weight row and k.
TANDEM_HD int64_t tc_row(int64_t t, int lane, int r) { return 16 * t + (lane >> 2) + 8 * (r & 1); }
TANDEM_HD int64_t tc_col(int64_t st, int lane, int r, int h) { return 16 * st + 2 * (lane & 3) + h + 8 * (r >> 1); }

// Where repacked register r (0..3: rows g, g + 8, g, g + 8 at k pairs 0, 0, 8, 8) half h keeps an E2M1
// code's sign bit and the lowest of its three magnitude bits.
TANDEM_HD int tc_sign_bit(int r, int h) { return (r == 0 ? 15 : r == 1 ? 12 : r == 2 ? 14 : 13) + 16 * h; }
TANDEM_HD int tc_mag_bit(int r, int h) { return (r == 0 ? 9 : r == 1 ? 6 : r == 2 ? 3 : 0) + 16 * h; }

// One NVFP4 lane-step word to its four A registers as e·2^−14 in fp16 (before the scale).
TANDEM_HD void tc_unpack(uint32_t v, uint32_t (&a)[4]) {
  a[0] = v & 0x8E008E00u;
  a[1] = (v << 3) & 0x8E008E00u;
  a[2] = ((v << 1) & 0x80008000u) | ((v << 6) & 0x0E000E00u);
  a[3] = ((v << 2) & 0x80008000u) | ((v << 9) & 0x0E000E00u);
}

// One Q8_0 lane-step (two words) to its four A registers as fp16 1024 + (q + 128): register r is
// bytes 2r, 2r + 1 under the exponent byte 0x64; kTcQ8Bias2 (1152 twice) subtracted leaves q.
constexpr uint32_t kTcQ8Bias2 = 0x64806480u;  // half2 (1152, 1152)
TANDEM_HD void tc_unpack_q8(uint32_t w0, uint32_t w1, uint32_t (&a)[4]) {
#ifdef __CUDA_ARCH__
  a[0] = __byte_perm(w0, 0x64646464u, 0x4140);
  a[1] = __byte_perm(w0, 0x64646464u, 0x4342);
  a[2] = __byte_perm(w1, 0x64646464u, 0x4140);
  a[3] = __byte_perm(w1, 0x64646464u, 0x4342);
#else
  auto two = [](uint32_t w, int b) { return 0x64006400u | ((w >> (8 * b)) & 0xFFu) | (((w >> (8 * b + 8)) & 0xFFu) << 16); };
  a[0] = two(w0, 0), a[1] = two(w0, 2), a[2] = two(w1, 0), a[3] = two(w1, 2);
#endif
}

// The UE4M3 byte as the kernel's cvt.e4m3x2 reads it: bit 7 cleared, the NaN code 0x7F as zero, so
// that its e4m3 value is twice ue4m3_half of the original byte.
inline uint8_t tc_scale_byte(uint8_t b) {
  const uint8_t v = b & 0x7F;
  return v == 0x7F ? 0 : v;
}

// Calls f(t, st, lane) for every lane-step of the repacked layout, and s(t, oct, g, record) for every
// 16-byte scale record; tiles are split over the host's threads (a tile's bytes are its own), so that
// loading Bolt's ~5 G repacked elements takes seconds, not tens of them.
template <class F, class S>
void tc_for_each(const TcShape& s, uint8_t* out, F&& f, S&& sc) {
  const int64_t octs = s.steps / kTcGroupSteps;
  auto tiles = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t st = 0; st < s.steps; ++st)
        for (int lane = 0; lane < 32; ++lane) f(t, st, lane);
      for (int64_t o = 0; o < octs; ++o)
        for (int g = 0; g < 8; ++g) sc(t, o, g, out + s.nib_bytes() + ((t * octs + o) * 8 + g) * 16);
    }
  };
  const int64_t workers = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), (s.tiles + 63) / 64);
  std::vector<std::thread> pool;
  for (int64_t w = 1; w < workers; ++w) pool.emplace_back(tiles, s.tiles * w / workers, s.tiles * (w + 1) / workers);
  tiles(0, s.tiles / workers);
  for (std::thread& th : pool) th.join();
}

// NVFP4 rows (GGUF blocks of 36 bytes, k / 64 per row) into the layout above: nib bytes, then sc.
inline std::vector<uint8_t> repack_nvfp4_tc(const uint8_t* blocks, int64_t m, int64_t k, const std::string& name) {
  check(k > 0 && k % 64 == 0 && m > 0, "gguf tc gemv: tensor '", name,
        "' needs k a positive multiple of 64 and m > 0, found [", m, ", ", k, "]");
  const TcShape s = tc_shape(TcType::NVFP4, m, k);
  const int64_t row_bytes = k / 64 * 36, real_steps = k / 16;
  std::vector<uint8_t> out(s.bytes(), 0);
  auto code = [&](int64_t row, int64_t kk) -> uint32_t {  // the E2M1 nibble of element (row, kk)
    if (row >= m || kk >= k) return 0;
    const uint8_t* b = blocks + row * row_bytes + (kk / 64) * 36;
    const int e = int(kk % 64), sub = e / 16, j = e % 16;
    const uint8_t byte = b[4 + 8 * sub + (j % 8)];
    return j < 8 ? byte & 0xF : byte >> 4;
  };
  auto scale = [&](int64_t row, int64_t st) -> uint8_t {
    if (row >= m || st >= real_steps) return 0;
    return tc_scale_byte(blocks[row * row_bytes + (st / 4) * 36 + st % 4]);
  };
  tc_for_each(
      s, out.data(),
      [&](int64_t t, int64_t st, int lane) {
        uint32_t w = 0;
        for (int r = 0; r < 4; ++r)
          for (int h = 0; h < 2; ++h) {
            const uint32_t c = code(tc_row(t, lane, r), tc_col(st, lane, r, h));
            w |= ((c >> 3) << tc_sign_bit(r, h)) | ((c & 7) << tc_mag_bit(r, h));
          }
        std::memcpy(out.data() + ((t * (s.steps / 4) + st / 4) * 32 + lane) * 16 + 4 * (st % 4), &w, 4);
      },
      [&](int64_t t, int64_t o, int g, uint8_t* rec) {
        for (int i = 0; i < 8; ++i) {
          rec[2 * i] = scale(16 * t + g, 8 * o + i);
          rec[2 * i + 1] = scale(16 * t + g + 8, 8 * o + i);
        }
      });
  return out;
}

// Q8_0 rows (GGUF blocks of 34 bytes: fp16 d, 32 int8; k / 32 per row) into the layout above.
inline std::vector<uint8_t> repack_q8_0_tc(const uint8_t* blocks, int64_t m, int64_t k, const std::string& name) {
  check(k > 0 && k % 32 == 0 && m > 0, "gguf tc gemv: tensor '", name,
        "' needs k a positive multiple of 32 and m > 0, found [", m, ", ", k, "]");
  const TcShape s = tc_shape(TcType::Q8_0, m, k);
  const int64_t row_bytes = k / 32 * 34;
  std::vector<uint8_t> out(s.bytes(), 0);
  tc_for_each(
      s, out.data(),
      [&](int64_t t, int64_t st, int lane) {
        uint8_t* at = out.data() + ((t * (s.steps / 2) + st / 2) * 32 + lane) * 16 + 8 * (st % 2);
        for (int r = 0; r < 4; ++r)
          for (int h = 0; h < 2; ++h) {
            const int64_t row = tc_row(t, lane, r), kk = tc_col(st, lane, r, h);
            const uint8_t q = row < m && kk < k ? blocks[row * row_bytes + (kk / 32) * 34 + 2 + kk % 32] : 0;
            at[2 * r + h] = uint8_t(q ^ 0x80);
          }
      },
      [&](int64_t t, int64_t o, int g, uint8_t* rec) {
        for (int i = 0; i < 4; ++i)
          for (int hr = 0; hr < 2; ++hr) {
            const int64_t row = 16 * t + g + 8 * hr, blk = 4 * o + i;
            if (row < m && blk < k / 32) std::memcpy(rec + 4 * i + 2 * hr, blocks + row * row_bytes + blk * 34, 2);
          }
      });
  return out;
}

// The repack of `type`'s rows (GGUF blocks), m × k.
inline std::vector<uint8_t> repack_tc(TcType type, const uint8_t* blocks, int64_t m, int64_t k,
                                      const std::string& name) {
  return type == TcType::NVFP4 ? repack_nvfp4_tc(blocks, m, k, name) : repack_q8_0_tc(blocks, m, k, name);
}

struct TcArgs {
  const uint8_t* nib = nullptr;  // device: the repacked weight (nib, then sc)
  const uint8_t* sc = nullptr;
  int64_t m = 0, k = 0, steps = 0;
  int tiles = 0, slices = 0;
  const float* x = nullptr;  // device, n rows of k
  float* y = nullptr;        // device, n rows of m
  int n = 0;                 // 1..16
  float scale = 1.0f;
  int epilogue = 0;           // as CudaMatmulArgs
  unsigned* count = nullptr;  // workspace
  float* part = nullptr;
  int tiles_per_warp = 1;
};

__device__ __forceinline__ void e4m3x4_to_h2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(w));
}
__device__ __forceinline__ __half2 tc_h2(uint32_t u) {
  __half2 h;
  std::memcpy(&h, &u, 4);
  return h;
}
__device__ __forceinline__ uint32_t tc_u32(__half2 h) {
  uint32_t u;
  std::memcpy(&u, &h, 4);
  return u;
}
// a · (the low or high half of s, broadcast): exact (see Numbers).
__device__ __forceinline__ uint32_t tc_mul_lo(uint32_t a, uint32_t s) {
  return tc_u32(__hmul2(tc_h2(a), __low2half2(tc_h2(s))));
}
__device__ __forceinline__ uint32_t tc_mul_hi(uint32_t a, uint32_t s) {
  return tc_u32(__hmul2(tc_h2(a), __high2half2(tc_h2(s))));
}

__device__ __forceinline__ uint4 tc_ldg(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <int NT>
__device__ __forceinline__ void tc_zero(float (&a)[NT][4]) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) a[nt][0] = a[nt][1] = a[nt][2] = a[nt][3] = 0.0f;
}

// The weight side of the kernel, per type: kLoads 16-byte loads per lane and group of 8 steps (at
// `at`), kDepth groups in flight, and `group`, which multiplies one group into a fresh fragment tt
// (b(nt, st): the activation fragment of n8 tile nt at step st of the group).
struct TcNvfp4W {
  static constexpr int kLoads = 2, kDepth = 4;  // 1152 bytes a stage
  static constexpr float kCode = 16384.0f;      // codes are e·2^−14
  TANDEM_HD static const uint8_t* at(const uint8_t* nib, int64_t t, int64_t steps, int64_t oct, int lane, int i) {
    return nib + ((t * (steps / 4) + 2 * oct) * 32 + lane) * 16 + 512 * i;
  }
  template <int NT, class B>
  __device__ static void group(const uint4 (&w)[kLoads], uint4 s, B&& b, float (&tt)[NT][4]) {
    const uint32_t words[8] = {w[0].x, w[0].y, w[0].z, w[0].w, w[1].x, w[1].y, w[1].z, w[1].w};
    const uint32_t sw[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int i2 = 0; i2 < 4; ++i2) {
      uint32_t h[2];
      e4m3x4_to_h2(sw[i2], h[0], h[1]);
#pragma unroll
      for (int hs = 0; hs < 2; ++hs) {
        uint32_t a[4];
        tc_unpack(words[2 * i2 + hs], a);
        a[0] = tc_mul_lo(a[0], h[hs]), a[1] = tc_mul_hi(a[1], h[hs]);
        a[2] = tc_mul_lo(a[2], h[hs]), a[3] = tc_mul_hi(a[3], h[hs]);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint4 x = b(nt, 2 * i2 + hs);
          cuda::mma16816(tt[nt], a[0], a[1], a[2], a[3], x.x, x.y);
          cuda::mma16816(tt[nt], a[0], a[1], a[2], a[3], x.z, x.w);
        }
      }
    }
  }
};
struct TcQ8W {
  static constexpr int kLoads = 4, kDepth = 2;  // 2304 bytes a stage
  static constexpr float kCode = 1.0f;
  TANDEM_HD static const uint8_t* at(const uint8_t* nib, int64_t t, int64_t steps, int64_t oct, int lane, int i) {
    return nib + ((t * (steps / 2) + 4 * oct + i) * 32 + lane) * 16;
  }
  template <int NT, class B>
  __device__ static void group(const uint4 (&w)[kLoads], uint4 s, B&& b, float (&tt)[NT][4]) {
    const uint32_t sw[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int blk = 0; blk < 4; ++blk) {  // k32 blocks in k order, each into a fresh fragment
      float t2[NT][4];
      tc_zero(t2);
      const uint32_t words[4] = {w[blk].x, w[blk].y, w[blk].z, w[blk].w};
#pragma unroll
      for (int hs = 0; hs < 2; ++hs) {
        uint32_t a[4];
        tc_unpack_q8(words[2 * hs], words[2 * hs + 1], a);
#pragma unroll
        for (int r = 0; r < 4; ++r) a[r] = tc_u32(__hsub2(tc_h2(a[r]), tc_h2(kTcQ8Bias2)));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint4 x = b(nt, 2 * blk + hs);
          cuda::mma16816(t2[nt], a[0], a[1], a[2], a[3], x.x, x.y);
          cuda::mma16816(t2[nt], a[0], a[1], a[2], a[3], x.z, x.w);
        }
      }
      const __half2 d = tc_h2(sw[blk]);
      const float d0 = __low2float(d), d1 = __high2float(d);  // rows g and g + 8
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        tt[nt][0] = fmaf(t2[nt][0], d0, tt[nt][0]);
        tt[nt][1] = fmaf(t2[nt][1], d0, tt[nt][1]);
        tt[nt][2] = fmaf(t2[nt][2], d1, tt[nt][2]);
        tt[nt][3] = fmaf(t2[nt][3], d1, tt[nt][3]);
      }
    }
  }
};

// Shared memory: NT n8 tiles × 64 steps × 8 columns × 4 lanes of {hi b0, hi b1, lo b0, lo b1}, then
// the group factors 2^(14 − e)·c of 16 rows × 8 groups.
__host__ __device__ constexpr size_t tc_smem_bytes(int nt) {
  return size_t(nt) * kTcSliceSteps * 8 * 4 * 16 + 16 * 8 * 4;
}

// grid (x: groups of kTcWarps warps, y: slices). Warp w of block x, slice y owns tiles
// x·kTcWarps + w + i·gridDim.x·kTcWarps, i < tiles_per_warp, one after the other through one register
// pipeline of W::kDepth groups.
template <class W, int NT>
__global__ void __launch_bounds__(kTcThreads, 2) gemv_tc_kernel(TcArgs p) {
  constexpr int D = W::kDepth, L = W::kLoads, G = kTcGroupSteps, GPS = kTcSliceSteps / kTcGroupSteps;
  static_assert(GPS % D == 0, "a tile's slice ends on the last stage of a round");
  extern __shared__ __align__(16) unsigned char smem[];
  uint4* xs = reinterpret_cast<uint4*>(smem);
  float* es = reinterpret_cast<float*>(smem + size_t(NT) * kTcSliceSteps * 8 * 4 * 16);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  const int slice = blockIdx.y;
  const int nw = gridDim.x * kTcWarps, gw = blockIdx.x * kTcWarps + warp;
  const int F = p.tiles_per_warp * GPS;  // the warp's groups
  const int64_t octs = p.steps / G;
  auto tile_of = [&](int f) { return gw + (f / GPS) * nw; };
  auto load = [&](int f, uint4 (&wv)[L], uint4& s) {
    const int t = tile_of(f);
    if (f < F && t < p.tiles) {
      const int64_t oct = int64_t(slice) * GPS + f % GPS;
#pragma unroll
      for (int i = 0; i < L; ++i) wv[i] = tc_ldg(W::at(p.nib, t, p.steps, oct, lane, i));
      s = tc_ldg(p.sc + ((int64_t(t) * octs + oct) * 8 + g) * 16);
    }
  };
  // Weights are never written by a pass: the first stages are requested before the wait.
  uint4 rw[D][L], rs[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
#pragma unroll
    for (int i = 0; i < L; ++i) rw[d][i] = make_uint4(0, 0, 0, 0);
    rs[d] = make_uint4(0, 0, 0, 0);
    load(d, rw[d], rs[d]);
  }
  cuda::pdl_wait();
  cuda::pdl_trigger();

  // Stage the slice's activations: one warp per (row, 128-element group), four elements per lane
  // (one 16-byte load when x is aligned; k is a multiple of 32, so every row is then).
  const int nr = p.n;
  const bool vec = reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  for (int pr = warp; pr < nr * GPS; pr += kTcWarps) {
    const int r = pr / GPS, j = pr % GPS;
    const int64_t k0 = int64_t(slice) * kTcSliceSteps * 16 + j * 128 + lane * 4;
    float e4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (k0 < p.k) {
      const float* src = p.x + int64_t(r) * p.k + k0;
      if (vec) {
        const float4 v = *reinterpret_cast<const float4*>(src);
        e4[0] = v.x, e4[1] = v.y, e4[2] = v.z, e4[3] = v.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) e4[i] = src[i];
      }
    }
    float mx = fmaxf(fmaxf(fabsf(e4[0]), fabsf(e4[1])), fmaxf(fabsf(e4[2]), fabsf(e4[3])));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const cuda::Pow2Scale sc = cuda::pow2_scale<14>(mx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int kk = lane * 4 + i, st = j * G + (kk >> 4), kin = kk & 15;
      __half hi, lo;
      cuda::split_hi_lo(e4[i] * sc.up, hi, lo);
      __half* rec =
          reinterpret_cast<__half*>(xs + ((size_t(r >> 3) * kTcSliceSteps + st) * 8 + (r & 7)) * 4 + ((kin & 7) >> 1));
      const int at = (kin >> 3) * 2 + (kin & 1);
      rec[at] = hi;
      rec[4 + at] = lo;
    }
    if (lane == 0) es[r * GPS + j] = sc.down * W::kCode;
  }
  __syncthreads();

  float acc[NT][4];
  tc_zero(acc);
  // Accumulator i of n8 tile nt is activation row col(nt, i), weight row row(t, i); partials are
  // [slice][activation row][16·tiles].
  const int64_t pstride = int64_t(p.tiles) * 16;
  auto col_of = [&](int nt, int i) { return 8 * nt + 2 * q + (i & 1); };
  auto row_of = [&](int t, int i) { return int64_t(t) * 16 + g + 8 * (i >> 1); };
  // The slice of tile t is done: its partial out, and the last of the tile's slices adds them all.
  auto finish = [&](int t) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (col_of(nt, i) < nr)
          p.part[(int64_t(slice) * kTcMaxRows + col_of(nt, i)) * pstride + row_of(t, i)] = acc[nt][i];
    __threadfence();
    __syncwarp();
    unsigned last = 0;
    if (lane == 0) last = atomicAdd(p.count + t, 1u) == unsigned(p.slices - 1);
    last = __shfl_sync(0xffffffffu, last, 0);
    if (last) {
      __threadfence();
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int col = col_of(nt, i);
          const int64_t row = row_of(t, i);
          if (col >= nr || row >= p.m) continue;
          const float* pp = p.part + int64_t(col) * pstride + row;
          float v = __ldcg(pp);
          for (int s = 1; s < p.slices; ++s) v += __ldcg(pp + int64_t(s) * kTcMaxRows * pstride);
          store_out(p.y + int64_t(col) * p.m + row, v * p.scale, p.epilogue);
        }
      if (lane == 0) p.count[t] = 0;
    }
    tc_zero(acc);
  };

#pragma unroll 1
  for (int f0 = 0; f0 < F; f0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int f = f0 + d;
      uint4 wv[L];
#pragma unroll
      for (int i = 0; i < L; ++i) wv[i] = rw[d][i];
      const uint4 s = rs[d];
      load(f + D, rw[d], rs[d]);  // refill the stage before computing on it
      const int t = tile_of(f);
      if (f >= F || t >= p.tiles) continue;  // warp-uniform
      const int j = f % GPS;
      float tt[NT][4];
      tc_zero(tt);
      W::group(wv, s,
               [&](int nt, int st) {
                 return 8 * nt + g < nr ? xs[((size_t(nt) * kTcSliceSteps + j * G + st) * 8 + g) * 4 + q]
                                        : make_uint4(0, 0, 0, 0);
               },
               tt);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int c0 = 8 * nt + 2 * q;
        const float e0 = c0 < nr ? es[c0 * GPS + j] : 0.0f, e1 = c0 + 1 < nr ? es[(c0 + 1) * GPS + j] : 0.0f;
        acc[nt][0] = fmaf(tt[nt][0], e0, acc[nt][0]);
        acc[nt][1] = fmaf(tt[nt][1], e1, acc[nt][1]);
        acc[nt][2] = fmaf(tt[nt][2], e0, acc[nt][2]);
        acc[nt][3] = fmaf(tt[nt][3], e1, acc[nt][3]);
      }
      if (d == D - 1 && j == GPS - 1) finish(t);  // groups come D at a time, GPS a multiple of D
    }
  }
}

// Blocks per SM of one instance (its shared-memory attribute set first), once per process.
template <class W, int NT>
int tc_blocks_per_sm() {
  static const int per_sm = [] {
    auto kernel = gemv_tc_kernel<W, NT>;
    cuda::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(tc_smem_bytes(NT))),
                     "gguf tc gemv: shared memory attribute");
    int b = 0;
    cuda::check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kTcThreads, tc_smem_bytes(NT)),
                     "gguf tc gemv: occupancy");
    return std::max(b, 1);
  }();
  return per_sm;
}
inline int tc_blocks_per_sm(TcType type, int nt) {
  if (type == TcType::NVFP4) return nt == 1 ? tc_blocks_per_sm<TcNvfp4W, 1>() : tc_blocks_per_sm<TcNvfp4W, 2>();
  return nt == 1 ? tc_blocks_per_sm<TcQ8W, 1>() : tc_blocks_per_sm<TcQ8W, 2>();
}

// Tiles per warp for this device: every (tile, slice) once, with the grid resident at once.
inline int tc_tiles_per_warp(const TcShape& s, int nt) {
  const int64_t warps = int64_t(cuda::sm_count()) * tc_blocks_per_sm(s.type, nt) * kTcWarps;
  return int(std::max<int64_t>(1, (s.tiles * s.slices + warps - 1) / warps));
}

// The launch plan of a repacked weight: tiles per warp for one and two n8 tiles. Computing it (at
// load) also makes every device query and attribute call of the launches, so that a launch inside a
// CUDA graph capture makes none.
struct TcPlan {
  int tiles_per_warp[2] = {0, 0};
};
inline TcPlan tc_plan(const TcShape& s) {
  TcPlan p;
  p.tiles_per_warp[0] = tc_tiles_per_warp(s, 1);
  p.tiles_per_warp[1] = tc_tiles_per_warp(s, 2);
  return p;
}

// y[n, m] = scale · x[n, k] · Wᵀ for a repacked weight at `w` (shape s), n ≥ 0 (slabs of 16 rows,
// each with the bits it would have alone). part: s.workspace_bytes() (any contents); count:
// s.counters() counters, zero before the first launch on them (they are left zero); one launch at a
// time per workspace (stream order). plan: tc_plan(s) (or a copy with other tiles per warp), or null
// (computed here).
inline void launch_gemv_tc(const uint8_t* w, const TcShape& s, const float* x, float* y, int64_t n, float scale,
                           int epilogue, float* part, unsigned* count, cudaStream_t stream,
                           const TcPlan* plan = nullptr) {
  const TcPlan own = plan ? TcPlan{} : tc_plan(s);
  const TcPlan& pl = plan ? *plan : own;
  for (int64_t r0 = 0; r0 < n; r0 += kTcMaxRows) {
    TcArgs a;
    a.nib = w, a.sc = w + s.nib_bytes();
    a.m = s.m, a.k = s.k, a.steps = s.steps, a.tiles = int(s.tiles), a.slices = int(s.slices);
    a.x = x + r0 * s.k, a.y = y + r0 * s.m;
    a.n = int(std::min<int64_t>(kTcMaxRows, n - r0));
    a.scale = scale, a.epilogue = epilogue;
    a.count = count, a.part = part;
    const int nt = a.n > 8 ? 2 : 1;
    a.tiles_per_warp = pl.tiles_per_warp[nt - 1];
    const int64_t warps = (s.tiles + a.tiles_per_warp - 1) / a.tiles_per_warp;
    const dim3 grid(unsigned((warps + kTcWarps - 1) / kTcWarps), unsigned(s.slices));
    auto kernel = s.type == TcType::NVFP4 ? (nt == 1 ? gemv_tc_kernel<TcNvfp4W, 1> : gemv_tc_kernel<TcNvfp4W, 2>)
                                          : (nt == 1 ? gemv_tc_kernel<TcQ8W, 1> : gemv_tc_kernel<TcQ8W, 2>);
    cuda::launch(kernel, grid, dim3(kTcThreads), tc_smem_bytes(nt), stream, "gguf tc gemv", a);
  }
}

}  // namespace tandem::gguf::kcuda
