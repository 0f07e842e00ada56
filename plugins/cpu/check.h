// Fixed-order reductions shared by the CPU kernels, and the argument checks every backend shares.
// Owner: n/a. Thread: any. Sync: none.
#pragma once
#include <algorithm>
#include <cstdint>

#include "tandem/op_checks.h"

namespace tandem::cpu {

// Grain for parallel_for over rows of `cols` elements: enough work per chunk to pay for a wake-up.
inline int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// Reductions in a fixed order of 8 interleaved partial sums: vectorizable without -ffast-math, and
// the order depends only on n, never on the batch or the thread.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}
inline float sum_sq(const float* a, int64_t n) { return dot(a, a, n); }

}  // namespace tandem::cpu
