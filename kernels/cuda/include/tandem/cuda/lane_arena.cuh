// Scratch reused across calls for the decode GEMVs and small gathers of a module: one workspace and
// one zeroed counter buffer per lane, reused by every call on that lane (calls on one lane are
// serialized on its stream, and the kernels leave the counters zero; calls on two lanes may run at
// once, so each lane has its own: Backend::fork), so a call allocates nothing and a CUDA graph sees
// fixed addresses. Tensors reserve their need at load, on every lane; a call that needs more outside
// a capture grows its lane's arena, and the replaced buffers are kept (never freed), so graphs
// captured before still point at live memory. Device 0, as the CUDA backend. Each module (.so) that
// includes this has arenas of its own (hidden symbols).
// Owner: the arenas live for the process. Thread: the engine thread (a mutex guards growth).
// Sync: growth zeroes new counters on the given stream; nothing here synchronizes.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>

#include "tandem/cuda/util.cuh"
#include "tandem/device_queue.h"
#include "tandem/error.h"

namespace tandem::cuda {

class LaneArena {
 public:
  static LaneArena& get() { return of(lane()); }
  // Grows every lane's arena (at load).
  static void reserve_all(size_t bytes, size_t counters, cudaStream_t s) {
    for (int i = 0; i < kMaxLanes; ++i) of(i).reserve(bytes, counters, s);
  }
  static LaneArena& of(int lane) {
    static LaneArena* a[kMaxLanes] = {};  // never destroyed: graphs may outlive every tensor
    static std::mutex mu;
    check(lane >= 0 && lane < kMaxLanes, "cuda scratch arena: lane ", lane, " outside [0, ", kMaxLanes, ")");
    std::lock_guard<std::mutex> lock(mu);
    if (!a[lane]) a[lane] = new LaneArena;
    return *a[lane];
  }
  // Grows (on `s`, which must not be capturing) to at least the sizes.
  void reserve(size_t bytes, size_t counters, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    grow(bytes, counters, s);
  }
  // The buffers for one call, grown when needed and allowed; false when a capture would need growth.
  bool lease(size_t bytes, size_t counters, cudaStream_t s, void** ws, unsigned** ctr) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > ws_bytes_ || counters > n_counters_) {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      check_cuda(cudaStreamIsCapturing(s, &st), "cuda scratch arena: capture status");
      if (st != cudaStreamCaptureStatusNone) return false;
      grow(bytes, counters, s);
    }
    *ws = ws_, *ctr = counters_;
    return true;
  }

 private:
  static size_t round_up(size_t b) {
    size_t r = size_t(1) << 20;
    while (r < b) r *= 2;
    return r;
  }
  void grow(size_t bytes, size_t counters, cudaStream_t s) {
    if (bytes > ws_bytes_) {
      ws_bytes_ = round_up(bytes);
      check_cuda(cudaMalloc(&ws_, ws_bytes_), "cuda scratch arena: allocate workspace");
    }
    if (counters > n_counters_) {
      n_counters_ = round_up(counters * sizeof(unsigned)) / sizeof(unsigned);
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&counters_), n_counters_ * sizeof(unsigned)),
                 "cuda scratch arena: allocate counters");
      check_cuda(cudaMemsetAsync(counters_, 0, n_counters_ * sizeof(unsigned), s), "cuda scratch arena: zero counters");
    }
  }
  std::mutex mu_;
  void* ws_ = nullptr;
  size_t ws_bytes_ = 0;
  unsigned* counters_ = nullptr;
  size_t n_counters_ = 0;
};

}  // namespace tandem::cuda
