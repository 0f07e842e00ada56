// EXL3 linears on the GPU (formats/exl3/*_cuda.*) against the CPU reference (exl3::reconstruct, then a
// float64 matmul), for every K 1..8 and codebook on random trellis words: matmul for n = 1..16 and 40
// with poisoned outputs (padded storage, bias, split sums), rows bit-identical whatever n, the
// stacked expert gather against per-expert references, dequantize and get_rows, and the exl3-cuda
// module through the registry. GPU only: every test skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "cuda_probe.h"
#include "device_buffers.h"
#include "exl3_reference.h"
#include "exl3_test_util.h"
#include "formats/exl3/exl3_format_cuda.h"
#include "formats/exl3/matmul_cuda.cuh"
#include "formats/exl3/trellis.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"
#include "tandem/error.h"
#include "tandem/registry.h"
#include "test_util.h"

namespace tandem::exl3 {
namespace {

using exl3_test::GroupBuilder;
using exl3_test::RandomLinear;
using tandem::test::random_vec;

using tandem::test::Dev;
using tandem::test::download;
using tandem::test::poisoned;
using tandem::test::same_bits;
using tandem::test::upload;

// y = x · Wᵀ + bias in float64 from the CPU's reconstruction of W (out × in).
std::vector<double> reference(const Layout& l, const std::vector<float>& x, int64_t n) {
  const std::vector<float> w = reconstruct(l);
  const int64_t in = l.in_features, out = l.out_features;
  std::vector<double> y(size_t(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = l.bias.empty() ? 0.0 : l.bias[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += double(x[size_t(r * in + i)]) * w[size_t(o * in + i)];
      y[size_t(r * out + o)] = s;
    }
  return y;
}
// Largest |got − want| over the first `count` values relative to the largest |want|; NaN (unwritten) is
// infinite.
double rel_err(const float* got, const std::vector<double>& want, size_t count) {
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < count; ++i) scale = std::max(scale, std::abs(want[i]));
  for (size_t i = 0; i < count; ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
  }
  return worst / scale;
}

constexpr double kTol = 1e-5;
// mul1 on the int8 GEMV (TANDEM_EXL3_GEMV unset or int8): unrounded weights (≤ half an fp16 ulp each) and
// two int8 limbs per activation (≤ 2^−8 of the block's scale): 2.3e-4 … 3.7e-4 of max |y| measured on the H200.
constexpr double kTolInt8 = 1e-3;
double matmul_tol(int cb) {
  return kcuda::gemv_mode() == kcuda::GemvMode::kInt8 && cb == int(Codebook::kMul1) ? kTolInt8 : kTol;
}
// The row-scale prefill GEMM (TANDEM_EXL3_PREFILL=row, the default) sums its exact products in one fp32
// accumulator over all k / 16 mma steps, and the tensor cores' accumulation truncates: up to an ulp
// (2^−23) a step, so the bound grows with k (measured on the H200: 1.1e-5 at k = 4096, 2.2e-5 at 8192,
// 2.5e-6 at 1024; the block-scale kernels stay under 1e-6).
double prefill_tol(int64_t k) {
  return kcuda::prefill_impl() == kcuda::PrefillImpl::kRowScale ? std::max(kTol, double(k / 16) * 0x1p-23) : kTol;
}

struct Case {
  int64_t out, in;  // the model's shape
  int64_t n, k;     // storage, padded
  bool bias;
};
// Unpadded; padded on both sides with a bias; a k long enough for several split sums (4); for the
// matmul also 16 splits (one cluster of 16 blocks on sm_90+, past the portable 8; padded, with a bias)
// and 32 (more than a cluster holds: the splits sum through global memory).
const Case kCases[] = {{128, 128, 128, 128, false},
                       {200, 300, 256, 384, true},
                       {256, 1024, 256, 1024, false},
                       {100, 4096, 128, 4096, true},
                       {128, 8192, 128, 8192, false}};

class Exl3Cuda : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<cuda::CudaBackend>();
  }
  std::unique_ptr<cuda::CudaBackend> be;
  // set's gather of rows ids.size() = nx · per_x (row r: expert ids[r], x row r / per_x), on the host.
  std::vector<float> gather(const ExpertSet& set, const std::vector<float>& x, int64_t nx, const Case& c,
                            const std::vector<int32_t>& ids, int per_x) {
    const int64_t rows = int64_t(ids.size());
    Dev dx = upload(*be, x);
    auto dids = be->alloc(ids.size() * 4);
    be->upload(dids->data(), ids.data(), ids.size() * 4);
    Dev dy = poisoned(*be, size_t(rows * c.out));
    set.gather_matmul(Tensor::f32(dx.p(), nx, c.in), static_cast<int32_t*>(dids->data()), per_x,
                      Tensor::f32(dy.p(), rows, c.out));
    return download(*be, dy);
  }
};

TEST_P(Exl3Cuda, MatmulMatchesCpuForOneToSixteenFortyAnd150RowsAndIsBatchInvariant) {
  const int K = GetParam();
  double worst = 0, worst_i8 = 0;
  for (int cb = 0; cb < 3; ++cb)
    for (const Case& c : kCases) {
      const double tol = matmul_tol(cb);
      double& w8 = tol == kTol ? worst : worst_i8;
      const std::string what = "K " + std::to_string(K) + " " + codebook_name(Codebook(cb)) + " [" +
                               std::to_string(c.out) + ", " + std::to_string(c.in) + "]";
      GroupBuilder b;
      RandomLinear lin(c.k, c.n, K, cb, uint64_t(100 * K + 10 * cb + c.k), 1.0 / std::sqrt(double(c.k)));
      if (c.bias) lin.add_bias(c.out, 7);
      lin.store(b, "w");
      const TensorGroup g = b.group("w", {c.out, c.in});
      const Layout l = parse_group(g);
      auto gpu = load_exl3_cuda(g, *be);
      ASSERT_EQ(gpu->shape(), (std::vector<int64_t>{c.out, c.in}));
      ASSERT_EQ(gpu->type_name(), "EXL3_K" + std::to_string(K) + "_" + codebook_name(Codebook(cb)));
      const int64_t N = 150;  // 40 and 150: the prefill GEMM with one partial and three row blocks
      auto x = random_vec(size_t(N * c.in), uint64_t(K * 31 + cb), -1.f, 1.f);
      const std::vector<double> want = reference(l, x, N);
      Dev dx = upload(*be, x);
      std::vector<float> single(size_t(N * c.out));
      for (int64_t i = 0; i < N; ++i) {
        Dev dy = poisoned(*be, size_t(c.out));
        gpu->matmul(Tensor::f32(dx.p() + i * c.in, 1, c.in), Tensor::f32(dy.p(), 1, c.out));
        auto y = download(*be, dy);
        std::copy(y.begin(), y.end(), single.begin() + i * c.out);
      }
      const double e1 = rel_err(single.data(), want, single.size());
      EXPECT_LE(e1, tol) << what << " n 1";
      w8 = std::max(w8, e1);
      for (int64_t n = 2; n <= N; n = n == 16 ? 40 : n == 40 ? N : n + 1) {
        Dev dy = poisoned(*be, size_t(n * c.out));
        gpu->matmul(Tensor::f32(dx.p(), n, c.in), Tensor::f32(dy.p(), n, c.out));
        auto y = download(*be, dy);
        const double e = rel_err(y.data(), want, y.size());
        EXPECT_LE(e, n > 16 ? std::max(tol, prefill_tol(c.k)) : tol) << what << " n " << n;
        if (n > 16) worst = std::max(worst, e);  // above 16 rows the prefill path: exact products
        else w8 = std::max(w8, e);
        if (n <= 16) {  // the decode GEMV: every row has its single-row bits
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_TRUE(same_bits(y.data() + i * c.out, single.data() + i * c.out, size_t(c.out)))
                << what << " n " << n << " row " << i;
          }
        }
      }
      // Other rows' contents do not matter either: row 0 beside different rows.
      auto x2 = x;
      for (size_t i = size_t(c.in); i < x2.size(); ++i) x2[i] = -x2[i] * 3.0f;
      Dev dx2 = upload(*be, x2), dy2 = poisoned(*be, size_t(16 * c.out));
      gpu->matmul(Tensor::f32(dx2.p(), 16, c.in), Tensor::f32(dy2.p(), 16, c.out));
      EXPECT_TRUE(same_bits(download(*be, dy2).data(), single.data(), size_t(c.out))) << what;
    }
  std::printf("[measure] K %d matmul vs cpu: max |Δ| / max |y| = %.3g (tolerance %.3g at k = 8192)\n", K, worst,
              prefill_tol(8192));
  if (worst_i8 > 0)
    std::printf("[measure] K %d mul1 on the int8 GEMV vs cpu: max |Δ| / max |y| = %.3g (tolerance %.3g)\n", K,
                worst_i8, kTolInt8);
}

TEST_P(Exl3Cuda, DequantizeAndGetRowsEqualTheCpuReconstruction) {
  const int K = GetParam();
  const Case c = kCases[1];
  GroupBuilder b;
  RandomLinear lin(c.k, c.n, K, 2, uint64_t(K), 0.1);
  lin.store(b, "w");
  const TensorGroup g = b.group("w", {c.out, c.in});
  auto gpu = load_exl3_cuda(g, *be);
  const std::vector<float> want = reconstruct(parse_group(g));
  std::vector<float> got(want.size(), NAN);
  gpu->dequantize(got.data());
  EXPECT_TRUE(same_bits(got.data(), want.data(), want.size())) << "K " << K;
  const std::vector<int32_t> ids = {0, 199, 17, 17, 128};
  Dev out = poisoned(*be, ids.size() * size_t(c.in));
  gpu->get_rows(ids.data(), int(ids.size()), Tensor::f32(out.p(), int64_t(ids.size()), c.in));
  auto rows = download(*be, out);
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_TRUE(same_bits(rows.data() + i * size_t(c.in), want.data() + size_t(ids[i]) * size_t(c.in), size_t(c.in)))
        << "K " << K << " id " << ids[i];
  const int32_t bad = int32_t(c.out);
  EXPECT_THROW(gpu->get_rows(&bad, 1, Tensor::f32(out.p(), 1, c.in)), Error);
}

TEST_P(Exl3Cuda, GatherMatmulMatchesPerExpertReferenceAndIsBatchInvariantPerRow) {
  const int K = GetParam();
  const int E = 5;
  double worst = 0;
  // mul1 with a bias in one split; 3INST or MCG and mul1 with several splits. Gathers run the fp32
  // GEMV in every form: exact products, the fp32 tolerance.
  for (int variant = 0; variant < 3; ++variant) {
    const Case c = variant == 0 ? kCases[1] : kCases[2];
    const int cb = variant == 1 ? K % 2 : 2;
    GroupBuilder b;
    std::vector<TensorGroup> groups;
    for (int e = 0; e < E; ++e) {
      RandomLinear lin(c.k, c.n, K, cb, uint64_t(1000 * K + 10 * e + variant), 1.0 / std::sqrt(double(c.k)));
      if (c.bias && e != 2) lin.add_bias(c.out, uint64_t(e));  // expert 2 without: zeros
      lin.store(b, "experts." + std::to_string(e));
    }
    for (int e = 0; e < E; ++e) groups.push_back(b.group("experts." + std::to_string(e), {c.out, c.in}));
    auto set = load_exl3_experts_cuda(groups, *be);
    EXPECT_EQ(set->n_experts(), E);
    EXPECT_EQ(set->rows(), c.out);
    EXPECT_EQ(set->cols(), c.in);
    for (int per_x : {3, 1}) {
      const int64_t nx = 5, rows = nx * per_x;
      auto x = random_vec(size_t(nx * c.in), uint64_t(per_x + K), -1.f, 1.f);
      std::vector<int32_t> ids;
      for (int64_t r = 0; r < rows; ++r) ids.push_back(int32_t((r * 3 + K) % E));
      Dev dx = upload(*be, x);
      auto dids = be->alloc(ids.size() * 4);
      be->upload(dids->data(), ids.data(), ids.size() * 4);
      const std::vector<float> got = gather(*set, x, nx, c, ids, per_x);
      for (int64_t r = 0; r < rows; ++r) {
        const int e = ids[size_t(r)];
        const std::vector<float> xr(x.begin() + (r / per_x) * c.in, x.begin() + (r / per_x + 1) * c.in);
        const std::vector<double> want = reference(parse_group(groups[size_t(e)]), xr, 1);
        const double err = rel_err(got.data() + r * c.out, want, size_t(c.out));
        EXPECT_LE(err, kTol) << "K " << K << " row " << r << " expert " << e;
        worst = std::max(worst, err);
        // The row gathered alone (its x row, its id) has the same bits: a row never depends on the
        // others of its batch.
        Dev dxr = upload(*be, xr), dyr = poisoned(*be, size_t(c.out));
        const int32_t id = ids[size_t(r)];
        auto did = be->alloc(4);
        be->upload(did->data(), &id, 4);
        set->gather_matmul(Tensor::f32(dxr.p(), 1, c.in), static_cast<int32_t*>(did->data()), 1,
                           Tensor::f32(dyr.p(), 1, c.out));
        EXPECT_TRUE(same_bits(download(*be, dyr).data(), got.data() + r * c.out, size_t(c.out)))
            << "K " << K << " row " << r << " expert " << e;
      }
      // A prefix of the rows gives the same bits (batch invariance).
      Dev dy1 = poisoned(*be, size_t(per_x * c.out));
      set->gather_matmul(Tensor::f32(dx.p(), 1, c.in), static_cast<int32_t*>(dids->data()), per_x,
                         Tensor::f32(dy1.p(), per_x, c.out));
      EXPECT_TRUE(same_bits(download(*be, dy1).data(), got.data(), size_t(per_x * c.out))) << "K " << K;
    }
    // An id out of range leaves its row NaN instead of reading out of bounds.
    const std::vector<int32_t> bad = {E, -1};
    auto dbad = be->alloc(8);
    be->upload(dbad->data(), bad.data(), 8);
    Dev dx = upload(*be, random_vec(size_t(2 * c.in), 7)), dy = upload(*be, std::vector<float>(size_t(2 * c.out), 0.f));
    set->gather_matmul(Tensor::f32(dx.p(), 2, c.in), static_cast<int32_t*>(dbad->data()), 1,
                       Tensor::f32(dy.p(), 2, c.out));
    for (float v : download(*be, dy)) EXPECT_TRUE(std::isnan(v)) << "K " << K;
  }
  std::printf("[measure] K %d gather_matmul vs per-expert cpu: max |Δ| / max |y| = %.3g (tolerance %.3g)\n", K,
              worst, kTol);
}

// The fused epilogues (weights.h Epilogue) give the bits of the matmul followed by the backend's relu2
// or add: the decode and verify GEMVs (one and several splits, with a bias), the prefill GEMM (150
// rows), and the gather (its GEMV and, at 300 rows, its grouped GEMM).
TEST_P(Exl3Cuda, FusedEpiloguesEqualTheSeparateOps) {
  const int K = GetParam();
  for (const Case& c : {kCases[1], kCases[3]}) {
    GroupBuilder b;
    RandomLinear lin(c.k, c.n, K, 2, uint64_t(500 * K + c.k), 1.0 / std::sqrt(double(c.k)));
    if (c.bias) lin.add_bias(c.out, 3);
    lin.store(b, "w");
    auto gpu = load_exl3_cuda(b.group("w", {c.out, c.in}), *be);
    for (int64_t n : {1, 5, 16, 150}) {
      const std::string what = "K " + std::to_string(K) + " [" + std::to_string(c.out) + ", " +
                               std::to_string(c.in) + "] n " + std::to_string(n);
      auto x = random_vec(size_t(n * c.in), uint64_t(n + K), -1.f, 1.f);
      auto base = random_vec(size_t(n * c.out), uint64_t(n + 2 * K), -2.f, 2.f);
      Dev dx = upload(*be, x);
      const Tensor tx = Tensor::f32(dx.p(), n, c.in);
      Dev ref = poisoned(*be, size_t(n * c.out)), fused = poisoned(*be, size_t(n * c.out));
      const Tensor tref = Tensor::f32(ref.p(), n, c.out);
      gpu->matmul(tx, tref);
      ASSERT_TRUE(gpu->matmul_fused(tx, Tensor::f32(fused.p(), n, c.out), Epilogue::Relu2)) << what;
      Dev want = upload(*be, download(*be, ref));
      be->relu2(Tensor::f32(want.p(), n, c.out));
      auto w = download(*be, want), g = download(*be, fused);
      EXPECT_TRUE(same_bits(g.data(), w.data(), w.size())) << what << " relu2";
      Dev acc = upload(*be, base), sum = upload(*be, base);
      ASSERT_TRUE(gpu->matmul_fused(tx, Tensor::f32(acc.p(), n, c.out), Epilogue::Accumulate)) << what;
      be->add(Tensor::f32(sum.p(), n, c.out), tref, Tensor::f32(sum.p(), n, c.out));
      w = download(*be, sum), g = download(*be, acc);
      EXPECT_TRUE(same_bits(g.data(), w.data(), w.size())) << what << " accumulate";
    }
  }
  const Case c = kCases[1];
  GroupBuilder b;
  std::vector<TensorGroup> groups;
  for (int e = 0; e < 4; ++e) {
    RandomLinear lin(c.k, c.n, K, 2, uint64_t(900 * K + e), 1.0 / std::sqrt(double(c.k)));
    lin.store(b, "experts." + std::to_string(e));
  }
  for (int e = 0; e < 4; ++e) groups.push_back(b.group("experts." + std::to_string(e), {c.out, c.in}));
  auto set = load_exl3_experts_cuda(groups, *be);
  for (int64_t nx : {3, 100}) {
    const int per_x = 3;
    const int64_t rows = nx * per_x;
    auto x = random_vec(size_t(nx * c.in), uint64_t(nx * K), -1.f, 1.f);
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < rows; ++r) ids.push_back(int32_t((r * 5 + 1) % 4));
    Dev dx = upload(*be, x);
    auto dids = be->alloc(ids.size() * 4);
    be->upload(dids->data(), ids.data(), ids.size() * 4);
    const int32_t* id = static_cast<int32_t*>(dids->data());
    Dev ref = poisoned(*be, size_t(rows * c.out)), fused = poisoned(*be, size_t(rows * c.out));
    set->gather_matmul(Tensor::f32(dx.p(), nx, c.in), id, per_x, Tensor::f32(ref.p(), rows, c.out));
    ASSERT_TRUE(set->gather_matmul_fused(Tensor::f32(dx.p(), nx, c.in), id, per_x, Tensor::f32(fused.p(), rows, c.out),
                                         Epilogue::Relu2));
    be->relu2(Tensor::f32(ref.p(), rows, c.out));
    const auto w = download(*be, ref), g = download(*be, fused);
    EXPECT_TRUE(same_bits(g.data(), w.data(), w.size())) << "K " << K << " gather rows " << rows;
  }
}

// More rows than a verify pass has (16 tokens × 32 experts): the grouped prefill GEMM, every row
// against its expert's CPU reference (exact products: the fp32 tolerance), experts with 0, a few and
// more than 64 rows (several row groups), an out-of-range id's row NaN, and both gather forms.
TEST_P(Exl3Cuda, PrefillSizedGatherRunsTheGroupedGemm) {
  const int K = GetParam();
  const int E = 6;
  const Case c = kCases[1];  // [200, 300] padded to [256, 384], with bias
  const int cb = K % 3;
  GroupBuilder b;
  std::vector<TensorGroup> groups;
  for (int e = 0; e < E; ++e) {
    RandomLinear lin(c.k, c.n, K, cb, uint64_t(2000 * K + e), 1.0 / std::sqrt(double(c.k)));
    lin.add_bias(c.out, uint64_t(e + 3));
    lin.store(b, "experts." + std::to_string(e));
  }
  for (int e = 0; e < E; ++e) groups.push_back(b.group("experts." + std::to_string(e), {c.out, c.in}));
  auto set = load_exl3_experts_cuda(groups, *be);
  double worst = 0;
  for (int per_x : {8, 1}) {
    const int64_t rows = 600, nx = rows / per_x;
    auto x = random_vec(size_t(nx * c.in), uint64_t(K + per_x), -1.f, 1.f);
    std::vector<int32_t> ids;
    // Expert 5 gets none; expert 0 most (several groups of 64); row 7 an id out of range.
    for (int64_t r = 0; r < rows; ++r) ids.push_back(r % 3 == 0 ? 0 : int32_t(r % 5));
    ids[7] = E + 1;
    const std::vector<float> got = gather(*set, x, nx, c, ids, per_x);
    for (int64_t r = 0; r < rows; ++r) {
      const int e = ids[size_t(r)];
      if (e >= E) {
        for (int64_t j = 0; j < c.out; ++j) EXPECT_TRUE(std::isnan(got[size_t(r * c.out + j)])) << "row " << r;
        continue;
      }
      const std::vector<float> xr(x.begin() + (r / per_x) * c.in, x.begin() + (r / per_x + 1) * c.in);
      const double err = rel_err(got.data() + r * c.out, reference(parse_group(groups[size_t(e)]), xr, 1),
                                 size_t(c.out));
      EXPECT_LE(err, kTol) << "K " << K << " per_x " << per_x << " row " << r << " expert " << e;
      worst = std::max(worst, err);
    }
  }
  std::printf("[measure] K %d prefill gather vs per-expert cpu: max |Δ| / max |y| = %.3g (tolerance %.3g)\n", K,
              worst, kTol);
}

// The dense prefill tests' shapes: row tiles and 256-column blocks half full (n 128 and 384) and full
// (n 512), with and without a bias; and one such random weight (codebook from K and n) on the device.
struct PrefillShape {
  int64_t out, in, n, k;
  bool bias;
};
const PrefillShape kPrefillShapes[] = {{128, 128, 128, 128, false}, {300, 200, 384, 256, true},
                                       {512, 1024, 512, 1024, false}};
struct PrefillLinear {
  PrefillLinear(int K, const PrefillShape& c, Backend& be) : cb(int((K + c.n / 128) % 3)) {
    RandomLinear lin(c.k, c.n, K, cb, uint64_t(7000 * K + c.n), 1.0 / std::sqrt(double(c.k)));
    if (c.bias) lin.add_bias(c.out, 11);
    lin.store(b, "w");
    g = b.group("w", {c.out, c.in});
    gpu = load_exl3_cuda(g, be);
  }
  PrefillLinear(const PrefillLinear&) = delete;
  PrefillLinear& operator=(const PrefillLinear&) = delete;
  int cb;
  GroupBuilder b;
  TensorGroup g;
  std::unique_ptr<QuantizedTensor> gpu;
};

// The fused prefill kernel with a scale per 128-block (TANDEM_EXL3_PREFILL=block) against the old
// decode + GEMM + rotate_out (=old): bit for bit, and both against the CPU, with poisoned outputs, for row
// counts off the 64-row tile (17, 65, 200), 256-column blocks that are half full (n 128 and 384) and
// full (n 512), with and without a bias.
TEST_P(Exl3Cuda, FusedPrefillEqualsTheOldKernelsBitForBit) {
  const int K = GetParam();
  const kcuda::PrefillImpl saved = kcuda::prefill_impl();
  double worst = 0;
  for (const PrefillShape& c : kPrefillShapes) {
    const PrefillLinear w(K, c, *be);
    for (int64_t n : {17, 65, 200}) {
      const std::string what = "K " + std::to_string(K) + " cb " + std::to_string(w.cb) + " [" + std::to_string(c.out) +
                               ", " + std::to_string(c.in) + "] rows " + std::to_string(n);
      auto x = random_vec(size_t(n * c.in), uint64_t(n * 13 + K), -1.f, 1.f);
      Dev dx = upload(*be, x);
      Dev fused = poisoned(*be, size_t(n * c.out)), old = poisoned(*be, size_t(n * c.out));
      kcuda::set_prefill_impl(kcuda::PrefillImpl::kBlockScale);
      w.gpu->matmul(Tensor::f32(dx.p(), n, c.in), Tensor::f32(fused.p(), n, c.out));
      kcuda::set_prefill_impl(kcuda::PrefillImpl::kOld);
      w.gpu->matmul(Tensor::f32(dx.p(), n, c.in), Tensor::f32(old.p(), n, c.out));
      kcuda::set_prefill_impl(saved);
      const auto f = download(*be, fused), o = download(*be, old);
      EXPECT_TRUE(same_bits(f.data(), o.data(), f.size())) << what;
      const double e = rel_err(f.data(), reference(parse_group(w.g), x, n), f.size());
      EXPECT_LE(e, kTol) << what;
      worst = std::max(worst, e);
    }
  }
  std::printf("[measure] K %d fused prefill vs cpu: max |Δ| / max |y| = %.3g (tolerance %.3g)\n", K, worst, kTol);
}

// The fused grouped gather against the old one (bit for bit) and the per-expert CPU references:
// experts with no rows, with more than 64 and more than 128 rows (several tiles), one expert taking
// every row, an out-of-range id's row NaN, n a full (512) and a half (384) 256-column block.
TEST_P(Exl3Cuda, FusedPrefillGatherEqualsTheOldKernelsBitForBit) {
  const int K = GetParam();
  const kcuda::PrefillImpl saved = kcuda::prefill_impl();
  const int E = 5;
  double worst = 0;
  for (const Case& c : {Case{384, 256, 384, 256, true}, Case{500, 128, 512, 128, false}}) {
    const int cb = int((K + c.n / 128) % 3);
    GroupBuilder b;
    std::vector<TensorGroup> groups;
    for (int e = 0; e < E; ++e) {
      RandomLinear lin(c.k, c.n, K, cb, uint64_t(8000 * K + 10 * e + c.n), 1.0 / std::sqrt(double(c.k)));
      if (c.bias) lin.add_bias(c.out, uint64_t(e + 5));
      lin.store(b, "experts." + std::to_string(e));
    }
    for (int e = 0; e < E; ++e) groups.push_back(b.group("experts." + std::to_string(e), {c.out, c.in}));
    auto set = load_exl3_experts_cuda(groups, *be);
    for (int variant = 0; variant < 2; ++variant) {
      const int per_x = variant == 0 ? 4 : 1;
      const int64_t rows = 520, nx = rows / per_x;
      std::vector<int32_t> ids;
      // variant 0: expert 0 gets 260 rows (> 128), expert 1 130 (> 64), experts 3 and 4 65 each, expert 2
      // none, and one id is out of range; variant 1: expert 3 takes every row.
      for (int64_t r = 0; r < rows; ++r)
        ids.push_back(variant == 1 ? 3 : r % 2 == 0 ? 0 : r % 4 == 1 ? 1 : int32_t(3 + (r / 4) % 2));
      if (variant == 0) ids[11] = -1;
      const std::string what = "K " + std::to_string(K) + " n " + std::to_string(c.n) + " variant " + std::to_string(variant);
      auto x = random_vec(size_t(nx * c.in), uint64_t(K + 17 * variant), -1.f, 1.f);
      kcuda::set_prefill_impl(kcuda::PrefillImpl::kBlockScale);
      const std::vector<float> got = gather(*set, x, nx, c, ids, per_x);
      kcuda::set_prefill_impl(kcuda::PrefillImpl::kOld);
      const std::vector<float> old = gather(*set, x, nx, c, ids, per_x);
      kcuda::set_prefill_impl(saved);
      for (int64_t r = 0; r < rows; ++r) {
        const int e = ids[size_t(r)];
        const float* gr = got.data() + r * c.out;
        if (e < 0 || e >= E) {
          for (int64_t j = 0; j < c.out; ++j) EXPECT_TRUE(std::isnan(gr[j])) << what << " row " << r;
          continue;
        }
        EXPECT_TRUE(same_bits(gr, old.data() + r * c.out, size_t(c.out))) << what << " row " << r;
        const std::vector<float> xr(x.begin() + (r / per_x) * c.in, x.begin() + (r / per_x + 1) * c.in);
        const double err = rel_err(gr, reference(parse_group(groups[size_t(e)]), xr, 1), size_t(c.out));
        EXPECT_LE(err, kTol) << what << " row " << r << " expert " << e;
        worst = std::max(worst, err);
      }
    }
  }
  std::printf("[measure] K %d fused prefill gather vs per-expert cpu: max |Δ| / max |y| = %.3g (tolerance %.3g)\n",
              K, worst, kTol);
}

// The row-scale default (PrefillImpl::kRowScale, TANDEM_EXL3_PREFILL=row): other bits than the
// block-scale kernel, so against the CPU (dense and gathered, with poisoned outputs), and a row's bits the
// same whatever the pass's row count (its scale is its own), for the shapes of the tests above.
TEST_P(Exl3Cuda, RowScalePrefillMatchesCpu) {
  const int K = GetParam();
  const kcuda::PrefillImpl saved = kcuda::prefill_impl();
  kcuda::set_prefill_impl(kcuda::PrefillImpl::kRowScale);
  double worst = 0;
  for (const PrefillShape& c : kPrefillShapes) {
    const PrefillLinear w(K, c, *be);
    const int64_t N = 200;
    auto x = random_vec(size_t(N * c.in), uint64_t(N * 13 + K), -1.f, 1.f);
    for (int64_t i = 0; i < N * c.in; i += 7) x[size_t(i)] *= 1e-4f;  // small entries beside large ones
    Dev dx = upload(*be, x);
    std::vector<float> all;
    for (int64_t n : {N, int64_t(17), int64_t(65)}) {
      const std::string what = "K " + std::to_string(K) + " cb " + std::to_string(w.cb) + " [" + std::to_string(c.out) +
                               ", " + std::to_string(c.in) + "] rows " + std::to_string(n);
      Dev dy = poisoned(*be, size_t(n * c.out));
      w.gpu->matmul(Tensor::f32(dx.p(), n, c.in), Tensor::f32(dy.p(), n, c.out));
      const auto y = download(*be, dy);
      if (n == N) {
        all = y;
        const double e = rel_err(y.data(), reference(parse_group(w.g), x, n), y.size());
        EXPECT_LE(e, kTol) << what;
        worst = std::max(worst, e);
      } else {
        EXPECT_TRUE(same_bits(y.data(), all.data(), y.size())) << what << ": rows differ from the " << N << "-row pass";
      }
    }
  }
  const int E = 5;
  const Case c{384, 256, 384, 256, true};
  const int cb = int((K + c.n / 128) % 3);
  GroupBuilder b;
  std::vector<TensorGroup> groups;
  for (int e = 0; e < E; ++e) {
    RandomLinear lin(c.k, c.n, K, cb, uint64_t(8000 * K + 10 * e + c.n), 1.0 / std::sqrt(double(c.k)));
    lin.add_bias(c.out, uint64_t(e + 5));
    lin.store(b, "experts." + std::to_string(e));
  }
  for (int e = 0; e < E; ++e) groups.push_back(b.group("experts." + std::to_string(e), {c.out, c.in}));
  auto set = load_exl3_experts_cuda(groups, *be);
  const int per_x = 4;
  const int64_t rows = 520, nx = rows / per_x;
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < rows; ++r) ids.push_back(r % 2 == 0 ? 0 : r % 4 == 1 ? 1 : int32_t(3 + (r / 4) % 2));
  auto x = random_vec(size_t(nx * c.in), uint64_t(K + 31), -1.f, 1.f);
  const std::vector<float> got = gather(*set, x, nx, c, ids, per_x);
  for (int64_t r = 0; r < rows; ++r) {
    const int e = ids[size_t(r)];
    const std::vector<float> xr(x.begin() + (r / per_x) * c.in, x.begin() + (r / per_x + 1) * c.in);
    const double err = rel_err(got.data() + r * c.out, reference(parse_group(groups[size_t(e)]), xr, 1), size_t(c.out));
    EXPECT_LE(err, kTol) << "K " << K << " gather row " << r << " expert " << e;
    worst = std::max(worst, err);
  }
  kcuda::set_prefill_impl(saved);
  std::printf("[measure] K %d row-scale prefill vs cpu: max |Δ| / max |y| = %.3g (tolerance %.3g)\n", K, worst, kTol);
}

INSTANTIATE_TEST_SUITE_P(Bits, Exl3Cuda, ::testing::Range(1, 9),
                         [](const auto& info) { return "K" + std::to_string(info.param); });

// exllamav3's own tensors (tests/fixtures/exl3/) on the GPU: the reconstruction equals the CPU's (whose
// decoded trellis equals exllamav3's bit for bit: test_exl3's Exl3Exllama) and matches exllamav3's
// float32 one; x·W for exllamav3's inputs matches its outputs within its own fp16 error and the float64
// x·W from its decoded trellis within the GPU's tolerance.
class Exl3CudaExllama : public ::testing::TestWithParam<const char*> {};

TEST_P(Exl3CudaExllama, ReconstructionAndMatmulMatchExllama) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  auto r = exl3_test::load_reference(GetParam());
  ASSERT_TRUE(r) << "fixture missing";
  const TensorGroup g = r->group();
  const Layout l = parse_group(g);
  auto gpu = load_exl3_cuda(g, be);
  const int64_t out = gpu->shape()[0], in = gpu->shape()[1];
  std::vector<float> w(size_t(out * in), NAN);
  gpu->dequantize(w.data());
  const std::vector<float> cpu = reconstruct(l);
  EXPECT_TRUE(same_bits(w.data(), cpu.data(), w.size())) << GetParam();
  const std::vector<double> ex = r->values("ref.weight_recon_fp32"), w64 = exl3_test::weight_from_w_hat(*r);
  std::vector<double> ours(ex.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) ours[size_t(i * out + o)] = w[size_t(o * in + i)];
  const double rec = exl3_test::rel_max_error(ours, ex, w64);
  std::printf("[measure] %s: GPU reconstruction vs exllamav3 max |Δ|/max |W| %.2e\n", GetParam(), rec);
  EXPECT_LT(rec, 2e-6);  // the CPU's bound: the bits are the CPU's
  for (int rows : {1, 4, 16}) {
    const std::vector<double> x64 = r->values("ref.x_b" + std::to_string(rows)),
                              ey = r->values("ref.y_b" + std::to_string(rows) + "_fp32");
    const std::vector<float> x(x64.begin(), x64.end());
    Dev dx = upload(be, x);
    Dev dy = poisoned(be, size_t(rows * out));
    gpu->matmul(Tensor::f32(dx.p(), rows, in), Tensor::f32(dy.p(), rows, out));
    const std::vector<float> y = download(be, dy);
    const std::vector<double> want = exl3_test::matmul64(x64, w64, rows, in, out);
    const double vs_ex = exl3_test::rel_max_error(y, ey, want), vs_64 = rel_err(y.data(), want, want.size());
    std::printf("[measure] %s b%d: GPU x·W max |Δ|/max |y| vs exllamav3 %.2e, vs float64 %.2e (tolerance %.3g)\n",
                GetParam(), rows, vs_ex, vs_64, matmul_tol(int(l.codebook)));
    EXPECT_LT(vs_ex, 1e-3 + matmul_tol(int(l.codebook))) << GetParam() << " b" << rows << ": exllamav3's own fp16 error is ~4e-4";
    EXPECT_LE(vs_64, matmul_tol(int(l.codebook))) << GetParam() << " b" << rows;
  }
}

INSTANTIATE_TEST_SUITE_P(Exllamav3, Exl3CudaExllama, ::testing::ValuesIn(exl3_test::kReferenceCases),
                         [](const auto& info) { return std::string(info.param); });

TEST(Exl3CudaExperts, MixedBitsAreAnErrorNamingTheExpert) {
  TANDEM_SKIP_WITHOUT_CUDA();
  cuda::CudaBackend be;
  GroupBuilder b;
  RandomLinear(128, 128, 2, 2, 1).store(b, "experts.0");
  RandomLinear(128, 128, 3, 2, 2).store(b, "experts.1");
  try {
    load_exl3_experts_cuda({b.group("experts.0"), b.group("experts.1")}, be);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.1"), std::string::npos) << e.what();
  }
}

TEST(Exl3CudaPlugin, RegistryServesTheCudaProviderForCuda) {
  TANDEM_SKIP_WITHOUT_CUDA();
  PluginRegistry reg;
  reg.load_directory(tandem::test::plugin_dir());
  bool found = false;
  for (const auto& p : reg.providers())
    if (p.kind == TANDEM_KIND_FORMAT && p.name == "exl3" && p.device == "cuda") found = true;
  ASSERT_TRUE(found) << "libtandem-exl3-cuda.so did not register exl3/cuda";
  auto be = reg.backend("cuda");
  auto fmt = reg.format("exl3", "cuda");
  GroupBuilder b;
  RandomLinear lin(256, 128, 4, 2, 5, 0.1);
  lin.store(b, "layer.up_proj");
  const TensorGroup g = b.group("layer.up_proj", {100, 256});
  EXPECT_EQ(fmt->probe_group(g), 30);
  auto t = fmt->load(g, *be);
  EXPECT_EQ(t->type_name(), "EXL3_K4_mul1");
  EXPECT_EQ(t->shape(), (std::vector<int64_t>{100, 256}));
  std::vector<float> a(100 * 256);
  t->dequantize(a.data());
  const std::vector<float> want = reconstruct(parse_group(g));
  EXPECT_TRUE(same_bits(a.data(), want.data(), a.size()));
  auto set = fmt->load_experts({g, g}, *be);
  ASSERT_TRUE(set != nullptr);
  EXPECT_EQ(set->n_experts(), 2);
  // A CPU backend still gets the CPU tensors.
  auto cpu_be = reg.backend("cpu");
  EXPECT_EQ(fmt->load(g, *cpu_be)->type_name(), "EXL3_K4_mul1");
  // Errors name the tensor.
  GroupBuilder bad;
  bad.add_words("bad.trellis", {16, 8, 40}, std::vector<uint16_t>(16 * 8 * 40));
  bad.add_f16("bad.suh", std::vector<uint16_t>(256));
  bad.add_f16("bad.svh", std::vector<uint16_t>(128));
  try {
    fmt->load(bad.group("bad"), *be);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.trellis"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::exl3
