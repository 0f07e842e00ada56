// The llama activation mode on CUDA (formats/gguf/llama_act_cuda.*): the device's Q8_K rounding bit
// for bit against activations_cpu.cpp (ties, all-zero blocks, a NaN, equal magnitudes of both signs),
// and IQ2_XXS matmuls and expert gathers loaded with TANDEM_GGUF_ACTIVATIONS=llama against the CPU
// llama-mode twin (GgufTensor with llama activations): the same bits for n = 1, 3, 8, 16 and a
// 40-row prefill, on poisoned outputs, every row the bits of its single-row result; gathers with an
// expert of no rows, one expert taking every row, per-expert scales and ids out of range (NaN rows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_probe.h"
#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_format_cuda.h"
#include "formats/gguf/kernels_cpu.h"
#include "formats/gguf/llama_act_cuda.h"
#include "gguf_cuda_test_util.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"

namespace tandem::gguf::test {
namespace {

using tandem::test::random_vec;

class GgufLlamaCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<cuda::CudaBackend>();
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

// TANDEM_GGUF_ACTIVATIONS=llama while a scope loads tensors.
struct LlamaMode {
  LlamaMode() { setenv("TANDEM_GGUF_ACTIVATIONS", "llama", 1); }
  ~LlamaMode() { unsetenv("TANDEM_GGUF_ACTIVATIONS"); }
};

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// Largest |got − want| / max(|want|, 1e-30) (NaN: infinite).
double rel_diff(const float* got, const float* want, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(got[i])) continue;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / std::max(std::abs(double(want[i])), 1e-30));
  }
  return worst;
}

TEST_F(GgufLlamaCuda, Q8kRoundingEqualsTheCpuBitForBit) {
  const int64_t k = 2304, n = 9;  // 9 blocks a row
  std::vector<float> x = random_vec(size_t(n * k), 77, -3.f, 3.f);
  // Row 1: all zero. Row 2: ties — the first element −127 (iscale 1), the others k + ½.
  std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);
  for (int64_t j = 0; j < k; ++j) x[size_t(2 * k + j)] = j % 256 == 0 ? -127.0f : float(int(j % 200) - 100) + 0.5f;
  // Row 3: in each block two elements of the largest magnitude, of opposite signs (the first wins),
  // a −0 and, in block 1, a NaN (rounded to 0) — and block 2 wholly zero.
  for (int64_t b = 0; b < k / 256; ++b) {
    float* xb = x.data() + 3 * k + b * 256;
    xb[17 + b] = 4.0f * (b % 2 ? -1.f : 1.f);
    xb[200 - b] = -xb[17 + b];
    xb[5] = -0.0f;
  }
  x[size_t(3 * k + 256 + 9)] = NAN;
  std::fill(x.begin() + 3 * k + 512, x.begin() + 3 * k + 768, 0.0f);
  // Row 4: tiny values (d subnormal-adjacent), row 5: large ones.
  for (int64_t j = 0; j < k; ++j) x[size_t(4 * k + j)] *= 1e-30f, x[size_t(5 * k + j)] *= 1e30f;
  // Row 6: values that round to ±0.5 steps exactly (ties everywhere, both signs).
  for (int64_t j = 0; j < k; ++j) x[size_t(6 * k + j)] = j % 256 == 3 ? 127.0f : 0.5f * float(int(j % 61) - 30);

  std::vector<ActQ8_K> want(static_cast<size_t>(n * k / 256));
  for (int64_t r = 0; r < n; ++r)
    quantize_activations(ActFormat::Q8_K, x.data() + r * k, want.data() + r * (k / 256), k);

  Dev dx = upload(*be, x);
  const int64_t rb = cuda_q8k_row_bytes(k);
  auto dq = be->alloc(size_t(n * rb));
  launch_quantize_q8k(dx.p(), n, k, dq->data());
  std::vector<uint8_t> got(size_t(n * rb));
  be->download(got.data(), dq->data(), got.size());
  int bad = 0;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = got.data() + r * rb;
    for (int64_t b = 0; b < k / 256; ++b) {
      const ActQ8_K& w = want[size_t(r * (k / 256) + b)];
      float d;
      std::memcpy(&d, row + cuda_q8k_d_offset(k) + 4 * b, 4);
      const bool same_q = std::memcmp(row + 256 * b, w.q, 256) == 0;
      const bool same_sums = std::memcmp(row + cuda_q8k_bsums_offset(k) + 32 * b, w.bsums, 32) == 0;
      if (bits(d) != bits(w.d) || !same_q || !same_sums) {
        if (++bad < 10)
          ADD_FAILURE() << "row " << r << " block " << b << ": d " << d << " vs " << w.d << ", q "
                        << (same_q ? "same" : "differ") << ", bsums " << (same_sums ? "same" : "differ");
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

// Row lengths: 4 blocks (one pass), 9 (a partial last pass), 36 (terms flushed after 32 blocks).
const std::pair<int64_t, int64_t> kShapes[] = {{37, 1024}, {70, 2304}, {12, 9216}};

TEST_F(GgufLlamaCuda, Iq2XxsMatmulHasTheCpuLlamaBitsForEveryN) {
  const QuantType& qt = *find_type("IQ2_XXS");
  uint64_t seed = 4100;
  double worst = 0;
  for (auto [m, k] : kShapes) {
    Stored st = make_stored("IQ2_XXS", m, k, seed++);
    const GgufTensor host(st.raw(), qt, nullptr, /*llama_activations=*/true);
    std::unique_ptr<QuantizedTensor> gpu;
    {
      LlamaMode mode;
      gpu = load_gguf_cuda(st.raw(), qt, nullptr, *be);
    }
    const int64_t N = 40;
    auto x = random_vec(size_t(N * k), seed++, -2.f, 2.f);
    std::vector<float> want(static_cast<size_t>(N * m));
    host.matmul(Tensor::f32(x.data(), N, k), Tensor::f32(want.data(), N, m));
    Dev dx = upload(*be, x);
    std::vector<float> single(static_cast<size_t>(N * m));
    for (int64_t i = 0; i < N; ++i) {
      Dev dy = poisoned(*be, size_t(m));
      gpu->matmul(Tensor::f32(dx.p() + i * k, 1, k), Tensor::f32(dy.p(), 1, m));
      auto y = download(*be, dy);
      std::copy(y.begin(), y.end(), single.begin() + i * m);
    }
    worst = std::max(worst, rel_diff(single.data(), want.data(), single.size()));
    EXPECT_TRUE(same_bits(single.data(), want.data(), single.size())) << "[" << m << ", " << k << "] n 1";
    for (int64_t n : {3, 8, 16, 40}) {
      Dev dy = poisoned(*be, size_t(n * m));
      gpu->matmul(Tensor::f32(dx.p(), n, k), Tensor::f32(dy.p(), n, m));
      auto y = download(*be, dy);
      worst = std::max(worst, rel_diff(y.data(), want.data(), y.size()));
      EXPECT_TRUE(same_bits(y.data(), single.data(), y.size())) << "[" << m << ", " << k << "] n " << n << " vs n 1";
      EXPECT_TRUE(same_bits(y.data(), want.data(), y.size())) << "[" << m << ", " << k << "] n " << n << " vs cpu";
    }
  }
  EXPECT_LE(worst, 1e-6);
  std::printf("[measure] IQ2_XXS llama matmul vs cpu llama: max relative difference %.3g\n", worst);
}

TEST_F(GgufLlamaCuda, Iq2XxsGatherHasTheCpuLlamaBitsOfEachExpert) {
  const QuantType& qt = *find_type("IQ2_XXS");
  const int E = 5;
  const int64_t m = 70, k = 2304;
  uint64_t seed = 5200;
  for (bool stacked : {true, false}) {
    std::vector<Stored> parts;
    std::vector<uint8_t> stack;
    for (int e = 0; e < E; ++e) {
      parts.push_back(make_stored("IQ2_XXS", m, k, seed++, "experts." + std::to_string(e) + ".w"));
      stack.insert(stack.end(), parts.back().bytes.begin(), parts.back().bytes.end());
    }
    const size_t per = parts[0].bytes.size();
    std::vector<RawTensor> raws;
    for (int e = 0; e < E; ++e) {
      RawTensor r = parts[size_t(e)].raw();
      if (stacked) r.data = stack.data() + size_t(e) * per;
      raws.push_back(r);
    }
    std::vector<StoredScale> sc;
    for (int e = 0; e < E; ++e) sc.push_back({0.25f * float(e + 1) * (e % 2 ? -1.f : 1.f)});
    std::vector<RawTensor> sraws;
    for (auto& s : sc) sraws.push_back(s.raw());
    std::vector<const RawTensor*> ex, scs;
    for (int e = 0; e < E; ++e) ex.push_back(&raws[size_t(e)]), scs.push_back(stacked ? nullptr : &sraws[size_t(e)]);
    std::unique_ptr<ExpertSet> set;
    {
      LlamaMode mode;
      set = load_gguf_experts_cuda(ex, scs, *be);
    }
    // Expert 4 takes no row; then one expert (2) takes every row.
    for (bool one_expert : {false, true}) {
      for (int per_x : {3, 1}) {
        for (int64_t nx : {1, 3, 8, 16}) {
          const int64_t rows = nx * per_x;
          auto x = random_vec(size_t(nx * k), seed++, -2.f, 2.f);
          std::vector<int32_t> ids;
          for (int64_t r = 0; r < rows; ++r) ids.push_back(one_expert ? 2 : int32_t((r * 3 + seed) % (E - 1)));
          Dev dx = upload(*be, x);
          auto dids = be->alloc(ids.size() * 4);
          be->upload(dids->data(), ids.data(), ids.size() * 4);
          Dev dy = poisoned(*be, size_t(rows * m));
          set->gather_matmul(Tensor::f32(dx.p(), nx, k), static_cast<int32_t*>(dids->data()), per_x,
                             Tensor::f32(dy.p(), rows, m));
          auto got = download(*be, dy);
          for (int64_t r = 0; r < rows; ++r) {
            const int e = ids[size_t(r)];
            const GgufTensor h(raws[size_t(e)], qt, scs[size_t(e)], true);
            std::vector<float> want(static_cast<size_t>(m));
            h.matmul(Tensor::f32(x.data() + (r / per_x) * k, 1, k), Tensor::f32(want.data(), 1, m));
            EXPECT_TRUE(same_bits(got.data() + r * m, want.data(), size_t(m)))
                << "stacked " << stacked << " nx " << nx << " per_x " << per_x << " row " << r << " expert " << e
                << ": max rel " << rel_diff(got.data() + r * m, want.data(), size_t(m));
          }
        }
      }
    }
    // Ids out of range leave their rows NaN; the valid row between them is computed.
    const std::vector<int32_t> bad = {E, 1, -1};
    auto dbad = be->alloc(12);
    be->upload(dbad->data(), bad.data(), 12);
    auto x = random_vec(size_t(3 * k), 7);
    Dev dx = upload(*be, x), dy = upload(*be, std::vector<float>(size_t(3 * m), 0.f));
    set->gather_matmul(Tensor::f32(dx.p(), 3, k), static_cast<int32_t*>(dbad->data()), 1, Tensor::f32(dy.p(), 3, m));
    auto got = download(*be, dy);
    const GgufTensor h(raws[1], qt, scs[1], true);
    std::vector<float> want(static_cast<size_t>(m));
    h.matmul(Tensor::f32(x.data() + k, 1, k), Tensor::f32(want.data(), 1, m));
    for (int64_t o = 0; o < m; ++o) {
      EXPECT_TRUE(std::isnan(got[size_t(o)]) && std::isnan(got[size_t(2 * m + o)])) << o;
      EXPECT_EQ(bits(got[size_t(m + o)]), bits(want[size_t(o)])) << o;
    }
  }
}

// The fused epilogues (relu² and add) store the llama-mode value through the same arithmetic.
TEST_F(GgufLlamaCuda, Iq2XxsFusedEpiloguesEqualTheSeparateOps) {
  const QuantType& qt = *find_type("IQ2_XXS");
  const int64_t m = 70, k = 2304, n = 3;
  Stored st = make_stored("IQ2_XXS", m, k, 6100);
  const GgufTensor host(st.raw(), qt, nullptr, true);
  std::unique_ptr<QuantizedTensor> gpu;
  {
    LlamaMode mode;
    gpu = load_gguf_cuda(st.raw(), qt, nullptr, *be);
  }
  auto x = random_vec(size_t(n * k), 6101, -2.f, 2.f), base = random_vec(size_t(n * m), 6102);
  std::vector<float> want(static_cast<size_t>(n * m));
  host.matmul(Tensor::f32(x.data(), n, k), Tensor::f32(want.data(), n, m));
  Dev dx = upload(*be, x);
  Dev dr = poisoned(*be, size_t(n * m)), da = upload(*be, base);
  ASSERT_TRUE(gpu->matmul_fused(Tensor::f32(dx.p(), n, k), Tensor::f32(dr.p(), n, m), Epilogue::Relu2));
  ASSERT_TRUE(gpu->matmul_fused(Tensor::f32(dx.p(), n, k), Tensor::f32(da.p(), n, m), Epilogue::Accumulate));
  auto r2 = download(*be, dr), ad = download(*be, da);
  for (size_t i = 0; i < want.size(); ++i) {
    const float r = want[i] < 0.f ? 0.f : want[i];
    EXPECT_EQ(bits(r2[i]), bits(r * r)) << i;
    EXPECT_EQ(bits(ad[i]), bits(base[i] + want[i])) << i;
  }
}

// Types without a CUDA llama-mode kernel load in the mode and keep their fp32 path (stderr names them).
TEST_F(GgufLlamaCuda, OtherTypesKeepTheirFp32PathInLlamaMode) {
  const QuantType& qt = *find_type("Q8_0");
  Stored st = make_stored("Q8_0", 37, 1024, 7100);
  std::unique_ptr<QuantizedTensor> plain = load_gguf_cuda(st.raw(), qt, nullptr, *be), llama;
  {
    LlamaMode mode;
    llama = load_gguf_cuda(st.raw(), qt, nullptr, *be);
  }
  auto x = random_vec(size_t(2 * 1024), 7101);
  Dev dx = upload(*be, x), d1 = poisoned(*be, 74), d2 = poisoned(*be, 74);
  plain->matmul(Tensor::f32(dx.p(), 2, 1024), Tensor::f32(d1.p(), 2, 37));
  llama->matmul(Tensor::f32(dx.p(), 2, 1024), Tensor::f32(d2.p(), 2, 37));
  EXPECT_TRUE(same_bits(download(*be, d1).data(), download(*be, d2).data(), 74));
}

}  // namespace
}  // namespace tandem::gguf::test
