// The prefill GEMM and grouped expert gather of formats/gguf/gemm_cuda.cuh (more than 16 rows; gathers
// of more than 16 × 32 items) for the types with a tensor-core decoder, against the CPU kernels on
// fresh random blocks with poisoned outputs: n = 17, 40, 150, 512 over shapes whose m is not a
// multiple of the 128-row tile, k = 256 and 4096 and a k of an odd number of 64-element steps; a
// row's bits independent of n, of the block tiling (TANDEM_GGUF_GEMM_WM) and run to run; n ≤ 16
// still the GEMV's bits; the grouped gather with ragged groups, experts without rows, one expert
// taking every row and ids out of range, every epilogue, each gathered row bit-identical to its
// expert's own GEMM row. For NVFP4 and Q8_0 the
// one-copy readers (gemm_tc_cuda.cuh: GEMM, get_rows and dequantize from the repacked copy) against
// the file-block ones (TANDEM_GGUF_ONE_COPY=0), bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cuda_probe.h"
#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_format_cuda.h"
#include "gguf_cuda_test_util.h"
#include "plugins/backend-cuda/cuda_backend.h"

namespace tandem::gguf::test {
namespace {

using tandem::test::random_vec;

// Every GGUF type with CUDA kernels, each with its lane-wise decoder (Q4_K/Q5_K's with the min).
const char* const kGemmTypes[] = {"IQ2_XXS", "NVFP4", "Q8_0", "Q4_K",   "Q5_K",  "Q6_K",    "IQ4_NL",
                                  "IQ4_XS",  "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_M"};

// max |got − want| / max |want|: every product is exact (fp16 hi + lo activations against the
// weights' small integers) and both sides round fp32 sums over k, so the expected error is ~1e-6 of
// the largest output at k = 4096 (CPU and GPU orders differ); 2e-5 leaves room for the worst of
// ~10^5 outputs. A NaN (an unwritten output) makes it infinite.
constexpr double kGemmTol = 2e-5;
double err_vs_max(const float* got, const float* want, size_t count) {
  double mx = 1e-30, worst = 0;
  for (size_t i = 0; i < count; ++i) mx = std::max(mx, std::abs(double(want[i])));
  for (size_t i = 0; i < count; ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  }
  return worst / mx;
}

class GgufGemm : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<cuda::CudaBackend>();
  }
  std::vector<float> run_matmul(const QuantizedTensor& w, const Dev& x, int64_t n, int64_t k) {
    Dev y = poisoned(*be, size_t(n * w.rows()));
    w.matmul(Tensor::f32(x.p(), n, k), Tensor::f32(y.p(), n, w.rows()));
    return download(*be, y);
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

TEST_P(GgufGemm, MatchesCpuAndARowsBitsDoNotDependOnN) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  const int64_t b = qt.block_elems;
  uint64_t seed = 21000 + std::hash<std::string>()(type) % 1000;
  struct Shape {
    int64_t m, k;
  };
  // m past whole 128-row tiles; k of 4 and 64 steps, and 9 blocks (Q8_0: 288, an odd number of groups).
  for (Shape s : {Shape{1000, 256}, Shape{200, 4096}, Shape{77, 9 * b}}) {
    Stored st = make_stored(type, s.m, s.k, seed++);
    const GgufTensor host(st.raw(), qt, nullptr);
    auto gpu = load_gguf_cuda(st.raw(), qt, nullptr, *be);
    const int64_t N = 512;
    auto x = random_vec(size_t(N * s.k), seed++, -2.f, 2.f);
    std::vector<float> want(size_t(N * s.m));
    host.matmul(Tensor::f32(x.data(), N, s.k), Tensor::f32(want.data(), N, s.m));
    Dev dx = upload(*be, x);
    std::vector<std::vector<float>> ys;
    for (int64_t n : {17, 40, 150, 512}) {
      ys.push_back(run_matmul(*gpu, dx, n, s.k));
      const double e = err_vs_max(ys.back().data(), want.data(), size_t(n * s.m));
      std::printf("[measure] %s gemm [%lld, %lld] n %lld: max |err| / max |y| = %.3g (tolerance %.3g)\n", type.c_str(),
                  (long long)s.m, (long long)s.k, (long long)n, e, kGemmTol);
      EXPECT_LE(e, kGemmTol) << type << " [" << s.m << ", " << s.k << "] n " << n;
    }
    // A row's bits: the same in passes of 17, 40, 150 and 512 rows, and in a second run.
    for (size_t i = 1; i < ys.size(); ++i)
      EXPECT_TRUE(same_bits(ys[i].data(), ys[0].data(), size_t(17 * s.m))) << type << " first 17 rows, pass " << i;
    EXPECT_TRUE(same_bits(ys[2].data(), ys[1].data(), size_t(40 * s.m))) << type << " n 150 vs 40";
    EXPECT_TRUE(same_bits(ys[3].data(), ys[2].data(), size_t(150 * s.m))) << type << " n 512 vs 150";
    const auto again = run_matmul(*gpu, dx, 150, s.k);
    EXPECT_TRUE(same_bits(again.data(), ys[2].data(), again.size())) << type << " n 150 run to run";
    // Every block tiling (gemm_warp_rows: 128, 64 or 32 weight rows a block) gives those bits.
    for (const char* wm : {"1", "2", "4"}) {
      ::setenv("TANDEM_GGUF_GEMM_WM", wm, 1);
      const auto yt = run_matmul(*gpu, dx, 150, s.k);
      const auto yt512 = run_matmul(*gpu, dx, 512, s.k);
      ::unsetenv("TANDEM_GGUF_GEMM_WM");
      EXPECT_TRUE(same_bits(yt.data(), ys[2].data(), yt.size())) << type << " n 150, " << wm << " warp rows";
      EXPECT_TRUE(same_bits(yt512.data(), ys[3].data(), yt512.size())) << type << " n 512, " << wm << " warp rows";
    }
    // Up to 16 rows: the GEMV's bits (every row as when it is alone), untouched by the GEMM.
    const auto y16 = run_matmul(*gpu, dx, 16, s.k);
    for (int64_t i = 0; i < 16; ++i) {
      Dev dxi = upload(*be, std::vector<float>(x.begin() + i * s.k, x.begin() + (i + 1) * s.k));
      const auto yi = run_matmul(*gpu, dxi, 1, s.k);
      EXPECT_TRUE(same_bits(y16.data() + i * s.m, yi.data(), size_t(s.m))) << type << " n 16 row " << i;
    }
    EXPECT_LE(err_vs_max(y16.data(), want.data(), size_t(16 * s.m)), kGemmTol) << type;
  }
}

// relu(v)² and base + v as the backend's kernels compute them (store_out).
float relu2(float v) {
  const float r = v < 0.0f ? 0.0f : v;
  return r * r;
}

TEST_P(GgufGemm, GroupedGatherMatchesCpuAndEachExpertsGemmForEveryEpilogue) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  const int E = 12;
  const int64_t m = 300;
  uint64_t seed = 23000 + std::hash<std::string>()(type) % 1000;
  for (int64_t k : {int64_t(256), int64_t(1024)}) {
    std::vector<Stored> parts;
    std::vector<StoredScale> scales;
    for (int e = 0; e < E; ++e) {
      parts.push_back(make_stored(type, m, k, seed++, "experts." + std::to_string(e) + ".w"));
      scales.push_back({0.25f * float(e + 1) * (e % 2 ? -1.f : 1.f), "experts." + std::to_string(e) + ".scale"});
    }
    std::vector<RawTensor> raws, scale_raws;
    for (int e = 0; e < E; ++e) raws.push_back(parts[size_t(e)].raw()), scale_raws.push_back(scales[size_t(e)].raw());
    std::vector<const RawTensor*> ex, scs;
    for (int e = 0; e < E; ++e) ex.push_back(&raws[size_t(e)]), scs.push_back(&scale_raws[size_t(e)]);
    auto set = load_gguf_experts_cuda(ex, scs, *be);

    // Two routings: 160 tokens × 4 slots, ragged (expert 0 a third of the items: a full and a partial
    // tile; experts 3 and 7 none; two ids out of range), and 640 tokens × 1 slot all on expert 5.
    struct Case {
      const char* name;
      int per_x;
      std::vector<int32_t> ids;
    };
    std::vector<Case> cases(2);
    cases[0].name = "ragged", cases[0].per_x = 4;
    const int32_t others[] = {1, 2, 4, 5, 6, 8, 9, 10, 11};
    for (int64_t r = 0; r < 640; ++r) cases[0].ids.push_back(r % 3 == 0 ? 0 : others[(r * 7 + r / 5) % 9]);
    cases[0].ids[37] = E, cases[0].ids[401] = -1;
    cases[1].name = "one expert", cases[1].per_x = 1;
    cases[1].ids.assign(640, 5);

    for (const Case& c : cases) {
      const int64_t items = int64_t(c.ids.size()), nx = items / c.per_x;
      auto x = random_vec(size_t(nx * k), seed++, -2.f, 2.f);
      Dev dx = upload(*be, x);
      auto dids = be->alloc(c.ids.size() * 4);
      be->upload(dids->data(), c.ids.data(), c.ids.size() * 4);
      const int32_t* did = static_cast<const int32_t*>(dids->data());
      const Tensor tx = Tensor::f32(dx.p(), nx, k);
      auto gather = [&](Epilogue ep, const std::vector<float>* base) {
        Dev y = base ? upload(*be, *base) : poisoned(*be, size_t(items * m));
        const Tensor ty = Tensor::f32(y.p(), items, m);
        if (ep == Epilogue::None) set->gather_matmul(tx, did, c.per_x, ty);
        else EXPECT_TRUE(set->gather_matmul_fused(tx, did, c.per_x, ty, ep)) << type;
        return download(*be, y);
      };
      const auto got = gather(Epilogue::None, nullptr);
      EXPECT_TRUE(same_bits(gather(Epilogue::None, nullptr).data(), got.data(), got.size())) << type << " run to run";

      // Per expert used: the CPU matmul of every x row and the expert's own GPU GEMM (nx > 16 rows).
      std::vector<std::vector<float>> cpu(E), gemm(E);
      for (int e = 0; e < E; ++e) {
        if (std::find(c.ids.begin(), c.ids.end(), e) == c.ids.end()) continue;
        const GgufTensor host(raws[size_t(e)], qt, scs[size_t(e)]);
        cpu[size_t(e)].resize(size_t(nx * m));
        host.matmul(Tensor::f32(x.data(), nx, k), Tensor::f32(cpu[size_t(e)].data(), nx, m));
        auto one = load_gguf_cuda(raws[size_t(e)], qt, scs[size_t(e)], *be);
        gemm[size_t(e)] = run_matmul(*one, dx, nx, k);
      }
      std::vector<float> want(size_t(items * m)), got_valid;
      std::vector<float> want_valid;
      int64_t bad_rows = 0;
      for (int64_t r = 0; r < items; ++r) {
        const int e = c.ids[size_t(r)];
        const float* g = got.data() + r * m;
        if (e < 0 || e >= E) {
          ++bad_rows;
          for (int64_t o = 0; o < m; ++o) EXPECT_TRUE(std::isnan(g[o])) << type << " row " << r << " id " << e;
          continue;
        }
        const float* wc = cpu[size_t(e)].data() + (r / c.per_x) * m;
        got_valid.insert(got_valid.end(), g, g + m);
        want_valid.insert(want_valid.end(), wc, wc + m);
        EXPECT_TRUE(same_bits(g, gemm[size_t(e)].data() + (r / c.per_x) * m, size_t(m)))
            << type << " " << c.name << " k " << k << " row " << r << " expert " << e << ": not its GEMM's bits";
      }
      const double err = err_vs_max(got_valid.data(), want_valid.data(), got_valid.size());
      std::printf("[measure] %s grouped gather (%s, %lld items, k %lld): max |err| / max |y| = %.3g (tolerance %.3g)\n",
                  type.c_str(), c.name, (long long)items, (long long)k, err, kGemmTol);
      EXPECT_LE(err, kGemmTol) << type << " " << c.name << " k " << k;

      // Epilogues: relu² and accumulate give exactly store_out applied to the plain result.
      const auto r2 = gather(Epilogue::Relu2, nullptr);
      const auto base = random_vec(size_t(items * m), seed++, -3.f, 3.f);
      const auto acc = gather(Epilogue::Accumulate, &base);
      for (int64_t r = 0; r < items; ++r) {
        const int e = c.ids[size_t(r)];
        const bool valid = e >= 0 && e < E;
        std::vector<float> w2(static_cast<size_t>(m)), wa(static_cast<size_t>(m));
        for (int64_t o = 0; o < m; ++o) {
          const float v = got[size_t(r * m + o)];
          w2[size_t(o)] = valid ? relu2(v) : NAN;
          wa[size_t(o)] = valid ? base[size_t(r * m + o)] + v : NAN;
        }
        if (valid) {
          EXPECT_TRUE(same_bits(r2.data() + r * m, w2.data(), size_t(m))) << type << " relu2 row " << r;
          EXPECT_TRUE(same_bits(acc.data() + r * m, wa.data(), size_t(m))) << type << " accumulate row " << r;
        } else {
          for (int64_t o = 0; o < m; ++o) {
            EXPECT_TRUE(std::isnan(r2[size_t(r * m + o)])) << type << " relu2 row " << r;
            EXPECT_TRUE(std::isnan(acc[size_t(r * m + o)])) << type << " accumulate row " << r;
          }
        }
      }
      EXPECT_EQ(bad_rows, c.per_x == 4 ? 2 : 0);
    }
  }
}

// A dense matmul with the fused epilogues above 16 rows (the GEMM's store) equals the plain GEMM
// followed by the epilogue's arithmetic.
TEST_P(GgufGemm, FusedEpiloguesOfTheGemmEqualTheSeparateOps) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  const int64_t m = 333, k = 1024, n = 200;
  Stored st = make_stored(type, m, k, 25000 + std::hash<std::string>()(type) % 1000);
  StoredScale sc{-0.75f};
  const RawTensor sraw = sc.raw();
  auto gpu = load_gguf_cuda(st.raw(), qt, &sraw, *be);
  Dev dx = upload(*be, random_vec(size_t(n * k), 31, -2.f, 2.f));
  const Tensor tx = Tensor::f32(dx.p(), n, k);
  const auto plain = run_matmul(*gpu, dx, n, k);
  Dev r2 = poisoned(*be, size_t(n * m));
  ASSERT_TRUE(gpu->matmul_fused(tx, Tensor::f32(r2.p(), n, m), Epilogue::Relu2));
  const auto base = random_vec(size_t(n * m), 32, -3.f, 3.f);
  Dev acc = upload(*be, base);
  ASSERT_TRUE(gpu->matmul_fused(tx, Tensor::f32(acc.p(), n, m), Epilogue::Accumulate));
  std::vector<float> w2(plain.size()), wa(plain.size());
  for (size_t i = 0; i < plain.size(); ++i) w2[i] = relu2(plain[i]), wa[i] = base[i] + plain[i];
  EXPECT_TRUE(same_bits(download(*be, r2).data(), w2.data(), w2.size())) << type << " relu2";
  EXPECT_TRUE(same_bits(download(*be, acc).data(), wa.data(), wa.size())) << type << " accumulate";
  // The sidecar scale applies (against the CPU, which scales the same way).
  std::vector<float> want(plain.size());
  std::vector<float> xh = download(*be, dx);
  GgufTensor(st.raw(), qt, &sraw).matmul(Tensor::f32(xh.data(), n, k), Tensor::f32(want.data(), n, m));
  EXPECT_LE(err_vs_max(plain.data(), want.data(), plain.size()), kGemmTol) << type;
}

INSTANTIATE_TEST_SUITE_P(Types, GgufGemm, ::testing::ValuesIn(kGemmTypes),
                         [](const auto& info) { return std::string(info.param); });

// One copy (the default) against the file's blocks (TANDEM_GGUF_ONE_COPY=0 at load) for the types
// with a repacked copy: the prefill GEMM's outputs are the block GEMM's bits at m off the 128-row
// tile, k off the 1024-element slice and an odd number of groups, n = 17, 100, 257 and 2048 (poisoned
// outputs), with a sidecar scale and every epilogue; get_rows and dequantize are the block path's.
class GgufOneCopy : public GgufGemm {};

TEST_P(GgufOneCopy, PrefillGetRowsAndDequantizeEqualTheFileBlockPaths) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  const int64_t b = qt.block_elems;
  uint64_t seed = 27000 + std::hash<std::string>()(type) % 1000;
  struct Shape {
    int64_t m, k;
  };
  for (Shape s : {Shape{1000, 1088}, Shape{77, 9 * b}, Shape{130, 4096}, Shape{16, 2048}}) {
    Stored st = make_stored(type, s.m, s.k, seed++);
    StoredScale sc{-0.625f};
    const RawTensor sraw = sc.raw();
    std::unique_ptr<QuantizedTensor> blocks, blocks_scaled;
    {
      ScopedEnv off("TANDEM_GGUF_ONE_COPY", "0");
      blocks = load_gguf_cuda(st.raw(), qt, nullptr, *be);
      blocks_scaled = load_gguf_cuda(st.raw(), qt, &sraw, *be);
    }
    auto one = load_gguf_cuda(st.raw(), qt, nullptr, *be);
    auto one_scaled = load_gguf_cuda(st.raw(), qt, &sraw, *be);
    const int64_t N = 2048;
    auto x = random_vec(size_t(N * s.k), seed++, -2.f, 2.f);
    x[5] = 300.0f, x[size_t(s.k + 7)] = -1e-6f;  // rows of other magnitudes
    Dev dx = upload(*be, x);
    const std::string at = type + " [" + std::to_string(s.m) + ", " + std::to_string(s.k) + "]";
    for (int64_t n : {17, 100, 257, 2048}) {
      const auto want = run_matmul(*blocks, dx, n, s.k), got = run_matmul(*one, dx, n, s.k);
      EXPECT_TRUE(same_bits(got.data(), want.data(), got.size())) << at << " n " << n;
      const auto want_s = run_matmul(*blocks_scaled, dx, n, s.k), got_s = run_matmul(*one_scaled, dx, n, s.k);
      EXPECT_TRUE(same_bits(got_s.data(), want_s.data(), got_s.size())) << at << " n " << n << " with a sidecar";
    }
    // The fused epilogues of the one-copy GEMM.
    const int64_t n = 100;
    const Tensor tx = Tensor::f32(dx.p(), n, s.k);
    const auto base = random_vec(size_t(n * s.m), seed++, -3.f, 3.f);
    for (Epilogue ep : {Epilogue::Relu2, Epilogue::Accumulate}) {
      auto fused = [&](const QuantizedTensor& w) {
        Dev y = ep == Epilogue::Accumulate ? upload(*be, base) : poisoned(*be, size_t(n * s.m));
        EXPECT_TRUE(w.matmul_fused(tx, Tensor::f32(y.p(), n, s.m), ep)) << at;
        return download(*be, y);
      };
      const auto want = fused(*blocks_scaled), got = fused(*one_scaled);
      EXPECT_TRUE(same_bits(got.data(), want.data(), got.size())) << at << " epilogue " << int(ep);
    }
    // Decode and verify rows keep the tc GEMV's bits (the same copy in both modes).
    for (int64_t nd : {1, 16}) {
      const auto want = run_matmul(*blocks, dx, nd, s.k), got = run_matmul(*one, dx, nd, s.k);
      EXPECT_TRUE(same_bits(got.data(), want.data(), got.size())) << at << " n " << nd;
    }
    // get_rows (ids repeated, out of order, the last row, more than one launch's 64) and dequantize.
    std::vector<int32_t> ids;
    for (int i = 0; i < 150; ++i) ids.push_back(int32_t((i * 37 + i / 3) % s.m));
    ids[3] = int32_t(s.m - 1), ids[4] = 0, ids[5] = int32_t(s.m - 1);
    for (const auto* pair : {&blocks, &blocks_scaled}) {
      const QuantizedTensor& bw = **pair;
      const QuantizedTensor& ow = pair == &blocks ? *one : *one_scaled;
      Dev yb = poisoned(*be, ids.size() * size_t(s.k)), yo = poisoned(*be, ids.size() * size_t(s.k));
      bw.get_rows(ids.data(), int(ids.size()), Tensor::f32(yb.p(), int64_t(ids.size()), s.k));
      ow.get_rows(ids.data(), int(ids.size()), Tensor::f32(yo.p(), int64_t(ids.size()), s.k));
      const auto rb = download(*be, yb), ro = download(*be, yo);
      EXPECT_TRUE(same_bits(ro.data(), rb.data(), rb.size())) << at << " get_rows";
      std::vector<float> db(size_t(s.m * s.k), NAN), dq(size_t(s.m * s.k), NAN);
      bw.dequantize(db.data());
      ow.dequantize(dq.data());
      EXPECT_TRUE(same_bits(dq.data(), db.data(), db.size())) << at << " dequantize";
      for (float v : dq) ASSERT_TRUE(std::isfinite(v)) << at << " dequantize";
    }
    // Against the CPU too (the block GEMM's tolerance), for the plain GEMM at n = 257.
    if (s.m * s.k <= 1000 * 1088) {
      const int64_t nc = 257;
      std::vector<float> cpu(size_t(nc * s.m));
      GgufTensor(st.raw(), qt, nullptr).matmul(Tensor::f32(x.data(), nc, s.k), Tensor::f32(cpu.data(), nc, s.m));
      const auto got = run_matmul(*one, dx, nc, s.k);
      EXPECT_LE(err_vs_max(got.data(), cpu.data(), cpu.size()), kGemmTol) << at;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgufOneCopy, ::testing::Values("NVFP4", "Q8_0"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace tandem::gguf::test
