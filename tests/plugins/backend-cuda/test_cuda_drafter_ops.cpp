// The CUDA backend's drafter ops (rope, attention_full, their device-position variants rope_at and
// attention_full_at, silu_mul, scale_softcap, top_k_logprobs), each against its CPU twin
// (plugins/cpu/drafter_ops.cpp) on random inputs of several shapes, outputs poisoned with NaN first;
// the device-position variants also recorded once and replayed at other positions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "cuda_test.h"
#include "plugins/cpu/kernels.h"

namespace tandem::test {
namespace {

using cuda::CudaBackend;

class CudaDrafterOps : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<CudaBackend>();
  }
  std::unique_ptr<CudaBackend> be;
};

TEST_F(CudaDrafterOps, RopeMatchesCpu) {
  for (auto [rows, heads, hd, pos0] : {std::tuple{8, 4, 16, int64_t(0)}, std::tuple{17, 2, 128, int64_t(4093)},
                                      std::tuple{64, 8, 64, int64_t(100000)}}) {
    auto x = random_vec(size_t(rows * heads * hd), uint64_t(rows + hd), -2.f, 2.f);
    std::vector<float> ref = x;
    cpu::rope(Tensor::f32(ref.data(), rows, int64_t(heads) * hd), heads, hd, pos0, 1e6);
    auto dx = to_device(*be, x);
    be->rope(Tensor::f32(dx.p(), rows, int64_t(heads) * hd), heads, hd, pos0, 1e6);
    // cos/sin of angles up to 1e5 rad: the f32 argument reductions differ in the last bits.
    record(("rope " + std::to_string(hd) + " at " + std::to_string(pos0)).c_str(), max_rel_err(to_host(*be, dx), ref),
           pos0 > 10000 ? 5e-3 : 1e-5);
  }
}

TEST_F(CudaDrafterOps, AttentionFullMatchesCpuAndRowsAreBatchInvariant) {
  for (auto [n, rows, nq, nkv, hd] : {std::tuple{8, 8, 4, 2, 16}, std::tuple{8, 300, 32, 4, 128},
                                      std::tuple{3, 1, 2, 1, 64}, std::tuple{16, 1000, 8, 8, 96}}) {
    const int64_t qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
    auto q = random_vec(size_t(n * qw), 1, -1.f, 1.f);
    auto k = random_vec(size_t((rows + 5) * kw), 2, -1.f, 1.f);  // rows past `rows` must be ignored
    auto v = random_vec(size_t((rows + 5) * kw), 3, -1.f, 1.f);
    std::vector<float> ref(size_t(n * qw));
    cpu::attention_full(Tensor::f32(q.data(), n, qw), Tensor::f32(k.data(), rows + 5, kw),
                        Tensor::f32(v.data(), rows + 5, kw), rows, nq, nkv, hd, Tensor::f32(ref.data(), n, qw));
    auto dq = to_device(*be, q), dk = to_device(*be, k), dv = to_device(*be, v);
    auto dout = poisoned_device(*be, ref.size());
    be->attention_full(Tensor::f32(dq.p(), n, qw), Tensor::f32(dk.p(), rows + 5, kw), Tensor::f32(dv.p(), rows + 5, kw),
                       rows, nq, nkv, hd, Tensor::f32(dout.p(), n, qw));
    const auto got = to_host(*be, dout);
    record(("attention_full " + std::to_string(n) + "×" + std::to_string(rows)).c_str(), max_rel_err(got, ref), 1e-5);
    // The last row alone gives the bits it has among n.
    auto d1 = poisoned_device(*be, size_t(qw));
    be->attention_full(Tensor::f32(dq.p() + (n - 1) * qw, 1, qw), Tensor::f32(dk.p(), rows + 5, kw),
                       Tensor::f32(dv.p(), rows + 5, kw), rows, nq, nkv, hd, Tensor::f32(d1.p(), 1, qw));
    EXPECT_TRUE(same_bits(to_host(*be, d1), std::vector<float>(got.end() - qw, got.end())));
  }
}

// rope_at: the CPU twin at the host's position on fresh inputs (output in place, so the inputs are the
// poison: a row the kernel skips keeps its unturned values and fails), the same bits as rope(); then
// one recording replayed at other positions written to device memory gives rope()'s bits there.
TEST_F(CudaDrafterOps, RopeAtMatchesCpuAndOneRecordingServesEveryPosition) {
  for (auto [rows, heads, hd, pos0] : {std::tuple{8, 4, 16, int64_t(3)}, std::tuple{7, 8, 128, int64_t(4093)},
                                      std::tuple{16, 2, 64, int64_t(100000)}}) {
    const int64_t w = int64_t(heads) * hd;
    auto x = random_vec(size_t(rows * w), uint64_t(rows + hd + 7), -2.f, 2.f);
    std::vector<float> ref = x;
    cpu::rope_at(Tensor::f32(ref.data(), rows, w), heads, hd, pos0, &pos0, 1e6);
    auto pos = to_device(*be, std::vector<int64_t>{pos0});
    auto dx = to_device(*be, x), dr = to_device(*be, x);
    be->rope_at(Tensor::f32(dx.p(), rows, w), heads, hd, pos0, pos.p(), 1e6);
    be->rope(Tensor::f32(dr.p(), rows, w), heads, hd, pos0, 1e6);
    const auto got = to_host(*be, dx);
    record(("rope_at " + std::to_string(hd) + " at " + std::to_string(pos0)).c_str(), max_rel_err(got, ref),
           pos0 > 10000 ? 5e-3 : 1e-5);
    EXPECT_TRUE(same_bits(got, to_host(*be, dr))) << "rope_at and rope differ at " << pos0;

    auto rec = to_device(*be, x);
    ASSERT_TRUE(be->begin_capture());
    be->rope_at(Tensor::f32(rec.p(), rows, w), heads, hd, pos0, pos.p(), 1e6);
    auto graph = be->end_capture();
    ASSERT_TRUE(graph != nullptr);
    for (int64_t at : {int64_t(0), pos0 + 1, int64_t(777), pos0}) {
      be->upload(rec.p(), x.data(), x.size() * sizeof(float));
      be->upload(pos.p(), &at, sizeof(at));
      graph->launch();
      auto want = to_device(*be, x);
      be->rope(Tensor::f32(want.p(), rows, w), heads, hd, at, 1e6);
      EXPECT_TRUE(same_bits(to_host(*be, rec), to_host(*be, want))) << "replayed at " << at;
    }
  }
}

// rope_table (yarn frequency tables): the CPU twin on random inputs and tables, direct (host position)
// and through a device position, outputs in place; one recording replayed at other positions gives the
// direct call's bits there.
TEST_F(CudaDrafterOps, RopeTableMatchesCpuAndOneRecordingServesEveryPosition) {
  for (auto [rows, heads, hd, pos0] : {std::tuple{8, 4, 16, int64_t(3)}, std::tuple{7, 8, 128, int64_t(4093)},
                                      std::tuple{16, 2, 64, int64_t(100000)}}) {
    const int64_t w = int64_t(heads) * hd;
    auto x = random_vec(size_t(rows * w), uint64_t(rows + hd + 9), -2.f, 2.f);
    auto inv = random_vec(size_t(hd / 2), uint64_t(hd), 1e-5f, 1.f);
    const float scale = 1.0f + 0.1f * std::log(8.0f);
    std::vector<float> ref = x;
    cpu::rope_table(Tensor::f32(ref.data(), rows, w), heads, hd, pos0, nullptr, inv.data(), scale);
    auto dinv = to_device(*be, inv);
    auto pos = to_device(*be, std::vector<int64_t>{pos0});
    auto dx = to_device(*be, x), dr = to_device(*be, x);
    be->rope_table(Tensor::f32(dx.p(), rows, w), heads, hd, pos0, pos.p(), dinv.p(), scale);
    be->rope_table(Tensor::f32(dr.p(), rows, w), heads, hd, pos0, nullptr, dinv.p(), scale);
    const auto got = to_host(*be, dx);
    record(("rope_table " + std::to_string(hd) + " at " + std::to_string(pos0)).c_str(), max_rel_err(got, ref),
           pos0 > 10000 ? 5e-3 : 1e-5);
    EXPECT_TRUE(same_bits(got, to_host(*be, dr))) << "rope_table at the device position and the host's differ";

    auto rec = to_device(*be, x);
    ASSERT_TRUE(be->begin_capture());
    be->rope_table(Tensor::f32(rec.p(), rows, w), heads, hd, pos0, pos.p(), dinv.p(), scale);
    auto graph = be->end_capture();
    ASSERT_TRUE(graph != nullptr);
    for (int64_t at : {int64_t(0), pos0 + 1, int64_t(777), pos0}) {
      be->upload(rec.p(), x.data(), x.size() * sizeof(float));
      be->upload(pos.p(), &at, sizeof(at));
      graph->launch();
      auto want = to_device(*be, x);
      be->rope_table(Tensor::f32(want.p(), rows, w), heads, hd, at, nullptr, dinv.p(), scale);
      EXPECT_TRUE(same_bits(to_host(*be, rec), to_host(*be, want))) << "replayed at " << at;
    }
  }
}

// attention_full_at: the new rows land in the caches at the position and every query row attends over
// rows 0 … pos0 + n − 1, as the CPU twin does (outputs poisoned, cache rows past the block random and
// left alone); one recording replayed at other positions gives the bits of a direct call there.
TEST_F(CudaDrafterOps, AttentionFullAtMatchesCpuAndOneRecordingServesEveryPosition) {
  for (auto [n, pos0, nq, nkv, hd] : {std::tuple{8, int64_t(0), 4, 2, 16}, std::tuple{16, int64_t(300), 32, 4, 128},
                                      std::tuple{3, int64_t(1), 2, 1, 64}, std::tuple{16, int64_t(1000), 8, 8, 96}}) {
    const int64_t qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd, cap = pos0 + n + 40;
    auto q = random_vec(size_t(n * qw), 21, -1.f, 1.f);
    auto k = random_vec(size_t(n * kw), 22, -1.f, 1.f), v = random_vec(size_t(n * kw), 23, -1.f, 1.f);
    auto kc = random_vec(size_t(cap * kw), 24, -1.f, 1.f), vc = random_vec(size_t(cap * kw), 25, -1.f, 1.f);
    std::vector<float> kref = kc, vref = vc, ref(size_t(n * qw));
    cpu::attention_full_at(Tensor::f32(q.data(), n, qw), Tensor::f32(k.data(), n, kw), Tensor::f32(v.data(), n, kw),
                           kref.data(), vref.data(), cap, pos0, &pos0, nq, nkv, hd, Tensor::f32(ref.data(), n, qw));
    auto pos = to_device(*be, std::vector<int64_t>{pos0});
    auto dq = to_device(*be, q), dk = to_device(*be, k), dv = to_device(*be, v);
    auto dkc = to_device(*be, kc), dvc = to_device(*be, vc);
    auto dout = poisoned_device(*be, ref.size());
    const Tensor tq = Tensor::f32(dq.p(), n, qw), tk = Tensor::f32(dk.p(), n, kw), tv = Tensor::f32(dv.p(), n, kw);
    be->attention_full_at(tq, tk, tv, dkc.p(), dvc.p(), cap, pos0, pos.p(), nq, nkv, hd, Tensor::f32(dout.p(), n, qw));
    const std::string what = "attention_full_at " + std::to_string(n) + " at " + std::to_string(pos0);
    record(what.c_str(), max_rel_err(to_host(*be, dout), ref), 1e-5);
    EXPECT_TRUE(same_bits(to_host(*be, dkc), kref)) << what << ": k cache";
    EXPECT_TRUE(same_bits(to_host(*be, dvc), vref)) << what << ": v cache";

    auto rkc = to_device(*be, kc), rvc = to_device(*be, vc);
    auto rout = poisoned_device(*be, ref.size());
    ASSERT_TRUE(be->begin_capture());
    be->attention_full_at(tq, tk, tv, rkc.p(), rvc.p(), cap, pos0, pos.p(), nq, nkv, hd, Tensor::f32(rout.p(), n, qw));
    auto graph = be->end_capture();
    ASSERT_TRUE(graph != nullptr);
    for (int64_t at : {int64_t(0), pos0 + 7, cap - n, pos0}) {
      be->upload(pos.p(), &at, sizeof(at));
      graph->launch();
      auto wkc = to_device(*be, to_host(*be, rkc)), wvc = to_device(*be, to_host(*be, rvc));
      auto wout = poisoned_device(*be, ref.size());
      be->attention_full_at(tq, tk, tv, wkc.p(), wvc.p(), cap, at, pos.p(), nq, nkv, hd, Tensor::f32(wout.p(), n, qw));
      EXPECT_TRUE(same_bits(to_host(*be, rout), to_host(*be, wout))) << what << ", replayed at " << at;
      // The replay wrote the block where the direct call did (which then found it already there).
      EXPECT_TRUE(same_bits(to_host(*be, rkc), to_host(*be, wkc))) << what << ", replayed at " << at;
      std::vector<float> row(size_t(n * kw));
      be->download(row.data(), rkc.p() + at * kw, row.size() * sizeof(float));
      EXPECT_EQ(row, k) << what << ": the k rows at " << at;
    }
  }
}

TEST_F(CudaDrafterOps, SiluMulAndScaleSoftcapMatchCpu) {
  for (int64_t cols : {7, 256, 6144}) {
    const int64_t rows = 9;
    auto g = random_vec(size_t(rows * cols), 4, -6.f, 6.f), u = random_vec(size_t(rows * cols), 5, -2.f, 2.f);
    std::vector<float> ref(g.size());
    cpu::silu_mul(Tensor::f32(g.data(), rows, cols), Tensor::f32(u.data(), rows, cols), Tensor::f32(ref.data(), rows, cols));
    auto dg = to_device(*be, g), du = to_device(*be, u);
    auto dout = poisoned_device(*be, g.size());
    be->silu_mul(Tensor::f32(dg.p(), rows, cols), Tensor::f32(du.p(), rows, cols), Tensor::f32(dout.p(), rows, cols));
    record("silu_mul", max_rel_err(to_host(*be, dout), ref), 1e-6);
    for (float cap : {0.0f, 30.0f}) {
      std::vector<float> r2 = g;
      cpu::scale_softcap(Tensor::f32(r2.data(), rows, cols), 1.5f, cap);
      auto dx = to_device(*be, g);
      be->scale_softcap(Tensor::f32(dx.p(), rows, cols), 1.5f, cap);
      record(cap > 0 ? "softcap" : "scale", max_rel_err(to_host(*be, dx), r2), 1e-6);
    }
  }
}

// top_k_logprobs on the GPU and the CPU twin: ids identical, logp within 1e-6 relative (below |logp| 4,
// 4e-6 absolute: the two sum Σ exp in other orders, so lse may differ in its last bit, 1.9e-6 at 16…32).
void expect_top_k_matches_cpu(CudaBackend& be, const std::vector<float>& l, int64_t rows, int64_t vocab, int k,
                              const std::string& what) {
  std::vector<int32_t> ids(size_t(rows * k));
  std::vector<float> lp(size_t(rows * k));
  cpu::top_k_logprobs(Tensor::f32(const_cast<float*>(l.data()), rows, vocab), k, ids.data(), lp.data());
  auto dl = to_device(be, l);
  auto did = to_device(be, std::vector<int32_t>(ids.size(), -7));
  auto dlp = poisoned_device(be, lp.size());
  be.top_k_logprobs(Tensor::f32(dl.p(), rows, vocab), k, did.p(), dlp.p());
  const auto got_ids = to_host(be, did);
  const auto got_lp = to_host(be, dlp);
  EXPECT_EQ(got_ids, ids) << what;
  record(("top_k_logprobs " + what).c_str(), max_rel_err(got_lp, lp, 4.0), 1e-6);
  for (size_t i = 0; i < lp.size(); ++i)
    if (std::isinf(lp[i])) EXPECT_EQ(got_lp[i], lp[i]) << what << " entry " << i;
  // Run again: the same bits (the merge order is fixed, not the order the blocks finished in).
  auto dlp2 = poisoned_device(be, lp.size());
  be.top_k_logprobs(Tensor::f32(dl.p(), rows, vocab), k, did.p(), dlp2.p());
  EXPECT_TRUE(same_bits(to_host(be, dlp2), got_lp)) << what;
}

std::string top_k_name(int64_t rows, int64_t vocab, int k) {
  return std::to_string(rows) + "×" + std::to_string(vocab) + " top-" + std::to_string(k);
}

TEST_F(CudaDrafterOps, TopKLogprobsMatchesCpuWithTies) {
  for (auto [rows, vocab, k] : {std::tuple{7, 1024, 8}, std::tuple{7, 131072, 8}, std::tuple{3, 50, 1},
                                std::tuple{2, 4096, 64}, std::tuple{1, 131072, 8}, std::tuple{16, 131072, 8},
                                std::tuple{7, 131072 + 37, 8}, std::tuple{4, 4097, 64}, std::tuple{16, 4095, 1},
                                std::tuple{7, 131072, 64}, std::tuple{2, 300001, 8}, std::tuple{1, 64, 64}}) {
    auto l = random_vec(size_t(rows * vocab), uint64_t(vocab + k), -8.f, 8.f);
    // Ties at the top: the lower id comes first, also across chunks of the row (4096 logits each).
    l[5] = l[17] = 20.0f;
    if (vocab > 4099) l[4099] = 20.0f;
    if (rows > 1) l[size_t(vocab) + 3] = l[size_t(vocab) + 2] = 19.0f;
    if (rows > 2) {  // many equal values: the top-k is the lowest ids among them
      for (int64_t i = 0; i < vocab; i += 3) l[size_t(2 * vocab + i)] = 7.5f;
    }
    if (rows > 3 && vocab > 4096) {  // a chunk of only −inf beside finite chunks
      for (int64_t i = 0; i < 4096; ++i) l[size_t(3 * vocab + i)] = -INFINITY;
    }
    std::vector<int32_t> ids(size_t(rows * k));
    std::vector<float> lp(size_t(rows * k));
    cpu::top_k_logprobs(Tensor::f32(l.data(), rows, vocab), k, ids.data(), lp.data());
    EXPECT_EQ(ids[0], 5);
    if (k > 1) EXPECT_EQ(ids[1], 17);
    expect_top_k_matches_cpu(*be, l, rows, vocab, k, top_k_name(rows, vocab, k));
  }
}

TEST_F(CudaDrafterOps, TopKLogprobsNeverPicksNanAndKeepsInfinities) {
  for (auto [vocab, k] : {std::pair{int64_t(64), 64}, std::pair{int64_t(131072), 8}, std::pair{int64_t(5000), 64},
                          std::pair{int64_t(8193), 1}}) {
    const int64_t rows = 6;
    auto l = random_vec(size_t(rows * vocab), uint64_t(vocab), -8.f, 8.f);
    auto at = [&](int64_t r, int64_t i) -> float& { return l[size_t(r * vocab + i)]; };
    // Row 0: NaNs (one where the max would be): logp all NaN, ids the top-k of the rest.
    at(0, 0) = NAN, at(0, vocab - 1) = NAN, at(0, vocab / 2) = NAN;
    // Row 1: −inf entries among finite ones, and a few values only (the rest −inf): −inf is picked last.
    for (int64_t i = 3; i < vocab; ++i) at(1, i) = -INFINITY;
    // Row 2: only −inf: log_softmax is NaN, the ids are the lowest k.
    for (int64_t i = 0; i < vocab; ++i) at(2, i) = -INFINITY;
    // Row 3: +inf twice: the ids come first (lower first), logp NaN.
    at(3, vocab - 2) = INFINITY, at(3, 1) = INFINITY;
    // Row 4: all NaN but two: the rest of the ids are −1.
    for (int64_t i = 0; i < vocab; ++i) at(4, i) = i == 7 || i == vocab - 1 ? float(i) : NAN;
    // Row 5: NaN in every chunk but one finite value per chunk.
    for (int64_t i = 0; i < vocab; ++i) at(5, i) = i % 4096 == 100 ? float(i % 13) : NAN;
    std::vector<int32_t> ids(size_t(rows * k));
    std::vector<float> lp(size_t(rows * k));
    cpu::top_k_logprobs(Tensor::f32(l.data(), rows, vocab), k, ids.data(), lp.data());
    EXPECT_EQ(ids[size_t(4 * k)], int32_t(vocab - 1));
    if (k > 2) EXPECT_EQ(ids[size_t(4 * k + 2)], -1);
    for (int j = 0; j < k; ++j) EXPECT_NE(ids[size_t(j)], 0);
    expect_top_k_matches_cpu(*be, l, rows, vocab, k, "edge rows " + top_k_name(rows, vocab, k));
  }
}

TEST_F(CudaDrafterOps, TopKLogprobsRowsAreBatchInvariant) {
  const int64_t rows = 16, vocab = 131072 + 5;
  const int k = 8;
  auto l = random_vec(size_t(rows * vocab), 99, -12.f, 12.f);
  auto dl = to_device(*be, l);
  auto did = to_device(*be, std::vector<int32_t>(size_t(rows * k), -7));
  auto dlp = poisoned_device(*be, size_t(rows * k));
  be->top_k_logprobs(Tensor::f32(dl.p(), rows, vocab), k, did.p(), dlp.p());
  const auto all_ids = to_host(*be, did);
  const auto all_lp = to_host(*be, dlp);
  for (int64_t r : {int64_t(0), int64_t(9), rows - 1}) {
    auto d1 = to_device(*be, std::vector<float>(l.begin() + r * vocab, l.begin() + (r + 1) * vocab));
    auto i1 = to_device(*be, std::vector<int32_t>(size_t(k), -7));
    auto p1 = poisoned_device(*be, size_t(k));
    be->top_k_logprobs(Tensor::f32(d1.p(), 1, vocab), k, i1.p(), p1.p());
    EXPECT_EQ(to_host(*be, i1), std::vector<int32_t>(all_ids.begin() + r * k, all_ids.begin() + (r + 1) * k)) << r;
    EXPECT_TRUE(same_bits(to_host(*be, p1), std::vector<float>(all_lp.begin() + r * k, all_lp.begin() + (r + 1) * k)))
        << "row " << r;
  }
}

TEST_F(CudaDrafterOps, BadArgumentsAreOneLineErrors) {
  auto d = poisoned_device(*be, 64);
  EXPECT_THROW(be->rope(Tensor::f32(d.p(), 2, 32), 2, 15, 0, 1e4), Error);
  EXPECT_THROW(be->attention_full(Tensor::f32(d.p(), 1, 32), Tensor::f32(d.p(), 1, 16), Tensor::f32(d.p(), 1, 16), 2,
                                  2, 1, 16, Tensor::f32(d.p(), 1, 32)),
               Error);
  EXPECT_THROW(be->top_k_logprobs(Tensor::f32(d.p(), 1, 64), 65, nullptr, nullptr), Error);
  EXPECT_THROW(be->rope_at(Tensor::f32(d.p(), 2, 32), 2, 16, 0, nullptr, 1e4), Error);
  auto pos = to_device(*be, std::vector<int64_t>{0});
  // Positions [3, 5) of a 4-row cache.
  EXPECT_THROW(be->attention_full_at(Tensor::f32(d.p(), 2, 16), Tensor::f32(d.p(), 2, 16), Tensor::f32(d.p(), 2, 16),
                                     d.p(), d.p(), 4, 3, pos.p(), 1, 1, 16, Tensor::f32(d.p(), 2, 16)),
               Error);
}

}  // namespace
}  // namespace tandem::test
