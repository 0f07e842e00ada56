// CUDA attention against the CPU kernel: decode, verify and prefill shapes, several key tiles, the
// cache writes, and batch invariance (a row's bits do not depend on the rows beside it). Passes of
// up to 64 rows run a split-KV kernel (3xTF32 on tensor cores for groups of ≤ 16 heads and hd ≤ 128,
// else fp32 SIMT; 1e-5 both), longer ones the flash kernel (3xTF32 on
// tensor cores, 2e-5: test_cuda_attention_prefill.cpp says why) or, for head dims past 128, the
// per-row SIMT kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "attention_test_util.h"
#include "cuda_test.h"
#include "plugins/backend-cuda/kernels_cuda.cuh"
#include "plugins/cpu/kernels.h"

namespace tandem::test {
namespace {

// The tolerance of a pass of n rows (absolute; outputs are convex combinations of v ∈ [−1, 1]).
double tolerance(int64_t n) { return n > cuda::kAttentionSplitRows ? 2e-5 : 1e-5; }

struct PassResult {
  std::vector<float> out, k_cache, v_cache;
};

// Tokens [pos0, pos0+n) after a history of pos0 tokens, on the CPU and on the GPU.
class AttentionCase {
 public:
  AttentionCase(Shape s, int64_t capacity, uint64_t seed) : s_(s), cap_(capacity) {
    qw_ = int64_t(s.nq) * s.hd, kw_ = int64_t(s.nkv) * s.hd;
    q_ = random_vec(cap_ * qw_, seed, -1.5f, 1.5f);
    k_ = random_vec(cap_ * kw_, seed + 1, -1.5f, 1.5f);
    v_ = random_vec(cap_ * kw_, seed + 2, -1.f, 1.f);
  }
  // History rows are in the caches already; the pass writes rows pos0 .. pos0+n−1.
  PassResult cpu(int64_t pos0, int64_t n) const {
    PassResult r{std::vector<float>(n * qw_, NAN), k_, v_};
    cpu::attention(rows(q_, pos0, n, qw_), rows(k_, pos0, n, kw_), rows(v_, pos0, n, kw_), r.k_cache.data(),
                   r.v_cache.data(), cap_, pos0, s_.nq, s_.nkv, s_.hd, Tensor::f32(r.out.data(), n, qw_));
    return r;
  }
  PassResult gpu(Backend& be, int64_t pos0, int64_t n) const {
    // Cache rows from pos0 on are poisoned: the kernel must write them before it reads them.
    std::vector<float> kc(k_), vc(v_);
    for (int64_t i = pos0 * kw_; i < cap_ * kw_; ++i) kc[i] = vc[i] = NAN;
    auto dq = to_device(be, q_), dk = to_device(be, k_), dv = to_device(be, v_);
    auto dkc = to_device(be, kc), dvc = to_device(be, vc);
    auto dout = poisoned_device(be, size_t(n * qw_));
    be.attention(Tensor::f32(dq.p() + pos0 * qw_, n, qw_), Tensor::f32(dk.p() + pos0 * kw_, n, kw_),
                 Tensor::f32(dv.p() + pos0 * kw_, n, kw_), dkc.p(), dvc.p(), cap_, pos0, s_.nq, s_.nkv, s_.hd,
                 Tensor::f32(dout.p(), n, qw_));
    return PassResult{to_host(be, dout), to_host(be, dkc), to_host(be, dvc)};
  }
  int64_t kw() const { return kw_; }
  int64_t qw() const { return qw_; }

 private:
  static Tensor rows(const std::vector<float>& v, int64_t r0, int64_t n, int64_t w) {
    return Tensor::f32(const_cast<float*>(v.data()) + r0 * w, n, w);
  }
  Shape s_;
  int64_t cap_, qw_ = 0, kw_ = 0;
  std::vector<float> q_, k_, v_;
};

TEST(CudaAttention, MatchesCpuAcrossShapesAndTiles) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  double worst = 0, worst_long = 0;
  uint64_t seed = 300;
  for (Shape s : {Shape{4, 2, 16}, Shape{8, 2, 128}, Shape{6, 6, 64}, Shape{4, 1, 200}}) {
    AttentionCase c(s, 400, seed += 3);
    for (auto [pos0, n] : {std::pair<int64_t, int64_t>{0, 1}, {0, 5}, {37, 1}, {37, 16}, {0, 200}, {130, 40},
                           {250, 150}}) {
      PassResult want = c.cpu(pos0, n), got = c.gpu(be, pos0, n);
      double& w = n > cuda::kAttentionSplitRows ? worst_long : worst;
      w = std::max(w, max_rel_err(got.out, want.out));
      EXPECT_TRUE(same_bits(std::vector<float>(got.k_cache.begin(), got.k_cache.begin() + (pos0 + n) * c.kw()),
                            std::vector<float>(want.k_cache.begin(), want.k_cache.begin() + (pos0 + n) * c.kw())))
          << "k cache rows, pos0 " << pos0 << " n " << n;
      EXPECT_TRUE(same_bits(std::vector<float>(got.v_cache.begin(), got.v_cache.begin() + (pos0 + n) * c.kw()),
                            std::vector<float>(want.v_cache.begin(), want.v_cache.begin() + (pos0 + n) * c.kw())))
          << "v cache rows, pos0 " << pos0 << " n " << n;
    }
  }
  record("attention vs cpu, split passes (abs, |out| <= 1)", worst, tolerance(1));
  record("attention vs cpu, flash and per-row passes (abs, |out| <= 1)", worst_long, tolerance(200));
}

TEST(CudaAttention, RowsAreBatchInvariant) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  AttentionCase c(Shape{8, 2, 128}, 300, 400);
  const int64_t pos0 = 140;  // two key tiles before the pass
  PassResult all = c.gpu(be, pos0, 16);
  for (int64_t i = 0; i < 16; ++i) {
    PassResult one = c.gpu(be, pos0 + i, 1);
    EXPECT_TRUE(same_bits(one.out, std::vector<float>(all.out.begin() + i * c.qw(), all.out.begin() + (i + 1) * c.qw())))
        << "row " << i;
  }
}

// A history of ctx − 1 tokens, then passes of each n in `ns` (ascending) at pos0 = ctx − 1 on one pair
// of device caches whose rows from pos0 on start as NaN: a pass must write its rows before reading
// them and must not read past them. The CPU reference is one pass of max(ns) rows (its rows do not
// depend on n). With `invariant`, row i of every pass must equal, bit for bit, a 1-row pass at
// pos0 + i. Returns the largest error against the CPU.
double check_long_case(Backend& be, Shape s, int64_t ctx, const std::vector<int64_t>& ns, bool invariant,
                       uint64_t seed) {
  const int64_t rows = *std::max_element(ns.begin(), ns.end()), pos0 = ctx - 1, cap = pos0 + rows;
  const int64_t qw = int64_t(s.nq) * s.hd, kw = int64_t(s.nkv) * s.hd;
  const std::string what = "nq " + std::to_string(s.nq) + " nkv " + std::to_string(s.nkv) + " hd " +
                           std::to_string(s.hd) + " context " + std::to_string(ctx);
  const AttentionInputs in = attention_inputs(s, pos0, rows, seed);
  const std::vector<float>&q = in.q, &k = in.k, &v = in.v, &want = in.want;
  std::vector<float> hk(k), hv(v);
  std::fill(hk.begin() + pos0 * kw, hk.end(), NAN);
  std::fill(hv.begin() + pos0 * kw, hv.end(), NAN);
  auto dkc = to_device(be, hk), dvc = to_device(be, hv);
  auto dq = to_device(be, q), dk = to_device(be, k), dv = to_device(be, v);
  auto pass = [&](int64_t p0, int64_t n) {
    auto dout = poisoned_device(be, size_t(n * qw));
    const int64_t r0 = p0 - pos0;
    be.attention(Tensor::f32(dq.p() + r0 * qw, n, qw), Tensor::f32(dk.p() + p0 * kw, n, kw),
                 Tensor::f32(dv.p() + p0 * kw, n, kw), dkc.p(), dvc.p(), cap, p0, s.nq, s.nkv, s.hd,
                 Tensor::f32(dout.p(), n, qw));
    return to_host(be, dout);
  };

  double worst = 0;
  std::map<int64_t, std::vector<float>> outs;
  for (int64_t n : ns) {
    outs[n] = pass(pos0, n);
    const double err = max_rel_err(outs[n], std::vector<float>(want.begin(), want.begin() + n * qw));
    EXPECT_LE(err, tolerance(n)) << what << " n " << n;
    worst = std::max(worst, err);
  }
  if (!invariant) return worst;
  for (int64_t i = 0; i < rows; ++i) {
    const std::vector<float> one = pass(pos0 + i, 1);
    for (int64_t n : ns) {
      if (i >= n) continue;
      EXPECT_TRUE(same_bits(one, std::vector<float>(outs[n].begin() + i * qw, outs[n].begin() + (i + 1) * qw)))
          << what << ": row " << i << " of the " << n << "-row pass differs from a 1-row pass at its position";
    }
  }
  return worst;
}

// Contexts include ones whose passes straddle a change of split size (4096 and 20480 keys: the
// keys per split go from 32 to 64 and from 160 to 192), so rows of one pass split differently.
TEST(CudaAttention, SplitMatchesCpuAndIsBatchInvariantAtLongContexts) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  double worst = 0;
  uint64_t seed = 900;
  for (Shape s : {Shape{32, 2, 128}, Shape{32, 2, 64}, Shape{8, 2, 128}, Shape{8, 2, 64}, Shape{4, 4, 128},
                  Shape{4, 4, 64}})
    for (int64_t ctx : {1, 7, 129, 1000, 4070, 4097, 20011, 20450})
      worst = std::max(worst, check_long_case(be, s, ctx, {1, 2, 8, 16, 33, 64}, true, seed += 3));
  record("split attention vs cpu, contexts to 20k (abs, |out| <= 1)", worst, 1e-5);
}

// The SIMT split kernel, which the tensor-core one replaced for these shapes, stays right for them
// (TANDEM_CUDA_ATTN_SIMT=1 is read at every launch).
TEST(CudaAttention, SimtSplitMatchesCpuWhenForced) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  ASSERT_EQ(setenv("TANDEM_CUDA_ATTN_SIMT", "1", 1), 0);
  double worst = 0;
  uint64_t seed = 2100;
  for (Shape s : {Shape{32, 2, 128}, Shape{8, 2, 64}})
    for (int64_t ctx : {1, 129, 4097})
      worst = std::max(worst, check_long_case(be, s, ctx, {1, 8, 64}, true, seed += 3));
  unsetenv("TANDEM_CUDA_ATTN_SIMT");
  record("split attention (SIMT forced) vs cpu (abs, |out| <= 1)", worst, 1e-5);
}

// Head sizes off the fast paths: not a multiple of 4 (scalar cache loads), between powers of two,
// the largest supported, and groups of 3 and 1 query heads per kv head.
TEST(CudaAttention, SplitMatchesCpuForOddShapes) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  double worst = 0;
  uint64_t seed = 1300;
  for (Shape s : {Shape{6, 2, 30}, Shape{12, 4, 36}, Shape{4, 1, 200}, Shape{2, 2, 512}, Shape{3, 3, 96}})
    for (int64_t ctx : {1, 300, 5000})
      worst = std::max(worst, check_long_case(be, s, ctx, {1, 5, 64}, true, seed += 3));
  record("split attention vs cpu, odd shapes (abs, |out| <= 1)", worst, 1e-5);
}

// 65 rows is the first pass length that takes the flash kernel (the per-row one for hd > 128).
TEST(CudaAttention, PassesPastTheSplitLimitMatchCpu) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  double worst = 0;
  uint64_t seed = 1700;
  for (Shape s : {Shape{32, 2, 128}, Shape{4, 4, 64}, Shape{2, 2, 200}})
    for (int64_t ctx : {1, 1000, 4097})
      worst = std::max(worst, check_long_case(be, s, ctx, {65}, false, seed += 3));
  record("flash and per-row attention vs cpu, 65 rows (abs, |out| <= 1)", worst, tolerance(65));
}

}  // namespace
}  // namespace tandem::test
