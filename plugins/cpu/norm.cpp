// Row-wise CPU kernels: RMSNorm, the Mamba2 gated grouped RMSNorm, add and relu².
#include <cmath>

#include "check.h"
#include "kernels.h"
#include "tandem/parallel.h"

namespace tandem::cpu {
namespace {

// x·rsqrt(mean(x²)+eps), times w, written to y (y may be x).
void norm_row(const float* x, const float* w, float eps, int64_t d, float* y) {
  float r = 1.0f / std::sqrt(sum_sq(x, d) / float(d) + eps);
  for (int64_t j = 0; j < d; ++j) y[j] = w[j] * (x[j] * r);
}

}  // namespace

void rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) {
  check_tensor("rms_norm", "x", x, x.rows, x.cols);
  check_tensor("rms_norm", "y", y, x.rows, x.cols);
  check_ptr("rms_norm", "weight", w);
  const int64_t d = x.cols;
  parallel_for(x.rows, row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) norm_row(x.row(r), w, eps, d, y.row(r));
  });
}

void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                    const Tensor& out) {
  check_tensor("gated_rms_norm", "y", y, y.rows, y.cols);
  check_tensor("gated_rms_norm", "z", z, y.rows, y.cols);
  check_tensor("gated_rms_norm", "out", out, y.rows, y.cols);
  check_ptr("gated_rms_norm", "weight", w);
  check(groups > 0 && y.cols % groups == 0, "gated_rms_norm: groups must divide the width ", y.cols,
        ", found ", groups);
  const int64_t d = y.cols, gd = d / groups;
  parallel_for(y.rows, row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y.row(r);
      const float* zr = z.row(r);
      float* o = out.row(r);
      // Element j of u reads only element j of y and z, so out may alias either.
      for (int64_t j = 0; j < d; ++j) o[j] = yr[j] * (zr[j] / (1.0f + std::exp(-zr[j])));
      for (int g = 0; g < groups; ++g) norm_row(o + g * gd, w + g * gd, eps, gd, o + g * gd);
    }
  });
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_tensor("add", "a", a, a.rows, a.cols);
  check_tensor("add", "b", b, a.rows, a.cols);
  check_tensor("add", "out", out, a.rows, a.cols);
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* po = out.f32();
  parallel_for(a.numel(), 1 << 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) po[i] = pa[i] + pb[i];
  });
}

void relu2(const Tensor& x) {
  check_tensor("relu2", "x", x, x.rows, x.cols);
  float* p = x.f32();
  parallel_for(x.numel(), 1 << 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float r = p[i] < 0.0f ? 0.0f : p[i];  // NaN stays NaN, as in torch
      p[i] = r * r;
    }
  });
}

void moe_combine(const Tensor& expert_out, const float* weights, int k, const Tensor& out) {
  check(k >= 1, "moe_combine: k must be positive, found ", k);
  check_tensor("moe_combine", "out", out, out.rows, out.cols);
  check_tensor("moe_combine", "expert_out", expert_out, out.rows * k, out.cols);
  if (out.rows == 0) return;
  check_ptr("moe_combine", "weights", weights);
  const int64_t d = out.cols;
  parallel_for(out.rows, row_grain(d * k), [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      float* dst = out.row(t);
      for (int64_t c = 0; c < d; ++c) dst[c] = 0.f;
      for (int j = 0; j < k; ++j) {
        const float w = weights[t * k + j];
        const float* src = expert_out.row(t * k + j);
        for (int64_t c = 0; c < d; ++c) dst[c] += w * src[c];
      }
    }
  });
}

}  // namespace tandem::cpu
