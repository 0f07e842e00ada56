// The sigmoid MoE router against a float64 reference (spec/nemotron_h.md § 5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "cpu_test.h"
#include "plugins/cpu/cpu_backend.h"
#include "test_util.h"

namespace tandem::test {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed route(Backend& be, std::vector<float>& logits, const float* bias, const RouteParams& p) {
  const int64_t n = int64_t(logits.size()) / p.n_experts;
  Routed r{std::vector<int32_t>(n * p.top_k, -1), poisoned(n * p.top_k)};
  be.moe_route(Tensor::f32(logits.data(), n, p.n_experts), bias, p, r.ids.data(), r.weights.data());
  return r;
}

// One row, written from the spec in float64: ids by descending selection score, and their weights.
std::pair<std::vector<int>, std::vector<double>> ref_route(const float* logits, const float* bias,
                                                           const RouteParams& p) {
  const int e = p.n_experts, gsize = e / p.n_group;
  std::vector<double> s(e), sel(e);
  for (int j = 0; j < e; ++j) {
    s[j] = 1.0 / (1.0 + std::exp(-double(logits[j])));
    sel[j] = s[j] + (bias ? bias[j] : 0.0);
  }
  if (p.n_group > 1) {
    std::vector<std::pair<double, int>> gscore;
    for (int g = 0; g < p.n_group; ++g) {
      std::vector<double> v(sel.begin() + g * gsize, sel.begin() + (g + 1) * gsize);
      std::sort(v.rbegin(), v.rend());
      gscore.push_back({-(v[0] + (gsize > 1 ? v[1] : 0.0)), g});
    }
    std::sort(gscore.begin(), gscore.end());
    for (int i = p.topk_group; i < p.n_group; ++i)
      for (int j = 0; j < gsize; ++j) sel[gscore[i].second * gsize + j] = -INFINITY;
  }
  std::vector<int> idx(e);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return sel[a] > sel[b]; });
  idx.resize(p.top_k);
  std::vector<double> w;
  double sum = 0;
  for (int i : idx) sum += s[i];
  for (int i : idx) w.push_back((p.norm_topk_prob ? s[i] / (sum + 1e-20) : s[i]) * p.scaling);
  return {idx, w};
}

void expect_matches_reference(Backend& be, std::vector<float>& logits, const float* bias,
                              const RouteParams& p) {
  auto got = route(be, logits, bias, p);
  const int64_t n = int64_t(logits.size()) / p.n_experts;
  for (int64_t r = 0; r < n; ++r) {
    auto [ids, w] = ref_route(logits.data() + r * p.n_experts, bias, p);
    std::set<int> want(ids.begin(), ids.end()), have(got.ids.begin() + r * p.top_k,
                                                     got.ids.begin() + (r + 1) * p.top_k);
    EXPECT_EQ(have, want) << "row " << r;
    for (int j = 0; j < p.top_k; ++j) {
      // Random logits have no ties, so the order is the reference's too.
      EXPECT_EQ(got.ids[r * p.top_k + j], ids[j]) << "row " << r << " slot " << j;
      EXPECT_NEAR(got.weights[r * p.top_k + j], w[j], 2e-6 * p.scaling) << "row " << r << " slot " << j;
    }
  }
}

TEST(CpuRoute, TopKWithBiasNormAndScaling) {
  cpu::CpuBackend be;
  auto logits = random_vec(6 * 16, 30, -3.f, 3.f);
  auto bias = random_vec(16, 31, -0.4f, 0.4f);
  for (bool norm : {true, false})
    for (float scaling : {1.0f, 2.5f}) {
      RouteParams p;
      p.n_experts = 16;
      p.top_k = 4;
      p.norm_topk_prob = norm;
      p.scaling = scaling;
      expect_matches_reference(be, logits, bias.data(), p);
      expect_matches_reference(be, logits, nullptr, p);
    }
}

TEST(CpuRoute, BiasSelectsButDoesNotWeigh) {
  cpu::CpuBackend be;
  std::vector<float> logits = {1.0f, 0.9f, -1.0f, -2.0f};
  std::vector<float> bias = {0.0f, 0.5f, 0.0f, 0.0f};
  RouteParams p;
  p.n_experts = 4;
  p.top_k = 1;
  p.norm_topk_prob = false;
  auto plain = route(be, logits, nullptr, p);
  auto biased = route(be, logits, bias.data(), p);
  EXPECT_EQ(plain.ids[0], 0);
  EXPECT_EQ(biased.ids[0], 1);
  EXPECT_NEAR(biased.weights[0], 1.0 / (1.0 + std::exp(-0.9)), 1e-7);  // s, not s + bias

  p.top_k = 2;
  p.norm_topk_prob = true;
  p.scaling = 5.0f;
  auto two = route(be, logits, bias.data(), p);
  double s0 = 1.0 / (1.0 + std::exp(-1.0)), s1 = 1.0 / (1.0 + std::exp(-0.9));
  EXPECT_EQ(two.ids, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(two.weights[0], 5.0 * s1 / (s0 + s1), 1e-6);
  EXPECT_NEAR(two.weights[1], 5.0 * s0 / (s0 + s1), 1e-6);
}

TEST(CpuRoute, GroupLimitedRouting) {
  cpu::CpuBackend be;
  RouteParams p;
  p.n_experts = 8;
  p.n_group = 4;
  p.topk_group = 2;
  p.top_k = 3;
  // Group 0 holds the single best expert but a poor partner; groups 1 and 2 are better in sum.
  std::vector<float> logits = {4.0f, -4.0f, 2.0f, 1.9f, 1.8f, 1.7f, 1.0f, -3.0f};
  auto got = route(be, logits, nullptr, p);
  EXPECT_EQ(got.ids, (std::vector<int32_t>{2, 3, 4}));
  RouteParams flat = p;
  flat.n_group = flat.topk_group = 1;
  EXPECT_EQ(route(be, logits, nullptr, flat).ids[0], 0);  // without groups expert 0 wins

  auto many = random_vec(10 * 8, 40, -3.f, 3.f);
  auto bias = random_vec(8, 41, -0.3f, 0.3f);
  expect_matches_reference(be, many, bias.data(), p);
}

TEST(CpuRoute, TiesGoToTheLowerId) {
  cpu::CpuBackend be;
  std::vector<float> logits(8, 0.5f);
  RouteParams p;
  p.n_experts = 8;
  p.top_k = 3;
  auto got = route(be, logits, nullptr, p);
  EXPECT_EQ(got.ids, (std::vector<int32_t>{0, 1, 2}));
  for (float w : got.weights) EXPECT_NEAR(w, 1.0 / 3.0, 1e-7);
}

TEST(CpuRoute, BadParamsAreNamed) {
  cpu::CpuBackend be;
  std::vector<float> logits(16);
  std::vector<int32_t> ids(16);
  std::vector<float> w(16);
  auto call = [&](RouteParams p, int64_t cols) {
    return error_of([&] {
      be.moe_route(Tensor::f32(logits.data(), 16 / cols, cols), nullptr, p, ids.data(), w.data());
    });
  };
  RouteParams p;
  p.n_experts = 8;
  p.top_k = 9;
  EXPECT_EQ(call(p, 8), "moe_route: top_k must be in [1, 8] (experts in the kept groups), found 9");
  p.top_k = 2;
  EXPECT_EQ(call(p, 4), "moe_route: logits: expected f32 [4, 8], found f32 [4, 4]");
  p.n_group = 3;
  EXPECT_EQ(call(p, 8), "moe_route: n_group must divide n_experts 8, found 3");
  p.n_group = 2;
  p.topk_group = 3;
  EXPECT_EQ(call(p, 8), "moe_route: topk_group must be in [1, 2], found 3");
  p.topk_group = 1;
  p.top_k = 5;
  EXPECT_EQ(call(p, 8), "moe_route: top_k must be in [1, 4] (experts in the kept groups), found 5");
}

}  // namespace
}  // namespace tandem::test
