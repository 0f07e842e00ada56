// Host fp32 kernels of the LiLiCorr CPU reference (host_ops.h).
#include "host_ops.h"

#include <algorithm>
#include <cmath>

#include "tandem/parallel.h"

namespace tandem::lilicorr {

void Linear::apply(const float* x, int64_t n, std::vector<float>& y) const {
  y.assign(size_t(n * out), 0.0f);
  float* yp = y.data();
  const float* wp = w.data();
  const float* bp = b.empty() ? nullptr : b.data();
  const int64_t I = in, O = out;
  parallel_for(n * O, std::max<int64_t>(1, 16384 / std::max<int64_t>(I, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t r = t / O, o = t % O;
      const float* xr = x + r * I;
      const float* wr = wp + o * I;
      float acc = 0.0f;
      for (int64_t i = 0; i < I; ++i) acc += xr[i] * wr[i];
      yp[t] = acc + (bp ? bp[o] : 0.0f);
    }
  });
}

void rms_norm(float* x, int64_t n, int64_t d, const std::vector<float>& w, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    float* v = x + r * d;
    float ss = 0.0f;
    for (int64_t i = 0; i < d; ++i) ss += v[i] * v[i];
    const float s = 1.0f / std::sqrt(ss / float(d) + eps);
    for (int64_t i = 0; i < d; ++i) v[i] = v[i] * s * w[size_t(i)];
  }
}

void layer_norm(float* x, int64_t n, int64_t d, const std::vector<float>& w, const std::vector<float>& b, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    float* v = x + r * d;
    float mean = 0.0f;
    for (int64_t i = 0; i < d; ++i) mean += v[i];
    mean /= float(d);
    float var = 0.0f;
    for (int64_t i = 0; i < d; ++i) var += (v[i] - mean) * (v[i] - mean);
    const float s = 1.0f / std::sqrt(var / float(d) + eps);
    for (int64_t i = 0; i < d; ++i) v[i] = (v[i] - mean) * s * w[size_t(i)] + b[size_t(i)];
  }
}

void silu(std::vector<float>& x) {
  for (float& v : x) v = silu(v);
}

void normalize_rows(float* x, int64_t n, int64_t d, float eps) {
  for (int64_t r = 0; r < n; ++r) {
    float* v = x + r * d;
    float ss = 0.0f;
    for (int64_t i = 0; i < d; ++i) ss += v[i] * v[i];
    const float s = 1.0f / std::max(std::sqrt(ss), eps);
    for (int64_t i = 0; i < d; ++i) v[i] *= s;
  }
}

void rope(float* x, int heads, int hd, int64_t pos, double theta) {
  const int half = hd / 2;
  for (int j = 0; j < half; ++j) {
    const double inv = std::pow(theta, -2.0 * double(j) / double(hd));
    const float a = float(double(pos) * inv);
    const float c = std::cos(a), s = std::sin(a);
    for (int h = 0; h < heads; ++h) {
      float* v = x + int64_t(h) * hd;
      const float x1 = v[j], x2 = v[j + half];
      v[j] = x1 * c - x2 * s;
      v[j + half] = x2 * c + x1 * s;
    }
  }
}

void rope_table(float* x, int heads, int hd, int64_t pos, const float* inv_freq, float scale) {
  const int half = hd / 2;
  for (int j = 0; j < half; ++j) {
    const float a = float(double(pos) * double(inv_freq[j]));
    const float c = std::cos(a) * scale, s = std::sin(a) * scale;
    for (int h = 0; h < heads; ++h) {
      float* v = x + int64_t(h) * hd;
      const float x1 = v[j], x2 = v[j + half];
      v[j] = x1 * c - x2 * s;
      v[j + half] = x2 * c + x1 * s;
    }
  }
}

}  // namespace tandem::lilicorr
