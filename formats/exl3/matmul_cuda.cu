// The EXL3 matmul around the per-K kernels: the input rotation (×suh, 128-point Hadamard, fragment
// order), the output rotation (split sum in split order, Hadamard, ×svh, trim, bias), the prefill
// GEMM on decoded fp16 chunks, and the dispatch by K, codebook and row count.
#include "formats/exl3/matmul_cuda.cuh"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "tandem/cuda/util.cuh"
#include "formats/exl3/kernels_cuda.cuh"
#include "formats/exl3/prefill_cuda.cuh"
#include "tandem/error.h"

namespace tandem::exl3::kcuda {

TANDEM_EXL3_CUDA_EXTERN(1)
TANDEM_EXL3_CUDA_EXTERN(2)
TANDEM_EXL3_CUDA_EXTERN(3)
TANDEM_EXL3_CUDA_EXTERN(4)
TANDEM_EXL3_CUDA_EXTERN(5)
TANDEM_EXL3_CUDA_EXTERN(6)
TANDEM_EXL3_CUDA_EXTERN(7)
TANDEM_EXL3_CUDA_EXTERN(8)
TANDEM_EXL3_PREFILL_EXTERN(1)
TANDEM_EXL3_PREFILL_EXTERN(2)
TANDEM_EXL3_PREFILL_EXTERN(3)
TANDEM_EXL3_PREFILL_EXTERN(4)
TANDEM_EXL3_PREFILL_EXTERN(5)
TANDEM_EXL3_PREFILL_EXTERN(6)
TANDEM_EXL3_PREFILL_EXTERN(7)
TANDEM_EXL3_PREFILL_EXTERN(8)

namespace {

using cuda::check_launch;

// Gathers of more rows than a verify pass can have (16 tokens × 32 experts each) run as prefill: the
// grouped tensor-core GEMM (gather_gemm_kernel); up to this many, the per-row GEMV, whose rows have
// the bits of a single row's.
constexpr int64_t kGatherGemvMaxRows = 16 * 32;

// The input rotations' work item: the calling warp's (row r, 128-block b) and the suh of the row's
// expert (ids: a gather, ids[r]; else expert 0). False past the last item or for an id out of range.
struct RowBlock {
  int64_t r, b;
  const float* su;
};
__device__ __forceinline__ bool row_block(int64_t rows, int64_t k, const int32_t* ids, int n_experts,
                                          const float* suh, RowBlock& rb) {
  const int64_t blocks = k / kHad;
  const int64_t wid = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (wid >= rows * blocks) return false;
  rb.r = wid / blocks, rb.b = wid % blocks, rb.su = suh;
  if (!ids) return true;
  const int e = ids[rb.r];
  if (e < 0 || e >= n_experts) return false;
  rb.su += int64_t(e) * k;
  return true;
}

// xh row r = H(x[r / per_x] zero-extended ⊙ suh[e]) with e = ids[r] (gather) or 0; one warp per
// (row, 128-block). `fragment`: the GEMV's order (per 16-row tile, lane class q = 0..3 holds tile rows
// 2q, 2q+1, 2q+8, 2q+9 as one float4), else natural order.
__global__ void rotate_in_kernel(const float* x, int64_t in_features, int per_x, const int32_t* ids, int n_experts,
                                 const float* suh, int64_t k, int64_t rows, bool fragment, float* xh) {
  RowBlock rb;
  if (!row_block(rows, k, ids, n_experts, suh, rb)) return;
  rotate_block(x, in_features, ids ? rb.r / per_x : rb.r, rb.su, rb.b, int(threadIdx.x) % 32, fragment,
               xh + rb.r * k + rb.b * kHad);
}

// y[r, col0 + c] for c in the chunk: z = Σ_s part[s] (split order), H(z) ⊙ svh[e] + bias[e], trimmed
// to out_features; one warp per (row, 128-block of the chunk). A row whose id is out of range is NaN.
struct OutArgs {
  const float* part = nullptr;
  int splits = 1;
  int64_t split_stride = 0;  // floats between splits
  int64_t ldz = 0;           // floats per row of z
  int64_t width = 0;         // chunk columns (multiple of 128)
  int64_t col0 = 0;
  int64_t rows = 0;
  const int32_t* ids = nullptr;
  int n_experts = 1;
  const float* svh = nullptr;
  const float* bias = nullptr;
  int64_t n = 0, out_features = 0;
  float* y = nullptr;
  int epilogue = 0;  // DeviceWeights::epilogue
};
__global__ void rotate_out_kernel(const OutArgs a) {
  const int64_t blocks = a.width / kHad;
  const int64_t wid = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (wid >= a.rows * blocks) return;
  const int64_t r = wid / blocks, b = wid % blocks;
  const int64_t c0 = a.col0 + b * kHad + lane * 4;
  float* yr = a.y + r * a.out_features;
  int e = 0;
  if (a.ids) {
    e = a.ids[r];
    if (e < 0 || e >= a.n_experts) {
      for (int m = 0; m < 4; ++m)
        if (c0 + m < a.out_features) yr[c0 + m] = __int_as_float(0x7fffffff);
      return;
    }
  }
  const float4 z0 = *reinterpret_cast<const float4*>(a.part + r * a.ldz + b * kHad + lane * 4);
  float v[4] = {z0.x, z0.y, z0.z, z0.w};
  for (int s = 1; s < a.splits; ++s) {
    const float4 z = *reinterpret_cast<const float4*>(a.part + s * a.split_stride + r * a.ldz + b * kHad + lane * 4);
    v[0] += z.x, v[1] += z.y, v[2] += z.z, v[3] += z.w;
  }
  finish_output(v, lane, c0, a.svh + int64_t(e) * a.n, a.bias ? a.bias + int64_t(e) * a.out_features : nullptr,
                a.out_features, yr, a.epilogue);
}

// max |v| over a 128-block: the warp's four values a lane, every lane gets it.
__device__ __forceinline__ float block_abs_max(const float (&v)[4]) {
  float mx = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  return mx;
}

// The prefill input: xh row r = H(x[r] zero-extended ⊙ suh) as fp16 hi + lo (natural order), each
// (row, 128-block) scaled by a power of two into [2^14, 2^15) first (pow2_scale<14>: the tensor-core
// GEMV's split), its 2^−e in xsc[r][b]. One warp per (row, 128-block).
// Gathers: row r is x[r / per_x] with expert ids[r]'s suh (a row with an id out of range is left as
// it is: no expert lists it, and rotate_out writes it NaN).
// With row_max (PrefillImpl::kRowScale) every 128-block of row r takes the row's scale, from the bits of
// max |xh[r]| that row_max_kernel left there.
__global__ void rotate_split_kernel(const float* x, int64_t in_features, int per_x, const int32_t* ids, int n_experts,
                                    const float* suh, int64_t k, int64_t rows, const unsigned* row_max, __half* xhi,
                                    __half* xlo, float* xsc) {
  RowBlock rb;
  if (!row_block(rows, k, ids, n_experts, suh, rb)) return;
  const int64_t r = rb.r, b = rb.b, blocks = k / kHad;
  const int lane = int(threadIdx.x) % 32;
  float v[4];
  rotated_values(x, in_features, r / per_x, rb.su, b, lane, v);
  const float mx = row_max ? __uint_as_float(row_max[r]) : block_abs_max(v);
  const cuda::Pow2Scale sc = cuda::pow2_scale<14>(mx);
  __half hi[4], lo[4];
#pragma unroll
  for (int m = 0; m < 4; ++m) cuda::split_hi_lo(v[m] * sc.up, hi[m], lo[m]);
  const int64_t o = r * k + b * kHad + lane * 4;
  *reinterpret_cast<uint2*>(xhi + o) = *reinterpret_cast<const uint2*>(hi);
  *reinterpret_cast<uint2*>(xlo + o) = *reinterpret_cast<const uint2*>(lo);
  if (lane == 0) xsc[r * blocks + b] = sc.down;
}

// z[rows, C] = xh[rows, k] · Ŵ[k, C] on the tensor cores (mma.m16n8k16, fp16 × fp16 → fp32): Ŵ as
// decode_kernel leaves it (per 16-column strip and 16-row tile, each lane's A fragment as 16 bytes),
// xh as rotate_split_kernel's hi + lo, so every product is exact; per (row, 128-block) the hi and lo
// products are summed on the tensor cores and then folded into the output times the block's scale.
// Block: 64 rows × 128 columns, 8 warps as 2 row halves × 4 column pairs (a warp: 32 rows, 2 strips);
// the block's rows of each 128-block of xh are staged through shared memory (cp.async, two stages)
// and read as B fragments with ldmatrix. Each output sums its 128-blocks in k order.
constexpr int kBn = 128;
__global__ void __launch_bounds__(256) gemm_tc_kernel(const __half* xhi, const __half* xlo, const float* xsc,
                                                      const uint4* wf, int64_t rows, int64_t k, int64_t C, float* z) {
  extern __shared__ __align__(16) unsigned char gemm_smem[];
  GemmStage* st = reinterpret_cast<GemmStage*>(gemm_smem);  // [2]
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int64_t r0 = int64_t(blockIdx.y) * kBm;
  const int rh = warp / 4;                                      // rows rh·32 .. +32 of the block
  const int64_t strip0 = int64_t(blockIdx.x) * 8 + (warp % 4) * 2;  // strips strip0, strip0 + 1
  const int64_t tiles_k = k / 16;
  // Lane's fragments: strip s, tile i at wf[(s · tiles_k + i) · 32 + lane].
  const uint4* wa = wf + strip0 * tiles_k * 32 + lane;
  const uint4* wb = wa + tiles_k * 32;
  float acc[2][4][4] = {};
  auto row_of = [&](int rr) { return r0 + rr < rows ? r0 + rr : int64_t(0); };  // past the rows: row 0, unused
  for_staged_blocks(st, xhi, xlo, xsc, k, row_of, [&](const GemmStage& cur, int64_t b) {
    float t[2][4][4] = {};
    uint4 a0 = __ldg(wa + (b * 8) * 32), a1 = __ldg(wb + (b * 8) * 32);
#pragma unroll
    for (int tt = 0; tt < 8; ++tt) {
      uint4 n0 = a0, n1 = a1;
      if (tt + 1 < 8) n0 = __ldg(wa + (b * 8 + tt + 1) * 32), n1 = __ldg(wb + (b * 8 + tt + 1) * 32);
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        uint32_t f[4];
        stage_fragments(cur, rh * 4 + nb, tt, lane, f);
        cuda::mma16816(t[0][nb], a0.x, a0.y, a0.z, a0.w, f[0], f[1]);
        cuda::mma16816(t[0][nb], a0.x, a0.y, a0.z, a0.w, f[2], f[3]);
        cuda::mma16816(t[1][nb], a1.x, a1.y, a1.z, a1.w, f[0], f[1]);
        cuda::mma16816(t[1][nb], a1.x, a1.y, a1.z, a1.w, f[2], f[3]);
      }
      a0 = n0, a1 = n1;
    }
#pragma unroll
    for (int nb = 0; nb < 4; ++nb)
#pragma unroll
      for (int s = 0; s < 2; ++s) fold_scaled(t[s][nb], cur, rh * 4 + nb, lane, acc[s][nb]);
  });
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int nb = 0; nb < 4; ++nb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t row = r0 + rh * 32 + nb * 8 + 2 * q + h;
        if (row >= rows) continue;
        const int64_t col = (strip0 + s) * 16 + g;
        z[row * C + col] = acc[s][nb][h];
        z[row * C + col + 8] = acc[s][nb][2 + h];
      }
}

// The gather's grouping for prefill_gemm_kernel (one block of 1024 threads): counts rows per expert,
// lays the experts' rows out in expert order in list (within an expert in arrival order of the
// atomics: a row's bits never depend on which rows share its tile), and writes one tile per 64 rows
// of each expert ({e, first list index, rows}) and their count. A row whose id is out of range is in
// no tile and is written NaN here (as rotate_out does). Dynamic shared memory: 2 · n_experts ints.
__global__ void __launch_bounds__(1024) group_rows_kernel(const int32_t* ids, int rows, int n_experts,
                                                         int64_t out_features, float* y, int* list, int4* tiles,
                                                         int* ntiles) {
  extern __shared__ int grp_smem[];
  int* cnt = grp_smem;
  int* cur = grp_smem + n_experts;
  __shared__ int wsum[2][32];
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  for (int e = tid; e < n_experts; e += 1024) cnt[e] = 0;
  __syncthreads();
  for (int r = tid; r < rows; r += 1024) {
    const int e = ids[r];
    if (e >= 0 && e < n_experts) {
      atomicAdd(&cnt[e], 1);
    } else {
      for (int64_t c = 0; c < out_features; ++c) y[int64_t(r) * out_features + c] = __int_as_float(0x7fffffff);
    }
  }
  __syncthreads();
  // Exclusive scans of rows and tiles over the experts: thread t owns experts [t·per, (t+1)·per).
  const int per = (n_experts + 1023) / 1024, e0 = min(n_experts, tid * per), e1 = min(n_experts, e0 + per);
  int sr = 0, st = 0;
  for (int e = e0; e < e1; ++e) sr += cnt[e], st += (cnt[e] + kBm - 1) / kBm;
  int ir = sr, it = st;  // inclusive within the warp
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int a = __shfl_up_sync(0xffffffffu, ir, off), b = __shfl_up_sync(0xffffffffu, it, off);
    if (lane >= off) ir += a, it += b;
  }
  if (lane == 31) wsum[0][warp] = ir, wsum[1][warp] = it;
  __syncthreads();
  int br = 0, bt = 0;
  for (int w = 0; w < warp; ++w) br += wsum[0][w], bt += wsum[1][w];
  int orow = br + ir - sr, otile = bt + it - st;
  for (int e = e0; e < e1; ++e) {
    const int c = cnt[e];
    cur[e] = orow;
    for (int t0 = 0; t0 < c; t0 += kBm) tiles[otile++] = make_int4(e, orow + t0, min(kBm, c - t0), 0);
    orow += c;
  }
  if (tid == 1023) *ntiles = bt + it;
  __syncthreads();
  for (int r = tid; r < rows; r += 1024) {
    const int e = ids[r];
    if (e >= 0 && e < n_experts) list[atomicAdd(&cur[e], 1)] = r;
  }
}

// f(std::integral_constant<int, K>{}) for the kernels' K (1..8).
template <class F>
void with_k(int K, F&& f) {
  switch (K) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    default: fail("exl3 (cuda): K = ", K, " bits per weight has no kernel");
  }
}

void launch_gemv(const GemvArgs& a, int K, int cb, int rows_pad, bool gather, bool fuse_in, dim3 grid, size_t smem,
                 cudaStream_t s) {
  with_k(K, [&](auto k) { launch_gemv_k<decltype(k)::value>(a, cb, rows_pad, gather, fuse_in, grid, smem, s); });
  check_launch("exl3 gemv");
}

void launch_gemv_tc(const GemvArgs& a, int K, int cb, int rows_pad, bool i8, dim3 grid, cudaStream_t s) {
  with_k(K, [&](auto k) { launch_gemv_tc_k<decltype(k)::value>(a, cb, rows_pad, i8, grid, s); });
  check_launch("exl3 gemv (mma)");
}

void launch_decode(const DecodeArgs& a, int K, int cb, cudaStream_t s) {
  with_k(K, [&](auto k) { launch_decode_k<decltype(k)::value>(a, cb, s); });
  check_launch("exl3 decode");
}

unsigned warp_blocks(int64_t warps, int per_block) { return unsigned((warps + per_block - 1) / per_block); }

void rotate_in(const DeviceWeights& w, const float* x, int per_x, const int32_t* ids, int64_t rows, bool fragment,
               float* xh, cudaStream_t s) {
  const int64_t warps = rows * (w.k / kHad);
  rotate_in_kernel<<<warp_blocks(warps, 4), 128, 0, s>>>(x, w.in_features, per_x, ids, w.n_experts, w.suh, w.k,
                                                         rows, fragment, xh);
  check_launch("exl3 rotate_in");
}

void rotate_out(OutArgs a, cudaStream_t s) {
  const int64_t warps = a.rows * (a.width / kHad);
  rotate_out_kernel<<<warp_blocks(warps, 4), 128, 0, s>>>(a);
  check_launch("exl3 rotate_out");
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// max |xh[r]| over the row's 128-blocks into row_max[r] (as float bits: non-negative floats order as
// unsigned ints; zeroed before), one warp per (row, 128-block) as rotate_split_kernel.
__global__ void row_max_kernel(const float* x, int64_t in_features, int per_x, const int32_t* ids, int n_experts,
                               const float* suh, int64_t k, int64_t rows, unsigned* row_max) {
  RowBlock rb;
  if (!row_block(rows, k, ids, n_experts, suh, rb)) return;
  const int lane = int(threadIdx.x) % 32;
  float v[4];
  rotated_values(x, in_features, rb.r / per_x, rb.su, rb.b, lane, v);
  const float mx = block_abs_max(v);
  if (lane == 0) atomicMax(row_max + rb.r, __float_as_uint(mx));
}

// The prefill GEMMs' split input (rotate_split_kernel) of `rows` rows, carved from the front of ws
// (which then points past it); ids/per_x as for the gather (null ids: row r is x[r]).
struct SplitInput {
  __half* hi;
  __half* lo;
  float* sc;
};
// Where split_input's parts sit in its workspace: hi at 0, then lo, the scales and kRowScale's row maxima.
struct SplitLayout {
  size_t lo, sc, row_max, total;
};
SplitLayout split_layout(const DeviceWeights& w, int64_t rows) {
  SplitLayout l;
  l.lo = align256(size_t(rows * w.k) * 2);
  l.sc = 2 * l.lo;
  l.row_max = l.sc + align256(size_t(rows * (w.k / kHad)) * 4);
  l.total = l.row_max + align256(size_t(rows) * 4);
  return l;
}
size_t split_input_bytes(const DeviceWeights& w, int64_t rows) { return split_layout(w, rows).total; }
SplitInput split_input(const DeviceWeights& w, const float* x, int per_x, const int32_t* ids, int64_t rows, char*& ws,
                       cudaStream_t s) {
  const SplitLayout l = split_layout(w, rows);
  SplitInput in;
  in.hi = reinterpret_cast<__half*>(ws);
  in.lo = reinterpret_cast<__half*>(ws + l.lo);
  in.sc = reinterpret_cast<float*>(ws + l.sc);
  unsigned* row_max = nullptr;
  if (prefill_impl() == PrefillImpl::kRowScale) {
    row_max = reinterpret_cast<unsigned*>(ws + l.row_max);
    cuda::check_cuda(cudaMemsetAsync(row_max, 0, size_t(rows) * 4, s), "exl3: clear the row maxima");
    row_max_kernel<<<warp_blocks(rows * (w.k / kHad), 4), 128, 0, s>>>(x, w.in_features, per_x, ids, w.n_experts,
                                                                       w.suh, w.k, rows, row_max);
    check_launch("exl3 row_max");
  }
  ws += l.total;
  rotate_split_kernel<<<warp_blocks(rows * (w.k / kHad), 4), 128, 0, s>>>(
      x, w.in_features, per_x, ids, w.n_experts, w.suh, w.k, rows, row_max, in.hi, in.lo, in.sc);
  check_launch("exl3 rotate_split");
  return in;
}

int rows_pad_of(int64_t rows) {
  int p = 1;
  while (p < rows) p *= 2;
  return p;
}

// Tiles per split of `splits`: whole 128-blocks (the tensor-core GEMV folds its scales per 128-block).
int split_tiles(int tiles_k, int splits) { return ((tiles_k + splits - 1) / splits + 7) / 8 * 8; }

// The decode GEMV's shape for `rows_pad` rows (1 for the gather): splits, tiles per split, and whether
// each block rotates its own input (FuseIn; `smem` bytes of shared memory) instead of rotate_in.
struct GemvPlan {
  int splits = 1, tiles_per_split = 0;
  bool fuse_in = false;
  size_t smem = 0;
  unsigned blocks_x = 0;
};
GemvPlan plan_gemv(const DeviceWeights& w, int rows_pad, bool gather = false) {
  GemvPlan p;
  const int tiles_k = int(w.k / 16), strips = int(w.n / 16);
  p.splits = gemv_splits(w.k, w.n, gather);
  p.tiles_per_split = split_tiles(tiles_k, p.splits);
  int nhb = 0;
  for (int s = 0; s < p.splits; ++s) {
    const int ib = s * p.tiles_per_split, ie = std::min(ib + p.tiles_per_split, tiles_k);
    if (ib < ie) nhb = std::max(nhb, (ie + 7) / 8 - ib / 8);
  }
  p.smem = size_t(rows_pad) * size_t(nhb) * kHad * sizeof(float);
  p.fuse_in = rows_pad <= 4 && p.smem <= size_t(kFuseInBytes);
  if (!p.fuse_in) p.smem = 0;
  p.blocks_x = unsigned((strips + kGemvWarps - 1) / kGemvWarps);
  return p;
}

// Prefill column chunk: at most 32 Mi fp16 weights of scratch.
int64_t prefill_chunk(const DeviceWeights& w) {
  const int64_t c = std::max<int64_t>(kHad, (int64_t(32) << 20) / w.k / kHad * kHad);
  return std::min(c, w.n);
}


}  // namespace

// Which GEMV a matmul of ≤ 16 rows runs (one kernel for every n, so a row's bits never depend on n),
// from TANDEM_EXL3_GEMV:
// - int8 (the default): mul1 weights on the int8 tensor-core GEMV, the others on the fp16 one. mul1's
//   value is an affine function of a byte sum rounded to fp16; the int8 GEMV sums the products' bytes
//   times two int8 limbs of the activations on the tensor cores and applies the affine map per output,
//   without the per-weight rounding: each weight is off by at most half an fp16 ulp (|v| · 2^−11) and
//   each activation by 2^−8 of its 128-block's scale (docs/exl3.md gives the measured error).
// - fp16: every codebook on the fp16 tensor-core GEMV, exact products of the fp16 weights (error
//   against the CPU ≤ 1e-5 of max |y|).
// - fp32: the fp32 GEMV.
// Gathers, one row per block, stay on the fp32 GEMV (12.1 µs for Bolt's routed experts against 13.3
// on the fp16 tensor-core GEMV and 12.4 on the int8 one, H200 2026-11-30: a gather block's fixed
// cost, not its loop, dominates).
GemvMode gemv_mode() {
  static const GemvMode mode = [] {
    const char* e = std::getenv("TANDEM_EXL3_GEMV");
    const std::string v = e ? e : "";
    if (v.empty() || v == "int8") return GemvMode::kInt8;
    if (v == "fp16") return GemvMode::kFp16;
    if (v == "fp32") return GemvMode::kFp32;
    fail("TANDEM_EXL3_GEMV: unknown value '", v, "' (int8, fp16 or fp32)");
  }();
  return mode;
}

// Which prefill GEMMs run, from TANDEM_EXL3_PREFILL: unset or "row", the fused prefill_gemm_kernel with
// one activation scale a row (the default); "block", the fused kernel with a scale per 128-block;
// "old", decode_kernel + gemm_tc_kernel + rotate_out and the old grouped gather (block and old give
// the same bits; kept for side-by-side timing). Another value fails naming it.
namespace {
PrefillImpl& prefill_impl_ref() {
  static PrefillImpl impl = [] {
    const char* e = std::getenv("TANDEM_EXL3_PREFILL");
    const std::string v = e ? e : "";
    if (v.empty() || v == "row") return PrefillImpl::kRowScale;
    if (v == "block") return PrefillImpl::kBlockScale;
    if (v == "old") return PrefillImpl::kOld;
    fail("TANDEM_EXL3_PREFILL: unknown value '", v, "' (row, block or old)");
  }();
  return impl;
}
}  // namespace
PrefillImpl prefill_impl() { return prefill_impl_ref(); }
void set_prefill_impl(PrefillImpl impl) { prefill_impl_ref() = impl; }

int gemv_splits(int64_t k, int64_t n, bool gather) {
  const int tiles_k = int(k / 16), blocks_x = int((n / 16 + kGemvWarps - 1) / kGemvWarps);
  const double sms = double(std::max(1, cuda::sm_count()));
  // A gather launches a block column per row: cost it for the 8 rows of a typical decode step (a
  // fixed guess, so that the split count stays a function of the shape alone).
  const int64_t cols = int64_t(blocks_x) * (gather ? 8 : 1);
  const int overhead = gather ? 16 : 8;  // a block's fixed cost in tiles per warp (ids, rotation, output)
  // The busiest SM's time: ceil(blocks per SM) × (tiles per split + the fixed cost), stretched when
  // fewer than 3 blocks per SM leave its warps latency-bound. Measured on the H200 (2026-11-30) against
  // power-of-two splits: Bolt's in_proj 31.7 µs (kept), shared up 14.3 → 12.7, shared down 13.2 → 12.7,
  // routed gathers 14.2 → 13.3 µs.
  int best = 1;
  double best_cost = -1;
  for (int s = 1; s <= std::max(1, tiles_k / 16); ++s) {
    const int tps = split_tiles(tiles_k, s);
    if ((tiles_k + tps - 1) / tps != s) continue;          // a split without work
    const double per_sm = double(cols * s) / sms;
    const double cost = std::ceil(per_sm) * (tps + overhead) * std::max(1.0, 3.0 / per_sm);
    if (best_cost < 0 || cost < best_cost - 1e-9) best = s, best_cost = cost;
  }
  return best;
}

size_t matmul_workspace_bytes(const DeviceWeights& w, int64_t rows) {
  if (rows <= kGemvMaxRows) {
    const int pad = rows_pad_of(rows);
    const GemvPlan p = plan_gemv(w, pad);
    const size_t xh = p.fuse_in || gemv_mode() != GemvMode::kFp32 ? 0 : align256(size_t(pad * w.k) * 4);
    return xh + (p.splits > 1 ? size_t(p.splits) * size_t(rows * w.n) * 4 : 0);
  }
  if (prefill_impl() != PrefillImpl::kOld) return split_input_bytes(w, rows);
  const int64_t C = prefill_chunk(w);
  return split_input_bytes(w, rows) + align256(size_t(rows * C) * 4) + size_t(w.k * C) * 2;
}

size_t matmul_counters(const DeviceWeights& w, int64_t rows) {
  if (rows > kGemvMaxRows) return 0;
  const GemvPlan p = plan_gemv(w, rows_pad_of(rows));
  return p.splits > 1 ? p.blocks_x : 0;
}

void launch_matmul(const DeviceWeights& w, const float* x, int64_t rows, float* y, void* workspace,
                   unsigned* counters, cudaStream_t stream) {
  if (rows == 0) return;
  char* ws = static_cast<char*>(workspace);
  if (rows <= kGemvMaxRows) {
    const int pad = rows_pad_of(rows);
    const GemvPlan p = plan_gemv(w, pad);
    const bool tc = gemv_mode() != GemvMode::kFp32;
    const bool i8 = gemv_mode() == GemvMode::kInt8 && w.cb == kCbMul1;
    float* xh = nullptr;
    if (!p.fuse_in && !tc) {
      xh = reinterpret_cast<float*>(ws);
      ws += align256(size_t(pad * w.k) * 4);
      rotate_in(w, x, 1, nullptr, rows, true, xh, stream);
    }
    GemvArgs a;
    a.w = w.trellis;
    a.tiles_k = int(w.k / 16), a.strips = int(w.n / 16);
    a.tiles_per_split = p.tiles_per_split, a.splits = p.splits;
    a.xh = xh, a.x = x, a.in_features = w.in_features, a.per_x = 1, a.suh = w.suh;
    a.k = w.k, a.n = w.n;
    a.part = reinterpret_cast<float*>(ws), a.counters = counters;
    a.rows = int(rows), a.part_rows = int(rows);
    a.svh = w.svh, a.bias = w.bias, a.epilogue = w.epilogue, a.out_features = w.out_features, a.y = y;
    a.round_hb = std::min(tc_round_hb(pad, i8), p.tiles_per_split / 8);
    if (tc) launch_gemv_tc(a, w.K, w.cb, pad, i8, dim3(p.blocks_x, unsigned(p.splits), 1), stream);
    else launch_gemv(a, w.K, w.cb, pad, false, p.fuse_in, dim3(p.blocks_x, unsigned(p.splits), 1), p.smem, stream);
    return;
  }
  if (prefill_impl() != PrefillImpl::kOld) {
    const SplitInput in = split_input(w, x, 1, nullptr, rows, ws, stream);
    PrefillArgs p;
    p.w = w.trellis, p.strips = int(w.n / 16);
    p.xhi = in.hi, p.xlo = in.lo, p.xsc = in.sc, p.k = w.k, p.n = w.n, p.rows = rows;
    p.svh = w.svh, p.bias = w.bias, p.out_features = w.out_features, p.y = y, p.epilogue = w.epilogue;
    p.row_scale = prefill_impl() == PrefillImpl::kRowScale;
    const dim3 grid(unsigned((w.n + kPfBn - 1) / kPfBn), unsigned((rows + kBm - 1) / kBm));
    with_k(w.K, [&](auto k) { launch_prefill_k<decltype(k)::value>(p, w.cb, grid, stream); });
    check_launch("exl3 prefill gemm");
    return;
  }
  const int64_t C = prefill_chunk(w);
  const SplitInput in = split_input(w, x, 1, nullptr, rows, ws, stream);
  float* z = reinterpret_cast<float*>(ws);
  uint4* wf = reinterpret_cast<uint4*>(ws + align256(size_t(rows * C) * 4));
  static const bool smem_ok = cudaFuncSetAttribute(gemm_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   int(2 * sizeof(GemmStage))) == cudaSuccess;
  if (!smem_ok) fail("exl3 (cuda): the prefill GEMM needs ", 2 * sizeof(GemmStage), " bytes of shared memory");
  for (int64_t c0 = 0; c0 < w.n; c0 += C) {
    const int64_t cols = std::min(C, w.n - c0);
    DecodeArgs d;
    d.w = w.trellis, d.tiles_k = int(w.k / 16), d.strips = int(w.n / 16), d.strip0 = int(c0 / 16);
    d.cols = int(cols), d.out = wf;
    launch_decode(d, w.K, w.cb, stream);
    const dim3 grid(unsigned(cols / kBn), unsigned((rows + kBm - 1) / kBm));
    gemm_tc_kernel<<<grid, 256, 2 * sizeof(GemmStage), stream>>>(in.hi, in.lo, in.sc, wf, rows, w.k, cols, z);
    check_launch("exl3 gemm");
    OutArgs o;
    o.part = z, o.splits = 1, o.ldz = cols, o.width = cols, o.col0 = c0;
    o.rows = rows, o.svh = w.svh, o.bias = w.bias, o.epilogue = w.epilogue, o.n = w.n, o.out_features = w.out_features, o.y = y;
    rotate_out(o, stream);
  }
}

namespace {
// Gather rows per round: the old grouped GEMM's kGatherRowChunk; the fused one's kPfGatherRowChunk
// (a 2048-token prefill chunk of Bolt's 9 experts a token is one round, so an expert's rows share
// one decode of its weights per 64 instead of per ~12).
constexpr int64_t kPfGatherRowChunk = 24576;
int64_t gather_chunk(int64_t rows, int per_x) {
  const int64_t c = rows > kGatherGemvMaxRows && prefill_impl() != PrefillImpl::kOld ? kPfGatherRowChunk
                                                                                      : kGatherRowChunk;
  return std::min<int64_t>(rows, std::max<int64_t>(per_x, c / per_x * per_x));
}
// Row tiles of a fused gather round of rc rows: at most one partial tile per expert with rows.
int64_t gather_tiles_max(const DeviceWeights& w, int64_t rc) {
  return (rc + kBm - 1) / kBm + std::min<int64_t>(w.n_experts, rc);
}
}  // namespace

// The split input and z (old) or the row list and tile table (fused) of one round of the grouped
// prefill gather.
size_t gather_gemm_bytes(const DeviceWeights& w, int64_t rc) {
  if (prefill_impl() != PrefillImpl::kOld)
    return split_input_bytes(w, rc) + align256(size_t(rc) * 4) + align256(size_t(gather_tiles_max(w, rc)) * 16) + 256;
  return split_input_bytes(w, rc) + size_t(rc * w.n) * 4;
}

size_t gather_workspace_bytes(const DeviceWeights& w, int64_t rows, int per_x) {
  const int64_t rc = gather_chunk(rows, per_x);
  if (rows > kGatherGemvMaxRows && prefill_impl() != PrefillImpl::kOld) return gather_gemm_bytes(w, rc);
  const GemvPlan p = plan_gemv(w, 1, true);
  const size_t gemv = (p.fuse_in ? 0 : align256(size_t(rc * w.k) * 4)) +
                      (p.splits > 1 ? size_t(p.splits) * size_t(rc * w.n) * 4 : 0);
  return rows > kGatherGemvMaxRows ? std::max(gemv, gather_gemm_bytes(w, rc)) : gemv;
}

size_t gather_counters(const DeviceWeights& w, int64_t rows, int per_x) {
  if (rows > kGatherGemvMaxRows && prefill_impl() != PrefillImpl::kOld) return 0;
  const GemvPlan p = plan_gemv(w, 1, true);
  return p.splits > 1 ? size_t(p.blocks_x) * size_t(gather_chunk(rows, per_x)) : 0;
}

void launch_gather_matmul(const DeviceWeights& w, const float* x, const int32_t* ids, int per_x, int64_t rows,
                          float* y, void* workspace, unsigned* counters, cudaStream_t stream) {
  const GemvPlan p = plan_gemv(w, 1, true);
  // Rounds of whole x rows (a multiple of per_x output rows), so x advances by rows too.
  const int64_t chunk = gather_chunk(rows, per_x);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t rc = std::min<int64_t>(chunk, rows - r0);
    char* ws = static_cast<char*>(workspace);
    const int32_t* ids_c = ids + r0;
    float* y_c = y + r0 * w.out_features;
    const float* x_c = x + (r0 / per_x) * w.in_features;
    if (rows > kGatherGemvMaxRows && prefill_impl() != PrefillImpl::kOld) {
      const SplitInput in = split_input(w, x_c, per_x, ids_c, rc, ws, stream);
      int* list = reinterpret_cast<int*>(ws);
      ws += align256(size_t(rc) * 4);
      const int64_t tmax = gather_tiles_max(w, rc);
      int4* tiles = reinterpret_cast<int4*>(ws);
      ws += align256(size_t(tmax) * 16);
      int* ntiles = reinterpret_cast<int*>(ws);
      const size_t gsmem = size_t(2) * size_t(w.n_experts) * 4;
      if (gsmem > (48u << 10)) {
        static const bool ok = cudaFuncSetAttribute(group_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    227 << 10) == cudaSuccess;
        if (!ok || gsmem > (227u << 10)) fail("exl3 (cuda): a gather of ", w.n_experts, " experts is too many to group");
      }
      group_rows_kernel<<<1, 1024, gsmem, stream>>>(ids_c, int(rc), w.n_experts, w.out_features, y_c, list, tiles,
                                                    ntiles);
      check_launch("exl3 group rows");
      PrefillArgs pa;
      pa.w = w.trellis, pa.expert_words = (w.k / 16) * (w.n / 16) * 8 * w.K, pa.strips = int(w.n / 16);
      pa.xhi = in.hi, pa.xlo = in.lo, pa.xsc = in.sc, pa.k = w.k, pa.n = w.n;
      pa.list = list, pa.tiles = tiles, pa.ntiles = ntiles;
      pa.svh = w.svh, pa.bias = w.bias, pa.out_features = w.out_features, pa.y = y_c, pa.epilogue = w.epilogue;
      pa.row_scale = prefill_impl() == PrefillImpl::kRowScale;
      const dim3 grid(unsigned((w.n + kPfBn - 1) / kPfBn), unsigned(tmax));
      with_k(w.K, [&](auto k) { launch_prefill_k<decltype(k)::value>(pa, w.cb, grid, stream); });
      check_launch("exl3 prefill gather gemm");
      continue;
    }
    if (rows > kGatherGemvMaxRows) {
      const SplitInput in = split_input(w, x_c, per_x, ids_c, rc, ws, stream);
      float* z = reinterpret_cast<float*>(ws);
      GatherGemmArgs g;
      g.w = w.trellis, g.expert_words = (w.k / 16) * (w.n / 16) * 8 * w.K;
      g.strips = int(w.n / 16), g.n_experts = w.n_experts, g.ids = ids_c, g.rows = int(rc);
      g.xhi = in.hi, g.xlo = in.lo, g.xsc = in.sc, g.k = w.k, g.n = w.n, g.z = z;
      with_k(w.K, [&](auto k) { launch_gather_gemm_k<decltype(k)::value>(g, w.cb, stream); });
      check_launch("exl3 gather gemm");
      OutArgs o;
      o.part = z, o.splits = 1, o.ldz = w.n, o.width = w.n, o.col0 = 0, o.rows = rc, o.ids = ids_c;
      o.n_experts = w.n_experts, o.svh = w.svh, o.bias = w.bias, o.epilogue = w.epilogue, o.n = w.n, o.out_features = w.out_features;
      o.y = y_c;
      rotate_out(o, stream);
      continue;
    }
    float* xh = nullptr;
    if (!p.fuse_in) {
      xh = reinterpret_cast<float*>(ws);
      ws += align256(size_t(rc * w.k) * 4);
      rotate_in(w, x_c, per_x, ids_c, rc, true, xh, stream);
    }
    GemvArgs a;
    a.w = w.trellis;
    a.expert_words = (w.k / 16) * (w.n / 16) * 8 * w.K;
    a.tiles_k = int(w.k / 16), a.strips = int(w.n / 16);
    a.tiles_per_split = p.tiles_per_split, a.splits = p.splits;
    a.xh = xh, a.x = x_c, a.in_features = w.in_features, a.per_x = per_x, a.suh = w.suh;
    a.k = w.k, a.n = w.n;
    a.part = reinterpret_cast<float*>(ws), a.counters = counters, a.part_rows = int(rc);
    a.ids = ids_c, a.n_experts = w.n_experts;
    a.svh = w.svh, a.bias = w.bias, a.epilogue = w.epilogue, a.out_features = w.out_features, a.y = y_c;
    launch_gemv(a, w.K, w.cb, 1, true, p.fuse_in, dim3(p.blocks_x, unsigned(p.splits), unsigned(rc)), p.smem, stream);
  }
}

}  // namespace tandem::exl3::kcuda
