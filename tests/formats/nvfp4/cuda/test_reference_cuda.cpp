// The reference fixture (reference_fixture.h) on device "cuda": the mixed NVFP4/FP8/BF16 model's
// logits against HF transformers' on the vLLM-dequantized weights (top-1 at every position, mean KL ≤
// 1e-3) and against the CPU path (within 1e-3 of the peak, as test_nvfp4_model_cuda.cpp), prefill and
// token-by-token decode. Every NVFP4 weight of the fixture has K a multiple of 64, so all of them take
// the GGUF NVFP4 repack. Skips without a device or without the fixture.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "cuda_probe.h"
#include "reference_fixture.h"
#include "tandem/model.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

namespace tandem::nvfp4::test {
namespace {

using ::tandem::test::registry;
using ::tandem::test::read_ids;

std::unique_ptr<Model> load(const std::string& device) {
  LoadOptions o;
  o.path = reference_dir();
  o.device = device;
  return Model::load(o, registry());
}

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, const NpyArray& hf, int len, int V,
                  const char* what) {
  ASSERT_EQ(gpu.size(), size_t(len) * V);
  ASSERT_EQ(cpu.size(), gpu.size());
  ASSERT_EQ(hf.data.size(), gpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) ASSERT_TRUE(std::isfinite(gpu[i])) << what << " element " << i;
  const LogitComparison h = compare_logits(gpu.data(), hf.data.data(), len, V);
  const LogitComparison c = compare_logits(gpu.data(), cpu.data(), len, V);
  EXPECT_EQ(h.top1_mismatches, 0) << what << " len " << len << " vs HF: first at position " << h.first_mismatch;
  EXPECT_LE(h.mean_kl, 1e-3) << what << " len " << len;
  EXPECT_EQ(c.top1_mismatches, 0) << what << " len " << len << " vs cpu: first at position " << c.first_mismatch;
  EXPECT_LE(c.max_abs, 1e-3 * c.peak) << what << " len " << len;
  std::printf("[measure] %s len %d: vs HF max |Δlogit| %.3g of peak %.3g, mean KL %.3g; vs cpu max |Δ| %.3g\n", what,
              len, h.max_abs, h.peak, h.mean_kl, c.max_abs);
}

TEST(Nvfp4ReferenceCuda, CudaMatchesTransformersAndTheCpu) {
  TANDEM_SKIP_WITHOUT_CUDA();
  TANDEM_SKIP_WITHOUT_NVFP4_REFERENCE();
  auto cpu = load("cpu"), gpu = load("cuda");
  ASSERT_EQ(gpu->backend().device(), "cuda");
  ASSERT_EQ(gpu->format_name(), "nvfp4");
  const int V = gpu->desc().vocab;
  const std::string dir = reference_dir();
  for (int len : kReferenceLens) {
    const auto ids = read_ids(dir + "/prompt_" + std::to_string(len) + ".txt");
    ASSERT_EQ(int(ids.size()), len);
    const NpyArray hf = read_npy(dir + "/logits_" + std::to_string(len) + ".npy");
    auto sc = cpu->new_sequence(128), sg = gpu->new_sequence(128);
    std::vector<float> c, g(size_t(len) * V, NAN);
    cpu->forward(*sc, ids, ForwardMode::Prefill, c, true);
    gpu->forward(*sg, ids, ForwardMode::Prefill, g, true);
    expect_close(g, c, hf, len, V, "cuda prefill");
  }
  // Token by token over the 64-token prompt.
  const auto ids = read_ids(dir + "/prompt_64.txt");
  const NpyArray hf = read_npy(dir + "/logits_64.npy");
  auto sc = cpu->new_sequence(128), sg = gpu->new_sequence(128);
  std::vector<float> c, g, step;
  for (int32_t t : ids) {
    step.assign(size_t(V), NAN);
    gpu->forward(*sg, {t}, ForwardMode::Verify, step, false);
    gpu->commit(*sg, 1);
    g.insert(g.end(), step.begin(), step.end());
    cpu->forward(*sc, {t}, ForwardMode::Verify, step, false);
    cpu->commit(*sc, 1);
    c.insert(c.end(), step.begin(), step.end());
  }
  expect_close(g, c, hf, int(ids.size()), V, "cuda decode");
}

}  // namespace
}  // namespace tandem::nvfp4::test
