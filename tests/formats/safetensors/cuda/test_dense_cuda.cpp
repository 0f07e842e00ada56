// Dense BF16/F16/F32 weights on the GPU against the CPU kernels: matmul for n = 1..16 and 40,
// bit-identical rows whatever n (batch invariance), get_rows and dequantize, the stacked expert
// gather against per-expert CPU matmuls, and the safetensors-cuda module through the registry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda_probe.h"
#include "dense_fixtures.h"
#include "device_buffers.h"
#include "formats/safetensors/dense_cpu.h"
#include "formats/safetensors/dense_cuda.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::safetensors::test {
namespace {

class DenseCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<cuda::CudaBackend>();
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

struct Shape {
  int64_t m, k;
};
// The last two split k over 4 and 8 warps per row (gemv_splits: few rows, k a multiple of 2048).
const Shape kShapes[] = {{96, 256}, {70, 101}, {33, 1000}, {130, 64}, {37, 4096}, {21, 8192}};

TEST_F(DenseCuda, MatmulMatchesCpuForOneToSixteenAndFortyRows) {
  const double tol = 1e-5;
  double worst = 0;
  uint64_t seed = 1;
  for (const char* dtype : {"BF16", "F16", "F32"})
    for (Shape s : kShapes) {
      Stored st = make_weight(dtype, s.m, s.k, seed++);
      DenseTensor host(st.raw());
      auto gpu = load_dense_cuda(st.raw(), *be);
      EXPECT_EQ(gpu->type_name(), dtype);
      EXPECT_EQ(gpu->shape(), st.shape);
      std::vector<float> w(size_t(s.m * s.k));
      host.dequantize(w.data());
      for (int64_t n = 1; n <= 40; n = n == 16 ? 40 : n + 1) {
        auto x = random_vec(size_t(n * s.k), seed++, -2.f, 2.f);
        std::vector<float> want(size_t(n * s.m));
        host.matmul(Tensor::f32(x.data(), n, s.k), Tensor::f32(want.data(), n, s.m));
        Dev dx = upload(*be, x), dy = poisoned(*be, size_t(n * s.m));
        gpu->matmul(Tensor::f32(dx.p(), n, s.k), Tensor::f32(dy.p(), n, s.m));
        const double e = dot_rel_err(download(*be, dy), want, x, w, n, s.m, s.k);
        EXPECT_LE(e, tol) << dtype << " [" << s.m << ", " << s.k << "] n " << n;
        worst = std::max(worst, e);
      }
    }
  std::printf("[measure] dense matmul vs cpu: max |Δ| / Σ|x·w| = %.3g (tolerance %.3g)\n", worst, tol);
}

TEST_F(DenseCuda, RowsAreBitIdenticalForEveryBatchSizeUpToSixteen) {
  uint64_t seed = 500;
  for (const char* dtype : {"BF16", "F16", "F32"})
    for (Shape s : kShapes) {
      Stored st = make_weight(dtype, s.m, s.k, seed++);
      auto gpu = load_dense_cuda(st.raw(), *be);
      auto x = random_vec(size_t(16 * s.k), seed++, -2.f, 2.f);
      Dev dx = upload(*be, x);
      // Each row alone (also from an offset that is not 16-byte aligned when k is odd).
      std::vector<std::vector<float>> single;
      for (int64_t i = 0; i < 16; ++i) {
        Dev dy = poisoned(*be, size_t(s.m));
        gpu->matmul(Tensor::f32(dx.p() + i * s.k, 1, s.k), Tensor::f32(dy.p(), 1, s.m));
        single.push_back(download(*be, dy));
      }
      for (int64_t n = 2; n <= 16; ++n) {
        Dev dy = poisoned(*be, size_t(n * s.m));
        gpu->matmul(Tensor::f32(dx.p(), n, s.k), Tensor::f32(dy.p(), n, s.m));
        auto y = download(*be, dy);
        for (int64_t i = 0; i < n; ++i)
          EXPECT_TRUE(same_bits(y.data() + i * s.m, single[size_t(i)].data(), size_t(s.m)))
              << dtype << " [" << s.m << ", " << s.k << "] n " << n << " row " << i;
      }
    }
}

TEST_F(DenseCuda, GetRowsAndDequantizeEqualTheCpu) {
  for (const char* dtype : {"BF16", "F16", "F32"}) {
    Stored st = make_weight(dtype, 50, 37, 900);
    DenseTensor host(st.raw());
    auto gpu = load_dense_cuda(st.raw(), *be);
    std::vector<float> a(50 * 37), b(50 * 37, NAN);
    host.dequantize(a.data());
    gpu->dequantize(b.data());
    EXPECT_TRUE(same_bits(a.data(), b.data(), a.size())) << dtype;
    // More ids than one launch carries (64), with repeats.
    std::vector<int32_t> ids;
    for (int i = 0; i < 150; ++i) ids.push_back((i * 17 + 3) % 50);
    std::vector<float> want(ids.size() * 37);
    host.get_rows(ids.data(), int(ids.size()), Tensor::f32(want.data(), int64_t(ids.size()), 37));
    Dev out = poisoned(*be, want.size());
    gpu->get_rows(ids.data(), int(ids.size()), Tensor::f32(out.p(), int64_t(ids.size()), 37));
    auto got = download(*be, out);
    EXPECT_TRUE(same_bits(got.data(), want.data(), want.size())) << dtype;
    const int32_t bad = 50;
    EXPECT_THROW(gpu->get_rows(&bad, 1, Tensor::f32(out.p(), 1, 37)), Error);
  }
}

TEST_F(DenseCuda, GatherMatmulMatchesPerExpertCpu) {
  const int E = 8;
  const double tol = 1e-5;
  double worst = 0;
  uint64_t seed = 1000;
  for (const char* dtype : {"BF16", "F32"})
    for (Shape s : {Shape{48, 64}, Shape{24, 33}}) {
      const Experts ex(dtype, E, s.m, s.k, seed);
      const std::vector<RawTensor>& raw_store = ex.raws;
      auto set = load_dense_experts_cuda(ex.ptrs, *be);
      EXPECT_EQ(set->n_experts(), E);
      EXPECT_EQ(set->rows(), s.m);
      EXPECT_EQ(set->cols(), s.k);
      for (int per_x : {3, 1}) {
        const int64_t nx = 5, rows = nx * per_x;
        auto x = random_vec(size_t(nx * s.k), seed++, -2.f, 2.f);
        std::vector<int32_t> ids;
        for (int64_t r = 0; r < rows; ++r) ids.push_back(int32_t((r * 5 + seed) % E));
        Dev dx = upload(*be, x);
        auto dids = be->alloc(ids.size() * 4);
        be->upload(dids->data(), ids.data(), ids.size() * 4);
        Dev dy = poisoned(*be, size_t(rows * s.m));
        set->gather_matmul(Tensor::f32(dx.p(), nx, s.k), static_cast<int32_t*>(dids->data()), per_x,
                           Tensor::f32(dy.p(), rows, s.m));
        auto got = download(*be, dy);
        for (int64_t r = 0; r < rows; ++r) {
          DenseTensor ex(raw_store[size_t(ids[size_t(r)])]);
          std::vector<float> xr(x.begin() + (r / per_x) * s.k, x.begin() + (r / per_x + 1) * s.k), want(size_t(s.m)),
              w(size_t(s.m * s.k));
          ex.matmul(Tensor::f32(xr.data(), 1, s.k), Tensor::f32(want.data(), 1, s.m));
          ex.dequantize(w.data());
          std::vector<float> g(got.begin() + r * s.m, got.begin() + (r + 1) * s.m);
          worst = std::max(worst, dot_rel_err(g, want, xr, w, 1, s.m, s.k));
        }
        // A prefix of the rows gives the same bits (batch invariance).
        Dev dy1 = poisoned(*be, size_t(per_x * s.m));
        set->gather_matmul(Tensor::f32(dx.p(), 1, s.k), static_cast<int32_t*>(dids->data()), per_x,
                           Tensor::f32(dy1.p(), per_x, s.m));
        EXPECT_TRUE(same_bits(download(*be, dy1).data(), got.data(), size_t(per_x * s.m))) << dtype;
      }
      // An id out of range leaves its row NaN instead of reading out of bounds.
      const std::vector<int32_t> bad = {E, -1};
      auto dbad = be->alloc(8);
      be->upload(dbad->data(), bad.data(), 8);
      Dev dx = upload(*be, random_vec(size_t(2 * s.k), 7)), dy = upload(*be, std::vector<float>(size_t(2 * s.m), 0.f));
      set->gather_matmul(Tensor::f32(dx.p(), 2, s.k), static_cast<int32_t*>(dbad->data()), 1,
                         Tensor::f32(dy.p(), 2, s.m));
      for (float v : download(*be, dy)) EXPECT_TRUE(std::isnan(v));
    }
  EXPECT_LE(worst, tol);
  std::printf("[measure] gather_matmul vs per-expert cpu: max |Δ| / Σ|x·w| = %.3g (tolerance %.3g)\n", worst, tol);
}

TEST(SafetensorsCudaPlugin, RegistryServesTheCudaProviderForCuda) {
  TANDEM_SKIP_WITHOUT_CUDA();
  PluginRegistry reg;
  reg.load_directory(tandem::test::plugin_dir());
  bool found = false;
  for (const auto& p : reg.providers())
    if (p.kind == TANDEM_KIND_FORMAT && p.name == "safetensors" && p.device == "cuda") found = true;
  ASSERT_TRUE(found) << "libtandem-safetensors-cuda.so did not register safetensors/cuda";
  auto be = reg.backend("cuda");
  auto fmt = reg.format("safetensors", "cuda");
  Stored st = make_weight("BF16", 16, 32, 77, "layer.up_proj.weight");
  RawTensor raw = st.raw();
  TensorGroup g{"layer.up_proj", {&raw}};
  EXPECT_EQ(fmt->probe_group(g), 10);
  auto t = fmt->load(g, *be);
  EXPECT_EQ(t->type_name(), "BF16");
  std::vector<float> a(16 * 32), b(16 * 32);
  t->dequantize(a.data());
  DenseTensor(raw).dequantize(b.data());
  EXPECT_TRUE(same_bits(a.data(), b.data(), a.size()));
  auto set = fmt->load_experts({g, g}, *be);
  ASSERT_TRUE(set != nullptr);
  EXPECT_EQ(set->n_experts(), 2);
  // A CPU backend still gets the host tensors (and no stacked set).
  auto cpu_be = reg.backend("cpu");
  EXPECT_EQ(fmt->load(g, *cpu_be)->type_name(), "BF16");
  EXPECT_EQ(fmt->load_experts({g}, *cpu_be), nullptr);
}

}  // namespace
}  // namespace tandem::safetensors::test
