// f32 buffers on a backend's device for the GPU tests: upload, NaN-poisoned outputs (so that a
// kernel that skips an element is caught), download, and a bitwise comparison.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "tandem/backend.h"

namespace tandem::test {

struct Dev {
  std::unique_ptr<Buffer> buf;
  size_t n = 0;
  float* p() const { return static_cast<float*>(buf->data()); }
};
inline Dev upload(Backend& be, const std::vector<float>& v) {
  Dev d{be.alloc(std::max<size_t>(v.size(), 1) * 4), v.size()};
  be.upload(d.buf->data(), v.data(), v.size() * 4);
  return d;
}
inline Dev poisoned(Backend& be, size_t n) { return upload(be, std::vector<float>(n, NAN)); }
inline std::vector<float> download(Backend& be, const Dev& d) {
  std::vector<float> v(d.n);
  be.download(v.data(), d.buf->data(), d.n * 4);
  return v;
}
inline bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

}  // namespace tandem::test
