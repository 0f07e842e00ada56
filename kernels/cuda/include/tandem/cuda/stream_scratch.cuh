// Stream-ordered scratch for one call (a prefill workspace, a capture that an arena cannot serve):
// cudaMallocAsync on the current lane's stream from the device's default pool, whose release
// threshold is raised once so that freed blocks stay pooled (after the first calls an allocation is
// a pool lookup); capturable in a CUDA graph. Optional counters after the bytes are zeroed on the
// stream.
// Owner: the object owns its block and frees it on the stream at scope exit. Thread: the engine
// thread. Sync: nothing here synchronizes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "tandem/cuda/util.cuh"

namespace tandem::cuda {

class StreamScratch {
 public:
  // `what` is the error of a failed allocation or zeroing ("exl3: allocate scratch").
  StreamScratch(size_t bytes, size_t counters, const char* what) {
    static std::once_flag once;
    std::call_once(once, [] {
      int dev = 0;
      cudaMemPool_t pool;
      if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
        uint64_t keep = UINT64_MAX;
        (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
      }
      (void)cudaGetLastError();
    });
    const size_t cbytes = (counters * sizeof(unsigned) + 255) / 256 * 256;
    if (bytes + cbytes) check_cuda(cudaMallocAsync(&p_, bytes + cbytes, stream()), what);
    if (cbytes) {
      counters_ = reinterpret_cast<unsigned*>(static_cast<char*>(p_) + bytes);
      check_cuda(cudaMemsetAsync(counters_, 0, cbytes, stream()), what);
    }
  }
  ~StreamScratch() {
    if (p_) (void)cudaFreeAsync(p_, stream());
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  void* get() const { return p_; }
  unsigned* counters() const { return counters_; }

 private:
  void* p_ = nullptr;
  unsigned* counters_ = nullptr;
};

}  // namespace tandem::cuda
