// Backend::rope_table on CUDA: RoPE with a frequency table (a drafter's rope_scaling, yarn), the CPU
// twin's arithmetic (plugins/cpu drafter_ops.cpp): the angle is the f32-rounded exact product, cos and
// sin in f32 (cosf/sinf, which may differ from the host's libm by an ulp), each times `scale`.
#include <algorithm>
#include <cstdint>

#include "tandem/cuda/util.cuh"
#include "kernels_cuda.cuh"

namespace tandem::cuda {
namespace {

__global__ void rope_table_kernel(float* x, int64_t rows, int heads, int hd, int64_t pos0, const int64_t* pos0_dev,
                                  const float* inv_freq, float scale) {
  pdl_wait();
  pdl_trigger();
  if (pos0_dev) pos0 = *pos0_dev;
  const int half = hd / 2;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int t = threadIdx.x; t < heads * half; t += blockDim.x) {
      const int h = t / half, j = t % half;
      const float a = float(double(pos0 + r) * double(inv_freq[j]));
      const float c = __fmul_rn(cosf(a), scale), s = __fmul_rn(sinf(a), scale);
      float* v = x + r * int64_t(heads) * hd + int64_t(h) * hd;
      const float x1 = v[j], x2 = v[j + half];
      v[j] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
      v[j + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
}

}  // namespace

void launch_rope_table(float* x, int64_t rows, int heads, int hd, int64_t pos0, const int64_t* pos0_device,
                       const float* inv_freq, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  launch(rope_table_kernel, dim3(unsigned(std::min<int64_t>(rows, 65535))), dim3(128), 0, stream, "rope_table", x,
         rows, heads, hd, pos0, pos0_device, inv_freq, scale);
}

}  // namespace tandem::cuda
