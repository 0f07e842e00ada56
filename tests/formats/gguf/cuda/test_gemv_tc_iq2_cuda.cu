// The tensor-core IQ2_XXS GEMV and grouped gather prototype (formats/gguf/gemv_tc_iq2_cuda.cuh) against
// the CPU dequantizer and a float64 dot product, on fresh random IQ2_XXS weights with poisoned outputs.
// Dense: n = 1, 2, 3, 8, 9, 16 and 40 (three slabs) on a ragged m with one block, a k that ends inside
// a slice (5 blocks), Bolt's routed up [2304, 1024] and down [1024, 2304] and shared up [5376, 4096];
// every row bit-identical to the same row alone. Gather: an expert taking every row, experts with no
// rows, ragged groups, a repeated expert within a row, ids out of range (NaN rows), expert scales, 1–20
// tokens (two slabs); every (row, slot) bit-identical to the dense kernel on that expert and row alone.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda_probe.h"
#include "formats/gguf/gemv_tc_iq2_cuda.cuh"
#include "gguf_cuda_test_util.h"
#include "tc_check.h"

namespace tandem::gguf::test {
namespace {

// The CPU weights of one IQ2_XXS [m, k] matrix.
std::vector<float> dequant(const std::vector<uint8_t>& bytes, int64_t m, int64_t k) {
  const QuantType& qt = *find_type("IQ2_XXS");
  const int64_t rb = row_bytes(qt, k);
  std::vector<float> w(size_t(m * k));
  for (int64_t r = 0; r < m; ++r) qt.dequantize(bytes.data() + r * rb, w.data() + r * k, k);
  return w;
}

// float64 dot of weight row o and activation row x, and its magnitude Σ|x·w|.
std::pair<double, double> ref_dot(const float* wr, const float* xr, int64_t k) {
  double s = 0, a = 1e-30;
  for (int64_t j = 0; j < k; ++j) s += double(xr[j]) * wr[j], a += std::abs(double(xr[j]) * wr[j]);
  return {s, a};
}

std::vector<float> download(const DevMem& d, size_t n) {
  std::vector<float> v(n);
  cudaMemcpy(v.data(), d.p, n * 4, cudaMemcpyDeviceToHost);
  return v;
}

TEST(GemvTcIq2Cuda, MatchesCpuForOneToSixteenRowsAndIsBatchInvariant) {
  TANDEM_SKIP_WITHOUT_CUDA();
  using namespace kcuda;
  struct Case {
    int64_t m, k;
    float scale;
  };
  const std::vector<uint8_t> tab = iq2tc_tables();
  DevMem dt(tab.size());
  ok(cudaMemcpy(dt.p, tab.data(), tab.size(), cudaMemcpyHostToDevice), "upload tables");
  uint64_t seed = 5151;
  for (Case c : {Case{37, 256, 1.0f}, Case{100, 1280, 0.37f}, Case{2304, 1024, 1.0f}, Case{1024, 2304, 2.5f},
                 Case{5376, 4096, 1.0f}}) {
    SCOPED_TRACE("[" + std::to_string(c.m) + ", " + std::to_string(c.k) + "]");
    const std::vector<uint8_t> bytes = random_weight("IQ2_XXS", c.m, c.k, seed++);
    const std::vector<float> w = dequant(bytes, c.m, c.k);
    const int64_t N = 40;
    const std::vector<float> x = tandem::test::random_vec(size_t(N * c.k), seed++, -2.f, 2.f);
    std::vector<double> want(size_t(N * c.m)), mag(size_t(N * c.m));
    for (int64_t r = 0; r < N; ++r)
      for (int64_t o = 0; o < c.m; ++o) {
        const auto [s, a] = ref_dot(w.data() + o * c.k, x.data() + r * c.k, c.k);
        want[size_t(r * c.m + o)] = s * c.scale, mag[size_t(r * c.m + o)] = a * std::abs(c.scale);
      }
    const Iq2TcShape s = iq2tc_shape(c.m, c.k);
    const std::vector<uint8_t> rp = repack_iq2_xxs_tc(bytes.data(), c.m, c.k, "w");
    DevMem dw(rp.size()), dx(x.size() * 4), dws(s.workspace_bytes()), dy(size_t((N + 1) * c.m) * 4);
    ok(cudaMemcpy(dw.p, rp.data(), rp.size(), cudaMemcpyHostToDevice), "upload w");
    ok(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
    ok(cudaMemset(dws.p, 0, s.workspace_bytes()), "zero workspace");
    auto run = [&](int64_t r0, int64_t n) {  // n rows from r0, the output poisoned (one row more)
      std::vector<float> y(size_t((n + 1) * c.m), NAN);
      cudaMemcpy(dy.p, y.data(), y.size() * 4, cudaMemcpyHostToDevice);
      launch_gemv_tc_iq2(dw.as<uint8_t>(), s, dt.p, dx.as<float>() + r0 * c.k, dy.as<float>(), n, c.scale, 0, dws.p, 0);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      y = download(dy, y.size());
      for (int64_t i = n * c.m; i < (n + 1) * c.m; ++i)
        if (!std::isnan(y[size_t(i)])) {
          ADD_FAILURE() << "n " << n << ": wrote past its rows at " << i;
          break;
        }
      y.resize(size_t(n * c.m));
      return y;
    };
    const int64_t alone = c.m > 4000 ? 16 : N;  // rows checked one by one
    expect_rows_match_and_stay_invariant(run, c.m, N, alone, want, mag);
    std::vector<unsigned> cnt(size_t(s.tiles));
    cudaMemcpy(cnt.data(), dws.p, cnt.size() * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::count(cnt.begin(), cnt.end(), 0u), int64_t(cnt.size())) << "counters left nonzero";
  }
}

TEST(GemvTcIq2Cuda, GroupedGatherMatchesTheDenseKernelBitForBit) {
  TANDEM_SKIP_WITHOUT_CUDA();
  using namespace kcuda;
  const std::vector<uint8_t> tab = iq2tc_tables();
  DevMem dt(tab.size());
  ok(cudaMemcpy(dt.p, tab.data(), tab.size(), cudaMemcpyHostToDevice), "upload tables");
  const int E = 7, slots = 4;
  uint64_t seed = 777;
  for (auto mk : {std::pair<int64_t, int64_t>{72, 1024}, {200, 1280}}) {
    const int64_t m = mk.first, k = mk.second;
    SCOPED_TRACE("[" + std::to_string(m) + ", " + std::to_string(k) + "]");
    const Iq2TcShape s = iq2tc_shape(m, k);
    const int64_t eb = int64_t(s.bytes());
    std::vector<uint8_t> stack(size_t(E * eb));
    std::vector<std::vector<float>> w;
    for (int e = 0; e < E; ++e) {
      const std::vector<uint8_t> bytes = random_weight("IQ2_XXS", m, k, seed++);
      w.push_back(dequant(bytes, m, k));
      const std::vector<uint8_t> rp = repack_iq2_xxs_tc(bytes.data(), m, k, "e" + std::to_string(e));
      std::copy(rp.begin(), rp.end(), stack.begin() + e * eb);
    }
    const int64_t T = 20;
    const std::vector<float> x = tandem::test::random_vec(size_t(T * k), seed++, -2.f, 2.f);
    const std::vector<float> es = {0.5f, 1.25f, 3.0f, 0.75f, 2.0f, 1.0f, 0.125f};
    const int64_t ws_items = int64_t(kTcMaxRows) * slots;
    DevMem dw(stack.size()), dx(x.size() * 4), dws(s.workspace_bytes(ws_items)), dws1(s.workspace_bytes()),
        des(es.size() * 4), dids(size_t(T * slots) * 4), dy(size_t((T * slots + 1) * m) * 4), dy1(size_t(m) * 4);
    ok(cudaMemcpy(dw.p, stack.data(), stack.size(), cudaMemcpyHostToDevice), "upload experts");
    ok(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
    ok(cudaMemcpy(des.p, es.data(), es.size() * 4, cudaMemcpyHostToDevice), "upload scales");
    ok(cudaMemset(dws.p, 0, s.workspace_bytes(ws_items)), "zero workspace");
    ok(cudaMemset(dws1.p, 0, s.workspace_bytes()), "zero workspace");
    // The dense kernel on expert e for token t alone (scale sc).
    auto alone = [&](int e, int64_t t, float sc) {
      launch_gemv_tc_iq2(dw.as<uint8_t>() + e * eb, s, dt.p, dx.as<float>() + t * k, dy1.as<float>(), 1, sc, 0,
                         dws1.p, 0);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      return download(dy1, size_t(m));
    };
    std::mt19937_64 rng(seed++);
    struct Pattern {
      const char* name;
      int64_t tokens;
      bool scaled;
    };
    for (Pattern pt : {Pattern{"one token", 1, false}, Pattern{"three tokens", 3, true}, Pattern{"eight", 8, false},
                       Pattern{"sixteen", 16, true}, Pattern{"two slabs", 20, false}}) {
      SCOPED_TRACE(pt.name);
      // Slot 0: expert 2 for every token; the others ragged over experts 0, 2, 3, 5 (1, 4, 6 never
      // chosen, except below); token 1 repeats an expert; the last token of >2 has ids out of range.
      std::vector<int32_t> ids(size_t(pt.tokens * slots));
      const int32_t pool[4] = {0, 2, 3, 5};
      for (int64_t t = 0; t < pt.tokens; ++t) {
        ids[size_t(t * slots)] = 2;
        for (int j = 1; j < slots; ++j) ids[size_t(t * slots + j)] = pool[rng() % 4];
      }
      if (pt.tokens > 1) ids[size_t(1 * slots + 3)] = ids[size_t(1 * slots + 1)];
      if (pt.tokens > 2) ids[size_t((pt.tokens - 1) * slots + 1)] = -1, ids[size_t((pt.tokens - 1) * slots + 2)] = E;
      if (pt.tokens >= 16) ids[size_t(5 * slots + 3)] = 6;  // an expert with a single row
      cudaMemcpy(dids.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice);
      const int64_t rows = pt.tokens * slots;
      std::vector<float> y(size_t((rows + 1) * m), NAN);
      cudaMemcpy(dy.p, y.data(), y.size() * 4, cudaMemcpyHostToDevice);
      launch_gather_tc_iq2(dw.as<uint8_t>(), eb, E, pt.scaled ? des.as<float>() : nullptr, s, dt.p, dx.as<float>(),
                           dids.as<int32_t>(), slots, dy.as<float>(), pt.tokens, 1.5f, 0, dws.p, 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      y = download(dy, y.size());
      int64_t unequal = 0, not_nan = 0, past = 0;
      double worst = 0;
      for (int64_t i = rows * m; i < (rows + 1) * m; ++i) past += !std::isnan(y[size_t(i)]);
      for (int64_t t = 0; t < pt.tokens; ++t)
        for (int j = 0; j < slots; ++j) {
          const int32_t e = ids[size_t(t * slots + j)];
          const float* yr = y.data() + (t * slots + j) * m;
          if (e < 0 || e >= E) {
            for (int64_t o = 0; o < m; ++o) not_nan += !std::isnan(yr[o]);
            continue;
          }
          const float sc = pt.scaled ? es[size_t(e)] : 1.5f;
          const std::vector<float> ref = alone(e, t, sc);
          for (int64_t o = 0; o < m; ++o) {
            if (std::memcmp(&yr[o], &ref[size_t(o)], 4) != 0) ++unequal;
            const auto [dv, a] = ref_dot(w[size_t(e)].data() + o * k, x.data() + t * k, k);
            worst = std::max(worst, std::isnan(yr[o]) ? INFINITY : std::abs(yr[o] - dv * sc) / (a * sc));
          }
        }
      EXPECT_EQ(unequal, 0) << "gathered outputs differ from the dense kernel's";
      EXPECT_EQ(not_nan, 0) << "rows of out-of-range ids must stay NaN";
      EXPECT_EQ(past, 0) << "wrote past the gathered rows";
      EXPECT_LE(worst, 3e-5);
    }
    std::vector<unsigned> cnt(size_t(ws_items * s.tiles));
    cudaMemcpy(cnt.data(), dws.p, cnt.size() * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::count(cnt.begin(), cnt.end(), 0u), int64_t(cnt.size())) << "counters left nonzero";
  }
}

}  // namespace
}  // namespace tandem::gguf::test
