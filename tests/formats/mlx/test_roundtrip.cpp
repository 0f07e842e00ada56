// The loss-free claim (issue 19, spec/formats.md § 7.2): an MLX folder written from a GGUF file by
// our converter opens as the `mlx` format (probed, no flag), every tensor decodes to exactly the
// GGUF's floats, and the two models' logits are the same bits on the CPU. The GGUF is the synthetic
// tiny model in the 2-bit mix (IQ2_XXS experts, NVFP4 Mamba projections with `.scale`, Q8_0 elsewhere).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "synth_model.h"
#include "synth_plan.h"
#include "synth_write.h"
#include "tandem/backend.h"
#include "tandem/converter.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"
#include "mlx_test_util.h"

namespace tandem::test {
namespace {

std::unique_ptr<Checkpoint> open_auto(const std::string& path, PluginRegistry& reg, std::string& format) {
  LoadOptions o;
  o.path = path;
  return open_checkpoint(o, reg, &format);
}

// The tensors of `name`'s group as the gguf format loads them, decoded to f32.
std::vector<float> decoded(const Checkpoint& ck, const RawTensor& t, WeightFormat& gguf, Backend& be) {
  TensorGroup g;
  const bool weight = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
  g.prefix = weight ? t.name.substr(0, t.name.size() - 7) : t.name;
  g.members.push_back(&t);
  if (weight)
    if (const RawTensor* s = ck.find(g.prefix + ".scale")) g.members.push_back(s);
  auto q = gguf.load(g, be);
  int64_t n = 1;
  for (int64_t d : q->shape()) n *= d;
  std::vector<float> out(size_t(n), std::nanf(""));
  q->dequantize(out.data());
  return out;
}

// Logits of a prefill of 9 tokens and two decode steps, concatenated.
std::vector<float> run_logits(const std::string& path, PluginRegistry& reg) {
  LoadOptions o;
  o.device = "cpu";
  o.threads = 2;
  o.path = path;
  auto m = Model::load(o, reg);
  const int V = m->desc().vocab;
  auto seq = m->new_sequence(64);
  std::mt19937_64 rng(7);
  std::vector<int32_t> toks;
  for (int i = 0; i < 9; ++i) toks.push_back(int32_t(rng() % uint64_t(V)));
  std::vector<float> all, l;
  m->forward(*seq, toks, ForwardMode::Prefill, l, false);
  all.insert(all.end(), l.begin(), l.end());
  m->commit(*seq, int(toks.size()));
  for (int step = 0; step < 2; ++step) {
    m->forward(*seq, {int32_t(rng() % uint64_t(V))}, ForwardMode::Verify, l, false);
    all.insert(all.end(), l.begin(), l.end());
    m->commit(*seq, 1);
  }
  return all;
}

TEST(MlxRoundTrip, GgufToMlxIsLossFree) {
  PluginRegistry reg;
  reg.load_directory(plugin_dir());
  TempDir tmp("tandem-mlx");
  const std::string gguf_path = tmp.file("tiny.gguf"), mlx_dir = tmp.file("tiny-mlx");
  synth::write_gguf(synth::make_plan(synth::model_shape("tiny"), synth::Mix::GgufIq2, &reg), gguf_path, 19);

  ConvertRequest req;
  req.input = gguf_path, req.output = mlx_dir;
  NoCalibrationHost host(reg);
  reg.converter("mlx")->validate(req);
  reg.converter("mlx")->convert(req, host);
  ASSERT_TRUE(std::filesystem::exists(mlx_dir + "/model.safetensors"));
  ASSERT_TRUE(std::filesystem::exists(mlx_dir + "/tokenizer.json"));

  std::string gf, mf;
  auto gck = open_auto(gguf_path, reg, gf);
  auto mck = open_auto(mlx_dir, reg, mf);
  EXPECT_EQ(gf, "gguf");
  EXPECT_EQ(mf, "mlx");

  auto gguf = reg.format("gguf");
  auto be = reg.backend("cpu");
  std::map<std::string, int> types;  // GGML type → tensors compared
  size_t compared = 0;
  for (const RawTensor& t : gck->tensors()) {
    const std::string& n = t.name;
    const bool sidecar = n.size() > 6 && (n.compare(n.size() - 6, 6, ".scale") == 0 ||
                                          (n.size() > 12 && n.compare(n.size() - 12, 12, ".input_scale") == 0));
    if (sidecar) continue;  // decoded with their weight (.scale) or not used by weight-only matmuls
    const RawTensor* m = mck->find(n);
    ASSERT_NE(m, nullptr) << "the MLX folder lacks '" << n << "'";
    EXPECT_EQ(m->dtype, t.dtype) << n;
    const bool has_scale = gck->find(n.substr(0, n.size() - 7) + ".scale") != nullptr && n.size() > 7;
    if (has_scale) EXPECT_NE(mck->find(n.substr(0, n.size() - 7) + ".scale"), nullptr) << n;
    const std::vector<float> a = decoded(*gck, t, *gguf, *be), b = decoded(*mck, *m, *gguf, *be);
    ASSERT_EQ(a.size(), b.size()) << n;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << n << " (" << t.dtype << ")";
    ++types[t.dtype];
    ++compared;
  }
  // The test means something only if every transcoded type took part.
  for (const char* ty : {"IQ2_XXS", "NVFP4", "Q8_0", "F32"}) EXPECT_GT(types[ty], 0) << ty;
  EXPECT_GT(compared, 20u);
  // NVFP4 with a per-tensor scale other than 1, so the global scale's convention matters.
  bool nontrivial_scale = false;
  for (const RawTensor& t : mck->tensors())
    if (t.dtype == "F32" && t.nbytes == 4 && t.name.size() > 6 && t.name.compare(t.name.size() - 6, 6, ".scale") == 0) {
      float v;
      std::memcpy(&v, t.data, 4);
      nontrivial_scale |= v != 1.0f;
    }
  EXPECT_TRUE(nontrivial_scale);

  // Both models, same tokens: bit-identical logits for a prefill and two decode steps. Float tensors
  // (F32 norms, router, conv) of an MLX folder lie in its safetensors files, where the gguf format
  // claims them only below the safetensors format (dense kernels, another summation order); without
  // the safetensors module every matmul of both models runs on the gguf kernels.
  PluginRegistry lean;
  for (const char* m : {"cpu", "mamba2", "gguf", "mlx"})
    lean.load_file(plugin_dir() + "/libtandem-" + m + ".so");
  const std::vector<float> g1 = run_logits(gguf_path, lean), m1 = run_logits(mlx_dir, lean);
  ASSERT_EQ(g1.size(), m1.size());
  ASSERT_FALSE(g1.empty());
  EXPECT_EQ(std::memcmp(g1.data(), m1.data(), g1.size() * sizeof(float)), 0) << "logits differ";
  // With every module loaded the MLX folder's float tensors run on the dense kernels: the same values,
  // so the logits agree to rounding.
  const std::vector<float> m2 = run_logits(mlx_dir, reg);
  ASSERT_EQ(m2.size(), g1.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g1.size(); ++i) {
    worst = std::max(worst, std::fabs(double(g1[i]) - double(m2[i])));
    scale = std::max(scale, std::fabs(double(g1[i])));
  }
  std::printf("mlx via dense kernels for float tensors: max |logit difference| %.3g (max |logit| %.3g)\n", worst,
              scale);
  EXPECT_LT(worst, 1e-4 * std::max(1.0, scale));
}

}  // namespace
}  // namespace tandem::test
