// The LiLiCorr head's ops of the CPU backend (tandem/backend.h: mul_add_rows, add_rows, normalize_rows,
// group_dots; attention_bias and attention_bias_qkv share attention_full's row in drafter_ops.cpp): the arithmetic of the
// plugin's host head (head.cpp), one row at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "check.h"
#include "kernels.h"
#include "tandem/parallel.h"

namespace tandem::cpu {

void mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) {
  check_mul_add_rows(x, a, b, group, out);
  const int64_t D = x.cols;
  parallel_for(x.rows, row_grain(D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.row(r);
      const float* ar = a.data ? a.row(r / group) : nullptr;
      const float* br = b.data ? b.row(r / group) : nullptr;
      float* o = out.row(r);
      for (int64_t i = 0; i < D; ++i) {
        const float v = ar ? xr[i] * ar[i] : xr[i];
        o[i] = br ? v + br[i] : v;
      }
    }
  });
}

void add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb, bool silu,
              const Tensor& out) {
  check_add_rows(x, d, a, ga, b, gb, out);
  const int64_t D = x.cols;
  parallel_for(x.rows, row_grain(D), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.row(r);
      const float* dr = d.data ? d.row(r) : nullptr;
      const float* ar = a.data ? a.row(r / ga) : nullptr;
      const float* br = b.data ? b.row(r / gb) : nullptr;
      float* o = out.row(r);
      for (int64_t i = 0; i < D; ++i) {
        float v = xr[i];
        if (dr) v += dr[i];
        if (ar) v += ar[i];
        if (br) v += br[i];
        o[i] = silu ? v / (1.0f + std::exp(-v)) : v;
      }
    }
  });
}

void normalize_rows(const Tensor& x, float eps) {
  check_tensor("normalize_rows", "x", x, x.rows, x.cols);
  parallel_for(x.rows, row_grain(x.cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* v = x.row(r);
      const float s = 1.0f / std::max(std::sqrt(sum_sq(v, x.cols)), eps);
      for (int64_t i = 0; i < x.cols; ++i) v[i] *= s;
    }
  });
}

void group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out) {
  check_group_dots(a, b, groups, out);
  const int64_t ka = a.rows / groups, kb = b.rows / groups, F = a.cols;
  parallel_for(groups * ka, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t g = t / ka, i = t % ka;
      for (int64_t j = 0; j < kb; ++j) out.row(g)[i * kb + j] = dot(a.row(g * ka + i), b.row(g * kb + j), F) * scale;
    }
  });
}

}  // namespace tandem::cpu
