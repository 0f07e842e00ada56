// An MLX folder written from the synthetic tiny GGUF (2-bit mix: IQ2_XXS experts, NVFP4 Mamba
// projections with `.scale`, Q8_0 elsewhere) by the mlx converter, loaded on "cuda": the logits of a
// prefill, of decode steps and of a 4-token verify pass are bit-identical to the GGUF's on "cuda". The
// safetensors modules are left out, so the float tensors of both take the gguf-cuda path too (with
// them, the MLX folder's floats go to the dense kernels; see docs/formats-mlx.md). Logits are
// poisoned (NaN) before every pass.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "cuda_probe.h"
#include "synth_model.h"
#include "synth_plan.h"
#include "synth_write.h"
#include "tandem/converter.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"
#include "tests/formats/mlx/mlx_test_util.h"

namespace tandem::test {
namespace {

std::vector<float> run(const std::string& path, PluginRegistry& reg, const std::string& want_format) {
  LoadOptions o;
  o.device = "cuda";
  o.path = path;
  auto m = Model::load(o, reg);
  EXPECT_EQ(m->format_name(), want_format);
  const int V = m->desc().vocab;
  auto seq = m->new_sequence(128);
  std::mt19937_64 rng(23);
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(int32_t(rng() % uint64_t(V)));
    return t;
  };
  std::vector<float> all, l;
  auto pass = [&](const std::vector<int32_t>& t, ForwardMode mode) {
    l.assign(size_t(V) * t.size(), std::nanf(""));
    m->forward(*seq, t, mode, l, true);
    for (float v : l) EXPECT_FALSE(std::isnan(v));
    all.insert(all.end(), l.begin(), l.end());
    m->commit(*seq, int(t.size()));
  };
  pass(tokens(17), ForwardMode::Prefill);
  for (int i = 0; i < 3; ++i) pass(tokens(1), ForwardMode::Verify);
  pass(tokens(4), ForwardMode::Verify);
  return all;
}

TEST(MlxCuda, FolderWrittenFromGgufGivesItsLogits) {
  TANDEM_SKIP_WITHOUT_CUDA();
  PluginRegistry reg;
  for (const auto& e : std::filesystem::directory_iterator(plugin_dir())) {
    const std::string f = e.path().filename().string();
    if (f.rfind("libtandem-", 0) == 0 && f.find("safetensors") == std::string::npos) reg.load_file(e.path().string());
  }
  TempDir tmp("tandem-mlx-cuda");
  const std::string gguf = tmp.file("tiny.gguf"), mlx = tmp.file("tiny-mlx");
  synth::write_gguf(synth::make_plan(synth::model_shape("tiny"), synth::Mix::GgufIq2, &reg), gguf, 29);
  ConvertRequest req;
  req.input = gguf, req.output = mlx;
  NoCalibrationHost host(reg);
  reg.converter("mlx")->convert(req, host);

  const std::vector<float> a = run(gguf, reg, "gguf"), b = run(mlx, reg, "mlx");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  std::printf("mlx vs gguf on cuda: max |logit difference| %.3g over %zu logits\n", worst, a.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace tandem::test
