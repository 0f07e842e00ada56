// rms_norm, gated_rms_norm, add and relu2 against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cpu_test.h"
#include "plugins/cpu/cpu_backend.h"
#include "test_util.h"

namespace tandem::test {
namespace {

std::vector<double> ref_rms_norm(const std::vector<float>& x, const std::vector<float>& w, int64_t n,
                                 int64_t d, double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(x[r * d + j]) * x[r * d + j];
    double inv = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t j = 0; j < d; ++j) y[r * d + j] = w[j] * x[r * d + j] * inv;
  }
  return y;
}

TEST(CpuNorm, RmsNormMatchesReference) {
  cpu::CpuBackend be;
  for (auto [n, d] : {std::pair<int64_t, int64_t>{7, 96}, {64, 4096}, {3, 13}}) {
    auto x = random_vec(n * d, 10 + d, -3.f, 3.f);
    auto w = random_vec(d, 20 + d, 0.5f, 1.5f);
    auto y = poisoned(x.size());
    be.rms_norm(Tensor::f32(x.data(), n, d), w.data(), 1e-5f, Tensor::f32(y.data(), n, d));
    EXPECT_LT(max_abs_diff(y, ref_rms_norm(x, w, n, d, 1e-5)), 2e-5) << n << "x" << d;

    // In place gives the same bits as out of place.
    auto inplace = x;
    be.rms_norm(Tensor::f32(inplace.data(), n, d), w.data(), 1e-5f, Tensor::f32(inplace.data(), n, d));
    EXPECT_EQ(std::memcmp(inplace.data(), y.data(), y.size() * 4), 0);
  }
}

TEST(CpuNorm, RmsNormRowsIndependentOfBatchAndThreads) {
  cpu::CpuBackend be;
  const int64_t n = 32, d = 4096;
  auto x = random_vec(n * d, 3, -2.f, 2.f);
  auto w = random_vec(d, 4);
  std::vector<float> all(x.size()), single(x.size());
  {
    ThreadCount t(3);
    be.rms_norm(Tensor::f32(x.data(), n, d), w.data(), 1e-5f, Tensor::f32(all.data(), n, d));
  }
  ThreadCount t(1);
  for (int64_t r = 0; r < n; ++r)
    be.rms_norm(Tensor::f32(x.data() + r * d, 1, d), w.data(), 1e-5f,
                Tensor::f32(single.data() + r * d, 1, d));
  EXPECT_EQ(std::memcmp(all.data(), single.data(), all.size() * 4), 0);
}

TEST(CpuNorm, GatedRmsNormGroupsMatchReference) {
  cpu::CpuBackend be;
  const int64_t n = 5, d = 64;
  const int groups = 2;
  auto y = random_vec(n * d, 5, -2.f, 2.f);
  auto z = random_vec(n * d, 6, -3.f, 3.f);
  auto w = random_vec(d, 7, 0.5f, 1.5f);
  auto out = poisoned(y.size());
  be.gated_rms_norm(Tensor::f32(y.data(), n, d), Tensor::f32(z.data(), n, d), w.data(), groups, 1e-5f,
                    Tensor::f32(out.data(), n, d));

  std::vector<double> ref(y.size());
  const int64_t gd = d / groups;
  for (int64_t r = 0; r < n; ++r)
    for (int g = 0; g < groups; ++g) {
      std::vector<double> u(gd);
      double ss = 0;
      for (int64_t j = 0; j < gd; ++j) {
        int64_t i = r * d + g * gd + j;
        double zz = z[i];
        u[j] = y[i] * zz / (1.0 + std::exp(-zz));
        ss += u[j] * u[j];
      }
      double inv = 1.0 / std::sqrt(ss / gd + 1e-5);
      for (int64_t j = 0; j < gd; ++j) ref[r * d + g * gd + j] = w[g * gd + j] * u[j] * inv;
    }
  EXPECT_LT(max_abs_diff(out, ref), 2e-5);

  // out may alias y.
  auto alias = y;
  be.gated_rms_norm(Tensor::f32(alias.data(), n, d), Tensor::f32(z.data(), n, d), w.data(), groups,
                    1e-5f, Tensor::f32(alias.data(), n, d));
  EXPECT_EQ(std::memcmp(alias.data(), out.data(), out.size() * 4), 0);

  std::string msg = error_of([&] {
    be.gated_rms_norm(Tensor::f32(y.data(), n, d), Tensor::f32(z.data(), n, d), w.data(), 3, 1e-5f,
                      Tensor::f32(out.data(), n, d));
  });
  EXPECT_NE(msg.find("gated_rms_norm: groups must divide the width 64, found 3"), std::string::npos)
      << msg;
}

TEST(CpuNorm, AddAndRelu2AreExact) {
  cpu::CpuBackend be;
  const int64_t n = 9, d = 33;
  auto a = random_vec(n * d, 8, -4.f, 4.f);
  auto b = random_vec(n * d, 9, -4.f, 4.f);
  auto out = poisoned(a.size());
  be.add(Tensor::f32(a.data(), n, d), Tensor::f32(b.data(), n, d), Tensor::f32(out.data(), n, d));
  // One f32 add is correctly rounded, so it equals the rounded float64 sum.
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(out[i], float(double(a[i]) + double(b[i]))) << i;

  auto x = a;
  be.relu2(Tensor::f32(x.data(), n, d));
  size_t zeros = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double r = std::max(0.0, double(a[i]));
    ASSERT_EQ(x[i], float(r * r)) << i;
    zeros += x[i] == 0.f;
  }
  EXPECT_GT(zeros, 0u);  // the input had negatives
}

TEST(CpuNorm, BadShapesAndTypesNameTheOperand) {
  cpu::CpuBackend be;
  std::vector<float> x(16), y(16), w(8);
  auto msg = error_of([&] {
    be.rms_norm(Tensor::f32(x.data(), 2, 8), w.data(), 1e-5f, Tensor::f32(y.data(), 4, 4));
  });
  EXPECT_EQ(msg, "rms_norm: y: expected f32 [2, 8], found f32 [4, 4]");
  msg = error_of([&] {
    be.add(Tensor::f32(x.data(), 2, 8), Tensor(y.data(), DType::BF16, 2, 8), Tensor::f32(y.data(), 2, 8));
  });
  EXPECT_EQ(msg, "add: b: expected f32 [2, 8], found bf16 [2, 8]");
  msg = error_of([&] { be.relu2(Tensor(x.data(), DType::I32, 2, 8)); });
  EXPECT_EQ(msg, "relu2: x: expected f32 [2, 8], found i32 [2, 8]");
  msg = error_of([&] {
    be.gated_rms_norm(Tensor::f32(x.data(), 2, 8), Tensor::f32(y.data(), 2, 4), w.data(), 1, 1e-5f,
                      Tensor::f32(y.data(), 2, 8));
  });
  EXPECT_EQ(msg, "gated_rms_norm: z: expected f32 [2, 8], found f32 [2, 4]");
  msg = error_of([&] {
    be.rms_norm(Tensor::f32(x.data(), 2, 8), nullptr, 1e-5f, Tensor::f32(y.data(), 2, 8));
  });
  EXPECT_EQ(msg, "rms_norm: weight is null");
}

}  // namespace
}  // namespace tandem::test
