// Causal GQA attention against a float64 reference, cache writes, and batch invariance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cpu_test.h"
#include "plugins/cpu/cpu_backend.h"
#include "test_util.h"

namespace tandem::test {
namespace {

constexpr int kNq = 4, kNkv = 2, kHd = 16;
constexpr int64_t kQw = kNq * kHd, kKw = kNkv * kHd;

// Token t's q, k and v, so that a test can rebuild any position.
struct Tokens {
  std::vector<float> q, k, v;
  explicit Tokens(int64_t n, uint64_t seed)
      : q(random_vec(n * kQw, seed, -1.5f, 1.5f)),
        k(random_vec(n * kKw, seed + 1, -1.5f, 1.5f)),
        v(random_vec(n * kKw, seed + 2, -1.f, 1.f)) {}
};

struct Cache {
  int64_t capacity;
  std::vector<float> k, v;
  // Poisoned: a read past the written rows turns the output into NaN.
  explicit Cache(int64_t cap) : capacity(cap), k(poisoned(cap * kKw)), v(poisoned(cap * kKw)) {}
};

// Runs tokens [t0, t0+n) through the backend at positions t0.. and returns out [n, kQw].
std::vector<float> run(Backend& be, const Tokens& tk, Cache& c, int64_t t0, int64_t n) {
  auto out = poisoned(n * kQw);
  be.attention(Tensor::f32(const_cast<float*>(tk.q.data()) + t0 * kQw, n, kQw),
               Tensor::f32(const_cast<float*>(tk.k.data()) + t0 * kKw, n, kKw),
               Tensor::f32(const_cast<float*>(tk.v.data()) + t0 * kKw, n, kKw), c.k.data(), c.v.data(),
               c.capacity, t0, kNq, kNkv, kHd, Tensor::f32(out.data(), n, kQw));
  return out;
}

// Query at position `pos` against keys/values 0..pos.
std::vector<double> ref_row(const Tokens& tk, int64_t pos) {
  std::vector<double> out(kQw);
  const double scale = 1.0 / std::sqrt(double(kHd));
  for (int h = 0; h < kNq; ++h) {
    const int kvh = h / (kNq / kNkv);
    std::vector<double> s(pos + 1);
    double m = -INFINITY;
    for (int64_t t = 0; t <= pos; ++t) {
      double dot = 0;
      for (int d = 0; d < kHd; ++d) dot += double(tk.q[pos * kQw + h * kHd + d]) * tk.k[t * kKw + kvh * kHd + d];
      s[t] = dot * scale;
      m = std::max(m, s[t]);
    }
    double sum = 0;
    for (auto& x : s) sum += x = std::exp(x - m);
    for (int d = 0; d < kHd; ++d) {
      double acc = 0;
      for (int64_t t = 0; t <= pos; ++t) acc += s[t] * tk.v[t * kKw + kvh * kHd + d];
      out[h * kHd + d] = acc / sum;
    }
  }
  return out;
}

TEST(CpuAttention, MatchesReferenceAfterPrefill) {
  cpu::CpuBackend be;
  Tokens tk(12, 100);
  Cache c(16);
  run(be, tk, c, 0, 5);                 // prefill positions 0..4
  auto out = run(be, tk, c, 5, 7);      // then positions 5..11 against the cached rows
  for (int64_t i = 0; i < 7; ++i) {
    std::vector<float> row(out.begin() + i * kQw, out.begin() + (i + 1) * kQw);
    EXPECT_LT(max_abs_diff(row, ref_row(tk, 5 + i)), 2e-6) << "position " << 5 + i;
  }
  // The caches hold the new k/v rows exactly, and nothing past them was written.
  EXPECT_EQ(std::memcmp(c.k.data(), tk.k.data(), 12 * kKw * 4), 0);
  EXPECT_EQ(std::memcmp(c.v.data(), tk.v.data(), 12 * kKw * 4), 0);
  for (int64_t i = 12 * kKw; i < 16 * kKw; ++i) ASSERT_TRUE(std::isnan(c.k[i]) && std::isnan(c.v[i]));
}

TEST(CpuAttention, HeadsReadTheirOwnKvHead) {
  // With v of kv head 1 set to 1 and of head 0 to 0, query heads 0-1 must give 0 and heads 2-3 give 1.
  cpu::CpuBackend be;
  Tokens tk(3, 7);
  for (int64_t t = 0; t < 3; ++t)
    for (int d = 0; d < kKw; ++d) tk.v[t * kKw + d] = d < kHd ? 0.f : 1.f;
  Cache c(3);
  auto out = run(be, tk, c, 0, 3);
  for (int64_t i = 0; i < 3; ++i)
    for (int h = 0; h < kNq; ++h)
      for (int d = 0; d < kHd; ++d) ASSERT_NEAR(out[i * kQw + h * kHd + d], h < 2 ? 0.f : 1.f, 1e-6);
}

TEST(CpuAttention, RowsAreBitIdenticalWhateverTheBatch) {
  cpu::CpuBackend be;
  Tokens tk(40, 200);
  const int64_t pre = 31, n = 9;  // long enough that one call fans out over several threads
  Cache batched(40), single(40);
  std::vector<float> a;
  {
    ThreadCount t(3);
    run(be, tk, batched, 0, pre);
    a = run(be, tk, batched, pre, n);
  }
  ThreadCount t(1);
  run(be, tk, single, 0, pre);
  for (int64_t i = 0; i < n; ++i) {
    auto b = run(be, tk, single, pre + i, 1);
    ASSERT_EQ(std::memcmp(a.data() + i * kQw, b.data(), kQw * 4), 0) << "position " << pre + i;
  }
}

TEST(CpuAttention, BadArgumentsAreNamed) {
  cpu::CpuBackend be;
  Tokens tk(4, 1);
  Cache c(4);
  auto out = poisoned(4 * kQw);
  auto call = [&](int64_t n, int64_t pos0, int nq, int nkv, int64_t qcols) {
    return error_of([&] {
      be.attention(Tensor::f32(tk.q.data(), n, qcols), Tensor::f32(tk.k.data(), n, kKw),
                   Tensor::f32(tk.v.data(), n, kKw), c.k.data(), c.v.data(), c.capacity, pos0, nq, nkv,
                   kHd, Tensor::f32(out.data(), n, qcols));
    });
  };
  EXPECT_EQ(call(2, 0, 3, 2, 3 * kHd), "attention: query heads 3 are not a multiple of kv heads 2");
  EXPECT_EQ(call(2, 3, kNq, kNkv, kQw), "attention: positions [3, 5) exceed the cache capacity 4");
  EXPECT_EQ(call(2, 0, kNq, kNkv, kQw - 1), "attention: q: expected f32 [2, 64], found f32 [2, 63]");
  std::string msg = error_of([&] {
    be.attention(Tensor::f32(tk.q.data(), 2, kQw), Tensor::f32(tk.k.data(), 1, kKw),
                 Tensor::f32(tk.v.data(), 2, kKw), c.k.data(), c.v.data(), 4, 0, kNq, kNkv, kHd,
                 Tensor::f32(out.data(), 2, kQw));
  });
  EXPECT_EQ(msg, "attention: k: expected f32 [2, 32], found f32 [1, 32]");
  // Nothing was written by a rejected call.
  for (float x : c.k) ASSERT_TRUE(std::isnan(x));
}

}  // namespace
}  // namespace tandem::test
