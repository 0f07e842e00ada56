// The LiLiCorr head's ops of the CUDA backend (tandem/backend.h: mul_add_rows, add_rows, normalize_rows,
// group_dots; attention_bias and attention_bias_qkv share attention_full's kernel in drafter_ops_cuda.cu). Reductions run in fixed trees that depend on the row's width only.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tandem/cuda/util.cuh"
#include "kernels_cuda.cuh"

namespace tandem::cuda {
namespace {

constexpr int kEltThreads = 256;
constexpr int kRowThreads = 256;

__global__ void mul_add_rows_kernel(const float* x, const float* a, const float* b, int64_t n, int64_t cols,
                                    int64_t group, float* out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols, s = (r / group) * cols + c;
    const float v = a ? __fmul_rn(x[i], a[s]) : x[i];
    out[i] = b ? __fadd_rn(v, b[s]) : v;
  }
}

__global__ void add_rows_kernel(const float* x, const float* d, const float* a, int64_t ga, const float* b, int64_t gb,
                                bool silu, int64_t n, int64_t cols, float* out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float v = x[i];
    if (d) v = __fadd_rn(v, d[i]);
    if (a) v = __fadd_rn(v, a[(r / ga) * cols + c]);
    if (b) v = __fadd_rn(v, b[(r / gb) * cols + c]);
    out[i] = silu ? v / (1.0f + expf(-v)) : v;
  }
}

// One block per row: Σ x² in a block tree, then x / max(‖x‖, eps).
__global__ void normalize_rows_kernel(float* x, int64_t cols, float eps) {
  __shared__ float scratch[32];
  pdl_wait();
  pdl_trigger();
  float* r = x + blockIdx.x * cols;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) s = fmaf(r[i], r[i], s);
  s = block_sum(s, scratch);
  const float inv = 1.0f / fmaxf(sqrtf(s), eps);
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) r[i] = __fmul_rn(r[i], inv);
}

// One warp per output entry (g, i, j): lanes stride the F dims, then a butterfly sum.
__global__ void group_dots_kernel(const float* a, const float* b, int64_t groups, int64_t ka, int64_t kb, int64_t F,
                                  float scale, float* out) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t total = groups * ka * kb;
  for (int64_t t = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5; t < total;
       t += (int64_t(gridDim.x) * blockDim.x) >> 5) {
    const int64_t g = t / (ka * kb), i = (t / kb) % ka, j = t % kb;
    const float* ar = a + (g * ka + i) * F;
    const float* br = b + (g * kb + j) * F;
    float d = 0.0f;
    for (int64_t e = lane; e < F; e += 32) d = fmaf(ar[e], br[e], d);
    d = warp_sum(d);
    if (lane == 0) out[t] = __fmul_rn(d, scale);
  }
}

}  // namespace

void launch_mul_add_rows(const float* x, const float* a, const float* b, int64_t rows, int64_t cols, int64_t group,
                         float* out, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(n, kEltThreads), 65535 * 8));
  launch(mul_add_rows_kernel, dim3(blocks), dim3(kEltThreads), 0, stream, "mul_add_rows", x, a, b, n, cols, group,
         out);
}

void launch_add_rows(const float* x, const float* d, const float* a, int64_t ga, const float* b, int64_t gb, bool silu,
                     int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(n, kEltThreads), 65535 * 8));
  launch(add_rows_kernel, dim3(blocks), dim3(kEltThreads), 0, stream, "add_rows", x, d, a, ga, b, gb, silu, n, cols,
         out);
}

void launch_normalize_rows(float* x, int64_t rows, int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  launch(normalize_rows_kernel, dim3(unsigned(rows)), dim3(kRowThreads), 0, stream, "normalize_rows", x, cols, eps);
}

void launch_group_dots(const float* a, const float* b, int64_t groups, int64_t ka, int64_t kb, int64_t F, float scale,
                       float* out, cudaStream_t stream) {
  const int64_t total = groups * ka * kb;
  if (total == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(total * 32, kEltThreads), 65535 * 8));
  launch(group_dots_kernel, dim3(blocks), dim3(kEltThreads), 0, stream, "group_dots", a, b, groups, ka, kb, F, scale,
         out);
}

}  // namespace tandem::cuda
