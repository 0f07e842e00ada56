// An independent float64 Mamba2 mixer written straight from spec/nemotron_h.md § 3: token by token,
// sequential recurrence (§ 3.5), no chunking, no shared code with the plugin.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "fakes.h"

namespace tandem::mamba2::test {

struct RefState {
  std::vector<double> conv;  // [conv_dim, K−1], oldest first
  std::vector<double> ssm;   // [nh, P, N]
  RefState(const MambaDesc& d)
      : conv(size_t(d.conv_dim()) * (d.conv_kernel - 1), 0.0), ssm(size_t(d.d_inner()) * d.state_size, 0.0) {}
};

// x [n, hidden] → out [n, hidden]; advances st by n tokens. clamp: Δ ≥ time_step_min (HF prefill).
inline std::vector<double> reference_mixer(const MambaDesc& d, int hidden, const MapLoader& w,
                                           const std::vector<float>& x, int n, RefState& st, bool clamp) {
  const int nh = d.n_heads, P = d.head_dim, G = d.n_groups, N = d.state_size, K = d.conv_kernel;
  const int d_in = d.d_inner(), cd = d.conv_dim(), rows = d.in_proj_rows();
  const std::vector<float>& win = w.at("in_proj");
  const std::vector<float>& wout = w.at("out_proj");
  const std::vector<float>& cw = w.at("conv1d");
  std::vector<double> a(nh);
  if (w.has("A_log"))
    for (int h = 0; h < nh; ++h) a[h] = -std::exp(double(w.at("A_log")[h]));
  else
    for (int h = 0; h < nh; ++h) a[h] = w.at("A")[h];

  std::vector<double> out(n * hidden), proj(rows), xbc(cd), y(d_in), u(d_in), normed(d_in);
  for (int t = 0; t < n; ++t) {
    // in_proj: z | xBC | dt
    for (int r = 0; r < rows; ++r) {
      double acc = d.proj_bias ? double(w.at("in_proj.bias")[r]) : 0.0;
      for (int k = 0; k < hidden; ++k) acc += double(win[r * hidden + k]) * x[t * hidden + k];
      proj[r] = acc;
    }
    // Causal depthwise conv with the window, then silu; the window shifts by one.
    for (int c = 0; c < cd; ++c) {
      double* wc = &st.conv[c * (K - 1)];
      const double cur = proj[d_in + c];
      double acc = d.conv_bias ? double(w.at("conv1d.bias")[c]) : 0.0;
      for (int j = 0; j < K - 1; ++j) acc += double(cw[c * K + j]) * wc[j];
      acc += double(cw[c * K + K - 1]) * cur;
      xbc[c] = acc / (1.0 + std::exp(-acc));
      for (int j = 0; j + 1 < K - 1; ++j) wc[j] = wc[j + 1];
      wc[K - 2] = cur;
    }
    // Recurrence per head.
    for (int h = 0; h < nh; ++h) {
      const int g = h / (nh / G);
      const double v = proj[d_in + cd + h] + double(w.at("dt_bias")[h]);
      double dt = v > 20.0 ? v : std::log1p(std::exp(v));
      if (clamp) dt = std::max(dt, double(d.time_step_min));
      const double da = std::exp(dt * a[h]);
      const double dd = w.at("D")[h];
      for (int p = 0; p < P; ++p) {
        const double xp = xbc[h * P + p];
        double acc = 0;
        for (int k = 0; k < N; ++k) {
          double& s = st.ssm[(h * P + p) * N + k];
          s = da * s + dt * xp * xbc[d_in + g * N + k];
          acc += s * xbc[d_in + G * N + g * N + k];
        }
        y[h * P + p] = acc + dd * xp;
      }
    }
    // Gate first, then RMS per group, times the norm weight; then out_proj.
    for (int c = 0; c < d_in; ++c) {
      const double z = proj[c];
      u[c] = y[c] * z / (1.0 + std::exp(-z));
    }
    const int gs = d_in / G;
    for (int g = 0; g < G; ++g) {
      double ss = 0;
      for (int c = g * gs; c < (g + 1) * gs; ++c) ss += u[c] * u[c];
      const double inv = 1.0 / std::sqrt(ss / gs + double(d.eps));
      for (int c = g * gs; c < (g + 1) * gs; ++c) normed[c] = double(w.at("norm")[c]) * u[c] * inv;
    }
    for (int o = 0; o < hidden; ++o) {
      double acc = d.proj_bias ? double(w.at("out_proj.bias")[o]) : 0.0;
      for (int c = 0; c < d_in; ++c) acc += double(wout[o * d_in + c]) * normed[c];
      out[t * hidden + o] = acc;
    }
  }
  return out;
}

}  // namespace tandem::mamba2::test
