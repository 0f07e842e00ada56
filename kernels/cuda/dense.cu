// Dense BF16/F16/F32 weights on the GPU: the tensor-core kernels of BF16/F16 (dense_tc.cu) for
// every row count; the SIMT warp-per-output GEMV (decode and verify of F32 weights, every MoE
// gather, and BF16/F16 when the tensor-core kernels do not take a weight or TANDEM_CUDA_DENSE_SIMT=1)
// and tiled kernel (prefill), and row gathers, on raw device pointers.
#include "tandem/cuda/dense.cuh"

#include "dense_tc.cuh"

#include <algorithm>
#include <cstring>

namespace tandem::cuda {

namespace {

constexpr int kWarps = 8;           // output rows per GEMV block, one per warp
constexpr int kLaneSpan = 8;        // consecutive elements a lane takes per step
constexpr int kStep = 32 * kLaneSpan;

// acc[r] += x[r] · w over one weight row, for the rows r < nr. Lane l takes elements
// l·8 + 256·t + e (e = 0..7, in order), one fmaf each; that order is fixed by k alone, so row r's
// partial sums never depend on nr or on which loads were vectorized.
template <WType T, int NR>
__device__ __forceinline__ void lane_dots(const typename WElem<T>::type* wr, int64_t k, bool wvec, const float* x,
                                          int64_t x_stride, int nr, bool xvec, float* acc) {
  const int lane = threadIdx.x & 31;
  for (int64_t base = int64_t(lane) * kLaneSpan; base < k; base += kStep) {
    const bool full = base + kLaneSpan <= k;
    float wv[kLaneSpan];
    if (full && wvec) {
      WElem<T>::get8(wr + base, wv);
    } else {
#pragma unroll
      for (int e = 0; e < kLaneSpan; ++e) wv[e] = base + e < k ? WElem<T>::get(wr, base + e) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      if (r >= nr) break;
      const float* xr = x + r * x_stride + base;
      if (full) {
        float xv[kLaneSpan];
        if (xvec) {
          const float4 a = *reinterpret_cast<const float4*>(xr), b = *reinterpret_cast<const float4*>(xr + 4);
          xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w, xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
        } else {
#pragma unroll
          for (int e = 0; e < kLaneSpan; ++e) xv[e] = xr[e];
        }
#pragma unroll
        for (int e = 0; e < kLaneSpan; ++e) acc[r] = fmaf(wv[e], xv[e], acc[r]);
      } else {
        for (int e = 0; e < kLaneSpan && base + e < k; ++e) acc[r] = fmaf(wv[e], xr[e], acc[r]);
      }
    }
  }
}

// The same sums when both vector paths apply and k is a multiple of kUnroll·kStep (every model
// width): kUnroll steps of weights are loaded at once, the next group while the current one is used,
// so a lane keeps several loads in flight. The order of each acc[r] is that of lane_dots. With Wait,
// pdl_wait() comes after the first weight loads (weights are never written by a pass).
constexpr int kUnroll = 4;
template <WType T>
__device__ __forceinline__ void load_steps(const typename WElem<T>::type* wr, int64_t base, float (&wv)[kUnroll][kLaneSpan]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) WElem<T>::get8(wr + base + u * kStep, wv[u]);
}
template <WType T, int NR, bool Wait>
__device__ __forceinline__ void lane_dots_fast(const typename WElem<T>::type* wr, int64_t k, const float* x,
                                               int64_t x_stride, int nr, float* acc) {
  const int lane = threadIdx.x & 31;
  float wv[kUnroll][kLaneSpan], wn[kUnroll][kLaneSpan];
  int64_t base = int64_t(lane) * kLaneSpan;
  load_steps<T>(wr, base, wv);
  if constexpr (Wait) cuda::pdl_wait(), cuda::pdl_trigger();
  for (; base < k; base += kUnroll * kStep) {
    const bool more = base + kUnroll * kStep < k;
    if (more) load_steps<T>(wr, base + kUnroll * kStep, wn);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        if (r >= nr) break;
        const float* xr = x + r * x_stride + base + u * kStep;
        const float4 a = *reinterpret_cast<const float4*>(xr), b = *reinterpret_cast<const float4*>(xr + 4);
        const float xv[kLaneSpan] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < kLaneSpan; ++e) acc[r] = fmaf(wv[u][e], xv[e], acc[r]);
      }
    if (more) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int e = 0; e < kLaneSpan; ++e) wv[u][e] = wn[u][e];
    }
  }
}
__host__ __device__ inline bool fast_dots(bool wvec, bool xvec, int64_t k) { return wvec && xvec && k % (kUnroll * kStep) == 0; }

// One output row per `sk` warps: warp (row, slice) sums the slice's k / sk elements in lane_dots'
// order; the slices are added in slice order through shared memory. sk comes from the weight's shape
// alone (gemv_splits), so a row's bits do not depend on n. Splitting keeps a small-m GEMV (the F32
// router: 240–496 rows) from running on a few warps per SM: 8 rows of it took 53 µs unsplit.
template <WType T, int NR>
__global__ void gemv_kernel(const typename WElem<T>::type* w, int64_t m, int64_t k, bool wvec, const float* x, int nr,
                            bool xvec, bool fast, int sk, float* y) {
  __shared__ float part[kWarps][NR];
  const int wi = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31), slice = wi % sk;
  const int64_t o = int64_t(blockIdx.x) * (kWarps / sk) + wi / sk;
  const int64_t ks = k / sk, k0 = int64_t(slice) * ks;
  if (sk == 1 && o >= m) return;  // a whole warp leaves together (no barrier below when unsplit)
  float acc[NR];
#pragma unroll
  for (int r = 0; r < NR; ++r) acc[r] = 0.0f;
  if (o >= m) {
    cuda::pdl_wait();
    cuda::pdl_trigger();
  } else if (fast) {
    lane_dots_fast<T, NR, true>(w + o * k + k0, ks, x + k0, k, nr, acc);
  } else {
    cuda::pdl_wait();
    cuda::pdl_trigger();
    lane_dots<T, NR>(w + o * k + k0, ks, wvec, x + k0, k, nr, xvec, acc);
  }
#pragma unroll
  for (int r = 0; r < NR; ++r) {
    if (r >= nr) break;
    const float v = cuda::warp_sum(acc[r]);
    if (sk == 1) {
      if (lane == 0) y[r * m + o] = v;
    } else if (lane == 0) {
      part[wi][r] = v;
    }
  }
  if (sk == 1) return;
  __syncthreads();
  if (slice == 0 && o < m && lane < nr) {
    float v = part[wi][lane];
    for (int j = 1; j < sk; ++j) v += part[wi + j][lane];
    y[int64_t(lane) * m + o] = v;
  }
}

// Warps per output row: split k while the GEMV has few rows, each slice a whole number of the fast
// path's 1024-element steps (every model width), at most the block's 8 warps.
int gemv_splits(int64_t m, int64_t k) {
  int sk = 1;
  while (sk < kWarps && k % (int64_t(2 * sk) * kUnroll * kStep) == 0 && m * sk < 4096) sk *= 2;
  return sk;
}

template <WType T>
__global__ void gather_kernel(const typename WElem<T>::type* w, int n_experts, int64_t m, int64_t k, bool wvec,
                              const float* x, bool xvec, const int32_t* ids, int per_x, int64_t rows, float* y) {
  cuda::pdl_wait();
  cuda::pdl_trigger();
  const int64_t o = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (o >= m) return;
  const bool fast = fast_dots(wvec, xvec, k);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int32_t e = ids[r];
    if (e < 0 || e >= n_experts) {
      if ((threadIdx.x & 31) == 0) y[r * m + o] = __int_as_float(0x7fc00000);
      continue;
    }
    float acc[1] = {0.0f};
    if (fast) lane_dots_fast<T, 1, false>(w + (int64_t(e) * m + o) * k, k, x + (r / per_x) * k, k, 1, acc);
    else lane_dots<T, 1>(w + (int64_t(e) * m + o) * k, k, wvec, x + (r / per_x) * k, k, 1, xvec, acc);
    const float s = cuda::warp_sum(acc[0]);
    if ((threadIdx.x & 31) == 0) y[r * m + o] = s;
  }
}

// Prefill: 64×64 output tiles, k in steps of 16 through shared memory; each thread owns a 4×4 block
// and sums its outputs in k order.
constexpr int kTile = 64, kTileK = 16, kGemmThreads = 256;

template <WType T>
__global__ void gemm_kernel(const typename WElem<T>::type* w, int64_t m, int64_t k, const float* x, int64_t n,
                            float* y) {
  __shared__ float xs[kTileK][kTile + 4];
  __shared__ float ws[kTileK][kTile + 4];
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
    for (int idx = threadIdx.x; idx < kTile * kTileK; idx += kGemmThreads) {
      const int rr = idx / kTileK, kk = idx % kTileK;
      const int64_t gk = k0 + kk;
      xs[kk][rr] = row0 + rr < n && gk < k ? x[(row0 + rr) * k + gk] : 0.0f;
      ws[kk][rr] = col0 + rr < m && gk < k ? WElem<T>::get(w, (col0 + rr) * k + gk) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty * 4 + i], b[i] = ws[kk][tx * 4 + i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = row0 + ty * 4 + i, c = col0 + tx * 4 + j;
      if (r < n && c < m) y[r * m + c] = acc[i][j];
    }
}

constexpr int kIdsPerLaunch = 64;
struct RowIds {
  int32_t id[kIdsPerLaunch];
};

template <WType T>
__global__ void get_rows_kernel(const typename WElem<T>::type* w, int64_t k, RowIds ids, float* out) {
  const int i = blockIdx.y;
  const typename WElem<T>::type* src = w + int64_t(ids.id[i]) * k;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < k; c += int64_t(gridDim.x) * blockDim.x)
    out[i * k + c] = WElem<T>::get(src, c);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// Vector loads of 8 weights need every row 16-byte aligned; x rows need it for float4 loads.
bool w_vec(WType t, const void* w, int64_t k) { return aligned16(w) && (size_t(k) * elem_bytes(t)) % 16 == 0; }
bool x_vec(const float* x, int64_t k) { return aligned16(x) && k % 4 == 0; }

// TANDEM_CUDA_DENSE_SIMT=1 keeps BF16/F16 weights on the SIMT kernels (side-by-side timing); read once.
bool simt_only() {
  static const bool v = env_is_one("TANDEM_CUDA_DENSE_SIMT");
  return v;
}

template <WType T>
void matmul_typed(const void* wp, int64_t m, int64_t k, const float* x, int64_t n, float* y, cudaStream_t s) {
  using E = typename WElem<T>::type;
  if (T != WType::F32 && !simt_only() && dense_tc::eligible(T, wp, k)) return dense_tc::matmul(T, wp, m, k, x, n, y, s);
  const E* w = static_cast<const E*>(wp);
  if (n > kGemvMaxRows) {
    dim3 grid(unsigned(ceil_div(m, kTile)), unsigned(ceil_div(n, kTile)));
    check(grid.y <= 65535, "matmul (cuda): ", n, " rows exceed one launch");
    gemm_kernel<T><<<grid, kGemmThreads, 0, s>>>(w, m, k, x, n, y);
    return check_launch("dense matmul (tiled)");
  }
  const int sk = gemv_splits(m, k);
  const unsigned blocks = unsigned(ceil_div(m, int64_t(kWarps / sk)));
  const bool wv = w_vec(T, wp, k), xv = x_vec(x, k), fast = fast_dots(wv, xv, k / sk);
  const int nr = int(n);
  auto go = [&](auto kernel) {
    cuda::launch(kernel, dim3(blocks), dim3(kWarps * 32), 0, s, "dense matmul (gemv)", w, m, k, wv, x, nr, xv, fast, sk,
                 y);
  };
  if (n == 1) go(gemv_kernel<T, 1>);
  else if (n <= 4) go(gemv_kernel<T, 4>);
  else go(gemv_kernel<T, kGemvMaxRows>);
}

template <WType T>
void gather_typed(const void* wp, int n_experts, int64_t m, int64_t k, const float* x, const int32_t* ids, int per_x,
                  int64_t rows, float* y, cudaStream_t s) {
  using E = typename WElem<T>::type;
  dim3 grid(unsigned(ceil_div(m, kWarps)), unsigned(std::min<int64_t>(rows, 65535)));
  cuda::launch(gather_kernel<T>, grid, dim3(kWarps * 32), 0, s, "dense gather_matmul", static_cast<const E*>(wp),
               n_experts, m, k, w_vec(T, wp, k), x, x_vec(x, k), ids, per_x, rows, y);
}

template <WType T>
void get_rows_typed(const void* wp, int64_t k, const int32_t* ids, int n, float* out, cudaStream_t s) {
  using E = typename WElem<T>::type;
  for (int i0 = 0; i0 < n; i0 += kIdsPerLaunch) {
    RowIds batch{};
    const int cnt = std::min(kIdsPerLaunch, n - i0);
    std::memcpy(batch.id, ids + i0, size_t(cnt) * sizeof(int32_t));
    dim3 grid(unsigned(std::min<int64_t>(ceil_div(k, 256), 64)), unsigned(cnt));
    get_rows_kernel<T><<<grid, 256, 0, s>>>(static_cast<const E*>(wp), k, batch, out + int64_t(i0) * k);
    check_launch("dense get_rows");
  }
}

}  // namespace

void launch_dense_matmul(WType t, const void* w, int64_t m, int64_t k, const float* x, int64_t n, float* y,
                         cudaStream_t stream) {
  if (n == 0 || m == 0) return;
  switch (t) {
    case WType::BF16: return matmul_typed<WType::BF16>(w, m, k, x, n, y, stream);
    case WType::F16: return matmul_typed<WType::F16>(w, m, k, x, n, y, stream);
    case WType::F32: return matmul_typed<WType::F32>(w, m, k, x, n, y, stream);
  }
}

void launch_dense_gather_matmul(WType t, const void* w, int n_experts, int64_t m, int64_t k, const float* x,
                                const int32_t* ids, int per_x, int64_t rows, float* y, cudaStream_t stream) {
  if (rows == 0 || m == 0) return;
  if (t != WType::F32 && !simt_only() && dense_tc::grouped_gather_enabled() && rows >= dense_tc::kGroupedMinItems &&
      n_experts >= 1 && n_experts <= dense_tc::kGroupedMaxExperts && dense_tc::eligible(t, w, k))
    return dense_tc::gather(t, w, n_experts, m, k, x, ids, per_x, rows, y, stream);
  switch (t) {
    case WType::BF16: return gather_typed<WType::BF16>(w, n_experts, m, k, x, ids, per_x, rows, y, stream);
    case WType::F16: return gather_typed<WType::F16>(w, n_experts, m, k, x, ids, per_x, rows, y, stream);
    case WType::F32: return gather_typed<WType::F32>(w, n_experts, m, k, x, ids, per_x, rows, y, stream);
  }
}

void launch_dense_get_rows(WType t, const void* w, int64_t k, const int32_t* ids_host, int n, float* out,
                           cudaStream_t stream) {
  if (n == 0 || k == 0) return;
  switch (t) {
    case WType::BF16: return get_rows_typed<WType::BF16>(w, k, ids_host, n, out, stream);
    case WType::F16: return get_rows_typed<WType::F16>(w, k, ids_host, n, out, stream);
    case WType::F32: return get_rows_typed<WType::F32>(w, k, ids_host, n, out, stream);
  }
}
}  // namespace tandem::cuda
