// moe_combine: the weighted sum of each token's k expert outputs, against float64, and independent
// of how many tokens share the call.
#include <gtest/gtest.h>

#include <cstring>

#include "cpu_test.h"
#include "plugins/cpu/kernels.h"
#include "test_util.h"

using namespace tandem;

TEST(CpuMoeCombine, MatchesFloat64AndIsBatchInvariant) {
  const int n = 7, k = 3, d = 37;
  auto eo = test::random_vec(size_t(n * k * d), 3);
  auto w = test::random_vec(size_t(n * k), 4, 0.f, 2.f);
  auto out = test::poisoned(size_t(n * d));
  cpu::moe_combine(Tensor::f32(eo.data(), n * k, d), w.data(), k, Tensor::f32(out.data(), n, d));
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      double ref = 0;
      for (int j = 0; j < k; ++j) ref += double(w[size_t(t * k + j)]) * eo[size_t((t * k + j) * d + c)];
      EXPECT_NEAR(out[size_t(t * d + c)], ref, 1e-5 * (1 + std::fabs(ref)));
    }
  for (int t = 0; t < n; ++t) {  // one token at a time: the same bits
    std::vector<float> one(static_cast<size_t>(d));
    cpu::moe_combine(Tensor::f32(eo.data() + t * k * d, k, d), w.data() + t * k, k, Tensor::f32(one.data(), 1, d));
    EXPECT_EQ(std::memcmp(one.data(), out.data() + t * d, size_t(d) * 4), 0) << "token " << t;
  }
}

TEST(CpuMoeCombine, ShapeErrorsNameTheOperand) {
  std::vector<float> eo(12), w(4), out(6);
  std::string e = test::error_of([&] {
    cpu::moe_combine(Tensor::f32(eo.data(), 4, 3), w.data(), 3, Tensor::f32(out.data(), 2, 3));
  });
  EXPECT_NE(e.find("moe_combine"), std::string::npos) << e;
  EXPECT_NE(e.find("expert_out"), std::string::npos) << e;
}
