// The CUDA backend's memory, copies and row-wise ops, the router and sampling, each against its CPU
// twin (plugins/cpu kernels) on fresh random inputs with outputs poisoned first.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_test.h"
#include "plugins/cpu/kernels.h"
#include "tandem/error.h"
#include "tandem/sampler.h"

namespace tandem::test {
namespace {

using cuda::CudaBackend;

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<CudaBackend>();
  }
  std::unique_ptr<CudaBackend> be;
};

TEST_F(CudaBackendTest, AllocIsZeroedAndCopiesRoundTrip) {
  auto b = be->alloc(1000 * sizeof(float));
  std::vector<float> z(1000, 1.f);
  be->download(z.data(), b->data(), z.size() * sizeof(float));
  for (float v : z) ASSERT_EQ(v, 0.f);
  auto x = random_vec(1000, 1);
  be->upload(b->data(), x.data(), x.size() * sizeof(float));
  std::vector<float> y(1000);
  be->download(y.data(), b->data(), y.size() * sizeof(float));
  EXPECT_TRUE(same_bits(x, y));
  // A released block is reused (the pool does not grow for the same size).
  const size_t held = be->pool_bytes();
  b.reset();
  auto c = be->alloc(1000 * sizeof(float));
  EXPECT_EQ(be->pool_bytes(), held);
  be->synchronize();
  EXPECT_EQ(be->device(), "cuda");
}

TEST_F(CudaBackendTest, RmsNormMatchesCpuAndRowsAreBatchInvariant) {
  double worst = 0;
  for (int64_t cols : {64, 1000, 4096}) {
    const int64_t rows = 17;
    auto x = random_vec(rows * cols, 10 + cols, -2.f, 2.f);
    auto w = random_vec(cols, 20 + cols, 0.5f, 1.5f);
    std::vector<float> ref(x.size());
    cpu::rms_norm(Tensor::f32(x.data(), rows, cols), w.data(), 1e-5f, Tensor::f32(ref.data(), rows, cols));
    auto dx = to_device(*be, x), dw = to_device(*be, w);
    auto dy = poisoned_device(*be, x.size());
    be->rms_norm(Tensor::f32(dx.p(), rows, cols), dw.p(), 1e-5f, Tensor::f32(dy.p(), rows, cols));
    auto got = to_host(*be, dy);
    worst = std::max(worst, max_rel_err(got, ref));
    // One row alone gives the bits it has in a batch of 17.
    auto d1 = poisoned_device(*be, size_t(cols));
    be->rms_norm(Tensor::f32(dx.p() + 5 * cols, 1, cols), dw.p(), 1e-5f, Tensor::f32(d1.p(), 1, cols));
    EXPECT_TRUE(same_bits(to_host(*be, d1), std::vector<float>(got.begin() + 5 * cols, got.begin() + 6 * cols)));
    // In place (y aliases x).
    be->rms_norm(Tensor::f32(dx.p(), rows, cols), dw.p(), 1e-5f, Tensor::f32(dx.p(), rows, cols));
    EXPECT_TRUE(same_bits(to_host(*be, dx), got)) << "in place, cols " << cols;
  }
  record("rms_norm vs cpu (relative to max(1,|ref|))", worst, 1e-5);
}

// The fused residual add and norm: the bits of add then rms_norm on the GPU (both the one-launch form,
// 1000 and 4096 columns, and the fallback, 66), near the CPU's, and x left holding the sum.
TEST_F(CudaBackendTest, AddRmsNormIsAddThenNorm) {
  double worst = 0;
  for (int64_t cols : {66, 1000, 4096}) {
    const int64_t rows = 5;
    auto x = random_vec(rows * cols, 30 + cols, -2.f, 2.f), b = random_vec(rows * cols, 40 + cols, -2.f, 2.f);
    auto w = random_vec(cols, 50 + cols, 0.5f, 1.5f);
    std::vector<float> sum(x.size()), ref(x.size());
    cpu::add(Tensor::f32(x.data(), rows, cols), Tensor::f32(b.data(), rows, cols), Tensor::f32(sum.data(), rows, cols));
    cpu::rms_norm(Tensor::f32(sum.data(), rows, cols), w.data(), 1e-5f, Tensor::f32(ref.data(), rows, cols));
    auto dx = to_device(*be, x), db = to_device(*be, b), dw = to_device(*be, w);
    auto dy = poisoned_device(*be, x.size());
    be->add_rms_norm(Tensor::f32(dx.p(), rows, cols), Tensor::f32(db.p(), rows, cols), dw.p(), 1e-5f,
                     Tensor::f32(dy.p(), rows, cols));
    auto got = to_host(*be, dy);
    EXPECT_TRUE(same_bits(to_host(*be, dx), sum)) << "x += b, cols " << cols;
    worst = std::max(worst, max_rel_err(got, ref));
    // Separately on the GPU: the same bits.
    auto dx2 = to_device(*be, x), dy2 = poisoned_device(*be, x.size());
    be->add(Tensor::f32(dx2.p(), rows, cols), Tensor::f32(db.p(), rows, cols), Tensor::f32(dx2.p(), rows, cols));
    be->rms_norm(Tensor::f32(dx2.p(), rows, cols), dw.p(), 1e-5f, Tensor::f32(dy2.p(), rows, cols));
    EXPECT_TRUE(same_bits(to_host(*be, dy2), got)) << "cols " << cols;
    EXPECT_THROW(be->add_rms_norm(Tensor::f32(dx.p(), rows, cols), Tensor::f32(db.p(), rows, cols), dw.p(), 1e-5f,
                                  Tensor::f32(dx.p(), rows, cols)),
                 Error);
  }
  record("add_rms_norm vs cpu (relative to max(1,|ref|))", worst, 1e-5);
}

TEST_F(CudaBackendTest, GatedRmsNormMatchesCpu) {
  double worst = 0;
  for (int groups : {1, 2, 8}) {
    const int64_t rows = 9, cols = 512;
    auto y = random_vec(rows * cols, 40 + groups, -2.f, 2.f);
    auto z = random_vec(rows * cols, 50 + groups, -4.f, 4.f);
    auto w = random_vec(cols, 60 + groups, 0.5f, 1.5f);
    std::vector<float> ref(y.size());
    cpu::gated_rms_norm(Tensor::f32(y.data(), rows, cols), Tensor::f32(z.data(), rows, cols), w.data(), groups, 1e-5f,
                        Tensor::f32(ref.data(), rows, cols));
    auto dy = to_device(*be, y), dz = to_device(*be, z), dw = to_device(*be, w);
    auto dout = poisoned_device(*be, y.size());
    be->gated_rms_norm(Tensor::f32(dy.p(), rows, cols), Tensor::f32(dz.p(), rows, cols), dw.p(), groups, 1e-5f,
                       Tensor::f32(dout.p(), rows, cols));
    auto got = to_host(*be, dout);
    worst = std::max(worst, max_rel_err(got, ref));
    // out aliasing y gives the same bits.
    be->gated_rms_norm(Tensor::f32(dy.p(), rows, cols), Tensor::f32(dz.p(), rows, cols), dw.p(), groups, 1e-5f,
                       Tensor::f32(dy.p(), rows, cols));
    EXPECT_TRUE(same_bits(to_host(*be, dy), got)) << "groups " << groups;
  }
  record("gated_rms_norm vs cpu (relative to max(1,|ref|))", worst, 1e-5);
  auto d = poisoned_device(*be, 12);
  EXPECT_THROW(be->gated_rms_norm(Tensor::f32(d.p(), 1, 12), Tensor::f32(d.p(), 1, 12), d.p(), 5, 1e-5f,
                                  Tensor::f32(d.p(), 1, 12)),
               Error);
}

TEST_F(CudaBackendTest, AddRelu2AndCombineAreBitExact) {
  const int64_t rows = 7, cols = 300;
  auto a = random_vec(rows * cols, 70, -3.f, 3.f), b = random_vec(rows * cols, 71, -3.f, 3.f);
  a[3] = NAN;
  std::vector<float> ref(a.size());
  cpu::add(Tensor::f32(a.data(), rows, cols), Tensor::f32(b.data(), rows, cols), Tensor::f32(ref.data(), rows, cols));
  auto da = to_device(*be, a), db = to_device(*be, b);
  auto dout = poisoned_device(*be, a.size());
  be->add(Tensor::f32(da.p(), rows, cols), Tensor::f32(db.p(), rows, cols), Tensor::f32(dout.p(), rows, cols));
  EXPECT_TRUE(same_values(to_host(*be, dout), ref)) << "add";

  cpu::relu2(Tensor::f32(ref.data(), rows, cols));
  be->relu2(Tensor::f32(dout.p(), rows, cols));
  EXPECT_TRUE(same_values(to_host(*be, dout), ref)) << "relu2 (NaN stays NaN)";

  for (int k : {1, 3, 8}) {
    auto eo = random_vec(rows * k * cols, 80 + k, -2.f, 2.f);
    auto w = random_vec(rows * k, 90 + k, 0.f, 2.5f);
    std::vector<float> cref(rows * cols);
    cpu::moe_combine(Tensor::f32(eo.data(), rows * k, cols), w.data(), k, Tensor::f32(cref.data(), rows, cols));
    auto deo = to_device(*be, eo), dw = to_device(*be, w);
    auto dc = poisoned_device(*be, cref.size());
    be->moe_combine(Tensor::f32(deo.p(), rows * k, cols), dw.p(), k, Tensor::f32(dc.p(), rows, cols));
    EXPECT_TRUE(same_bits(to_host(*be, dc), cref)) << "moe_combine k " << k;
  }
  EXPECT_THROW(be->add(Tensor::f32(da.p(), rows, cols), Tensor::f32(db.p(), rows, cols + 1),
                       Tensor::f32(dout.p(), rows, cols)),
               Error);
}

struct RouteCase {
  int E, k, n_group, topk_group;
  bool bias, norm;
  float scaling;
};

TEST_F(CudaBackendTest, RouteMatchesCpu) {
  const RouteCase cases[] = {{8, 3, 1, 1, true, true, 2.5f},    {16, 4, 1, 1, false, false, 1.0f},
                             {128, 6, 8, 4, true, true, 5.0f},  {64, 8, 8, 3, true, false, 1.0f},
                             {512, 22, 1, 1, true, true, 2.5f}, {512, 22, 16, 5, true, true, 2.5f},
                             // Bolt's layer sizes (9 of 240 … 496) and the edges of the warp kernel.
                             {496, 9, 1, 1, true, true, 2.5f},  {240, 9, 1, 1, true, true, 2.5f},
                             {300, 32, 1, 1, false, true, 1.0f}, {33, 1, 1, 1, true, false, 1.0f},
                             {32, 32, 1, 1, false, true, 1.0f},
                             // The sort kernel's sizes (E > 64): Bolt --uniform's 346, padding edges.
                             {65, 9, 1, 1, true, true, 2.5f},   {128, 9, 1, 1, true, true, 2.5f},
                             {129, 32, 1, 1, false, true, 1.0f}, {256, 9, 1, 1, true, false, 2.5f},
                             {346, 9, 1, 1, true, true, 2.5f}};
  double worst = 0;
  uint64_t seed = 100;
  for (const RouteCase& c : cases) {
    RouteParams p;
    p.n_experts = c.E, p.top_k = c.k, p.n_group = c.n_group, p.topk_group = c.topk_group;
    p.norm_topk_prob = c.norm, p.scaling = c.scaling;
    const int64_t n = 13;
    auto logits = random_vec(n * c.E, seed++, -4.f, 4.f);
    // Ties: row 2 repeats a few values, so the lower id must win on both devices.
    for (int j = 0; j < c.E; ++j) logits[2 * c.E + j] = float(j % 3);
    // Row 3: all equal (the lowest ids win); row 4: NaN logits (never chosen while others remain) and
    // a few equal to the row's largest.
    for (int j = 0; j < c.E; ++j) logits[3 * c.E + j] = 0.5f;
    for (int j = 0; j < c.E; j += 3) logits[4 * c.E + j] = std::nanf("");
    for (int j = 1; j < c.E; j += 7) logits[4 * c.E + j] = 4.0f;
    auto bias = random_vec(c.E, seed++, -0.3f, 0.3f);
    std::vector<int32_t> rid(n * c.k);
    std::vector<float> rw(n * c.k);
    cpu::moe_route(Tensor::f32(logits.data(), n, c.E), c.bias ? bias.data() : nullptr, p, rid.data(), rw.data());
    auto dl = to_device(*be, logits), db = to_device(*be, bias);
    auto dids = to_device(*be, std::vector<int32_t>(n * c.k, -7));
    auto dw = poisoned_device(*be, n * c.k);
    be->moe_route(Tensor::f32(dl.p(), n, c.E), c.bias ? db.p() : nullptr, p, dids.p(), dw.p());
    EXPECT_EQ(to_host(*be, dids), rid) << "E " << c.E << " k " << c.k << " groups " << c.n_group;
    worst = std::max(worst, max_rel_err(to_host(*be, dw), rw));
  }
  record("moe_route weights vs cpu (relative)", worst, 1e-6);
}

TEST_F(CudaBackendTest, SampleMatchesCpuForHostAndDeviceLogits) {
  auto logits = random_vec(1000, 200, -5.f, 5.f);
  auto dl = to_device(*be, logits);
  for (float t : {0.0f, 0.7f, 1.3f}) {
    SamplingParams p;
    p.temperature = t, p.top_k = 50, p.top_p = 0.9f, p.min_p = 0.01f;
    for (uint64_t seed : {1u, 2u, 3u}) {
      Rng a(seed), b(seed), c(seed);
      const int32_t want = sample_host(logits.data(), 1000, p, a);
      EXPECT_EQ(be->sample(logits.data(), 1000, p, b), want) << "host logits, T " << t;
      EXPECT_EQ(be->sample(dl.p(), 1000, p, c), want) << "device logits, T " << t;
      EXPECT_EQ(a.state, c.state);
    }
  }
}

}  // namespace
}  // namespace tandem::test
