// The flash prefill attention (plugins/backend-cuda/attention_prefill_cuda.cu) against the CPU kernel:
// called directly for every pass length (it serves n > kAttentionSplitRows through launch_attention,
// which is checked to give the same bits), at pos0 = 0 and after an earlier chunk, for the head dims
// it instantiates and zero-padded ones between them, and at a 40k-key context.
//
// Tolerance 2e-5 absolute (outputs are convex combinations of v ∈ [−1, 1]): the kernel multiplies on
// tensor cores in fp16 hi + lo (about 2^-21 relative per product, and the tensor core's fp32
// accumulation truncates), so its scores differ from the CPU's fp32 dot products by ~1e-6 and its
// outputs by a few 1e-6; one fp16 product would be ~1e-3 off and a fragment, scale or masking error
// far more (or NaN from the poisoned cache rows past the pass or an unwritten workspace tile: the
// workspace is NaN-poisoned before each call).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attention_test_util.h"
#include "cuda_test.h"
#include "plugins/backend-cuda/kernels_cuda.cuh"

namespace tandem::test {
namespace {

constexpr double kTol = 2e-5;

std::string describe(Shape s, int64_t pos0, int64_t n) {
  return "nq " + std::to_string(s.nq) + " nkv " + std::to_string(s.nkv) + " hd " + std::to_string(s.hd) + " pos0 " +
         std::to_string(pos0) + " n " + std::to_string(n);
}

// A history of pos0 tokens, then passes of each n in `ns` at pos0, on the CPU (one pass of max(ns)
// rows: a row's result does not depend on the rows after it) and on the GPU through
// launch_attention_prefill, over device caches that hold rows [0, pos0 + n) and NaN past them, into
// a NaN-poisoned output. Passes past kAttentionSplitRows also run through CudaBackend::attention
// (new rows written by the backend into caches poisoned from pos0 on) and must give the same bits.
// Row i's bits do not depend on n here (a block that reaches further only adds masked keys, exactly
// 0): every pass must agree with the shorter ones on their rows. The kernel's power-of-two scales
// come from the pass's keys (K per 64-key tile, V per kv head), so that holds whenever a longer pass
// keeps the scales, as it does for these inputs (the largest |k| and |v| keep their exponent); a
// scale that moved could change the last bits of a row through fp16's subnormals, never more than
// the tolerance. Returns the largest error against the CPU.
double check_prefill(cuda::CudaBackend& be, Shape s, int64_t pos0, const std::vector<int64_t>& ns, uint64_t seed,
                     float q_range = 1.5f) {
  const int64_t rows = *std::max_element(ns.begin(), ns.end()), cap = pos0 + rows;
  const int64_t qw = int64_t(s.nq) * s.hd, kw = int64_t(s.nkv) * s.hd;
  const AttentionInputs in = attention_inputs(s, pos0, rows, seed, q_range);
  const std::vector<float>&q = in.q, &k = in.k, &v = in.v, &want = in.want;
  auto dq = to_device(be, q);
  double worst = 0;
  std::vector<std::pair<int64_t, std::vector<float>>> passes;
  for (int64_t n : ns) {
    const std::string what = describe(s, pos0, n);
    std::vector<float> hk(k), hv(v);
    std::fill(hk.begin() + (pos0 + n) * kw, hk.end(), NAN);
    std::fill(hv.begin() + (pos0 + n) * kw, hv.end(), NAN);
    auto dkc = to_device(be, hk), dvc = to_device(be, hv);
    auto dout = poisoned_device(be, size_t(n * qw));
    const size_t ws_bytes = cuda::attention_prefill_workspace_bytes(pos0 + n, s.nkv, s.hd);
    auto ws = poisoned_device(be, ws_bytes / sizeof(float));
    EXPECT_TRUE(cuda::launch_attention_prefill(dq.p(), dkc.p(), dvc.p(), n, pos0, s.nq, s.nkv, s.hd, dout.p(), ws.p(),
                                               ws_bytes, cudaStreamPerThread))
        << what << ": head dim not instantiated";
    const std::vector<float> got = to_host(be, dout);
    const double err = max_rel_err(got, std::vector<float>(want.begin(), want.begin() + n * qw));
    EXPECT_LE(err, kTol) << what;
    worst = std::max(worst, err);
    for (const auto& [m, out] : passes)
      if (m < n)
        EXPECT_TRUE(same_values(out, std::vector<float>(got.begin(), got.begin() + m * qw)))
            << what << ": its first " << m << " rows differ from a pass of " << m;
    passes.emplace_back(n, got);
    if (n <= cuda::kAttentionSplitRows) continue;
    // Through the backend: the dispatch takes the flash kernel for these passes.
    std::fill(hk.begin() + pos0 * kw, hk.end(), NAN);
    std::fill(hv.begin() + pos0 * kw, hv.end(), NAN);
    auto bkc = to_device(be, hk), bvc = to_device(be, hv), dk = to_device(be, k), dv = to_device(be, v);
    auto bout = poisoned_device(be, size_t(n * qw));
    be.attention(Tensor::f32(dq.p(), n, qw), Tensor::f32(dk.p() + pos0 * kw, n, kw),
                 Tensor::f32(dv.p() + pos0 * kw, n, kw), bkc.p(), bvc.p(), cap, pos0, s.nq, s.nkv, s.hd,
                 Tensor::f32(bout.p(), n, qw));
    EXPECT_TRUE(same_bits(to_host(be, bout), got)) << what << ": CudaBackend::attention differs from the flash kernel";
  }
  return worst;
}

const std::vector<int64_t> kPassLengths = {17, 63, 64, 65, 200, 1000};

// The instantiated head dims (16, 32, 64, 128), one and several query heads per kv head.
TEST(CudaAttention, FlashPrefillMatchesCpu) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  double worst = 0;
  uint64_t seed = 2100;
  for (int hd : {16, 32, 64, 128})
    for (Shape s : {Shape{1, 1, hd}, Shape{4, 1, hd}, Shape{8, 2, hd}})
      for (int64_t pos0 : {0, 300}) worst = std::max(worst, check_prefill(be, s, pos0, kPassLengths, seed += 3));
  record("flash prefill attention vs cpu (abs, |out| <= 1)", worst, kTol);
}

// Head dims that run zero-padded in the next instance: the tiny models' 8 and 12, 30 (not a multiple
// of 4: plain loads instead of cp.async), 100; and sharper softmaxes (q up to ±3), where the running
// max moves more.
TEST(CudaAttention, FlashPrefillMatchesCpuForPaddedHeadDimsAndSharpScores) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  double worst = 0;
  uint64_t seed = 2500;
  for (Shape s : {Shape{4, 2, 8}, Shape{4, 2, 12}, Shape{6, 2, 30}, Shape{4, 1, 100}})
    for (int64_t pos0 : {0, 300}) worst = std::max(worst, check_prefill(be, s, pos0, {17, 65, 200}, seed += 3));
  for (Shape s : {Shape{8, 2, 128}, Shape{4, 1, 64}})
    worst = std::max(worst, check_prefill(be, s, 300, {65, 1000}, seed += 3, 3.0f));
  record("flash prefill attention vs cpu, padded head dims and sharp scores (abs, |out| <= 1)", worst, kTol);
}

// A 64-row chunk (and a 65-row one, through the backend) after 40000 keys, the Nemotron-H head shape
// and a group of 4.
TEST(CudaAttention, FlashPrefillMatchesCpuAtLongContext) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  double worst = 0;
  uint64_t seed = 2900;
  const int64_t pos0 = 40000;
  for (Shape s : {Shape{32, 2, 128}, Shape{4, 1, 64}})
    worst = std::max(worst, check_prefill(be, s, pos0, {64, 65}, seed += 3));
  record("flash prefill attention vs cpu at 40k keys (abs, |out| <= 1)", worst, kTol);
}

// Rows of very different magnitudes: q rows scaled by 2^-12 … 2^6 and k, v caches scaled by 1e-6 and
// by 1e4 (the power-of-two scales must bring every operand into fp16's range, and P's scale keep the
// small probabilities), against the CPU relative to the output's largest magnitude.
TEST(CudaAttention, FlashPrefillKeepsPrecisionAcrossMagnitudes) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  const Shape s{8, 2, 128};
  const int64_t pos0 = 300, n = 200, qw = int64_t(s.nq) * s.hd, kw = int64_t(s.nkv) * s.hd;
  double worst = 0;
  for (float kv_scale : {1e-6f, 1e4f}) {
    AttentionInputs in = attention_inputs(s, pos0, n, 3100 + uint64_t(kv_scale > 1), 0.05f);
    for (int64_t i = 0; i < n * qw; ++i) in.q[size_t(i)] *= std::ldexp(1.0f, int((i / s.hd) % 19) - 12) / kv_scale;
    for (float& x : in.k) x *= kv_scale;
    for (float& x : in.v) x *= kv_scale;
    std::vector<float> want(size_t(n * qw)), kc(in.k), vc(in.v);
    cpu::attention(Tensor::f32(in.q.data(), n, qw), Tensor::f32(in.k.data() + pos0 * kw, n, kw),
                   Tensor::f32(in.v.data() + pos0 * kw, n, kw), kc.data(), vc.data(), pos0 + n, pos0, s.nq, s.nkv,
                   s.hd, Tensor::f32(want.data(), n, qw));
    auto dq = to_device(be, in.q), dkc = to_device(be, in.k), dvc = to_device(be, in.v);
    auto dout = poisoned_device(be, size_t(n * qw));
    const size_t ws_bytes = cuda::attention_prefill_workspace_bytes(pos0 + n, s.nkv, s.hd);
    auto ws = poisoned_device(be, ws_bytes / sizeof(float));
    ASSERT_TRUE(cuda::launch_attention_prefill(dq.p(), dkc.p(), dvc.p(), n, pos0, s.nq, s.nkv, s.hd, dout.p(), ws.p(),
                                               ws_bytes, cudaStreamPerThread));
    const std::vector<float> got = to_host(be, dout);
    double err = 0;
    for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(double(got[i]) - want[i]) / kv_scale);
    EXPECT_LE(err, kTol) << "k, v scaled by " << kv_scale;
    worst = std::max(worst, err);
  }
  record("flash prefill attention vs cpu across magnitudes (abs / |v| scale)", worst, kTol);
}

// Head dims past the largest instance are refused (launch_attention runs them on the SIMT kernel).
TEST(CudaAttention, FlashPrefillRefusesHeadDimsPastItsInstances) {
  TANDEM_SKIP_WITHOUT_CUDA();
  EXPECT_FALSE(cuda::launch_attention_prefill(nullptr, nullptr, nullptr, 100, 0, 2, 2, 200, nullptr, nullptr, 0,
                                              cudaStreamPerThread));
  EXPECT_EQ(cuda::attention_prefill_workspace_bytes(1000, 2, 200), 0u);
}

}  // namespace
}  // namespace tandem::test
