// Where the scan kernels (scan_cuda.cu, ssd_cuda.cu) find x, B and C of position t and head h in the
// conv output rows x | B | C (row stride `stride`): head h reads the B and C of group h / hpg.
// Owner: a value type of sizes. Thread: any. Sync: none.
#pragma once
#include <cstdint>

#include "scan_cpu.h"

namespace tandem::mamba2 {

struct ScanLayout {
  int nh, P, G, N, hpg;
  int64_t d_in, stride;
  __device__ const float* x(const float* xbc, int t, int h) const { return xbc + t * stride + int64_t(h) * P; }
  __device__ const float* b(const float* xbc, int t, int h) const { return xbc + t * stride + d_in + int64_t(h / hpg) * N; }
  __device__ const float* c(const float* xbc, int t, int h) const {
    return xbc + t * stride + d_in + int64_t(G + h / hpg) * N;
  }
};

inline ScanLayout layout_of(const Dims& dm, int64_t stride) {
  return ScanLayout{dm.nh, dm.P, dm.G, dm.N, dm.heads_per_group(), dm.d_in, stride};
}

}  // namespace tandem::mamba2
