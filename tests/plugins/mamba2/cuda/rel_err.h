// The error measure of the Mamba2 CUDA tests: max |got − ref| / max |ref|, infinite when got holds a
// NaN (the tests poison outputs with NaN, so an entry a kernel never wrote fails).
// Owner: none. Thread: any. Sync: none.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::mamba2::test {

template <class Ref>
double rel_err(const std::vector<float>& got, const std::vector<Ref>& ref) {
  double scale = 1e-30, m = 0;
  for (Ref v : ref) scale = std::max(scale, std::abs(double(v)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    m = std::max(m, std::abs(double(got[i]) - double(ref[i])));
  }
  return m / scale;
}

}  // namespace tandem::mamba2::test
