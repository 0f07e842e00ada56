// Device-side helpers shared by the CUDA modules: error checks, the stream every module queues on,
// element loads of BF16/F16/F32 weights, and fixed-order warp/block reductions.
// Owner: n/a. Thread: the engine thread queues work. Sync: nothing here synchronizes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "tandem/cuda/util.h"
#include "tandem/device_queue.h"
#include "tandem/error.h"

namespace tandem::cuda {

// Throws a one-line tandem::Error naming the operation and CUDA's message.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("cuda: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}
// After a launch: the configuration error, if any (no synchronization).
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

// The queue every CUDA module uses: the calling thread's per-thread default stream (one engine
// thread gives one ordered stream, and unlike the legacy stream it can be captured into a CUDA
// graph), or, while the backend has lanes open (Backend::fork), the current lane's stream, which the
// backend publishes in the core's thread-local DeviceQueue so that every module sees it.
inline cudaStream_t stream() {
  void* q = current_device_queue().native;
  return q ? static_cast<cudaStream_t>(q) : cudaStreamPerThread;
}
// The current lane (0 outside lanes): modules with scratch reused across calls keep one per lane.
inline int lane() { return current_device_queue().lane; }

// Weight element types, as the kernels read them.
enum class WType : int { BF16 = 0, F16 = 1, F32 = 2 };

template <WType T>
struct WElem;
template <>
struct WElem<WType::BF16> {
  using type = __nv_bfloat16;
  static __device__ __forceinline__ float get(const type* p, int64_t i) { return __bfloat162float(p[i]); }
  // 8 elements from a 16-byte aligned address.
  static __device__ __forceinline__ void get8(const type* p, float* out) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};
template <>
struct WElem<WType::F16> {
  using type = __half;
  static __device__ __forceinline__ float get(const type* p, int64_t i) { return __half2float(p[i]); }
  static __device__ __forceinline__ void get8(const type* p, float* out) {
    uint4 u = *reinterpret_cast<const uint4*>(p);
    const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = __half22float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};
template <>
struct WElem<WType::F32> {
  using type = float;
  static __device__ __forceinline__ float get(const type* p, int64_t i) { return p[i]; }
  static __device__ __forceinline__ void get8(const type* p, float* out) {
    float4 a = *reinterpret_cast<const float4*>(p);
    float4 b = *reinterpret_cast<const float4*>(p + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

// Sum over the warp by an xor butterfly: every lane ends with the same bits (a + b == b + a), and
// the order depends only on the lane layout, never on the launch.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Block-wide sum in a fixed tree (warp sums, then the warp sums in warp order), of floats or of
// doubles. `scratch` holds 32 of them; every thread gets the result. Callers must call it from all
// threads of the block.
template <class T>
__device__ __forceinline__ T block_sum_of(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T t = lane < warps ? scratch[lane] : T(0);
  return warp_sum(t);
}
__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_sum_of(v, scratch); }
__device__ __forceinline__ double block_sum(double v, double* scratch) { return block_sum_of(v, scratch); }
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(t);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- programmatic dependent launch (sm_90+) ----
// A kernel launched with launch() may start while the kernel before it on the stream is still
// running, as soon as that one calls pdl_trigger() (every kernel here calls it right after its own
// pdl_wait(): triggering earlier lets a chain of not-yet-runnable grids fill the machine, which
// measured 8 % slower than no overlap at all); it must call pdl_wait() before it reads
// anything an earlier kernel wrote and before it writes anything (the wait returns once the earlier
// kernel has finished and its memory is visible). Before the wait it may read only memory no
// kernel of the pass writes (weights, lookup grids): that is how a GEMV's first weight loads overlap
// the previous kernel. Kernels launched with <<<>>> keep the full ordering; pdl_trigger() and
// pdl_wait() are no-ops for them and below sm_90. TANDEM_CUDA_PDL=0 turns the overlap off.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Defined in util.cu: true when the current device is sm_90+ and TANDEM_CUDA_PDL is not 0.
bool pdl_enabled();
// True when the environment variable `name` is exactly "1" (the opt-in kernel switches).
bool env_is_one(const char* name);
// The current device's SM count, read once per process (launch plans ask for it at every call).
int sm_count();

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, const char* what,
            Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), what);
}

}  // namespace tandem::cuda
