// What the tensor-core GEMV tests share (test_gemv_tc_cuda.cu, test_gemv_tc_iq2_cuda.cu): a CUDA call
// check, a device allocation that frees itself, and the check of n-row passes against the reference.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tandem::gguf::test {

inline void ok(cudaError_t e, const char* what) {
  ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

struct DevMem {
  void* p = nullptr;
  explicit DevMem(size_t bytes) { cudaMalloc(&p, std::max<size_t>(bytes, 16)); }
  ~DevMem() { cudaFree(p); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// The tensor-core GEMVs' common check. run(r0, n) returns rows r0 … r0 + n − 1 of y ([n, m] floats);
// want and mag hold the float64 reference and each output's magnitude for `rows` rows. Every pass of
// n = 1, 2, 3, 8, 9, 16, 40 rows must lie within 3e-5 of it (|Δ| / magnitude), and its first `alone`
// rows must be bit-equal to the same rows run one by one (batch invariance). Returns those rows.
template <class Run>
std::vector<float> expect_rows_match_and_stay_invariant(const Run& run, int64_t m, int64_t rows, int64_t alone,
                                                        const std::vector<double>& want, const std::vector<double>& mag) {
  std::vector<float> single(size_t(rows * m));
  for (int64_t r = 0; r < alone; ++r) {
    const std::vector<float> y = run(r, 1);
    std::copy(y.begin(), y.end(), single.begin() + r * m);
  }
  for (int64_t n : {1, 2, 3, 8, 9, 16, 40}) {
    const std::vector<float> y = run(0, n);
    double worst = 0;
    int64_t unequal = 0;
    for (int64_t i = 0; i < n * m; ++i) {
      const double e = std::isnan(y[size_t(i)]) ? INFINITY : std::abs(y[size_t(i)] - want[size_t(i)]) / mag[size_t(i)];
      worst = std::max(worst, e);
      if (i < alone * m && std::memcmp(&y[size_t(i)], &single[size_t(i)], 4) != 0) ++unequal;
    }
    EXPECT_LE(worst, 3e-5) << "n " << n;
    EXPECT_EQ(unequal, 0) << "n " << n << ": rows differ from the same rows alone";
  }
  return single;
}

}  // namespace tandem::gguf::test
