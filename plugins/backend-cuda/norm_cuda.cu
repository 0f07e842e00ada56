// Row-wise CUDA kernels: RMSNorm, the Mamba2 gated grouped RMSNorm, add, relu² and the MoE combine.
// One block per row (or row group) with a fixed reduction tree, so a row's bits never depend on n.
#include <algorithm>

#include "cuda_util.cuh"
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

__global__ void add_kernel(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void relu2_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float r = v < 0.0f ? 0.0f : v;  // NaN stays NaN, as on the CPU
    x[i] = r * r;
  }
}

__global__ void moe_combine_kernel(const float* eo, const float* wts, int k, int64_t rows, int64_t cols, float* out) {
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
  rms_norm_kernel<<<unsigned(std::min(rows, kMaxGrid)), kNormThreads, 0, stream>>>(x, w, eps, rows, cols, y);
  check_launch("rms_norm");
}

void launch_gated_rms_norm(const float* y, const float* z, const float* w, int groups, float eps, int64_t rows,
                           int64_t cols, float* out, cudaStream_t stream) {
  if (rows == 0) return;
  dim3 grid(unsigned(std::min(rows, kMaxGrid)), unsigned(groups));
  gated_rms_norm_kernel<<<grid, kNormThreads, 0, stream>>>(y, z, w, groups, eps, rows, cols, out);
  check_launch("gated_rms_norm");
}

void launch_add(const float* a, const float* b, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<elt_blocks(n), kEltThreads, 0, stream>>>(a, b, n, out);
  check_launch("add");
}

void launch_relu2(float* x, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  relu2_kernel<<<elt_blocks(n), kEltThreads, 0, stream>>>(x, n);
  check_launch("relu2");
}

void launch_moe_combine(const float* expert_out, const float* weights, int k, int64_t rows, int64_t cols,
                        float* out, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  dim3 grid(unsigned(ceil_div(cols, kEltThreads)), unsigned(std::min(rows, kMaxGrid)));
  moe_combine_kernel<<<grid, kEltThreads, 0, stream>>>(expert_out, weights, k, rows, cols, out);
  check_launch("moe_combine");
}

}  // namespace tandem::cuda
