// The LiLiCorr head's ops of the CPU backend (mul_add_rows, add_rows, attention_bias_qkv, normalize_rows,
// group_dots) against float64
// references and cases with known answers (attention_bias: beside attention_full, test_drafter_ops.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "plugins/cpu/cpu_backend.h"
#include "tandem/error.h"
#include "test_util.h"

namespace tandem::test {
namespace {

TEST(CpuHeadOps, MulAddRowsBroadcastsEachGroupsRow) {
  cpu::CpuBackend be;
  const int64_t n = 6, D = 5, group = 3;
  auto x = random_vec(size_t(n * D), 1), a = random_vec(size_t(2 * D), 2), b = random_vec(size_t(2 * D), 3);
  const Tensor X = Tensor::f32(x.data(), n, D), A = Tensor::f32(a.data(), 2, D), Bt = Tensor::f32(b.data(), 2, D);
  std::vector<float> out(x.size(), NAN);
  be.mul_add_rows(X, A, Bt, group, Tensor::f32(out.data(), n, D));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < D; ++i) {
      const size_t g = size_t((r / group) * D + i);
      EXPECT_EQ(out[size_t(r * D + i)], x[size_t(r * D + i)] * a[g] + b[g]) << r << "," << i;
    }
  // Without a: a plain broadcast add of one bias row, in place.
  std::vector<float> y = x;
  be.mul_add_rows(Tensor::f32(y.data(), n, D), Tensor(), Tensor::f32(b.data(), 1, D), n, Tensor::f32(y.data(), n, D));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < D; ++i) EXPECT_EQ(y[size_t(r * D + i)], x[size_t(r * D + i)] + b[size_t(i)]);
  // Without b: a product with one row per group of 2.
  be.mul_add_rows(X, Tensor::f32(x.data(), 3, D), Tensor(), 2, Tensor::f32(out.data(), n, D));
  EXPECT_EQ(out[size_t(5 * D + 1)], x[size_t(5 * D + 1)] * x[size_t(2 * D + 1)]);
  EXPECT_THROW(be.mul_add_rows(X, A, Bt, 4, Tensor::f32(out.data(), n, D)), Error);
  EXPECT_THROW(be.mul_add_rows(X, A, Bt, 2, Tensor::f32(out.data(), n, D)), Error);  // a holds 2 rows, not 3
}

TEST(CpuHeadOps, AddRowsSumsLeftToRightWithBroadcastsThenSilu) {
  cpu::CpuBackend be;
  const int64_t n = 6, D = 5;
  auto x = random_vec(size_t(n * D), 1), d = random_vec(size_t(n * D), 2), a = random_vec(size_t(2 * D), 3),
       b = random_vec(size_t(n * D), 4);
  const Tensor X = Tensor::f32(x.data(), n, D), Dt = Tensor::f32(d.data(), n, D), A = Tensor::f32(a.data(), 2, D);
  for (bool silu : {false, true}) {
    std::vector<float> out(x.size(), NAN);
    be.add_rows(X, Dt, A, 3, Tensor::f32(b.data(), n, D), 1, silu, Tensor::f32(out.data(), n, D));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < D; ++i) {
        const size_t e = size_t(r * D + i);
        const float v = ((x[e] + d[e]) + a[size_t((r / 3) * D + i)]) + b[e];
        EXPECT_EQ(out[e], silu ? v / (1.0f + std::exp(-v)) : v) << r << "," << i;
      }
  }
  // A bias row alone, in place; then silu alone (the same bits as silu_mul by ones).
  std::vector<float> y = x;
  be.add_rows(Tensor::f32(y.data(), n, D), Tensor(), Tensor::f32(a.data(), 1, D), n, Tensor(), 1, false,
              Tensor::f32(y.data(), n, D));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < D; ++i) EXPECT_EQ(y[size_t(r * D + i)], x[size_t(r * D + i)] + a[size_t(i)]);
  std::vector<float> s1(x.size()), s2(x.size()), ones(x.size(), 1.0f);
  be.add_rows(X, Tensor(), Tensor(), 1, Tensor(), 1, true, Tensor::f32(s1.data(), n, D));
  be.silu_mul(X, Tensor::f32(ones.data(), n, D), Tensor::f32(s2.data(), n, D));
  EXPECT_EQ(s1, s2);
  EXPECT_THROW(be.add_rows(X, Dt, A, 4, Tensor(), 1, false, Tensor::f32(y.data(), n, D)), Error);  // 4 ∤ 6
  EXPECT_THROW(be.add_rows(X, Dt, A, 2, Tensor(), 1, false, Tensor::f32(y.data(), n, D)), Error);  // a: 2 rows, not 3
  EXPECT_THROW(be.add_rows(X, Tensor::f32(d.data(), n - 1, D), Tensor(), 1, Tensor(), 1, false,
                           Tensor::f32(y.data(), n, D)),
               Error);
}

TEST(CpuHeadOps, AttentionBiasQkvIsAttentionBiasOfTheBiasedBlocks) {
  cpu::CpuBackend be;
  const int64_t n = 6;
  const int heads = 2, hd = 4;
  const int64_t w = heads * hd;
  auto qkv = random_vec(size_t(n * 3 * w), 5), qb = random_vec(size_t(3 * w), 6), bias = random_vec(size_t(heads * n * n), 7);
  std::vector<float> q(size_t(n * w)), k(q.size()), v(q.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < w; ++e) {
      q[size_t(i * w + e)] = qkv[size_t(i * 3 * w + e)] + qb[size_t(e)];
      k[size_t(i * w + e)] = qkv[size_t(i * 3 * w + w + e)] + qb[size_t(w + e)];
      v[size_t(i * w + e)] = qkv[size_t(i * 3 * w + 2 * w + e)] + qb[size_t(2 * w + e)];
    }
  std::vector<float> want(q.size()), got(q.size(), NAN);
  be.attention_bias(Tensor::f32(q.data(), n, w), Tensor::f32(k.data(), n, w), Tensor::f32(v.data(), n, w),
                    Tensor::f32(bias.data(), heads * n, n), heads, hd, Tensor::f32(want.data(), n, w));
  be.attention_bias_qkv(Tensor::f32(qkv.data(), n, 3 * w), Tensor::f32(qb.data(), 1, 3 * w),
                        Tensor::f32(bias.data(), heads * n, n), heads, hd, Tensor::f32(got.data(), n, w));
  EXPECT_EQ(got, want);
  EXPECT_THROW(be.attention_bias_qkv(Tensor::f32(qkv.data(), n, 2 * w), Tensor(), Tensor::f32(bias.data(), heads * n, n),
                                     heads, hd, Tensor::f32(got.data(), n, w)),
               Error);
}

TEST(CpuHeadOps, NormalizeRowsGivesUnitRowsAndKeepsTinyOnesBelowEps) {
  cpu::CpuBackend be;
  std::vector<float> x = {3, 4, 0, 0, 1e-6f, 0, 2, 2, 1};
  be.normalize_rows(Tensor::f32(x.data(), 3, 3), 1e-4f);
  EXPECT_NEAR(x[0], 0.6, 1e-7);
  EXPECT_NEAR(x[1], 0.8, 1e-7);
  EXPECT_NEAR(x[4], 1e-6 / 1e-4, 1e-8);  // ‖x‖ < eps: divided by eps
  EXPECT_NEAR(x[6], 2.0 / 3.0, 1e-7);
  EXPECT_NEAR(x[8], 1.0 / 3.0, 1e-7);
}

TEST(CpuHeadOps, GroupDotsPairsRowsWithinEachGroup) {
  cpu::CpuBackend be;
  for (auto [groups, ka, kb, F] : {std::tuple{3, 4, 4, 16}, std::tuple{1, 1, 8, 5}, std::tuple{6, 2, 3, 33}}) {
    auto a = random_vec(size_t(groups * ka * F), 8), b = random_vec(size_t(groups * kb * F), 9);
    std::vector<float> out(size_t(groups * ka * kb), NAN);
    be.group_dots(Tensor::f32(a.data(), groups * ka, F), Tensor::f32(b.data(), groups * kb, F), groups, 2.5f,
                  Tensor::f32(out.data(), groups, ka * kb));
    for (int g = 0; g < groups; ++g)
      for (int i = 0; i < ka; ++i)
        for (int j = 0; j < kb; ++j) {
          double d = 0;
          for (int e = 0; e < F; ++e) d += double(a[size_t((g * ka + i) * F + e)]) * b[size_t((g * kb + j) * F + e)];
          EXPECT_NEAR(out[size_t((g * ka + i) * kb + j)], 2.5 * d, 1e-5) << g << "," << i << "," << j;
        }
  }
  std::vector<float> z(64);
  EXPECT_THROW(be.group_dots(Tensor::f32(z.data(), 4, 4), Tensor::f32(z.data(), 3, 4), 2, 1.f,
                             Tensor::f32(z.data(), 2, 4)),
               Error);
}

}  // namespace
}  // namespace tandem::test
