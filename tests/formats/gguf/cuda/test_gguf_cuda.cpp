// GGUF block types on the GPU (formats/gguf/*_cuda.*) against the CPU twin (GgufTensor and its
// QuantType kernels), for every type the plugin reads, on fresh random valid blocks: matmul for
// n = 1..16 and 40 with poisoned outputs, rows bit-identical whatever n, get_rows and dequantize bit
// for bit, the stacked expert gather against per-expert CPU matmuls (with NVFP4 `.scale` sidecars),
// a many-item gather bit for bit against small ones, and the gguf-cuda module through the registry.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>

#include "cuda_probe.h"
#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_format_cuda.h"
#include "gguf_cuda_test_util.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"
#include "tandem/error.h"
#include "tandem/registry.h"

namespace tandem::gguf::test {
namespace {

// The opt-in tensor-core matmul (formats/gguf/mma_cuda.cuh) serves every block type but Q4_K/Q5_K
// (their min has no GEMV form there) when TANDEM_GGUF_MMA=1.
bool mma_matmul(const std::string& type) {
  const char* e = std::getenv("TANDEM_GGUF_MMA");
  return e && std::string(e) == "1" && find_type(type)->block_elems > 1 && type != "Q4_K" && type != "Q5_K";
}

// The tensor-core decode/verify GEMV (formats/gguf/gemv_tc_cuda.cuh) serves dense matmuls of these
// types unless TANDEM_GGUF_TC=0; gathers stay on the fp32 kernel.
bool tc_matmul(const std::string& type) {
  const char* e = std::getenv("TANDEM_GGUF_TC");
  if (!(e && std::string(e) == "0") && (type == "NVFP4" || type == "Q8_0")) return true;
  // F16/BF16 matmuls run the tensor-core dense kernels (kernels/cuda/dense_tc.cu) unless
  // TANDEM_CUDA_DENSE_SIMT=1; their gathers stay on the SIMT kernel.
  const char* d = std::getenv("TANDEM_CUDA_DENSE_SIMT");
  return !(d && std::string(d) == "1") && (type == "F16" || type == "BF16");
}

using tandem::test::random_vec;

const char* const kTypes[] = {"F32",     "F16",    "BF16",  "Q8_0",    "Q4_K",  "Q5_K",  "Q6_K",  "IQ4_NL",
                              "IQ4_XS",  "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_M", "NVFP4"};

struct Shape {
  int64_t m, k;
};
// Row lengths in whole blocks: a partial first chunk of 1024, several chunks with a partial last one
// (rows that start off 16-byte alignment for most types), and one longer than every activation
// chunk (16384 at n = 1, 4096 at n ≤ 4, 1024 above).
std::vector<Shape> shapes_for(const std::string& type) {
  const int64_t b = find_type(type)->block_elems;
  if (b == 1) return {{37, 101}, {70, 1000}, {9, 4100}};
  return {{37, 3 * b}, {70, 1024 + 5 * b}, {12, 17408}};
}

// Σ_j |x_j·w_j|·|scale| for every output: the dot product's own magnitude, which bounds any
// summation order's rounding.
std::vector<double> dot_magnitudes(const std::vector<float>& x, const std::vector<float>& w, int64_t n, int64_t m,
                                   int64_t k, float scale = 1.0f) {
  std::vector<double> mag(size_t(n * m));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < m; ++o) {
      double s = 1e-30;
      for (int64_t j = 0; j < k; ++j) s += std::abs(double(x[r * k + j]) * w[o * k + j]);
      mag[size_t(r * m + o)] = s * std::abs(scale);
    }
  return mag;
}
// Largest |got − want| / magnitude over the first n rows; NaN (an unwritten output) counts as infinite.
double rel_err(const float* got, const float* want, const std::vector<double>& mag, int64_t n, int64_t m) {
  double worst = 0;
  for (int64_t i = 0; i < n * m; ++i) {
    if (std::isnan(got[i])) return INFINITY;
    worst = std::max(worst, std::abs(double(got[i]) - want[i]) / mag[size_t(i)]);
  }
  return worst;
}
double dot_rel_err(const float* got, const float* want, const std::vector<float>& x, const std::vector<float>& w,
                   int64_t n, int64_t m, int64_t k, float scale = 1.0f) {
  return rel_err(got, want, dot_magnitudes(x, w, n, m, k, scale), n, m);
}

class GgufCuda : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<cuda::CudaBackend>();
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

constexpr double kTol = 3e-5;

TEST_P(GgufCuda, MatmulMatchesCpuForOneToSixteenAndFortyRowsAndIsBatchInvariant) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  double worst = 0;
  uint64_t seed = std::hash<std::string>()(type) % 1000;
  for (Shape s : shapes_for(type)) {
    Stored st = make_stored(type, s.m, s.k, seed++);
    const GgufTensor host(st.raw(), qt, nullptr);
    auto gpu = load_gguf_cuda(st.raw(), qt, nullptr, *be);
    ASSERT_EQ(gpu->type_name(), type);
    ASSERT_EQ(gpu->shape(), st.shape);
    EXPECT_EQ(gpu->bytes(), st.bytes.size());
    std::vector<float> w(size_t(s.m * s.k));
    host.dequantize(w.data());
    const int64_t N = 40;
    auto x = random_vec(size_t(N * s.k), seed++, -2.f, 2.f);
    std::vector<float> want(size_t(N * s.m));
    host.matmul(Tensor::f32(x.data(), N, s.k), Tensor::f32(want.data(), N, s.m));
    const std::vector<double> mag = dot_magnitudes(x, w, N, s.m, s.k);
    Dev dx = upload(*be, x);
    // Each row alone: the reference bits for every batch size.
    std::vector<float> single(size_t(N * s.m));
    for (int64_t i = 0; i < N; ++i) {
      Dev dy = poisoned(*be, size_t(s.m));
      gpu->matmul(Tensor::f32(dx.p() + i * s.k, 1, s.k), Tensor::f32(dy.p(), 1, s.m));
      auto y = download(*be, dy);
      std::copy(y.begin(), y.end(), single.begin() + i * s.m);
    }
    const double e1 = rel_err(single.data(), want.data(), mag, N, s.m);
    EXPECT_LE(e1, kTol) << type << " [" << s.m << ", " << s.k << "] n 1";
    worst = std::max(worst, e1);
    for (int64_t n = 2; n <= N; n = n == 16 ? N : n + 1) {
      Dev dy = poisoned(*be, size_t(n * s.m));
      gpu->matmul(Tensor::f32(dx.p(), n, s.k), Tensor::f32(dy.p(), n, s.m));
      auto y = download(*be, dy);
      const double e = rel_err(y.data(), want.data(), mag, n, s.m);
      EXPECT_LE(e, kTol) << type << " [" << s.m << ", " << s.k << "] n " << n;
      worst = std::max(worst, e);
      // Up to 16 rows every row is bit-identical to its single-row result. Above, every type runs a
      // tiled prefill kernel (the dense ones, and each block type's tensor-core GEMM:
      // test_gguf_gemm_cuda.cpp checks its own invariance), with bits of its own.
      const int64_t same = n > 16 ? 0 : n;
      for (int64_t i = 0; i < same; ++i)
        EXPECT_TRUE(same_bits(y.data() + i * s.m, single.data() + i * s.m, size_t(s.m)))
            << type << " [" << s.m << ", " << s.k << "] n " << n << " row " << i;
    }
  }
  std::printf("[measure] %s matmul vs cpu: max |Δ| / Σ|x·w| = %.3g (tolerance %.3g)\n", type.c_str(), worst, kTol);
}

TEST_P(GgufCuda, GetRowsAndDequantizeEqualTheCpuBitForBit) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  uint64_t seed = 7000 + std::hash<std::string>()(type) % 1000;
  for (float scale : {1.0f, -0.375f}) {
    const Shape s = shapes_for(type)[1];
    Stored st = make_stored(type, s.m, s.k, seed++);
    StoredScale sc{scale};
    const RawTensor sraw = sc.raw();
    const RawTensor* sp = scale == 1.0f ? nullptr : &sraw;
    const GgufTensor host(st.raw(), qt, sp);
    auto gpu = load_gguf_cuda(st.raw(), qt, sp, *be);
    std::vector<float> a(size_t(s.m * s.k)), b(size_t(s.m * s.k), NAN);
    host.dequantize(a.data());
    gpu->dequantize(b.data());
    EXPECT_TRUE(same_bits(a.data(), b.data(), a.size())) << type << " scale " << scale;
    // More ids than one launch carries (64), with repeats.
    std::vector<int32_t> ids;
    for (int i = 0; i < 150; ++i) ids.push_back(int32_t((i * 17 + 3) % s.m));
    const int64_t n = int64_t(ids.size());
    std::vector<float> want(size_t(n * s.k));
    host.get_rows(ids.data(), int(n), Tensor::f32(want.data(), n, s.k));
    Dev out = poisoned(*be, want.size());
    gpu->get_rows(ids.data(), int(n), Tensor::f32(out.p(), n, s.k));
    auto got = download(*be, out);
    EXPECT_TRUE(same_bits(got.data(), want.data(), want.size())) << type << " scale " << scale;
    const int32_t bad = int32_t(s.m);
    EXPECT_THROW(gpu->get_rows(&bad, 1, Tensor::f32(out.p(), 1, s.k)), Error);
    // The sidecar scales matmul outputs too.
    if (sp) {
      auto x = random_vec(size_t(3 * s.k), seed++, -1.f, 1.f);
      std::vector<float> yw(size_t(3 * s.m));
      host.matmul(Tensor::f32(x.data(), 3, s.k), Tensor::f32(yw.data(), 3, s.m));
      Dev dx = upload(*be, x), dy = poisoned(*be, yw.size());
      gpu->matmul(Tensor::f32(dx.p(), 3, s.k), Tensor::f32(dy.p(), 3, s.m));
      std::vector<float> w(size_t(s.m * s.k));
      GgufTensor(st.raw(), qt, nullptr).dequantize(w.data());
      EXPECT_LE(dot_rel_err(download(*be, dy).data(), yw.data(), x, w, 3, s.m, s.k, scale), kTol) << type;
    }
  }
}

TEST_P(GgufCuda, GatherMatmulMatchesPerExpertCpu) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  const int E = 5;
  const Shape s = shapes_for(type)[1];
  uint64_t seed = 9000 + std::hash<std::string>()(type) % 1000;
  double worst = 0;
  // Stacked in one buffer (as GGUF views are) without scales; then separate buffers with per-expert
  // scales (NVFP4's `.scale` {n_expert}; also for the others, which must honour any sidecar).
  for (bool stacked : {true, false}) {
    std::vector<Stored> parts;
    std::vector<uint8_t> stack;
    for (int e = 0; e < E; ++e) {
      parts.push_back(make_stored(type, s.m, s.k, seed++, "experts." + std::to_string(e) + ".w"));
      stack.insert(stack.end(), parts.back().bytes.begin(), parts.back().bytes.end());
    }
    std::vector<RawTensor> raws;
    const size_t per = parts[0].bytes.size();
    for (int e = 0; e < E; ++e) {
      RawTensor r = parts[size_t(e)].raw();
      if (stacked) r.data = stack.data() + size_t(e) * per;
      raws.push_back(r);
    }
    std::vector<StoredScale> scale_store;
    for (int e = 0; e < E; ++e) scale_store.push_back({stacked ? 1.0f : 0.25f * float(e + 1) * (e % 2 ? -1.f : 1.f)});
    std::vector<RawTensor> scale_raws;
    for (auto& sc : scale_store) scale_raws.push_back(sc.raw());
    std::vector<const RawTensor*> ex, scs;
    for (int e = 0; e < E; ++e) {
      ex.push_back(&raws[size_t(e)]);
      scs.push_back(stacked ? nullptr : &scale_raws[size_t(e)]);
    }
    auto set = load_gguf_experts_cuda(ex, scs, *be);
    EXPECT_EQ(set->n_experts(), E);
    EXPECT_EQ(set->rows(), s.m);
    EXPECT_EQ(set->cols(), s.k);
    EXPECT_EQ(set->type_name(), type);
    EXPECT_EQ(set->bytes(), per * E);
    for (int per_x : {3, 1}) {
      const int64_t nx = 5, rows = nx * per_x;
      auto x = random_vec(size_t(nx * s.k), seed++, -2.f, 2.f);
      std::vector<int32_t> ids;
      for (int64_t r = 0; r < rows; ++r) ids.push_back(int32_t((r * 3 + seed) % E));
      Dev dx = upload(*be, x);
      auto dids = be->alloc(ids.size() * 4);
      be->upload(dids->data(), ids.data(), ids.size() * 4);
      Dev dy = poisoned(*be, size_t(rows * s.m));
      set->gather_matmul(Tensor::f32(dx.p(), nx, s.k), static_cast<int32_t*>(dids->data()), per_x,
                         Tensor::f32(dy.p(), rows, s.m));
      auto got = download(*be, dy);
      for (int64_t r = 0; r < rows; ++r) {
        const int e = ids[size_t(r)];
        const GgufTensor ex_host(raws[size_t(e)], qt, scs[size_t(e)]);
        std::vector<float> xr(x.begin() + (r / per_x) * s.k, x.begin() + (r / per_x + 1) * s.k), want(size_t(s.m)),
            w(size_t(s.m * s.k));
        ex_host.matmul(Tensor::f32(xr.data(), 1, s.k), Tensor::f32(want.data(), 1, s.m));
        GgufTensor(raws[size_t(e)], qt, nullptr).dequantize(w.data());
        worst = std::max(worst, dot_rel_err(got.data() + r * s.m, want.data(), xr, w, 1, s.m, s.k,
                                            scale_store[size_t(e)].value));
        // The gathered row has the bits of the expert's own matmul (block types; dense gathers use
        // the dense GEMV, the same kernel as its n ≤ 16 matmul) — unless a tensor-core matmul (the
        // tc GEMV, or the opt-in TANDEM_GGUF_MMA=1) serves this type: gathers stay on the fp32 kernel.
        auto one = load_gguf_cuda(raws[size_t(e)], qt, scs[size_t(e)], *be);
        Dev dxr = upload(*be, xr), dyr = poisoned(*be, size_t(s.m));
        one->matmul(Tensor::f32(dxr.p(), 1, s.k), Tensor::f32(dyr.p(), 1, s.m));
        if (!mma_matmul(type) && !tc_matmul(type))
          EXPECT_TRUE(same_bits(download(*be, dyr).data(), got.data() + r * s.m, size_t(s.m)))
              << type << " row " << r << " expert " << e;
      }
      // A prefix of the rows gives the same bits (batch invariance).
      Dev dy1 = poisoned(*be, size_t(per_x * s.m));
      set->gather_matmul(Tensor::f32(dx.p(), 1, s.k), static_cast<int32_t*>(dids->data()), per_x,
                         Tensor::f32(dy1.p(), per_x, s.m));
      EXPECT_TRUE(same_bits(download(*be, dy1).data(), got.data(), size_t(per_x * s.m))) << type;
    }
    // An id out of range leaves its row NaN instead of reading out of bounds.
    const std::vector<int32_t> bad = {E, -1};
    auto dbad = be->alloc(8);
    be->upload(dbad->data(), bad.data(), 8);
    Dev dx = upload(*be, random_vec(size_t(2 * s.k), 7)), dy = upload(*be, std::vector<float>(size_t(2 * s.m), 0.f));
    set->gather_matmul(Tensor::f32(dx.p(), 2, s.k), static_cast<int32_t*>(dbad->data()), 1,
                       Tensor::f32(dy.p(), 2, s.m));
    for (float v : download(*be, dy)) EXPECT_TRUE(std::isnan(v)) << type;
  }
  EXPECT_LE(worst, kTol) << type;
  std::printf("[measure] %s gather_matmul vs per-expert cpu: max |Δ| / Σ|x·w| = %.3g (tolerance %.3g)\n",
              type.c_str(), worst, kTol);
}

// Many items (a verify pass gathers tokens × experts): the launcher gives each block several row
// groups of its item. Every row keeps the bits of small gathers (one row group per block), for an x
// held whole and one streamed in chunks, with a partial last row group (200 rows: 7 groups of 32, in
// 2 blocks of 4 and 3) and ids out of range, whose rows become NaN.
// The fused epilogues (weights.h Epilogue) give the bits of the matmul followed by the backend's
// relu2 or add, for every row count of decode, verify and prefill slabs, and for the gather; the
// dense types decline (their scale runs in a kernel of its own) and the caller runs the ops.
TEST_P(GgufCuda, FusedEpiloguesEqualTheSeparateOps) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  const bool dense = qt.block_elems == 1;
  const Shape s = shapes_for(type)[1];
  uint64_t seed = 7100 + std::hash<std::string>()(type) % 1000;
  Stored st = make_stored(type, s.m, s.k, seed++);
  auto gpu = load_gguf_cuda(st.raw(), qt, nullptr, *be);
  for (int64_t n : {1, 3, 8, 20}) {
    auto x = random_vec(size_t(n * s.k), seed++, -2.f, 2.f);
    auto base = random_vec(size_t(n * s.m), seed++, -3.f, 3.f);
    Dev dx = upload(*be, x);
    const Tensor tx = Tensor::f32(dx.p(), n, s.k);
    Dev ref = poisoned(*be, size_t(n * s.m));
    const Tensor tref = Tensor::f32(ref.p(), n, s.m);
    gpu->matmul(tx, tref);
    // relu²
    Dev fused = poisoned(*be, size_t(n * s.m));
    const bool did = gpu->matmul_fused(tx, Tensor::f32(fused.p(), n, s.m), Epilogue::Relu2);
    EXPECT_EQ(did, !dense) << type;
    if (did) {
      Dev want = upload(*be, download(*be, ref));
      be->relu2(Tensor::f32(want.p(), n, s.m));
      const auto w = download(*be, want), g = download(*be, fused);
      EXPECT_TRUE(same_bits(g.data(), w.data(), w.size())) << type << " relu2 n " << n;
    }
    // y += x·Wᵀ
    Dev acc = upload(*be, base);
    const bool did_acc = gpu->matmul_fused(tx, Tensor::f32(acc.p(), n, s.m), Epilogue::Accumulate);
    EXPECT_EQ(did_acc, !dense) << type;
    if (did_acc) {
      Dev want = upload(*be, base);
      be->add(Tensor::f32(want.p(), n, s.m), tref, Tensor::f32(want.p(), n, s.m));
      const auto w = download(*be, want), g = download(*be, acc);
      EXPECT_TRUE(same_bits(g.data(), w.data(), w.size())) << type << " accumulate n " << n;
    }
  }
  // The gather with relu²: 3 experts, 4 tokens × 3 slots.
  std::vector<Stored> parts;
  std::vector<RawTensor> raws;
  for (int e = 0; e < 3; ++e) parts.push_back(make_stored(type, s.m, s.k, seed++, "experts." + std::to_string(e) + ".w"));
  for (auto& pt : parts) raws.push_back(pt.raw());
  std::vector<const RawTensor*> ex{&raws[0], &raws[1], &raws[2]}, scs{nullptr, nullptr, nullptr};
  auto set = load_gguf_experts_cuda(ex, scs, *be);
  const int64_t nx = 4, per_x = 3, rows = nx * per_x;
  auto x = random_vec(size_t(nx * s.k), seed++, -2.f, 2.f);
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < rows; ++r) ids.push_back(int32_t((r * 7 + 1) % 3));
  Dev dx = upload(*be, x);
  auto dids = be->alloc(ids.size() * 4);
  be->upload(dids->data(), ids.data(), ids.size() * 4);
  const int32_t* id = static_cast<int32_t*>(dids->data());
  Dev ref = poisoned(*be, size_t(rows * s.m)), fused = poisoned(*be, size_t(rows * s.m));
  set->gather_matmul(Tensor::f32(dx.p(), nx, s.k), id, int(per_x), Tensor::f32(ref.p(), rows, s.m));
  const bool did = set->gather_matmul_fused(Tensor::f32(dx.p(), nx, s.k), id, int(per_x),
                                            Tensor::f32(fused.p(), rows, s.m), Epilogue::Relu2);
  EXPECT_EQ(did, !dense) << type;
  if (did) {
    be->relu2(Tensor::f32(ref.p(), rows, s.m));
    const auto w = download(*be, ref), g = download(*be, fused);
    EXPECT_TRUE(same_bits(g.data(), w.data(), w.size())) << type << " gather relu2";
  }
}

TEST_P(GgufCuda, ManyItemGatherKeepsTheBitsOfSmallGathers) {
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  if (qt.block_elems == 1) GTEST_SKIP() << "dense gathers run the dense GEMV";
  const int E = 5, per_x = 4;
  const int64_t m = 200, items = 400, nx = items / per_x, piece = 8;
  uint64_t seed = 11000 + std::hash<std::string>()(type) % 1000;
  for (int64_t k : {int64_t(1024 + 5 * qt.block_elems), int64_t(17408)}) {
    std::vector<Stored> parts;
    std::vector<RawTensor> raws;
    std::vector<StoredScale> scale_store;
    for (int e = 0; e < E; ++e) {
      parts.push_back(make_stored(type, m, k, seed++, "experts." + std::to_string(e) + ".w"));
      scale_store.push_back({0.5f * float(e + 1)});
    }
    std::vector<RawTensor> scale_raws;
    for (int e = 0; e < E; ++e) raws.push_back(parts[size_t(e)].raw()), scale_raws.push_back(scale_store[size_t(e)].raw());
    std::vector<const RawTensor*> ex, scs;
    for (int e = 0; e < E; ++e) ex.push_back(&raws[size_t(e)]), scs.push_back(&scale_raws[size_t(e)]);
    auto set = load_gguf_experts_cuda(ex, scs, *be);
    std::vector<int32_t> ids;
    for (int64_t r = 0; r < items; ++r) ids.push_back(int32_t((r * 7 + 1) % E));
    ids[37] = E, ids[250] = -1;
    Dev dx = upload(*be, random_vec(size_t(nx * k), seed++, -2.f, 2.f));
    auto dids = be->alloc(ids.size() * 4);
    be->upload(dids->data(), ids.data(), ids.size() * 4);
    const int32_t* did = static_cast<const int32_t*>(dids->data());
    Dev dy = upload(*be, std::vector<float>(size_t(items * m), 0.f));
    set->gather_matmul(Tensor::f32(dx.p(), nx, k), did, per_x, Tensor::f32(dy.p(), items, m));
    Dev dref = poisoned(*be, size_t(items * m));
    for (int64_t r0 = 0; r0 < items; r0 += piece)
      set->gather_matmul(Tensor::f32(dx.p() + (r0 / per_x) * k, piece / per_x, k), did + r0, per_x,
                         Tensor::f32(dref.p() + r0 * m, piece, m));
    const auto got = download(*be, dy), want = download(*be, dref);
    for (int64_t r = 0; r < items; ++r) {
      const float* g = got.data() + r * m;
      if (ids[size_t(r)] < 0 || ids[size_t(r)] >= E) {
        for (int64_t o = 0; o < m; ++o) EXPECT_TRUE(std::isnan(g[o])) << type << " k " << k << " row " << r;
      } else {
        EXPECT_TRUE(same_bits(g, want.data() + r * m, size_t(m))) << type << " k " << k << " row " << r;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GgufCuda, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(info.param); });

TEST(GgufCudaPlugin, RegistryServesTheCudaProviderForCuda) {
  TANDEM_SKIP_WITHOUT_CUDA();
  PluginRegistry reg;
  reg.load_directory(tandem::test::plugin_dir());
  bool found = false;
  for (const auto& p : reg.providers())
    if (p.kind == TANDEM_KIND_FORMAT && p.name == "gguf" && p.device == "cuda") found = true;
  ASSERT_TRUE(found) << "libtandem-gguf-cuda.so did not register gguf/cuda";
  auto be = reg.backend("cuda");
  auto fmt = reg.format("gguf", "cuda");
  Stored st = make_stored("IQ2_XXS", 16, 256, 77, "layer.up_proj.weight");
  StoredScale sc{0.5f, "layer.up_proj.scale"};
  RawTensor raw = st.raw(), sraw = sc.raw();
  TensorGroup g{"layer.up_proj", {&raw, &sraw}};
  EXPECT_EQ(fmt->probe_group(g), 5);  // a known type outside a GGUF file: the fallback score
  auto t = fmt->load(g, *be);
  EXPECT_EQ(t->type_name(), "IQ2_XXS");
  std::vector<float> a(16 * 256), b(16 * 256);
  t->dequantize(a.data());
  GgufTensor(raw, *find_type("IQ2_XXS"), &sraw).dequantize(b.data());
  EXPECT_TRUE(same_bits(a.data(), b.data(), a.size()));
  auto set = fmt->load_experts({g, g}, *be);
  ASSERT_TRUE(set != nullptr);
  EXPECT_EQ(set->n_experts(), 2);
  // A CPU backend still gets the host tensors (and no stacked set).
  auto cpu_be = reg.backend("cpu");
  EXPECT_EQ(fmt->load(g, *cpu_be)->type_name(), "IQ2_XXS");
  EXPECT_EQ(fmt->load_experts({g}, *cpu_be), nullptr);
  // Errors name the tensor.
  Stored odd = make_stored("Q8_0", 4, 64, 5, "bad.weight");
  odd.shape = {4, 48};
  RawTensor oraw = odd.raw();
  try {
    fmt->load(TensorGroup{"bad", {&oraw}}, *be);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::gguf::test
