// Helpers for the CUDA backend tests: a skip without a device, device copies of host vectors
// (outputs poisoned with NaN first), and error summaries that the tests print for the record.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_probe.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"
#include "test_util.h"

namespace tandem::test {

// A device copy of a host vector.
template <class T>
struct Dev {
  std::unique_ptr<Buffer> buf;
  size_t n = 0;
  T* p() const { return static_cast<T*>(buf->data()); }
};

template <class T>
Dev<T> to_device(Backend& be, const std::vector<T>& v) {
  Dev<T> d{be.alloc(std::max<size_t>(v.size() * sizeof(T), 4)), v.size()};
  be.upload(d.buf->data(), v.data(), v.size() * sizeof(T));
  return d;
}
// A device buffer of n floats, all NaN: an element a kernel forgets to write fails the comparison.
inline Dev<float> poisoned_device(Backend& be, size_t n) { return to_device(be, std::vector<float>(n, NAN)); }

template <class T>
std::vector<T> to_host(Backend& be, const Dev<T>& d) {
  std::vector<T> v(d.n);
  be.download(v.data(), d.buf->data(), d.n * sizeof(T));
  return v;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
// Bit-identical except that a NaN matches any NaN: the GPU returns the canonical NaN where x86
// propagates an operand's payload.
inline bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::isnan(a[i]) && std::isnan(b[i])) && std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  return true;
}

// max |got − want| / max(|want|, floor) over elements, NaN counting as infinite.
inline double max_rel_err(const std::vector<float>& got, const std::vector<float>& want, double floor = 1.0) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(got[i])) continue;
    m = std::max(m, std::abs(double(got[i]) - double(want[i])) / std::max(floor, std::abs(double(want[i]))));
  }
  return m;
}

inline void record(const char* what, double err, double tol) {
  std::printf("[measure] %s: max err %.3g (tolerance %.3g)\n", what, err, tol);
  EXPECT_LE(err, tol) << what;
}

}  // namespace tandem::test
