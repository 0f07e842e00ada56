// formats/exl3/exl3_cpu.*: the CPU tensor's matmul and get_rows against dequantize-then-multiply,
// with padding and bias, and batch invariance.
#include <gtest/gtest.h>

#include <cstring>

#include "exl3_test_util.h"
#include "formats/exl3/exl3_cpu.h"
#include "test_util.h"

using namespace tandem;

namespace {

struct Case {
  int64_t k, n, in, out;
  int K, cb;
  bool bias;
};

// y = x·Wᵀ in double from the dequantized W.
std::vector<double> reference_matmul(const std::vector<float>& w, const std::vector<float>& x, int64_t rows, int64_t in,
                                     int64_t out, const std::vector<uint16_t>& bias) {
  std::vector<double> y(size_t(rows * out));
  for (int64_t a = 0; a < rows; ++a)
    for (int64_t o = 0; o < out; ++o) {
      double s = bias.empty() ? 0.0 : exl3_ref::half_to_double(bias[size_t(o)]);
      for (int64_t i = 0; i < in; ++i) s += double(x[size_t(a * in + i)]) * w[size_t(o * in + i)];
      y[size_t(a * out + o)] = s;
    }
  return y;
}

class Exl3Matmul : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(Exl3Matmul, MatchesDequantizeThenMultiplyAndIsBatchInvariant) {
  const Case c = GetParam();
  exl3_test::RandomLinear lin(c.k, c.n, c.K, c.cb, uint64_t(c.k * 7 + c.n + c.K), 1.0 / std::sqrt(double(c.in)));
  if (c.bias) lin.add_bias(c.out, 17);
  exl3_test::GroupBuilder b;
  lin.store(b, "layer.proj");
  exl3::Exl3Tensor t(b.group("layer.proj", {c.out, c.in}));
  ASSERT_EQ(t.shape(), (std::vector<int64_t>{c.out, c.in}));
  const char* cb_names[3] = {"3inst", "mcg", "mul1"};
  EXPECT_EQ(t.type_name(), "EXL3_K" + std::to_string(c.K) + "_" + cb_names[c.cb]);
  EXPECT_EQ(t.bytes(), size_t(c.k * c.n * c.K / 8 + 2 * c.k + 2 * c.n + (c.bias ? 2 * c.out : 0)));

  std::vector<float> w(size_t(c.out * c.in));
  t.dequantize(w.data());
  const int64_t max_rows = 40;
  std::vector<float> x = test::random_vec(size_t(max_rows * c.in), 23);
  std::vector<double> want = reference_matmul(w, x, max_rows, c.in, c.out, lin.bias);
  double peak = 0;
  for (double v : want) peak = std::max(peak, std::abs(v));

  std::vector<float> full(size_t(max_rows * c.out));
  t.matmul(Tensor::f32(x.data(), max_rows, c.in), Tensor::f32(full.data(), max_rows, c.out));
  EXPECT_LT(test::max_abs_diff(full, want), 2e-5 * peak);

  // Every batch size from 1 to 16 gives each row the same bits as the 40-row call.
  for (int64_t rows = 1; rows <= 16; ++rows)
    for (int64_t a0 : {int64_t(0), max_rows - rows}) {
      std::vector<float> y(size_t(rows * c.out));
      t.matmul(Tensor::f32(x.data() + a0 * c.in, rows, c.in), Tensor::f32(y.data(), rows, c.out));
      ASSERT_EQ(std::memcmp(y.data(), full.data() + a0 * c.out, y.size() * sizeof(float)), 0)
          << rows << " rows from row " << a0;
    }

  // get_rows gives rows of the dequantized matrix (the embedding view); ids in any order, repeated.
  std::vector<int32_t> ids = {0, int32_t(c.out - 1), 5, int32_t(c.out / 2), 5};
  for (auto& id : ids) id %= int32_t(c.out);
  std::vector<float> rows(ids.size() * size_t(c.in));
  t.get_rows(ids.data(), int(ids.size()), Tensor::f32(rows.data(), int64_t(ids.size()), c.in));
  double wpeak = 0;
  for (float v : w) wpeak = std::max(wpeak, double(std::abs(v)));
  for (size_t p = 0; p < ids.size(); ++p)
    for (int64_t i = 0; i < c.in; ++i)
      ASSERT_NEAR(rows[p * size_t(c.in) + size_t(i)], w[size_t(ids[p]) * size_t(c.in) + size_t(i)], 1e-5 * wpeak)
          << "id " << ids[p] << " col " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Exl3Matmul,
                         ::testing::Values(Case{128, 256, 128, 256, 4, 2, false},   // no padding
                                           Case{128, 256, 100, 200, 2, 2, true},    // padded both sides, bias
                                           Case{256, 128, 256, 96, 6, 0, false},    // padded out only
                                           Case{384, 128, 300, 128, 3, 1, true},    // padded in only, 3 blocks
                                           Case{128, 128, 1, 1, 1, 0, false},       // K=1, 1×1
                                           Case{128, 384, 128, 257, 8, 2, true}));  // K=8, odd out

TEST(Exl3Cpu, GetRowsRejectsBadIdsAndShapes) {
  exl3_test::RandomLinear lin(128, 128, 4, 2, 3);
  exl3_test::GroupBuilder b;
  lin.store(b, "lm_head");
  exl3::Exl3Tensor t(b.group("lm_head", {100, 64}));
  std::vector<float> out(64 * 2);
  const int32_t bad[] = {3, 100};
  test::expect_error([&] { t.get_rows(bad, 2, Tensor::f32(out.data(), 2, 64)); }, {"lm_head", "100", "[0, 100)"});
  test::expect_error([&] { t.get_rows(bad, 1, Tensor::f32(out.data(), 1, 128)); }, {"lm_head", "[1, 64]"});
}
