// Kernels of the llama activation mode on CUDA (llama_act_cuda.h): Q8_K activation rounding, and the
// IQ2_XXS × Q8_K GEMV / expert gather on __dp4a.
//
// Product layout: one warp per weight row, lane = 8·g + ib takes sub-block ib (32 weights) of block
// 4·p + g in pass p (1024 elements a pass). It decodes its 32 weights once to eight int8×4 words
// (grid bytes from shared memory, signs applied four at a time) and, for each activation row of the
// slab, sums them with the row's int8 q in eight __dp4a; the eight lanes of a block add their
// sub-block sums (times the odd scale) by xor shuffles, exactly. Lane 8·g then forms the block's
// term (d_w·d_x)·float(isum) and leaves it in shared memory; every 8 passes (32 blocks) and at the
// end, lane r adds the terms of row r in block order. This is dot_act_q8k's arithmetic, operation
// for operation (no contraction: __fmul_rn / __fadd_rn), so each output has the CPU's bits whatever
// the slab or the number of rows.
#include "llama_act_cuda.h"

#include <cuda_fp16.h>

#include <algorithm>

#include "tandem/cuda/util.cuh"
#include "tandem/error.h"

namespace tandem::gguf {
namespace {

using cuda::check_launch;

constexpr int kWarps = 8;            // weight rows per block
constexpr int kTermBlocks = 32;      // blocks whose terms wait in shared memory before lane r adds them
constexpr int kMaxSlab = 16;         // activation rows per slab

// ---- Q8_K rounding: one warp per 256-element block, lane j holds elements 8j .. 8j+7 ----
__global__ void quantize_q8k_kernel(const float* __restrict__ x, int64_t n, int64_t k, uint8_t* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = k / 256;
  const int64_t total = n * nb;
  const int64_t stride = cuda_q8k_row_bytes(k);
  for (int64_t wb = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; wb < total;
       wb += int64_t(gridDim.x) * blockDim.x / 32) {
    const int64_t row = wb / nb, b = wb % nb;
    const float* xb = x + row * k + b * 256 + 8 * lane;
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = xb[j];
    // The first element of largest |x| (NaN never wins: the CPU's strict > skips it).
    float amax = 0.0f, mx = 0.0f;
    int idx = 1 << 30;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (fabsf(v[j]) > amax) amax = fabsf(v[j]), mx = v[j], idx = 8 * lane + j;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float a2 = __shfl_xor_sync(0xffffffffu, amax, o), m2 = __shfl_xor_sync(0xffffffffu, mx, o);
      const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
      if (a2 > amax || (a2 == amax && i2 < idx)) amax = a2, mx = m2, idx = i2;
    }
    uint8_t* ro = out + row * stride;
    int8_t q[8];
    float d = 0.0f;
    if (amax == 0.0f) {
#pragma unroll
      for (int j = 0; j < 8; ++j) q[j] = 0;
    } else {
      const float iscale = __fdiv_rn(-127.0f, mx);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float r = rintf(__fmul_rn(iscale, v[j]));  // ties to even, as std::nearbyint
        q[j] = int8_t(r != r ? 0 : r < -128.0f ? -128 : r > 127.0f ? 127 : int(r));
      }
      d = __fdiv_rn(1.0f, iscale);
    }
    int s = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) s += q[j];
    s += __shfl_down_sync(0xffffffffu, s, 1);
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) lo |= uint32_t(uint8_t(q[j])) << (8 * j), hi |= uint32_t(uint8_t(q[4 + j])) << (8 * j);
    *reinterpret_cast<uint2*>(ro + b * 256 + 8 * lane) = make_uint2(lo, hi);
    if ((lane & 1) == 0) reinterpret_cast<int16_t*>(ro + cuda_q8k_bsums_offset(k))[b * 16 + lane / 2] = int16_t(s);
    if (lane == 0) reinterpret_cast<float*>(ro + cuda_q8k_d_offset(k))[b] = d;
  }
}

// Four sign bits → a byte mask (0xFF where the bit is set); no carries: bit i lands at 8i alone.
__device__ __forceinline__ uint32_t sign_mask4(uint32_t b4) { return ((b4 * 0x00204081u) & 0x01010101u) * 0xFFu; }

__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

// ---- IQ2_XXS × Q8_K ----
// blockIdx.x: a group of kWarps weight rows; blockIdx.y (striding by gridDim.y): an item, a slab of up
// to NR activation rows (matmul) or one gathered row (ids set, NR = 1).
template <int NR>
__global__ void __launch_bounds__(kWarps * 32) iq2xxs_q8k_kernel(CudaMatmulArgs p, const uint8_t* __restrict__ xq) {
  __shared__ uint2 grid[256];
  __shared__ float terms[kWarps][NR][kTermBlocks];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 3, ib = lane & 7;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) grid[i] = static_cast<const uint2*>(p.grid)[i];
  __syncthreads();
  cuda::pdl_wait();
  cuda::pdl_trigger();

  const int64_t o = int64_t(blockIdx.x) * kWarps + warp;  // the warp's weight row
  if (o >= p.m) return;                                   // no block barrier below
  const int nb = int(p.k / 256), passes = (nb + 3) / 4;
  const int64_t xs = cuda_q8k_row_bytes(p.k);
  const int64_t items = p.ids ? p.n : (p.n + NR - 1) / NR;

  for (int64_t item = blockIdx.y; item < items; item += gridDim.y) {
    const uint8_t* w = p.w;
    const uint8_t* x;
    float* y;
    int nr;
    float scale = p.scale;
    if (p.ids) {
      nr = 1;
      x = xq + (item / p.per_x) * xs;
      y = p.y + item * p.m;
      const int32_t e = p.ids[item];
      if (e < 0 || e >= p.n_experts) {
        if (lane == 0) y[o] = __int_as_float(0x7fc00000);
        continue;
      }
      w += int64_t(e) * p.expert_bytes;
      if (p.expert_scale) scale = p.expert_scale[e];
    } else {
      nr = int(min(int64_t(NR), p.n - item * NR));
      x = xq + item * NR * xs;
      y = p.y + item * NR * p.m;
    }
    const uint8_t* wr = w + o * p.row_bytes;
    // The lane's five u16 of block b (d and its sub-block's two words; blocks are 66 bytes, so only
    // 2-byte aligned), fetched one pass ahead.
    uint32_t nw[5] = {0, 0, 0, 0, 0};
    auto fetch = [&](int b) {
      if (b < nb) {
        const uint8_t* blk = wr + int64_t(b) * 66;
        const uint8_t* u = blk + 2 + 8 * ib;
        nw[0] = ld_u16(blk), nw[1] = ld_u16(u), nw[2] = ld_u16(u + 2), nw[3] = ld_u16(u + 4), nw[4] = ld_u16(u + 6);
      }
    };
    fetch(g);
    float acc = 0.0f;  // lane r: row r's running sum, in block order
    for (int pass = 0; pass < passes; ++pass) {
      const int b = 4 * pass + g;
      const bool live = b < nb;
      const uint32_t cw[5] = {nw[0], nw[1], nw[2], nw[3], nw[4]};
      fetch(b + 4);
      uint32_t q[8];
      int32_t ls = 0;
      float dw = 0.0f;
      if (live) {
        dw = __half2float(__ushort_as_half((unsigned short)cw[0]));
        const uint32_t a0 = cw[1] | cw[2] << 16, a1 = cw[3] | cw[4] << 16;
        ls = int32_t(2 * (a1 >> 28) + 1);
#pragma unroll
        for (int l = 0; l < 4; ++l) {
          const uint2 gv = grid[(a0 >> (8 * l)) & 255];
          uint32_t sg = (a1 >> (7 * l)) & 127;
          sg |= (__popc(sg) & 1) << 7;  // ksigns_iq2xs: the eighth sign makes the parity even
          const uint32_t m0 = sign_mask4(sg & 15), m1 = sign_mask4(sg >> 4);
          q[2 * l] = __vsub4(gv.x ^ m0, m0);
          q[2 * l + 1] = __vsub4(gv.y ^ m1, m1);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) q[j] = 0;
      }
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        if (r >= nr) break;
        const uint8_t* xr = x + r * xs;
        int32_t s = 0;
        float dx = 0.0f;
        if (live) {
          const uint4* xv = reinterpret_cast<const uint4*>(xr + int64_t(b) * 256 + 32 * ib);
          const uint4 v0 = __ldg(xv), v1 = __ldg(xv + 1);
          s = __dp4a(int(q[0]), int(v0.x), s);
          s = __dp4a(int(q[1]), int(v0.y), s);
          s = __dp4a(int(q[2]), int(v0.z), s);
          s = __dp4a(int(q[3]), int(v0.w), s);
          s = __dp4a(int(q[4]), int(v1.x), s);
          s = __dp4a(int(q[5]), int(v1.y), s);
          s = __dp4a(int(q[6]), int(v1.z), s);
          s = __dp4a(int(q[7]), int(v1.w), s);
          s *= ls;
          dx = reinterpret_cast<const float*>(xr + cuda_q8k_d_offset(p.k))[b];
        }
        s += __shfl_xor_sync(0xffffffffu, s, 1);
        s += __shfl_xor_sync(0xffffffffu, s, 2);
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        if (live && ib == 0) terms[warp][r][b % kTermBlocks] = __fmul_rn(__fmul_rn(dw, dx), __int2float_rn(s));
      }
      // Every 32 blocks and at the end, lane r adds row r's waiting terms in block order.
      const int done = min(nb, 4 * (pass + 1));
      if (done % kTermBlocks == 0 || done == nb) {
        __syncwarp();
        if (lane < nr)
          for (int bb = (done - 1) / kTermBlocks * kTermBlocks; bb < done; ++bb)
            acc = __fadd_rn(acc, terms[warp][lane][bb % kTermBlocks]);
        __syncwarp();
      }
    }
    if (lane < nr) store_out(y + int64_t(lane) * p.m + o, __fmul_rn(__fmul_rn(0.125f, acc), scale), p.epilogue);
  }
}

template <int NR>
void launch_nr(const CudaMatmulArgs& a, const void* xq, int64_t items, cudaStream_t s) {
  const dim3 grid(unsigned(cuda::ceil_div(a.m, int64_t(kWarps))), unsigned(std::min<int64_t>(items, 65535)));
  cuda::launch(iq2xxs_q8k_kernel<NR>, grid, dim3(kWarps * 32), 0, s, "gguf iq2_xxs q8k", a,
               static_cast<const uint8_t*>(xq));
}

}  // namespace

void launch_quantize_q8k(const float* x, int64_t n, int64_t k, void* out, cudaStream_t s) {
  check(k % 256 == 0, "gguf (cuda): a Q8_K row of ", k, " elements is not a whole number of blocks (256)");
  const int64_t warps = n * (k / 256);
  if (warps == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(cuda::ceil_div(warps, 8), 4096));
  quantize_q8k_kernel<<<blocks, 256, 0, s>>>(x, n, k, static_cast<uint8_t*>(out));
  check_launch("gguf quantize q8k");
}

void launch_quantize_q8k(const float* x, int64_t n, int64_t k, void* out) {
  launch_quantize_q8k(x, n, k, out, cuda::stream());
}

void launch_iq2_xxs_q8k(const CudaMatmulArgs& a, const void* xq, cudaStream_t s) {
  if (a.n == 0 || a.m == 0) return;
  check(a.k % 256 == 0 && a.row_bytes == a.k / 256 * 66 && a.grid, "gguf (cuda): bad IQ2_XXS row geometry");
  if (a.ids) return launch_nr<1>(a, xq, a.n, s);
  if (a.n == 1) return launch_nr<1>(a, xq, 1, s);
  if (a.n <= 4) return launch_nr<4>(a, xq, 1, s);
  if (a.n <= 8) return launch_nr<8>(a, xq, 1, s);
  launch_nr<kMaxSlab>(a, xq, cuda::ceil_div(a.n, int64_t(kMaxSlab)), s);
}

}  // namespace tandem::gguf
