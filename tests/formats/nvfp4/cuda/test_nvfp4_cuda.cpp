// ModelOpt linears on the GPU (the repack to GGUF NVFP4 blocks, FP8 as BF16 codes or per-row F32)
// against the CPU ModeloptTensor on fresh random weights quantized by the test's reference
// quantizer: matmul for n = 1..16 and 40 with NaN-poisoned outputs, rows bit-identical whatever n
// (NVFP4; FP8 on the dense kernels up to 16 rows), get_rows and dequantize bit for bit, the stacked
// expert gather against per-expert CPU matmuls, and the nvfp4-cuda module through the registry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cuda_probe.h"
#include "device_buffers.h"
#include "formats/nvfp4/nvfp4_checkpoint.h"
#include "formats/nvfp4/nvfp4_cpu.h"
#include "formats/nvfp4/nvfp4_format_cuda.h"
#include "nvfp4_test_util.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::nvfp4::test {
namespace {

using tandem::test::Dev;
using tandem::test::download;
using tandem::test::poisoned;
using tandem::test::random_vec;
using tandem::test::same_bits;
using tandem::test::upload;

enum class Form { NVFP4, FP8, FP8_ROWS };
const char* form_name(Form f) { return f == Form::NVFP4 ? "NVFP4" : f == Form::FP8 ? "FP8" : "FP8 per-row"; }

// A one-linear ModelOpt folder per (form, shape), opened by the plugin's own checkpoint code.
struct Case {
  tandem::test::TempDir dir{"tandem-nvfp4-cuda"};
  std::unique_ptr<Checkpoint> ckpt;
  TensorGroup group;
  Case(Form f, int64_t m, int64_t k, uint64_t seed, const std::string& name = "x") {
    std::vector<st::WriteTensor> t;
    const std::vector<float> w = random_weights(m, k, seed, 0.1);
    if (f == Form::NVFP4) {
      add_nvfp4(t, name, quantize_nvfp4(w, m, k));
    } else {
      add_fp8(t, name, quantize_fp8(w, m, k));
      if (f == Form::FP8_ROWS) {
        std::vector<float> rows(static_cast<size_t>(m));
        for (int64_t r = 0; r < m; ++r) rows[size_t(r)] = 0.001f * float(r % 7 + 1);
        for (auto& x : t)
          if (x.name == name + ".weight_scale") x = bytes_tensor(x.name, "F32", {m}, rows.data(), size_t(m) * 4);
      }
    }
    std::ofstream(dir.file("config.json")) << R"({"model_type": "nemotron_h"})";
    std::ofstream(dir.file("hf_quant_config.json"))
        << R"({"quantization": {"quant_algo": ")" << (f == Form::NVFP4 ? "NVFP4" : "FP8") << R"(", "group_size": 16}})";
    st::write_file(dir.file("model.safetensors"), t);
    ckpt = open_modelopt(dir.path());
    group = group_of(*ckpt, name, {m, k});
  }
};

class Nvfp4Cuda : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<cuda::CudaBackend>();
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

constexpr double kTol = 3e-5;

// Largest |got − want| / Σ|x·w| over n rows; an unwritten (NaN) output counts as infinite.
double rel_err(const float* got, const float* want, const std::vector<float>& x, const std::vector<float>& w,
               int64_t n, int64_t m, int64_t k) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < m; ++o) {
      const float g = got[i * m + o];
      if (std::isnan(g)) return INFINITY;
      double mag = 1e-30;
      for (int64_t j = 0; j < k; ++j) mag += std::abs(double(x[size_t(i * k + j)]) * w[size_t(o * k + j)]);
      worst = std::max(worst, std::abs(double(g) - want[i * m + o]) / mag);
    }
  return worst;
}

TEST_P(Nvfp4Cuda, MatmulGetRowsAndDequantizeMatchTheCpu) {
  const Form f = GetParam();
  double worst = 0;
  uint64_t seed = 10 + uint64_t(f) * 100;
  for (auto [m, k] : {std::pair<int64_t, int64_t>{37, 192}, {70, 1088}, {12, 17408}}) {
    Case c(f, m, k, seed++);
    const ModeloptTensor host(c.group);
    auto gpu = load_modelopt_cuda(c.group, *be);
    ASSERT_EQ(gpu->shape(), (std::vector<int64_t>{m, k}));
    std::vector<float> w(size_t(m * k)), wg(size_t(m * k), NAN);
    host.dequantize(w.data());
    gpu->dequantize(wg.data());
    EXPECT_TRUE(same_bits(w.data(), wg.data(), w.size())) << form_name(f) << " dequantize [" << m << ", " << k << "]";
    const int32_t ids[4] = {int32_t(m - 1), 0, 5, 5};
    std::vector<float> rows(size_t(4 * k));
    host.get_rows(ids, 4, Tensor::f32(rows.data(), 4, k));
    Dev dr = poisoned(*be, rows.size());
    gpu->get_rows(ids, 4, Tensor::f32(dr.p(), 4, k));
    EXPECT_TRUE(same_bits(download(*be, dr).data(), rows.data(), rows.size())) << form_name(f) << " get_rows";

    const int64_t N = 40;
    auto x = random_vec(size_t(N * k), seed++, -2.f, 2.f);
    std::vector<float> want(size_t(N * m));
    host.matmul(Tensor::f32(x.data(), N, k), Tensor::f32(want.data(), N, m));
    Dev dx = upload(*be, x);
    std::vector<float> single(size_t(N * m));
    for (int64_t i = 0; i < N; ++i) {
      Dev dy = poisoned(*be, size_t(m));
      gpu->matmul(Tensor::f32(dx.p() + i * k, 1, k), Tensor::f32(dy.p(), 1, m));
      auto y = download(*be, dy);
      std::copy(y.begin(), y.end(), single.begin() + i * m);
    }
    worst = std::max(worst, rel_err(single.data(), want.data(), x, w, N, m, k));
    for (int64_t n = 2; n <= N; n = n == 16 ? N : n + 1) {
      Dev dy = poisoned(*be, size_t(n * m));
      gpu->matmul(Tensor::f32(dx.p(), n, k), Tensor::f32(dy.p(), n, m));
      auto y = download(*be, dy);
      const double e = rel_err(y.data(), want.data(), x, w, n, m, k);
      EXPECT_LE(e, kTol) << form_name(f) << " [" << m << ", " << k << "] n " << n;
      worst = std::max(worst, e);
      // Up to 16 rows (decode and verify) every row keeps its single-row bits, on the GGUF block
      // kernels (NVFP4) and the dense ones (FP8) alike; more rows are a prefill, which runs a tiled
      // tensor-core GEMM of its own (within kTol of the CPU, checked above).
      const int64_t same = n > 16 ? 0 : n;
      for (int64_t i = 0; i < same; ++i)
        EXPECT_TRUE(same_bits(y.data() + i * m, single.data() + i * m, size_t(m)))
            << form_name(f) << " [" << m << ", " << k << "] n " << n << " row " << i;
    }
  }
  EXPECT_LE(worst, kTol);
  std::printf("[measure] nvfp4 %s matmul vs cpu: max |Δ| / Σ|x·w| = %.3g (tolerance %.3g)\n", form_name(f), worst, kTol);
}

TEST_P(Nvfp4Cuda, GatherMatmulMatchesPerExpertCpu) {
  const Form f = GetParam();
  const int E = 5;
  const int64_t m = 70, k = 1088;
  std::vector<std::unique_ptr<Case>> cases;
  std::vector<TensorGroup> groups;
  for (int e = 0; e < E; ++e) {
    cases.push_back(std::make_unique<Case>(f, m, k, 500 + uint64_t(e) + 10 * uint64_t(f), "experts." + std::to_string(e) + ".up_proj"));
    groups.push_back(cases.back()->group);
  }
  auto set = load_modelopt_experts_cuda(groups, *be);
  ASSERT_EQ(set->n_experts(), E);
  ASSERT_EQ(set->rows(), m);
  ASSERT_EQ(set->cols(), k);
  double worst = 0;
  for (int per_x : {3, 1}) {
    const int64_t nx = 5, rows = nx * per_x;
    auto x = random_vec(size_t(nx * k), 77 + uint64_t(per_x), -2.f, 2.f);
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < rows; ++r) ids.push_back(int32_t((r * 3 + 1) % E));
    Dev dx = upload(*be, x);
    auto dids = be->alloc(ids.size() * 4);
    be->upload(dids->data(), ids.data(), ids.size() * 4);
    Dev dy = poisoned(*be, size_t(rows * m));
    set->gather_matmul(Tensor::f32(dx.p(), nx, k), static_cast<int32_t*>(dids->data()), per_x, Tensor::f32(dy.p(), rows, m));
    auto got = download(*be, dy);
    for (int64_t r = 0; r < rows; ++r) {
      const ModeloptTensor host(groups[size_t(ids[size_t(r)])]);
      std::vector<float> xr(x.begin() + (r / per_x) * k, x.begin() + (r / per_x + 1) * k), want(static_cast<size_t>(m)),
          w(size_t(m * k));
      host.matmul(Tensor::f32(xr.data(), 1, k), Tensor::f32(want.data(), 1, m));
      host.dequantize(w.data());
      worst = std::max(worst, rel_err(got.data() + r * m, want.data(), xr, w, 1, m, k));
    }
    // A prefix of the rows gives the same bits (batch invariance).
    Dev dy1 = poisoned(*be, size_t(per_x * m));
    set->gather_matmul(Tensor::f32(dx.p(), 1, k), static_cast<int32_t*>(dids->data()), per_x, Tensor::f32(dy1.p(), per_x, m));
    EXPECT_TRUE(same_bits(download(*be, dy1).data(), got.data(), size_t(per_x * m))) << form_name(f);
  }
  EXPECT_LE(worst, kTol) << form_name(f);
  std::printf("[measure] nvfp4 %s gather vs per-expert cpu: max |Δ| / Σ|x·w| = %.3g\n", form_name(f), worst);
}

INSTANTIATE_TEST_SUITE_P(Forms, Nvfp4Cuda, ::testing::Values(Form::NVFP4, Form::FP8, Form::FP8_ROWS),
                         [](const auto& info) {
                           return std::string(info.param == Form::NVFP4 ? "NVFP4" : info.param == Form::FP8 ? "FP8" : "FP8Rows");
                         });

TEST(Nvfp4CudaPlugin, RegistryServesTheCudaProviderAndNamesBadInput) {
  TANDEM_SKIP_WITHOUT_CUDA();
  PluginRegistry reg;
  reg.load_directory(tandem::test::plugin_dir());
  bool found = false;
  for (const auto& p : reg.providers())
    if (p.kind == TANDEM_KIND_FORMAT && p.name == "nvfp4" && p.device == "cuda") found = true;
  ASSERT_TRUE(found) << "libtandem-nvfp4-cuda.so did not register nvfp4/cuda";
  auto be = reg.backend("cuda");
  auto fmt = reg.format("nvfp4", "cuda");
  Case c(Form::NVFP4, 16, 256, 3, "layer.up_proj");
  EXPECT_EQ(fmt->probe_group(c.group), 40);
  auto t = fmt->load(c.group, *be);
  EXPECT_EQ(t->type_name(), "NVFP4");
  std::vector<float> a(16 * 256), b(16 * 256);
  t->dequantize(a.data());
  ModeloptTensor(c.group).dequantize(b.data());
  EXPECT_TRUE(same_bits(a.data(), b.data(), a.size()));
  auto set = fmt->load_experts({c.group, c.group}, *be);
  ASSERT_TRUE(set != nullptr);
  EXPECT_EQ(set->n_experts(), 2);
  // A CPU backend gets the host tensor (and the core's per-expert set).
  auto cpu_be = reg.backend("cpu");
  EXPECT_EQ(fmt->load(c.group, *cpu_be)->type_name(), "NVFP4");
  EXPECT_EQ(fmt->load_experts({c.group}, *cpu_be), nullptr);
  // K not a multiple of 64, and experts of mixed forms, are named.
  Case odd(Form::NVFP4, 4, 48, 4, "odd");
  tandem::test::expect_error([&] { fmt->load(odd.group, *be); }, {"odd.weight", "48", "64"});
  Case f8(Form::FP8, 16, 256, 5, "layer.other");
  tandem::test::expect_error([&] { fmt->load_experts({c.group, f8.group}, *be); }, {"layer.other", "FP8", "NVFP4"});
}

}  // namespace
}  // namespace tandem::nvfp4::test
