// YaRN frequencies (yarn.h).
#include "yarn.h"

#include <algorithm>
#include <cmath>

namespace tandem::lilicorr {

double yarn_get_mscale(double s, double m) { return s <= 1.0 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

RopeTable yarn_table(const YarnParams& p, int dim, double theta) {
  const double pi = 3.14159265358979323846;
  auto corr = [&](double rotations) {
    return double(dim) * std::log(p.original_max_position_embeddings / (rotations * 2.0 * pi)) / (2.0 * std::log(theta));
  };
  double low = corr(p.beta_fast ? p.beta_fast : 32.0), high = corr(p.beta_slow ? p.beta_slow : 1.0);
  if (p.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // HF: prevents a division by zero
  // The tensor steps in f32, as torch runs them (python scalars become f32 operands).
  const float base = float(theta), f = float(p.factor), lo = float(low), span = float(high - low);
  RopeTable t;
  const int half = dim / 2;
  t.inv_freq.resize(size_t(half));
  for (int j = 0; j < half; ++j) {
    const float pos_freq = std::pow(base, float(2 * j) / float(dim));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (f * pos_freq);
    const float ramp = std::clamp((float(j) - lo) / span, 0.0f, 1.0f);
    const float keep = 1.0f - ramp;  // HF's inv_freq_extrapolation_factor
    t.inv_freq[size_t(j)] = interpolation * (1.0f - keep) + extrapolation * keep;
  }
  double a;
  if (p.attention_factor) a = *p.attention_factor;
  else if (p.mscale && p.mscale_all_dim && *p.mscale != 0 && *p.mscale_all_dim != 0)
    a = yarn_get_mscale(p.factor, *p.mscale) / yarn_get_mscale(p.factor, *p.mscale_all_dim);
  else a = yarn_get_mscale(p.factor);
  t.scale = float(a);
  return t;
}

}  // namespace tandem::lilicorr
