// The tiny mixed-precision ModelOpt nemotron_h of nvfp4_model_util.h on device "cuda" against "cpu":
// prefill logits within 1e-3 of the peak with the same top-1 at every position, greedy decode steps
// with the same top-1, and on the GPU a verify pass of k tokens bit-identical to one-at-a-time
// decoding of the same tokens (batch invariance through NVFP4, FP8 and dense layers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cuda_probe.h"
#include "nvfp4_model_util.h"
#include "tandem/model.h"
#include "tandem/registry.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

namespace tandem::nvfp4::test {
namespace {

using ::tandem::test::registry;

const std::string& model_dir() {
  static tandem::test::TempDir* dir = new tandem::test::TempDir("tandem-nvfp4-model-cuda");
  static const std::string q = [] {
    write_model_pair(dir->file("q"), dir->file("dense"), true);
    return dir->file("q");
  }();
  return q;
}

std::unique_ptr<Model> load(const std::string& device) {
  LoadOptions o;
  o.path = model_dir();
  o.device = device;
  return Model::load(o, registry());
}

int argmax(const float* v, int n) { return int(std::max_element(v, v + n) - v); }

TEST(Nvfp4ModelCuda, CudaMatchesCpuAndVerifyEqualsDecode) {
  TANDEM_SKIP_WITHOUT_CUDA();
  auto cpu = load("cpu"), gpu = load("cuda");
  ASSERT_EQ(gpu->backend().device(), "cuda");
  ASSERT_EQ(gpu->format_name(), "nvfp4");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((i * 37 + 11) % kVocab));
  auto sc = cpu->new_sequence(128), sg = gpu->new_sequence(128);
  std::vector<float> c, g;
  cpu->forward(*sc, prompt, ForwardMode::Prefill, c, true);
  gpu->forward(*sg, prompt, ForwardMode::Prefill, g, true);
  ASSERT_EQ(g.size(), c.size());
  double maxdiff = 0, peak = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g[i])) << i;
    maxdiff = std::max(maxdiff, double(std::abs(g[i] - c[i])));
    peak = std::max(peak, double(std::abs(c[i])));
  }
  for (size_t t = 0; t < prompt.size(); ++t)
    EXPECT_EQ(argmax(&g[t * kVocab], kVocab), argmax(&c[t * kVocab], kVocab)) << "prefill position " << t;
  EXPECT_LE(maxdiff, 1e-3 * peak);
  std::printf("[measure] nvfp4 model prefill cuda vs cpu: max |Δlogit| %.3g of peak %.3g\n", maxdiff, peak);
  cpu->commit(*sc, int(prompt.size()));
  gpu->commit(*sg, int(prompt.size()));

  // Greedy decode from the CPU's choices on both devices; keep the GPU's step logits.
  std::vector<int32_t> steps;
  std::vector<std::vector<float>> gpu_steps;
  int32_t next = argmax(&c[(prompt.size() - 1) * kVocab], kVocab);
  for (int s = 0; s < 6; ++s) {
    steps.push_back(next);
    cpu->forward(*sc, {next}, ForwardMode::Verify, c, false);
    gpu->forward(*sg, {next}, ForwardMode::Verify, g, false);
    cpu->commit(*sc, 1);
    gpu->commit(*sg, 1);
    EXPECT_EQ(argmax(g.data(), kVocab), argmax(c.data(), kVocab)) << "decode step " << s;
    gpu_steps.push_back(g);
    next = argmax(c.data(), kVocab);
  }
  // One verify pass over the same tokens from the prompt's state: the same bits per row.
  auto sv = gpu->new_sequence(128);
  std::vector<float> pre, ver;
  gpu->forward(*sv, prompt, ForwardMode::Prefill, pre, false);
  gpu->commit(*sv, int(prompt.size()));
  gpu->forward(*sv, steps, ForwardMode::Verify, ver, true);
  ASSERT_EQ(ver.size(), steps.size() * size_t(kVocab));
  for (size_t i = 0; i < steps.size(); ++i)
    EXPECT_EQ(std::memcmp(ver.data() + i * kVocab, gpu_steps[i].data(), size_t(kVocab) * 4), 0) << "verify row " << i;
}

}  // namespace
}  // namespace tandem::nvfp4::test
