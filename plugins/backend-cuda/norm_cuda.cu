// Row-wise CUDA kernels: RMSNorm, the Mamba2 gated grouped RMSNorm, add, relu² and the MoE combine.
// One block per row (or row group) with a fixed reduction tree, so a row's bits never depend on n.
// Launched programmatically (tandem/cuda/util.cuh): each kernel waits for the previous one before any access.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "tandem/cuda/util.cuh"
#include "kernels_cuda.cuh"

namespace tandem::cuda {
namespace {

constexpr int kNormThreads = 256;
constexpr int kEltThreads = 256;
// Grid rows beyond this are covered by a loop (gridDim.y/x limits).
constexpr int64_t kMaxGrid = 65535;

// x·rsqrt(mean(x²)+eps)·w over `d` elements starting at x (stride 1). Called by a whole block.
__device__ void norm_span(const float* x, const float* w, float eps, int64_t d, float* y, float* scratch) {
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) ss = fmaf(x[j], x[j], ss);
  ss = block_sum(ss, scratch);
  const float r = 1.0f / sqrtf(ss / float(d) + eps);
  // Each thread rewrites only the elements it read, after the reduction: y may alias x.
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) y[j] = w[j] * (x[j] * r);
}

__global__ void rms_norm_kernel(const float* x, const float* w, float eps, int64_t rows, int64_t cols, float* y) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) norm_span(x + r * cols, w, eps, cols, y + r * cols, scratch);
}

// Block (row, group): u = y·silu(z) into out, then the group's RMSNorm in place.
__global__ void gated_rms_norm_kernel(const float* y, const float* z, const float* w, int groups, float eps,
                                      int64_t rows, int64_t cols, float* out) {
  __shared__ float scratch[32];
  const int64_t gd = cols / groups;
  const int g = blockIdx.y;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t off = r * cols + g * gd;
    for (int64_t j = threadIdx.x; j < gd; j += blockDim.x) {
      const float zv = z[off + j];
      out[off + j] = y[off + j] * (zv / (1.0f + expf(-zv)));
    }
    // norm_span reads out[j] back in the thread that wrote it (same j mapping), before its barrier.
    norm_span(out + off, w + g * gd, eps, gd, out + off, scratch);
  }
}

// The same two norms, and the residual add fused before a norm, for rows whose groups are whole
// float4s at 16-byte alignment (every model width): each thread loads its V float4s at once and keeps
// them in registers, so a row costs one round of loads instead of a chain of dependent ones. Sum
// order: each thread's elements in order (x, y, z, w of its float4s, V ascending), then block_sum;
// fixed per row, whatever the number of rows.
enum NormMode : int { kNormPlain, kNormGated, kNormAdd };
// kNormGated: u = x ⊙ silu(z), normalized per group. kNormAdd: x += z (written back: the residual),
// then normalized; the sum is add_kernel's a + b, so the bits are those of add then rms_norm.
template <int V, int Mode>
__global__ void __launch_bounds__(kNormThreads) norm_vec_kernel(const float* x, const float* z, const float* w,
                                                              int groups, float eps, int64_t rows, int64_t cols,
                                                              float* y) {
  __shared__ float scratch[32];
  pdl_wait();
  pdl_trigger();
  const int64_t gd = cols / groups;
  const int n4 = int(gd / 4);
  const int g = blockIdx.y;
  const float4* w4 = reinterpret_cast<const float4*>(w + g * gd);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t off = r * cols + g * gd;
    const float4* x4 = reinterpret_cast<const float4*>(x + off);
    float4 v[V];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int idx = threadIdx.x + i * kNormThreads;
      if (idx < n4) {
        float4 a = x4[idx];
        if constexpr (Mode == kNormAdd) {
          const float4 b = reinterpret_cast<const float4*>(z + off)[idx];
          a = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
          const_cast<float4*>(x4)[idx] = a;
        }
        if constexpr (Mode == kNormGated) {
          const float4 zz = reinterpret_cast<const float4*>(z + off)[idx];
          a.x = a.x * (zz.x / (1.0f + expf(-zz.x)));
          a.y = a.y * (zz.y / (1.0f + expf(-zz.y)));
          a.z = a.z * (zz.z / (1.0f + expf(-zz.z)));
          a.w = a.w * (zz.w / (1.0f + expf(-zz.w)));
        }
        v[i] = a;
        ss = fmaf(a.x, a.x, ss);
        ss = fmaf(a.y, a.y, ss);
        ss = fmaf(a.z, a.z, ss);
        ss = fmaf(a.w, a.w, ss);
      }
    }
    ss = block_sum(ss, scratch);
    const float rs = 1.0f / sqrtf(ss / float(gd) + eps);
    float4* y4 = reinterpret_cast<float4*>(y + off);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int idx = threadIdx.x + i * kNormThreads;
      if (idx < n4) {
        const float4 a = v[i], ww = w4[idx];
        y4[idx] = make_float4(ww.x * (a.x * rs), ww.y * (a.y * rs), ww.z * (a.z * rs), ww.w * (a.w * rs));
      }
    }
  }
}

// float4s per thread for a group of `gd` elements, or 0 when the vector kernel does not apply.
int vec_per_thread(int64_t gd, std::initializer_list<const void*> ptrs) {
  if (gd % 4 != 0 || gd > 4 * 8 * kNormThreads) return 0;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return 0;
  const int64_t n4 = gd / 4;
  return n4 <= kNormThreads ? 1 : n4 <= 2 * kNormThreads ? 2 : n4 <= 4 * kNormThreads ? 4 : 8;
}

template <int Mode>
void launch_norm_vec(int v, dim3 grid, const float* x, const float* z, const float* w, int groups, float eps,
                     int64_t rows, int64_t cols, float* y, cudaStream_t stream) {
  const char* what = Mode == kNormGated ? "gated_rms_norm" : Mode == kNormAdd ? "add_rms_norm" : "rms_norm";
  auto go = [&](auto kernel) {
    launch(kernel, grid, dim3(kNormThreads), 0, stream, what, x, z, w, groups, eps, rows, cols, y);
  };
  switch (v) {
    case 1: go(norm_vec_kernel<1, Mode>); break;
    case 2: go(norm_vec_kernel<2, Mode>); break;
    case 4: go(norm_vec_kernel<4, Mode>); break;
    default: go(norm_vec_kernel<8, Mode>); break;
  }
}

__global__ void add_kernel(const float* a, const float* b, int64_t n, float* out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void relu2_kernel(float* x, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float r = v < 0.0f ? 0.0f : v;  // NaN stays NaN, as on the CPU
    x[i] = r * r;
  }
}

__global__ void moe_combine_kernel(const float* eo, const float* wts, int k, int64_t rows, int64_t cols, float* out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t t = blockIdx.y; t < rows; t += gridDim.y)
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) acc = acc + __fmul_rn(wts[t * k + j], eo[(t * k + j) * cols + c]);
      out[t * cols + c] = acc;
    }
}

unsigned elt_blocks(int64_t n) { return unsigned(std::min<int64_t>(ceil_div(n, kEltThreads), 65535 * 8)); }

}  // namespace

void launch_rms_norm(const float* x, const float* w, float eps, int64_t rows, int64_t cols, float* y,
                     cudaStream_t stream) {
  if (rows == 0) return;
  if (const int v = vec_per_thread(cols, {x, w, y})) {
    return launch_norm_vec<kNormPlain>(v, dim3(unsigned(std::min(rows, kMaxGrid))), x, nullptr, w, 1, eps, rows, cols,
                                       y, stream);
  }
  rms_norm_kernel<<<unsigned(std::min(rows, kMaxGrid)), kNormThreads, 0, stream>>>(x, w, eps, rows, cols, y);
  check_launch("rms_norm");
}

void launch_gated_rms_norm(const float* y, const float* z, const float* w, int groups, float eps, int64_t rows,
                           int64_t cols, float* out, cudaStream_t stream) {
  if (rows == 0) return;
  dim3 grid(unsigned(std::min(rows, kMaxGrid)), unsigned(groups));
  if (const int v = vec_per_thread(cols / groups, {y, z, w, out})) {
    return launch_norm_vec<kNormGated>(v, grid, y, z, w, groups, eps, rows, cols, out, stream);
  }
  gated_rms_norm_kernel<<<grid, kNormThreads, 0, stream>>>(y, z, w, groups, eps, rows, cols, out);
  check_launch("gated_rms_norm");
}

void launch_add_rms_norm(float* x, const float* b, const float* w, float eps, int64_t rows, int64_t cols, float* y,
                         cudaStream_t stream) {
  if (rows == 0) return;
  if (const int v = vec_per_thread(cols, {x, b, w, y})) {
    return launch_norm_vec<kNormAdd>(v, dim3(unsigned(std::min(rows, kMaxGrid))), x, b, w, 1, eps, rows, cols, y,
                                     stream);
  }
  launch_add(x, b, rows * cols, x, stream);
  launch_rms_norm(x, w, eps, rows, cols, y, stream);
}

void launch_add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  launch(add_kernel, dim3(elt_blocks(n)), dim3(kEltThreads), 0, stream, "add", a, b, n, out);
}

void launch_relu2(float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  launch(relu2_kernel, dim3(elt_blocks(n)), dim3(kEltThreads), 0, stream, "relu2", x, n);
}

void launch_moe_combine(const float* expert_out, const float* weights, int k, int64_t rows, int64_t cols,
                        float* out, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  dim3 grid(unsigned(ceil_div(cols, kEltThreads)), unsigned(std::min(rows, kMaxGrid)));
  launch(moe_combine_kernel, grid, dim3(kEltThreads), 0, stream, "moe_combine", expert_out, weights, k, rows, cols, out);
}

}  // namespace tandem::cuda
