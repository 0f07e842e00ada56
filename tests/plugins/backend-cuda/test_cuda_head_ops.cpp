// The CUDA backend's LiLiCorr head ops (mul_add_rows, add_rows, attention_bias, attention_bias_qkv,
// normalize_rows, group_dots), each
// against its CPU twin (plugins/cpu/head_ops.cpp) on random inputs of several shapes (the Bolt head's
// among them), outputs poisoned with NaN first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda_test.h"
#include "plugins/cpu/kernels.h"

namespace tandem::test {
namespace {

using cuda::CudaBackend;

class CudaHeadOps : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<CudaBackend>();
  }
  std::unique_ptr<CudaBackend> be;
};

TEST_F(CudaHeadOps, MulAddRowsMatchesCpu) {
  for (auto [rows, cols, group] : {std::tuple{56, 1024, 8}, std::tuple{56, 1024, 56}, std::tuple{7, 33, 1}}) {
    const int64_t m = rows / group;
    auto x = random_vec(size_t(rows * cols), 1), a = random_vec(size_t(m * cols), 2), b = random_vec(size_t(m * cols), 3);
    auto dx = to_device(*be, x), da = to_device(*be, a), db = to_device(*be, b);
    for (int which = 0; which < 3; ++which) {  // a and b, a only, b only
      const bool ua = which != 2, ub = which != 1;
      std::vector<float> ref(x.size());
      cpu::mul_add_rows(Tensor::f32(x.data(), rows, cols), ua ? Tensor::f32(a.data(), m, cols) : Tensor(),
                        ub ? Tensor::f32(b.data(), m, cols) : Tensor(), group, Tensor::f32(ref.data(), rows, cols));
      auto dout = poisoned_device(*be, x.size());
      be->mul_add_rows(Tensor::f32(dx.p(), rows, cols), ua ? Tensor::f32(da.p(), m, cols) : Tensor(),
                       ub ? Tensor::f32(db.p(), m, cols) : Tensor(), group, Tensor::f32(dout.p(), rows, cols));
      // Separate multiply and add on both: the same bits.
      EXPECT_TRUE(same_bits(to_host(*be, dout), ref)) << rows << "×" << cols << " group " << group << " case " << which;
    }
  }
}

TEST_F(CudaHeadOps, AttentionBiasMatchesCpu) {
  for (auto [n, heads, hd] : {std::tuple{56, 8, 128}, std::tuple{24, 4, 8}, std::tuple{1, 2, 64},
                              std::tuple{100, 3, 96}}) {
    const int64_t w = int64_t(heads) * hd;
    auto q = random_vec(size_t(n * w), 4), k = random_vec(size_t(n * w), 5), v = random_vec(size_t(n * w), 6);
    auto bias = random_vec(size_t(heads * n * n), 7, -3.f, 3.f);
    std::vector<float> ref(size_t(n * w));
    cpu::attention_bias(Tensor::f32(q.data(), n, w), Tensor::f32(k.data(), n, w), Tensor::f32(v.data(), n, w),
                        Tensor::f32(bias.data(), heads * n, n), heads, hd, Tensor::f32(ref.data(), n, w));
    auto dq = to_device(*be, q), dk = to_device(*be, k), dv = to_device(*be, v), db = to_device(*be, bias);
    auto dout = poisoned_device(*be, ref.size());
    be->attention_bias(Tensor::f32(dq.p(), n, w), Tensor::f32(dk.p(), n, w), Tensor::f32(dv.p(), n, w),
                       Tensor::f32(db.p(), heads * n, n), heads, hd, Tensor::f32(dout.p(), n, w));
    record(("attention_bias " + std::to_string(n) + "×" + std::to_string(heads) + "×" + std::to_string(hd)).c_str(),
           max_rel_err(to_host(*be, dout), ref), 1e-5);
  }
}

TEST_F(CudaHeadOps, AddRowsMatchesCpu) {
  // The Bolt head's cases: a bias with silu, a residual with a bias, the node sum (per-slot rows and a
  // per-row table), the factor sum with silu, and a row count not a multiple of the block.
  for (auto [rows, cols, ga, gb] : {std::tuple{56, 1024, 8, 1}, std::tuple{56, 4096, 56, 56}, std::tuple{113, 256, 1, 113},
                                    std::tuple{7, 33, 7, 1}, std::tuple{1, 1024, 1, 1}}) {
    auto x = random_vec(size_t(rows * cols), 1, -6.f, 6.f), d = random_vec(size_t(rows * cols), 2);
    auto a = random_vec(size_t(rows / ga * cols), 3), b = random_vec(size_t(rows / gb * cols), 4);
    auto dx = to_device(*be, x), dd = to_device(*be, d), da = to_device(*be, a), db = to_device(*be, b);
    for (int which = 0; which < 16; ++which) {  // d, a, b each there or not; silu or not
      const bool ud = which & 1, ua = which & 2, ub = which & 4, silu = which & 8;
      std::vector<float> ref(x.size());
      cpu::add_rows(Tensor::f32(x.data(), rows, cols), ud ? Tensor::f32(d.data(), rows, cols) : Tensor(),
                    ua ? Tensor::f32(a.data(), rows / ga, cols) : Tensor(), ga,
                    ub ? Tensor::f32(b.data(), rows / gb, cols) : Tensor(), gb, silu, Tensor::f32(ref.data(), rows, cols));
      auto dout = poisoned_device(*be, x.size());
      be->add_rows(Tensor::f32(dx.p(), rows, cols), ud ? Tensor::f32(dd.p(), rows, cols) : Tensor(),
                   ua ? Tensor::f32(da.p(), rows / ga, cols) : Tensor(), ga,
                   ub ? Tensor::f32(db.p(), rows / gb, cols) : Tensor(), gb, silu, Tensor::f32(dout.p(), rows, cols));
      const std::string what = std::to_string(rows) + "×" + std::to_string(cols) + " case " + std::to_string(which);
      // The adds in the same order on both: the same bits; silu's exp may differ in its last bit.
      if (!silu) EXPECT_TRUE(same_bits(to_host(*be, dout), ref)) << what;
      else record(("add_rows silu " + what).c_str(), max_rel_err(to_host(*be, dout), ref), 1e-6);
    }
  }
  // In place (out = x), as the head runs it.
  auto x = random_vec(56 * 64, 5), d = random_vec(56 * 64, 6);
  std::vector<float> ref(x.size());
  cpu::add_rows(Tensor::f32(x.data(), 56, 64), Tensor::f32(d.data(), 56, 64), Tensor(), 1, Tensor(), 1, false,
                Tensor::f32(ref.data(), 56, 64));
  auto dx = to_device(*be, x), dd = to_device(*be, d);
  be->add_rows(Tensor::f32(dx.p(), 56, 64), Tensor::f32(dd.p(), 56, 64), Tensor(), 1, Tensor(), 1, false,
               Tensor::f32(dx.p(), 56, 64));
  EXPECT_TRUE(same_bits(to_host(*be, dx), ref));
}

TEST_F(CudaHeadOps, AttentionBiasQkvMatchesCpuAndTheUnpackedOp) {
  for (auto [n, heads, hd] : {std::tuple{56, 8, 128}, std::tuple{24, 4, 8}, std::tuple{1, 2, 64},
                              std::tuple{100, 3, 96}}) {
    const int64_t w = int64_t(heads) * hd;
    auto qkv = random_vec(size_t(n * 3 * w), 4), qb = random_vec(size_t(3 * w), 8);
    auto bias = random_vec(size_t(heads * n * n), 7, -3.f, 3.f);
    const std::string what = std::to_string(n) + "×" + std::to_string(heads) + "×" + std::to_string(hd);
    auto dqkv = to_device(*be, qkv), dqb = to_device(*be, qb), db = to_device(*be, bias);
    for (bool with_bias : {true, false}) {
      std::vector<float> ref(size_t(n * w));
      cpu::attention_bias_qkv(Tensor::f32(qkv.data(), n, 3 * w), with_bias ? Tensor::f32(qb.data(), 1, 3 * w) : Tensor(),
                              Tensor::f32(bias.data(), heads * n, n), heads, hd, Tensor::f32(ref.data(), n, w));
      auto dout = poisoned_device(*be, ref.size());
      be->attention_bias_qkv(Tensor::f32(dqkv.p(), n, 3 * w), with_bias ? Tensor::f32(dqb.p(), 1, 3 * w) : Tensor(),
                             Tensor::f32(db.p(), heads * n, n), heads, hd, Tensor::f32(dout.p(), n, w));
      const auto got = to_host(*be, dout);
      record(("attention_bias_qkv " + what).c_str(), max_rel_err(got, ref), 1e-5);
      // The same bits as the bias added by mul_add_rows and attention_bias on the unpacked blocks.
      std::vector<float> q(size_t(n * w)), k(q.size()), v(q.size());
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < w; ++e) {
          const size_t r = size_t(i * 3 * w + e);
          q[size_t(i * w + e)] = qkv[r] + (with_bias ? qb[size_t(e)] : 0.f);
          k[size_t(i * w + e)] = qkv[r + size_t(w)] + (with_bias ? qb[size_t(w + e)] : 0.f);
          v[size_t(i * w + e)] = qkv[r + size_t(2 * w)] + (with_bias ? qb[size_t(2 * w + e)] : 0.f);
        }
      auto dq = to_device(*be, q), dk = to_device(*be, k), dv = to_device(*be, v);
      auto dref = poisoned_device(*be, ref.size());
      be->attention_bias(Tensor::f32(dq.p(), n, w), Tensor::f32(dk.p(), n, w), Tensor::f32(dv.p(), n, w),
                         Tensor::f32(db.p(), heads * n, n), heads, hd, Tensor::f32(dref.p(), n, w));
      EXPECT_TRUE(same_bits(got, to_host(*be, dref))) << what << (with_bias ? " with" : " without") << " bias";
    }
  }
}

TEST_F(CudaHeadOps, NormalizeRowsMatchesCpu) {
  for (auto [rows, cols] : {std::tuple{56, 256}, std::tuple{1, 256}, std::tuple{5, 1000}, std::tuple{3, 7}}) {
    auto x = random_vec(size_t(rows * cols), uint64_t(cols));
    x[0] = x[1] = 0.0f;
    if (cols == 7) std::fill(x.begin(), x.begin() + 7, 1e-7f);  // ‖x‖ < eps
    std::vector<float> ref = x;
    cpu::normalize_rows(Tensor::f32(ref.data(), rows, cols), 1e-4f);
    auto dx = to_device(*be, x);
    be->normalize_rows(Tensor::f32(dx.p(), rows, cols), 1e-4f);
    record(("normalize_rows " + std::to_string(cols)).c_str(), max_rel_err(to_host(*be, dx), ref), 1e-6);
  }
}

TEST_F(CudaHeadOps, GroupDotsMatchesCpu) {
  for (auto [groups, ka, kb, F] : {std::tuple{6, 8, 8, 256}, std::tuple{1, 1, 8, 256}, std::tuple{3, 2, 5, 17},
                                   std::tuple{15, 16, 16, 64}}) {
    auto a = random_vec(size_t(groups * ka * F), 8), b = random_vec(size_t(groups * kb * F), 9);
    std::vector<float> ref(size_t(groups * ka * kb));
    cpu::group_dots(Tensor::f32(a.data(), groups * ka, F), Tensor::f32(b.data(), groups * kb, F), groups, 2.5f,
                    Tensor::f32(ref.data(), groups, ka * kb));
    auto da = to_device(*be, a), db = to_device(*be, b);
    auto dout = poisoned_device(*be, ref.size());
    be->group_dots(Tensor::f32(da.p(), groups * ka, F), Tensor::f32(db.p(), groups * kb, F), groups, 2.5f,
                   Tensor::f32(dout.p(), groups, ka * kb));
    record(("group_dots " + std::to_string(groups) + "×" + std::to_string(ka) + "×" + std::to_string(kb)).c_str(),
           max_rel_err(to_host(*be, dout), ref), 1e-5);
  }
}

TEST_F(CudaHeadOps, BadArgumentsAreOneLineErrors) {
  auto d = poisoned_device(*be, 64);
  EXPECT_THROW(be->mul_add_rows(Tensor::f32(d.p(), 4, 4), Tensor(), Tensor::f32(d.p(), 1, 4), 3,
                                Tensor::f32(d.p(), 4, 4)),
               Error);
  EXPECT_THROW(be->attention_bias(Tensor::f32(d.p(), 2, 8), Tensor::f32(d.p(), 2, 8), Tensor::f32(d.p(), 2, 8),
                                  Tensor::f32(d.p(), 2, 2), 2, 4, Tensor::f32(d.p(), 2, 8)),
               Error);
  EXPECT_THROW(be->add_rows(Tensor::f32(d.p(), 4, 4), Tensor(), Tensor::f32(d.p(), 1, 4), 3, Tensor(), 1, false,
                            Tensor::f32(d.p(), 4, 4)),
               Error);
  EXPECT_THROW(be->attention_bias_qkv(Tensor::f32(d.p(), 2, 16), Tensor(), Tensor::f32(d.p(), 4, 2), 2, 4,
                                      Tensor::f32(d.p(), 2, 4)),
               Error);  // qkv is 2×16, not 2×24
  EXPECT_THROW(be->group_dots(Tensor::f32(d.p(), 4, 4), Tensor::f32(d.p(), 3, 4), 2, 1.f, Tensor::f32(d.p(), 2, 4)),
               Error);
}

}  // namespace
}  // namespace tandem::test
