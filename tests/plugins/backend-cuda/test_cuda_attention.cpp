// CUDA attention against the CPU kernel: decode, verify and prefill shapes, several key tiles, the
// cache writes, and batch invariance (a row's bits do not depend on the rows beside it).
#include <gtest/gtest.h>

#include "cuda_test.h"
#include "plugins/cpu/kernels.h"

namespace tandem::test {
namespace {

struct Shape {
  int nq, nkv, hd;
};

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
  double worst = 0;
  uint64_t seed = 300;
  for (Shape s : {Shape{4, 2, 16}, Shape{8, 2, 128}, Shape{6, 6, 64}, Shape{4, 1, 200}}) {
    AttentionCase c(s, 400, seed += 3);
    for (auto [pos0, n] : {std::pair<int64_t, int64_t>{0, 1}, {0, 5}, {37, 1}, {37, 16}, {0, 200}, {130, 40},
                           {250, 150}}) {
      PassResult want = c.cpu(pos0, n), got = c.gpu(be, pos0, n);
      worst = std::max(worst, max_rel_err(got.out, want.out));
      EXPECT_TRUE(same_bits(std::vector<float>(got.k_cache.begin(), got.k_cache.begin() + (pos0 + n) * c.kw()),
                            std::vector<float>(want.k_cache.begin(), want.k_cache.begin() + (pos0 + n) * c.kw())))
          << "k cache rows, pos0 " << pos0 << " n " << n;
      EXPECT_TRUE(same_bits(std::vector<float>(got.v_cache.begin(), got.v_cache.begin() + (pos0 + n) * c.kw()),
                            std::vector<float>(want.v_cache.begin(), want.v_cache.begin() + (pos0 + n) * c.kw())))
          << "v cache rows, pos0 " << pos0 << " n " << n;
    }
  }
  record("attention vs cpu (abs, |out| <= 1)", worst, 1e-5);
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

}  // namespace
}  // namespace tandem::test
