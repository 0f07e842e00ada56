// The drafter ops of the CPU backend (rope, attention_full and their device-position variants, silu_mul,
// scale_softcap, top_k_logprobs, and the head's attention_bias) against float64 references and cases with known answers.
#include <gtest/gtest.h>

#include <cmath>

#include "plugins/cpu/cpu_backend.h"
#include "tandem/error.h"
#include "test_util.h"

namespace tandem::test {
namespace {

TEST(CpuDrafterOps, RopeTurnsEachPairByItsAngle) {
  cpu::CpuBackend be;
  const int heads = 3, hd = 8;
  const int64_t rows = 5, pos0 = 40;
  auto x = random_vec(size_t(rows * heads * hd), 1, -2.f, 2.f);
  std::vector<float> y = x;
  be.rope(Tensor::f32(y.data(), rows, heads * hd), heads, hd, pos0, 1e4);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < hd / 2; ++j) {
        const double a = double(pos0 + r) * std::pow(1e4, -2.0 * j / hd);
        const size_t i = size_t((r * heads + h) * hd + j), k = i + hd / 2;
        worst = std::max(worst, std::abs(y[i] - (x[i] * std::cos(a) - x[k] * std::sin(a))));
        worst = std::max(worst, std::abs(y[k] - (x[k] * std::cos(a) + x[i] * std::sin(a))));
      }
  EXPECT_LT(worst, 1e-5);
  // Position 0 leaves a row as it is.
  std::vector<float> z = x;
  be.rope(Tensor::f32(z.data(), 1, heads * hd), heads, hd, 0, 1e4);
  for (int i = 0; i < heads * hd; ++i) EXPECT_EQ(z[size_t(i)], x[size_t(i)]);
  EXPECT_THROW(be.rope(Tensor::f32(z.data(), 1, heads * hd), heads * 2, hd / 2 + 1, 0, 1e4), Error);
}

// max |out − reference| of attention with every row of q [n, nq·hd] over key rows 0 … rows − 1 of k, v
// (rows of nkv·hd), in float64; bias null or [nq·n, rows] added to the scaled scores.
double attention_err(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t n,
                     int64_t rows, int nq, int nkv, int hd, const float* bias, const std::vector<float>& out) {
  const int64_t qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  double worst = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int h = 0; h < nq; ++h) {
      const int g = h / (nq / nkv);
      std::vector<double> p(static_cast<size_t>(rows));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < rows; ++j) {
        double d = 0;
        for (int e = 0; e < hd; ++e) d += double(q[size_t(r * qw + h * hd + e)]) * k[size_t(j * kw + g * hd + e)];
        p[size_t(j)] = d / std::sqrt(double(hd)) + (bias ? bias[(h * n + r) * rows + j] : 0.0);
        mx = std::max(mx, p[size_t(j)]);
      }
      for (double& s : p) sum += s = std::exp(s - mx);
      for (int e = 0; e < hd; ++e) {
        double o = 0;
        for (int64_t j = 0; j < rows; ++j) o += p[size_t(j)] / sum * v[size_t(j * kw + g * hd + e)];
        worst = std::max(worst, std::abs(o - out[size_t(r * qw + h * hd + e)]));
      }
    }
  return worst;
}

TEST(CpuDrafterOps, AttentionFullSeesEveryRowAndIgnoresRowsPastTheCount) {
  cpu::CpuBackend be;
  const int nq = 4, nkv = 2, hd = 8;
  const int64_t n = 3, rows = 6, qw = nq * hd, kw = nkv * hd;
  auto q = random_vec(size_t(n * qw), 2), k = random_vec(size_t((rows + 2) * kw), 3), v = random_vec(size_t((rows + 2) * kw), 4);
  std::vector<float> out(size_t(n * qw), NAN);
  be.attention_full(Tensor::f32(q.data(), n, qw), Tensor::f32(k.data(), rows + 2, kw), Tensor::f32(v.data(), rows + 2, kw),
                    rows, nq, nkv, hd, Tensor::f32(out.data(), n, qw));
  const double worst = attention_err(q, k, v, n, rows, nq, nkv, hd, nullptr, out);
  EXPECT_LT(worst, 1e-5);
  EXPECT_THROW(be.attention_full(Tensor::f32(q.data(), n, qw), Tensor::f32(k.data(), rows + 2, kw),
                                 Tensor::f32(v.data(), rows + 2, kw), rows + 3, nq, nkv, hd, Tensor::f32(out.data(), n, qw)),
               Error);
}

// The device-position variants: rope_at is rope at *pos0_device; attention_full_at writes the new rows
// into the caches at pos0 and attends over rows 0 … pos0 + n − 1 of them; a device position that is
// not the host's is an error (host memory: the CPU twin checks what the CUDA kernels only read).
TEST(CpuDrafterOps, TheDevicePositionVariantsAreRopeAndAttentionFullAtThatPosition) {
  cpu::CpuBackend be;
  const int heads = 2, hd = 8, nq = 4, nkv = 2;
  const int64_t n = 3, pos0 = 11, cap = 20, qw = nq * hd, kw = nkv * hd;
  auto x = random_vec(size_t(n * heads * hd), 8, -2.f, 2.f);
  std::vector<float> a = x, b = x;
  be.rope(Tensor::f32(a.data(), n, heads * hd), heads, hd, pos0, 1e4);
  be.rope_at(Tensor::f32(b.data(), n, heads * hd), heads, hd, pos0, &pos0, 1e4);
  EXPECT_EQ(a, b);
  const int64_t other = pos0 + 1;
  EXPECT_THROW(be.rope_at(Tensor::f32(b.data(), n, heads * hd), heads, hd, pos0, &other, 1e4), Error);

  auto q = random_vec(size_t(n * qw), 9), k = random_vec(size_t(n * kw), 10), v = random_vec(size_t(n * kw), 11);
  auto kc = random_vec(size_t(cap * kw), 12), vc = random_vec(size_t(cap * kw), 13);
  std::vector<float> kref = kc, vref = vc, out(size_t(n * qw), NAN), ref(size_t(n * qw), NAN);
  std::copy(k.begin(), k.end(), kref.begin() + pos0 * kw);
  std::copy(v.begin(), v.end(), vref.begin() + pos0 * kw);
  be.attention_full(Tensor::f32(q.data(), n, qw), Tensor::f32(kref.data(), cap, kw), Tensor::f32(vref.data(), cap, kw),
                    pos0 + n, nq, nkv, hd, Tensor::f32(ref.data(), n, qw));
  be.attention_full_at(Tensor::f32(q.data(), n, qw), Tensor::f32(k.data(), n, kw), Tensor::f32(v.data(), n, kw),
                       kc.data(), vc.data(), cap, pos0, &pos0, nq, nkv, hd, Tensor::f32(out.data(), n, qw));
  EXPECT_EQ(out, ref);
  EXPECT_EQ(kc, kref);
  EXPECT_EQ(vc, vref);
  EXPECT_THROW(be.attention_full_at(Tensor::f32(q.data(), n, qw), Tensor::f32(k.data(), n, kw),
                                    Tensor::f32(v.data(), n, kw), kc.data(), vc.data(), cap, pos0, &other, nq, nkv, hd,
                                    Tensor::f32(out.data(), n, qw)),
               Error);
  const int64_t late = cap - 2;
  EXPECT_THROW(be.attention_full_at(Tensor::f32(q.data(), n, qw), Tensor::f32(k.data(), n, kw),
                                    Tensor::f32(v.data(), n, kw), kc.data(), vc.data(), cap, late, &late, nq, nkv, hd,
                                    Tensor::f32(out.data(), n, qw)),
               Error);
}

// rope_table (a drafter's rope_scaling): with the plain frequencies θ^(−2j/hd) (rounded to f32) and
// scale 1 it turns each pair by float(pos·inv[j]), as written here; the scale multiplies cos and sin; a
// device position that is not the host's is an error.
TEST(CpuDrafterOps, RopeTableTurnsByTheTableAndScales) {
  cpu::CpuBackend be;
  const int heads = 2, hd = 8;
  const int64_t n = 3, pos0 = 5;
  std::vector<float> inv(hd / 2);
  for (int j = 0; j < hd / 2; ++j) inv[size_t(j)] = 1.0f / float(1 + 3 * j);
  auto x = random_vec(size_t(n * heads * hd), 21, -2.f, 2.f);
  std::vector<float> y = x, z = x;
  be.rope_table(Tensor::f32(y.data(), n, heads * hd), heads, hd, pos0, nullptr, inv.data(), 1.0f);
  be.rope_table(Tensor::f32(z.data(), n, heads * hd), heads, hd, pos0, &pos0, inv.data(), 0.5f);
  for (int64_t r = 0; r < n; ++r)
    for (int h = 0; h < heads; ++h)
      for (int j = 0; j < hd / 2; ++j) {
        const size_t i = size_t(r * heads * hd + h * hd + j), k = i + size_t(hd / 2);
        const float a = float(double(pos0 + r) * double(inv[size_t(j)]));
        EXPECT_FLOAT_EQ(y[i], x[i] * std::cos(a) - x[k] * std::sin(a));
        EXPECT_FLOAT_EQ(y[k], x[k] * std::cos(a) + x[i] * std::sin(a));
        EXPECT_FLOAT_EQ(z[i], 0.5f * y[i]);
      }
  const int64_t other = pos0 + 1;
  EXPECT_THROW(be.rope_table(Tensor::f32(z.data(), n, heads * hd), heads, hd, pos0, &other, inv.data(), 1.0f), Error);
  EXPECT_THROW(be.rope_table(Tensor::f32(z.data(), n, heads * hd), heads, hd, pos0, nullptr, nullptr, 1.0f), Error);
}

TEST(CpuDrafterOps, AttentionBiasAddsTheBiasOfEachHeadAndPair) {
  cpu::CpuBackend be;
  for (auto [n, heads, hd] : {std::tuple{6, 2, 8}, std::tuple{1, 1, 4}, std::tuple{21, 3, 16}}) {
    const int64_t w = int64_t(heads) * hd;
    auto q = random_vec(size_t(n * w), 4), k = random_vec(size_t(n * w), 5), v = random_vec(size_t(n * w), 6);
    auto bias = random_vec(size_t(heads * n * n), 7, -3.f, 3.f);
    std::vector<float> out(size_t(n * w), NAN);
    be.attention_bias(Tensor::f32(q.data(), n, w), Tensor::f32(k.data(), n, w), Tensor::f32(v.data(), n, w),
                      Tensor::f32(bias.data(), heads * n, n), heads, hd, Tensor::f32(out.data(), n, w));
    const double worst = attention_err(q, k, v, n, n, heads, heads, hd, bias.data(), out);
    EXPECT_LT(worst, 1e-5) << n << " rows, " << heads << " heads";
  }
  // A bias of −∞ but on one key picks that key's value.
  const int n = 3, hd = 2;
  std::vector<float> q(6, 1.f), k = {1, 0, 0, 1, 1, 1}, v = {1, 2, 3, 4, 5, 6}, out(6);
  std::vector<float> bias(9, -INFINITY);
  bias[0 * 3 + 2] = bias[1 * 3 + 0] = bias[2 * 3 + 1] = 0.f;
  be.attention_bias(Tensor::f32(q.data(), n, hd), Tensor::f32(k.data(), n, hd), Tensor::f32(v.data(), n, hd),
                    Tensor::f32(bias.data(), n, n), 1, hd, Tensor::f32(out.data(), n, hd));
  EXPECT_EQ(out, (std::vector<float>{5, 6, 1, 2, 3, 4}));
  EXPECT_THROW(be.attention_bias(Tensor::f32(q.data(), n, hd), Tensor::f32(k.data(), n, hd),
                                 Tensor::f32(v.data(), n, hd), Tensor::f32(bias.data(), 1, 9), 1, hd,
                                 Tensor::f32(out.data(), n, hd)),
               Error);
}

TEST(CpuDrafterOps, SiluMulAndScaleSoftcap) {
  cpu::CpuBackend be;
  std::vector<float> g = {0.f, 1.f, -2.f, 40.f}, u = {3.f, 2.f, 1.f, 0.5f}, o(4);
  be.silu_mul(Tensor::f32(g.data(), 2, 2), Tensor::f32(u.data(), 2, 2), Tensor::f32(o.data(), 2, 2));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(o[size_t(i)], g[size_t(i)] / (1.0 + std::exp(-g[size_t(i)])) * u[size_t(i)], 1e-6);
  std::vector<float> x = {1.f, -100.f};
  be.scale_softcap(Tensor::f32(x.data(), 1, 2), 2.0f, 0.0f);
  EXPECT_EQ(x, (std::vector<float>{2.f, -200.f}));
  be.scale_softcap(Tensor::f32(x.data(), 1, 2), 1.0f, 30.0f);
  EXPECT_NEAR(x[0], 30.0 * std::tanh(2.0 / 30.0), 1e-5);
  EXPECT_NEAR(x[1], -30.0 * std::tanh(200.0 / 30.0), 1e-4);
}

TEST(CpuDrafterOps, TopKLogprobsIsDescendingWithTheLowerIdFirstOnTies) {
  cpu::CpuBackend be;
  std::vector<float> l = {1.f, 3.f, 2.f, 3.f, -1.f, /* row 1 */ 0.f, 0.f, 0.f, 5.f, 0.f};
  std::vector<int32_t> ids(6);
  std::vector<float> lp(6);
  be.top_k_logprobs(Tensor::f32(l.data(), 2, 5), 3, ids.data(), lp.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 2, 3, 0, 1}));
  for (int r = 0; r < 2; ++r) {
    double lse = 0;
    for (int i = 0; i < 5; ++i) lse += std::exp(double(l[size_t(r * 5 + i)]));
    lse = std::log(lse);
    for (int j = 0; j < 3; ++j)
      EXPECT_NEAR(lp[size_t(r * 3 + j)], l[size_t(r * 5 + ids[size_t(r * 3 + j)])] - lse, 1e-6);
  }
  EXPECT_THROW(be.top_k_logprobs(Tensor::f32(l.data(), 2, 5), 6, ids.data(), lp.data()), Error);
}

TEST(CpuDrafterOps, TopKLogprobsNeverPicksNan) {
  cpu::CpuBackend be;
  // Row 0: a NaN first and where the max would be; row 1: NaNs and −inf, fewer than k numbers.
  std::vector<float> l = {NAN, 3.f, NAN, 3.f, -INFINITY, /* row 1 */ NAN, -INFINITY, NAN, 2.f, NAN};
  std::vector<int32_t> ids(6);
  std::vector<float> lp(6);
  be.top_k_logprobs(Tensor::f32(l.data(), 2, 5), 3, ids.data(), lp.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 3, 1, -1}));
  for (float v : lp) EXPECT_TRUE(std::isnan(v));  // log_softmax of a row holding a NaN
  std::vector<float> m = {-INFINITY, 1.f, -INFINITY};
  be.top_k_logprobs(Tensor::f32(m.data(), 1, 3), 3, ids.data(), lp.data());
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 3), (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(lp[0], 0.f);
  EXPECT_EQ(lp[1], -INFINITY);
}

}  // namespace
}  // namespace tandem::test
