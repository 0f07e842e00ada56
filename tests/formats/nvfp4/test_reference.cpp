// tandem's ModelOpt decoding and CPU model path against independent code (reference_fixture.h): every
// quantized weight decodes to vLLM's NVFP4 emulation / ModelOpt's FP8 dequantization, and the model's
// logits match HF transformers run on those decoded weights. Skips until the fixture is committed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "reference_fixture.h"
#include "tandem/model.h"
#include "tandem/npy.h"
#include "tandem/registry.h"
#include "tandem/weights.h"
#include "test_util.h"
#include "tests/conformance/model_util.h"

namespace tandem::nvfp4::test {
namespace {

namespace fs = std::filesystem;

using ::tandem::test::registry;
using ::tandem::test::read_ids;

float ulp(float v) {
  const float a = std::abs(v);
  return std::nextafter(a, INFINITY) - a;
}

// vLLM and ModelOpt compute e4m3(s)·scale_2 first and round, then multiply by the E2M1 value and round
// again; tandem multiplies the exact e2m1·e4m3 product (≤ 6 significant bits) by scale_2 once. The two
// agree exactly where |e2m1| is a power of two or zero (codes 0, 0.5, 1, 2, 4: the second product is
// exact) and may differ by one ulp where it is 1.5, 3 or 6 (the double rounding).
bool power_of_two_magnitude(uint8_t nibble) {
  const int m = nibble & 7;
  return m == 0 || m == 1 || m == 2 || m == 4 || m == 6;
}

TEST(Nvfp4Reference, EveryQuantizedWeightDecodesAsTheReference) {
  TANDEM_SKIP_WITHOUT_NVFP4_REFERENCE();
  const std::string dir = reference_dir();
  LoadOptions o;
  o.path = dir;
  std::string format;
  auto ckpt = open_checkpoint(o, registry(), &format);
  EXPECT_EQ(format, "nvfp4");
  auto backend = registry().backend("cpu");
  int n_nvfp4 = 0, n_fp8 = 0, n_fp8_rows = 0;
  size_t exact = 0, one_ulp = 0, fp8_elems = 0;
  std::set<std::string> seen;
  for (const RawTensor& raw : ckpt->tensors()) {
    const std::string suffix = ".weight";
    if (raw.name.size() <= suffix.size() || raw.name.compare(raw.name.size() - suffix.size(), suffix.size(), suffix))
      continue;
    if (raw.dtype != "U8" && raw.dtype != "F8_E4M3") continue;
    const std::string module = raw.name.substr(0, raw.name.size() - suffix.size());
    const std::string npy = dir + "/dequant/" + module + ".npy";
    ASSERT_TRUE(fs::is_regular_file(npy)) << module << ": no reference decoding " << npy;
    seen.insert(module);
    const NpyArray ref = read_npy(npy);
    std::string f;
    auto t = load_tensor(*ckpt, module, registry(), *backend, &f);
    EXPECT_EQ(f, "nvfp4") << module;
    ASSERT_EQ(t->shape(), ref.shape) << module;
    ASSERT_EQ(ref.shape.size(), 2u) << module;
    const int64_t rows = ref.shape[0], cols = ref.shape[1];
    std::vector<float> ours(ref.data.size(), NAN);
    t->dequantize(ours.data());
    if (raw.dtype == "F8_E4M3") {
      // e4m3(q)·weight_scale is one product on both sides: exact.
      ++n_fp8;
      const RawTensor* s = ckpt->find(module + ".weight_scale");
      ASSERT_NE(s, nullptr) << module;
      if (s->nbytes > 4) ++n_fp8_rows;
      for (size_t i = 0; i < ours.size(); ++i)
        ASSERT_EQ(ours[i], ref.data[i]) << module << " element (" << i / cols << ", " << i % cols << ")";
      fp8_elems += ours.size();
      continue;
    }
    ++n_nvfp4;
    ASSERT_EQ(raw.nbytes, size_t(rows * cols / 2)) << module;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const size_t i = size_t(r * cols + k);
        const uint8_t byte = raw.data[r * (cols / 2) + k / 2];
        const uint8_t nibble = k % 2 ? byte >> 4 : byte & 0xF;
        const float a = ours[i], b = ref.data[i];
        ASSERT_TRUE(std::isfinite(a)) << module << " (" << r << ", " << k << ")";
        if (a == b) {
          ++exact;
          continue;
        }
        ASSERT_FALSE(power_of_two_magnitude(nibble))
            << module << " (" << r << ", " << k << "): code 0x" << std::hex << int(nibble) << std::dec << " gives " << a
            << ", the reference " << b << " (must be exact)";
        ASSERT_LE(std::abs(a - b), ulp(b)) << module << " (" << r << ", " << k << "): " << a << " vs " << b;
        ++one_ulp;
      }
  }
  // Every reference decoding belongs to a quantized weight of the checkpoint, and the mix is there.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir + "/dequant"))
    if (e.path().extension() == ".npy") {
      ++files;
      EXPECT_TRUE(seen.count(e.path().stem().string())) << e.path() << " names no quantized weight";
    }
  EXPECT_EQ(files, seen.size());
  EXPECT_GT(n_nvfp4, 0);
  EXPECT_GT(n_fp8 - n_fp8_rows, 0) << "no per-tensor FP8 weight";
  EXPECT_GT(n_fp8_rows, 0) << "no per-channel FP8 weight";
  std::printf("[measure] %d NVFP4 weights: %zu elements equal to vLLM's, %zu one ulp apart (1.5/3/6 codes); "
              "%d FP8 weights (%d per-channel): %zu elements, all equal to ModelOpt's\n",
              n_nvfp4, exact, one_ulp, n_fp8, n_fp8_rows, fp8_elems);
}

// Same criteria everywhere: the top-1 token at every position, mean KL(HF ‖ ours) ≤ 1e-3, and max |Δ|
// ≤ 1e-4 of the peak logit. The last is far above what float32 against float32 gives (the HF
// conformance test measures ≤ 1.3e-6 of the peak; the one-ulp weight differences above add ~1e-7)
// and far below a real defect (a wrong block scale or nibble order moves logits by percents).
constexpr double kMaxKl = 1e-3, kMaxRel = 1e-4;

void expect_matches_hf(const std::vector<float>& ours, const NpyArray& ref, int len, int vocab, const char* what) {
  ASSERT_EQ(ref.shape, (std::vector<int64_t>{len, vocab}));
  ASSERT_EQ(ours.size(), ref.data.size());
  const LogitComparison c = compare_logits(ours.data(), ref.data.data(), len, vocab);
  EXPECT_EQ(c.top1_mismatches, 0) << what << " len " << len << ": first at position " << c.first_mismatch;
  EXPECT_LE(c.mean_kl, kMaxKl) << what << " len " << len;
  EXPECT_LE(c.max_abs, kMaxRel * c.peak) << what << " len " << len;
  std::printf("[measure] %s len %d vs HF: max |Δlogit| %.3g of peak %.3g, mean KL %.3g, max KL %.3g\n", what, len,
              c.max_abs, c.peak, c.mean_kl, c.max_kl);
}

std::unique_ptr<Model> load(const std::string& path) {
  LoadOptions o;
  o.path = path;
  return Model::load(o, registry());
}

TEST(Nvfp4Reference, LogitsMatchTransformersOnTheDequantizedWeights) {
  TANDEM_SKIP_WITHOUT_NVFP4_REFERENCE();
  const std::string dir = reference_dir();
  auto model = load(dir);
  EXPECT_EQ(model->format_name(), "nvfp4");
  const int V = model->desc().vocab;
  for (int len : kReferenceLens) {
    const auto ids = read_ids(dir + "/prompt_" + std::to_string(len) + ".txt");
    ASSERT_EQ(int(ids.size()), len);
    const NpyArray ref = read_npy(dir + "/logits_" + std::to_string(len) + ".npy");
    auto seq = model->new_sequence(128);
    std::vector<float> ours;
    model->forward(*seq, ids, ForwardMode::Prefill, ours, true);
    expect_matches_hf(ours, ref, len, V, "cpu prefill");
  }
}

TEST(Nvfp4Reference, TokenByTokenDecodeMatchesTransformers) {
  TANDEM_SKIP_WITHOUT_NVFP4_REFERENCE();
  const std::string dir = reference_dir();
  auto model = load(dir);
  const int V = model->desc().vocab, len = 64;
  const auto ids = read_ids(dir + "/prompt_64.txt");
  ASSERT_EQ(int(ids.size()), len);
  const NpyArray ref = read_npy(dir + "/logits_64.npy");
  auto seq = model->new_sequence(128);
  std::vector<float> all, step;
  for (int32_t t : ids) {
    model->forward(*seq, {t}, ForwardMode::Verify, step, false);
    model->commit(*seq, 1);
    all.insert(all.end(), step.begin(), step.end());
  }
  expect_matches_hf(all, ref, len, V, "cpu decode");
}

// The same quantization written as config.json's quantization_config (no hf_quant_config.json) reads
// to the same model: the same logits, bit for bit.
TEST(Nvfp4Reference, ConfigJsonFormGivesTheSameLogits) {
  TANDEM_SKIP_WITHOUT_NVFP4_REFERENCE();
  const std::string dir = reference_dir(), qc = reference_dir("mixed_qc");
  ASSERT_TRUE(fs::is_regular_file(qc + "/config.json")) << qc;
  tandem::test::TempDir tmp("tandem-nvfp4-reference");
  fs::create_directories(tmp.file("m"));
  fs::copy_file(dir + "/model.safetensors", tmp.file("m") + "/model.safetensors");
  fs::copy_file(qc + "/config.json", tmp.file("m") + "/config.json");
  auto a = load(dir), b = load(tmp.file("m"));
  EXPECT_EQ(b->format_name(), "nvfp4");
  const auto ids = read_ids(dir + "/prompt_64.txt");
  std::vector<float> la, lb;
  auto sa = a->new_sequence(128), sb = b->new_sequence(128);
  a->forward(*sa, ids, ForwardMode::Prefill, la, true);
  b->forward(*sb, ids, ForwardMode::Prefill, lb, true);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0);
  expect_matches_hf(lb, read_npy(dir + "/logits_64.npy"), int(ids.size()), b->desc().vocab, "cpu config.json form");
}

}  // namespace
}  // namespace tandem::nvfp4::test
