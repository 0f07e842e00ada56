// CUDA kernels of the Mamba2 mixer. The step kernel gives each (head, p) row of the SSM state to one
// warp, the row held in registers across all steps of the launch. The chunked scan of prefill is in
// ssd_cuda.cu (tensor cores).
#include <algorithm>

#include "tandem/cuda/util.cuh"
#include "scan_cuda.cuh"
#include "scan_layout.cuh"

namespace tandem::mamba2 {

using cuda::ceil_div;
using cuda::check_launch;
using cuda::warp_sum;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = 8;                  // state rows per block, one per warp
constexpr int kRegs = kMaxState / 32;      // state elements per lane

// The scalar functions of scan_cpu.h, evaluated on the device.
__device__ __forceinline__ float silu_d(float v) { return v / (1.0f + expf(-v)); }
__device__ __forceinline__ float softplus_d(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

__global__ void add_bias_kernel(float* rows, int64_t n, int64_t cols, const float* bias) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    rows[i] += bias[i % cols];
}

__global__ void dt_kernel(const float* proj, int64_t stride, int64_t col, const float* dt_bias, int nh, int n,
                          bool clamp, float t_min, float* dt) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  const int64_t total = int64_t(n) * nh;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / nh;
    const int h = int(i % nh);
    const float v = softplus_d(proj[t * stride + col + h] + dt_bias[h]);
    dt[i] = clamp ? fmaxf(v, t_min) : v;
  }
}

__global__ void conv_silu_kernel(const float* window0, const float* window1, const int* sel, const float* u,
                                 int64_t u_stride, int n, const float* w, const float* bias, int64_t C, int K, float* out,
                                 int64_t out_stride, ConvSide side) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  const float* window = sel && *sel ? window1 : window0;
  const int W = K - 1;
  const int64_t total = int64_t(n) * C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int t = int(i / C);
    const int64_t c = i % C;
    if (side.u_log) side.u_log[i] = u[int64_t(t) * u_stride + c];
    if (side.z_out && c < side.z_cols) side.z_out[int64_t(t) * side.z_cols + c] = side.z_src[int64_t(t) * u_stride + c];
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) {
      const int src = t - W + j;  // position of tap j; negative = from the window
      const float v = src < 0 ? window[c * W + (W + src)] : u[int64_t(src) * u_stride + c];
      acc = acc + w[c * K + j] * v;
    }
    if (bias) acc = acc + bias[c];
    out[int64_t(t) * out_stride + c] = silu_d(acc);
  }
}

// shift_window over the flat index range [first, C·(K−1)) in steps of `step`.
__device__ __forceinline__ void shift_window_range(const WindowShift& w, int64_t first, int64_t step) {
  const int W = w.K - 1;
  const int64_t total = w.C * W;
  for (int64_t i = first; i < total; i += step) {
    const int64_t c = i / W;
    const int r = int(i % W);
    const int src = w.taken + r;  // row in [window ; u]
    w.out[i] = src < W ? w.window[c * W + src] : w.u[int64_t(src - W) * w.u_stride + c];
  }
}

__global__ void shift_window_kernel(WindowShift w) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  if (w.sel && blockIdx.x == 0 && threadIdx.x == 0) w.sel[0] = w.sel0, w.sel[1] = w.sel1;
  shift_window_range(w, blockIdx.x * int64_t(blockDim.x) + threadIdx.x, int64_t(gridDim.x) * blockDim.x);
}

using Layout = ScanLayout;

__global__ void set_selectors_kernel(int* sel, int sel0, int sel1) { sel[0] = sel0, sel[1] = sel1; }

// One warp per state row (h, p); lane l holds s[p, l + 32·i]. With sel != nullptr and *sel = 1 the
// two buffers trade roles (s_out is read, s_in written: both are then a StatePair's buffers).
// With shift.out != nullptr the grid also does that window shift (and its selector store) first: a
// commit's replay and shift in one launch. The shift touches none of the scan's inputs or outputs.
__global__ void steps_kernel(Layout L, const float* xbc, const float* dt, int n, const float* a, const float* d,
                             const float* s_in, float* s_out, const int* sel, float* y, WindowShift shift) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  if (shift.out) {
    const int64_t block = int64_t(blockIdx.y) * gridDim.x + blockIdx.x;
    if (shift.sel && block == 0 && threadIdx.x == 0) shift.sel[0] = shift.sel0, shift.sel[1] = shift.sel1;
    shift_window_range(shift, block * blockDim.x + threadIdx.x, int64_t(gridDim.x) * gridDim.y * blockDim.x);
  }
  if (sel && *sel) {
    float* committed = s_out;
    s_out = const_cast<float*>(s_in);
    s_in = committed;
  }
  const int h = blockIdx.x;
  const int p = blockIdx.y * kWarps + (threadIdx.x >> 5);
  if (p >= L.P) return;
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t(h) * L.P + p) * L.N;
  float s[kRegs];
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int k = lane + 32 * i;
    s[i] = k < L.N ? s_in[row + k] : 0.0f;
  }
  const float ah = a[h];
  for (int t = 0; t < n; ++t) {
    const float dtv = dt[int64_t(t) * L.nh + h];
    const float da = expf(dtv * ah);
    const float xv = L.x(xbc, t, h)[p];
    const float dx = dtv * xv;
    const float* bt = L.b(xbc, t, h);
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int k = lane + 32 * i;
      if (k < L.N) s[i] = da * s[i] + dx * bt[k];
    }
    if (y) {
      const float* ct = L.c(xbc, t, h);
      float part = 0.0f;
#pragma unroll
      for (int i = 0; i < kRegs; ++i) {
        const int k = lane + 32 * i;
        if (k < L.N) part = part + s[i] * ct[k];
      }
      const float tot = warp_sum(part);
      if (lane == 0) y[int64_t(t) * L.d_in + int64_t(h) * L.P + p] = tot + d[h] * xv;
    }
  }
#pragma unroll
  for (int i = 0; i < kRegs; ++i) {
    const int k = lane + 32 * i;
    if (k < L.N) s_out[row + k] = s[i];
  }
}

// ---- the fused verify pass (launch_verify_fused) ----
constexpr int kVerifyWarps = 16;
constexpr int kVerifyThreads = 32 * kVerifyWarps;
constexpr int kRowsPerWarp = 2;  // state rows per warp: 32 per block, 256 blocks at Bolt's size (one wave)
constexpr int kVerifyRows = kVerifyWarps * kRowsPerWarp;
constexpr int kVerifyTile = 16;   // positions whose conv outputs sit in shared memory at once
constexpr int kNormWidth = 256;   // threads per row of the backend's gated norm: its sum order
constexpr int kNormRows = kVerifyThreads / kNormWidth;  // group rows the last block normalizes at once
static_assert(kVerifyThreads % kNormWidth == 0, "whole norm rows per block");

struct VerifyLayout {
  int nh, P, G, N, K, hpg;
  int64_t d_in, cdim, rows, gd;  // gd: columns of one norm group (= heads_per_group · P)
};

size_t verify_smem_floats(int N) {
  return size_t(kVerifyTile) * (kVerifyRows + 2 * N) + kVerifyTile + kVerifyWarps;
}

// u = y·silu(z), the backend norm's expression. y comes from other blocks: read at L2 (__ldcg), never
// from a line this SM's L1 may hold from before the hand-off.
__device__ __forceinline__ float gated_d(const float* y, const float* z, int64_t c) {
  const float zv = z[c];
  return __ldcg(y + c) * (zv / (1.0f + expf(-zv)));
}

// Grid (nh, ceil(P / 32)); block (h, slice) owns state rows p = slice·32 + 16·r + warp (r = 0, 1) of
// head h, the x columns of those rows, and (slice 0 of a group's first head) the group's B and C columns in
// the log. Every block of group g computes the conv of B and C itself (2N columns, K taps each).
// All __syncthreads sit outside data-dependent branches: loop bounds and `last` are block-uniform.
template <int NR>
__global__ void __launch_bounds__(kVerifyThreads, 2)
    verify_fused_kernel(VerifyLayout L, const __grid_constant__ VerifyBatch batch) {
  const VerifyPass& v = batch.pass[blockIdx.z];  // read in place from the parameter space
  extern __shared__ float smem[];
  float* xs = smem;                                  // [tile][kVerifyRows]
  float* bs = xs + kVerifyTile * kVerifyRows;        // [tile][N]
  float* cs = bs + kVerifyTile * L.N;                // [tile][N]
  float* dts = cs + kVerifyTile * L.N;               // [tile]
  float* scratch = dts + kVerifyTile;                // [kVerifyWarps]: the norm's warp sums
  __shared__ int last;

  cuda::pdl_wait();
  cuda::pdl_trigger();
  const int h = blockIdx.x, slice = blockIdx.y, g = h / L.hpg;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float* window = *v.windows.sel ? v.windows.buf[1] : v.windows.buf[0];
  const bool flip = *v.states.sel != 0;
  const float* s_in = flip ? v.states.buf[1] : v.states.buf[0];
  float* s_out = flip ? v.states.buf[0] : v.states.buf[1];

  // The state rows' loads go out first; the conv below hides their latency.
  const int p0 = slice * kVerifyRows + warp;  // row r is p0 + 16·r; live when < P (warp-uniform)
  float s[kRowsPerWarp][NR];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int p = p0 + r * kVerifyWarps;
    const int64_t srow = (int64_t(h) * L.P + p) * L.N;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int k = lane + 32 * i;
      s[r][i] = p < L.P && k < L.N ? s_in[srow + k] : 0.0f;
    }
  }
  const float ah = v.a[h], dh = v.d[h];
  const bool bc_owner = slice == 0 && h % L.hpg == 0;
  const int W = L.K - 1;
  const int cols = kVerifyRows + 2 * L.N;  // conv columns per position: own x, then B, then C
  const float* u = v.proj + L.d_in;         // pre-conv x B C, row stride L.rows

  for (int t0 = 0; t0 < v.n; t0 += kVerifyTile) {
    const int tt = min(kVerifyTile, v.n - t0);
    for (int idx = threadIdx.x; idx < tt * cols; idx += blockDim.x) {
      const int tl = idx / cols, col = idx % cols;
      int64_t c;
      float* dst;
      bool owner;
      if (col < kVerifyRows) {
        const int pc = slice * kVerifyRows + col;
        if (pc >= L.P) continue;
        c = int64_t(h) * L.P + pc, dst = xs + tl * kVerifyRows + col, owner = true;
      } else if (col < kVerifyRows + L.N) {
        const int k = col - kVerifyRows;
        c = L.d_in + int64_t(g) * L.N + k, dst = bs + tl * L.N + k, owner = bc_owner;
      } else {
        const int k = col - kVerifyRows - L.N;
        c = L.d_in + int64_t(L.G + g) * L.N + k, dst = cs + tl * L.N + k, owner = bc_owner;
      }
      const int t = t0 + tl;
      // conv_silu_kernel's expression, tap by tap.
      float acc = 0.0f;
      for (int j = 0; j < L.K; ++j) {
        const int src = t - W + j;  // position of tap j; negative = from the window
        const float val = src < 0 ? window[c * W + (W + src)] : u[int64_t(src) * L.rows + c];
        acc = acc + v.conv_w[c * L.K + j] * val;
      }
      if (v.conv_b) acc = acc + v.conv_b[c];
      const float o = silu_d(acc);
      *dst = o;
      if (owner) {
        v.xbc_log[int64_t(t) * L.cdim + c] = o;
        v.u_log[int64_t(t) * L.cdim + c] = u[int64_t(t) * L.rows + c];
      }
    }
    if (threadIdx.x < tt) {  // dt_kernel's expression (verify never clamps)
      const int t = t0 + threadIdx.x;
      const float dtv = softplus_d(v.proj[int64_t(t) * L.rows + L.d_in + L.cdim + h] + v.dt_bias[h]);
      dts[threadIdx.x] = dtv;
      if (slice == 0) v.dt_log[int64_t(t) * L.nh + h] = dtv;
    }
    __syncthreads();
    for (int tl = 0; tl < tt; ++tl) {  // steps_kernel's recurrence and output, row by row
      const float dtv = dts[tl];
      const float da = expf(dtv * ah);
      const float* bt = bs + tl * L.N;
      const float* ct = cs + tl * L.N;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int p = p0 + r * kVerifyWarps;
        if (p >= L.P) continue;
        const float xv = xs[tl * kVerifyRows + r * kVerifyWarps + warp];
        const float dx = dtv * xv;
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          const int k = lane + 32 * i;
          if (k < L.N) s[r][i] = da * s[r][i] + dx * bt[k];
        }
        float part = 0.0f;
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          const int k = lane + 32 * i;
          if (k < L.N) part = part + s[r][i] * ct[k];
        }
        const float tot = warp_sum(part);
        if (lane == 0) v.y[int64_t(t0 + tl) * L.d_in + int64_t(h) * L.P + p] = tot + dh * xv;
      }
    }
    __syncthreads();  // the tile's shared values are read before the next tile overwrites them
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int p = p0 + r * kVerifyWarps;
    if (p >= L.P) continue;
    const int64_t srow = (int64_t(h) * L.P + p) * L.N;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const int k = lane + 32 * i;
      if (k < L.N) s_out[srow + k] = s[r][i];
    }
  }

  // Hand-off: every thread fences its y stores to device scope before the block is counted; the block
  // that brings group g's count to its total has the last y of the group and normalizes it.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned per_group = unsigned(L.hpg) * gridDim.y;
    last = atomicAdd(v.counters + g, 1u) == per_group - 1;
    __threadfence();  // as cooperative groups' grid sync: the count read, then a fence, then the barrier
  }
  __syncthreads();
  if (!last) return;  // block-uniform
  __threadfence();     // acquire side of the count: the other blocks' y are read after it

  // norm_vec_kernel<V, kNormGated> for group g: virtual thread vt of a row sums the float4s
  // vt, vt + 256, … (components in order) with fmaf, then warp sums and the sum of the 8 warp sums
  // as block_sum does; kNormRows rows at a time.
  const int sub = threadIdx.x / kNormWidth, vt = threadIdx.x % kNormWidth;
  const int64_t gd = L.gd, g0 = int64_t(g) * gd;
  const float* wg = v.norm_w + g0;
  for (int r0 = 0; r0 < v.n; r0 += kNormRows) {
    const int t = r0 + sub;
    const bool live = t < v.n;
    const float* yr = v.y + int64_t(t) * L.d_in + g0;
    const float* zr = v.proj + int64_t(t) * L.rows + g0;  // z: the first d_in columns of proj
    float ss = 0.0f;
    if (live) {
      for (int64_t q = vt; q * 4 < gd; q += kNormWidth)
        for (int e = 0; e < 4; ++e) {
          const int64_t c = q * 4 + e;
          if (c < gd) {
            const float x = gated_d(yr, zr, c);
            ss = fmaf(x, x, ss);
          }
        }
    }
    ss = warp_sum(ss);
    __syncthreads();  // the previous rows' sums are read
    if (lane == 0) scratch[warp] = ss;
    __syncthreads();
    const int per_row = kNormWidth / 32;
    const float tot = warp_sum(lane < per_row ? scratch[sub * per_row + lane] : 0.0f);
    const float rs = 1.0f / sqrtf(tot / float(gd) + v.eps);
    if (live) {
      float* outr = v.out + int64_t(t) * L.d_in + g0;
      for (int64_t q = vt; q * 4 < gd; q += kNormWidth)
        for (int e = 0; e < 4; ++e) {
          const int64_t c = q * 4 + e;
          if (c < gd) outr[c] = wg[c] * (gated_d(yr, zr, c) * rs);
        }
    }
  }
  if (threadIdx.x == 0) v.counters[g] = 0;  // every other block of g has counted: ready for the next launch
}

unsigned elt_blocks(int64_t n) { return unsigned(std::min<int64_t>(ceil_div(n, kThreads), 65535 * 8)); }

void check_dims(const Dims& dm) {
  check(dm.N <= kMaxState, "mamba2 (cuda): state_size ", dm.N, " exceeds the kernels' limit ", kMaxState);
  check(dm.nh <= 65535 && ceil_div(dm.P, kWarps) <= 65535, "mamba2 (cuda): nh=", dm.nh, " P=", dm.P,
        " exceed one launch");
}

}  // namespace

void launch_add_bias(float* rows, int64_t n, int64_t cols, const float* bias, cudaStream_t stream) {
  if (n == 0 || cols == 0) return;
  cuda::launch(add_bias_kernel, dim3(elt_blocks(n * cols)), dim3(kThreads), 0, stream, "mamba2 add_bias", rows, n, cols,
               bias);
}

void launch_dt(const float* proj, int64_t stride, int64_t col, const float* dt_bias, int nh, int n, bool clamp,
               float t_min, float* dt, cudaStream_t stream) {
  if (n == 0) return;
  cuda::launch(dt_kernel, dim3(elt_blocks(int64_t(n) * nh)), dim3(kThreads), 0, stream, "mamba2 dt", proj, stride, col,
               dt_bias, nh, n, clamp, t_min, dt);
}

void launch_conv_silu(const float* window, const float* u, int64_t u_stride, int n, const float* w, const float* bias,
                      int64_t C, int K, float* out, int64_t out_stride, cudaStream_t stream, const ConvSide& side) {
  if (n == 0) return;
  check(side.z_cols <= C, "mamba2 conv_silu: ", side.z_cols, " z columns exceed the ", C, " conv columns");
  cuda::launch(conv_silu_kernel, dim3(elt_blocks(int64_t(n) * C)), dim3(kThreads), 0, stream, "mamba2 conv_silu", window,
               window, static_cast<const int*>(nullptr), u, u_stride, n, w, bias, C, K, out, out_stride, side);
}

void launch_conv_silu(StatePair windows, const float* u, int64_t u_stride, int n, const float* w, const float* bias,
                      int64_t C, int K, float* out, int64_t out_stride, cudaStream_t stream, const ConvSide& side) {
  if (n == 0) return;
  check(side.z_cols <= C, "mamba2 conv_silu: ", side.z_cols, " z columns exceed the ", C, " conv columns");
  cuda::launch(conv_silu_kernel, dim3(elt_blocks(int64_t(n) * C)), dim3(kThreads), 0, stream, "mamba2 conv_silu",
               windows.buf[0], windows.buf[1], windows.sel, u, u_stride, n, w, bias, C, K, out, out_stride, side);
}

void launch_set_selectors(int* sel, int sel0, int sel1, cudaStream_t stream) {
  set_selectors_kernel<<<1, 1, 0, stream>>>(sel, sel0, sel1);
  check_launch("mamba2 set_selectors");
}

void launch_shift_window(const float* window, const float* u, int64_t u_stride, int taken, int64_t C, int K,
                         float* out, cudaStream_t stream, int* sel, int sel0, int sel1) {
  cuda::launch(shift_window_kernel, dim3(std::max(1u, elt_blocks(C * (K - 1)))), dim3(kThreads), 0, stream,
               "mamba2 shift_window", WindowShift{window, u, u_stride, taken, C, K, out, sel, sel0, sel1});
}

void launch_scan_steps(const Dims& dm, const ScanInput& in, const float* a, const float* d, const float* s_in,
                       float* s_out, float* y, cudaStream_t stream) {
  check_dims(dm);
  if (in.n == 0 && s_in == s_out) return;
  dim3 grid(unsigned(dm.nh), unsigned(ceil_div(dm.P, kWarps)));
  cuda::launch(steps_kernel, grid, dim3(kThreads), 0, stream, "mamba2 scan_steps", layout_of(dm, in.xbc_stride), in.xbc,
               in.dt, in.n, a, d, s_in, s_out, static_cast<const int*>(nullptr), y, WindowShift{});
}

void launch_replay_and_shift(const Dims& dm, const ScanInput& in, const float* a, float* s, const WindowShift& shift,
                             cudaStream_t stream) {
  check_dims(dm);
  check(shift.out, "mamba2 replay_and_shift: no window to shift into");
  dim3 grid(unsigned(dm.nh), unsigned(ceil_div(dm.P, kWarps)));
  cuda::launch(steps_kernel, grid, dim3(kThreads), 0, stream, "mamba2 replay_and_shift", layout_of(dm, in.xbc_stride),
               in.xbc, in.dt, in.n, a, static_cast<const float*>(nullptr), static_cast<const float*>(s), s,
               static_cast<const int*>(nullptr), static_cast<float*>(nullptr), shift);
}

void launch_scan_steps(const Dims& dm, const ScanInput& in, const float* a, const float* d, StatePair states, float* y,
                       cudaStream_t stream) {
  check_dims(dm);
  dim3 grid(unsigned(dm.nh), unsigned(ceil_div(dm.P, kWarps)));
  cuda::launch(steps_kernel, grid, dim3(kThreads), 0, stream, "mamba2 scan_steps", layout_of(dm, in.xbc_stride), in.xbc,
               in.dt, in.n, a, d, states.buf[0], states.buf[1], states.sel, y, WindowShift{});
}

void launch_verify_fused(const Dims& dm, const VerifyPass& v, cudaStream_t stream) {
  VerifyBatch b;
  b.pass[0] = v;
  b.count = 1;
  launch_verify_fused(dm, b, stream);
}

void launch_verify_fused(const Dims& dm, const VerifyBatch& batch, cudaStream_t stream) {
  check(dm.N <= kMaxState, "mamba2 (cuda): state_size ", dm.N, " exceeds the kernels' limit ", kMaxState);
  check(ceil_div(dm.P, kVerifyRows) <= 65535, "mamba2 (cuda): head_dim ", dm.P, " exceeds one verify launch");
  check(dm.G > 0 && dm.nh % dm.G == 0 && dm.d_in == int64_t(dm.nh) * dm.P, "mamba2 verify_fused: ", dm.nh,
        " heads of ", dm.P, " do not split into ", dm.G, " groups of d_inner ", dm.d_in);
  check(batch.count >= 0 && batch.count <= kVerifyBatchMax, "mamba2 verify_fused: ", batch.count,
        " passes in one launch, at most ", kVerifyBatchMax);
  for (int b = 0; b < batch.count; ++b) {
    const VerifyPass& v = batch.pass[b];
    check(v.n > 0, "mamba2 verify_fused: pass ", b, " of the batch has ", v.n, " rows, expected at least 1");
    check(v.y != v.out, "mamba2 verify_fused: out must not alias y");
    for (int c = 0; c < b; ++c)
      check(batch.pass[c].counters != v.counters, "mamba2 verify_fused: passes ", c, " and ", b,
            " of the batch share their counters");
  }
  if (batch.count == 0) return;
  const VerifyLayout L{dm.nh, dm.P, dm.G, dm.N, dm.K, dm.heads_per_group(), dm.d_in, dm.conv_dim, dm.rows,
                       dm.d_in / dm.G};
  const dim3 grid(unsigned(dm.nh), unsigned(ceil_div(dm.P, kVerifyRows)), unsigned(batch.count));
  const size_t smem = verify_smem_floats(dm.N) * sizeof(float);  // ≤ 34 KiB at N = 256: no opt-in
  auto go = [&](auto kernel) {
    cuda::launch(kernel, grid, dim3(kVerifyThreads), smem, stream, "mamba2 verify_fused", L, batch);
  };
  if (dm.N <= 32) go(verify_fused_kernel<1>);
  else if (dm.N <= 64) go(verify_fused_kernel<2>);
  else if (dm.N <= 128) go(verify_fused_kernel<4>);
  else go(verify_fused_kernel<8>);
}

}  // namespace tandem::mamba2
