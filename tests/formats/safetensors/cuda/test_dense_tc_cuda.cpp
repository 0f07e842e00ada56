// The tensor-core kernels of dense BF16/F16 weights (kernels/cuda/dense_tc.cu) through the
// safetensors CUDA tensors: against the CPU matmul on fresh random inputs into NaN-poisoned outputs
// for the GEMV (1…16 rows) and both GEMM tilings, m not a multiple of 16 or 128, k of model widths
// (4096, 12288, 24576), an odd multiple of 16 (4112) and one of 8 only (1000); every row's bits the
// same whatever n, whatever its position in the batch and whether x is 16-byte aligned; F16
// activations beyond fp16's range and far below it; replay under graph capture; and every kernel
// variant (tandem/cuda/util.h: the GEMV's x paths, the GEMM tilings of 17…64 rows) against the CPU
// and bit for bit against the others.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda_probe.h"
#include "dense_fixtures.h"
#include "device_buffers.h"
#include "formats/safetensors/dense_cpu.h"
#include "formats/safetensors/dense_cuda.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"
#include "tandem/error.h"
#include "test_util.h"

namespace tandem::safetensors::test {
namespace {

class DenseTcCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_SKIP_WITHOUT_CUDA();
    be = std::make_unique<cuda::CudaBackend>();
  }
  std::vector<float> run(QuantizedTensor& t, const Dev& dx, int64_t row0, int64_t n, int64_t m, int64_t k) {
    Dev dy = poisoned(*be, size_t(n * m));
    t.matmul(Tensor::f32(dx.p() + row0 * k, n, k), Tensor::f32(dy.p(), n, m));
    return download(*be, dy);
  }
  std::unique_ptr<cuda::CudaBackend> be;
};

struct Shape {
  int64_t m, k;
};

// A random `dtype` weight [m, k] with its CPU tensor, its device tensor and its dequantized values
// (for dot_rel_err). Not copied or moved: the CPU tensor reads the stored bytes in place.
struct Weight {
  Weight(const char* dtype, Shape s, uint64_t seed, Backend& be)
      : st(make_weight(dtype, s.m, s.k, seed)), host(st.raw()), gpu(load_dense_cuda(st.raw(), be)),
        w(size_t(s.m * s.k)) {
    host.dequantize(w.data());
  }
  Weight(const Weight&) = delete;
  Weight& operator=(const Weight&) = delete;
  Stored st;
  DenseTensor host;
  std::unique_ptr<QuantizedTensor> gpu;
  std::vector<float> w;
};

const int64_t kRows[] = {1, 3, 8, 16, 17, 64, 300};

TEST_F(DenseTcCuda, MatmulMatchesCpu) {
  const double tol = 1e-5;
  const Shape shapes[] = {{200, 4096}, {37, 12288}, {24, 24576}, {130, 4112}, {67, 1000}};
  double worst = 0;
  uint64_t seed = 7000;
  for (const char* dtype : {"BF16", "F16"}) {
    auto check = [&](Shape s, int64_t n, QuantizedTensor& gpu, DenseTensor& host, const std::vector<float>& w) {
      auto x = random_vec(size_t(n * s.k), seed++, -2.f, 2.f);
      std::vector<float> want(size_t(n * s.m));
      host.matmul(Tensor::f32(x.data(), n, s.k), Tensor::f32(want.data(), n, s.m));
      Dev dx = upload(*be, x);
      const double e = dot_rel_err(run(gpu, dx, 0, n, s.m, s.k), want, x, w, n, s.m, s.k);
      EXPECT_LE(e, tol) << dtype << " [" << s.m << ", " << s.k << "] n " << n;
      worst = std::max(worst, e);
    };
    for (Shape s : shapes) {
      Weight wt(dtype, s, seed++, *be);
      for (int64_t n : kRows) check(s, n, *wt.gpu, wt.host, wt.w);
    }
    // A prefill-sized batch (and, for 1100 × 2048, the 128 × 128 tiling on any GPU of ≤ 144 SMs).
    for (Shape s : {Shape{40, 4096}, Shape{1100, 256}}) {
      Weight wt(dtype, s, seed++, *be);
      check(s, 2048, *wt.gpu, wt.host, wt.w);
    }
  }
  std::printf("[measure] dense tensor-core matmul vs cpu: max |Δ| / Σ|x·w| = %.3g (tolerance %.3g)\n", worst, tol);
}

// Row r of an n-row call equals the same row in a 2048-row call (GEMV, 64 × 64 and 128 × 128 GEMM
// tilings), at a different position in the batch (offset 5), alone, and from an x that is not
// 16-byte aligned.
TEST_F(DenseTcCuda, RowsAreBitIdenticalForEveryBatchSize) {
  const Shape shapes[] = {{1100, 4096}, {200, 4112}, {67, 1000}, {37, 24576}};
  const int64_t N = 2048;
  uint64_t seed = 8000;
  for (const char* dtype : {"BF16", "F16"})
    for (Shape s : shapes) {
      Stored st = make_weight(dtype, s.m, s.k, seed++);
      auto gpu = load_dense_cuda(st.raw(), *be);
      auto x = random_vec(size_t(N * s.k), seed++, -2.f, 2.f);
      Dev dx = upload(*be, x);
      const auto all = run(*gpu, dx, 0, N, s.m, s.k);
      auto same_rows = [&](const std::vector<float>& y, int64_t row0, int64_t n, const char* what) {
        for (int64_t i = 0; i < n; ++i)
          if (!same_bits(y.data() + i * s.m, all.data() + (row0 + i) * s.m, size_t(s.m))) {
            ADD_FAILURE() << dtype << " [" << s.m << ", " << s.k << "] " << what << " n " << n << ": row " << row0 + i
                          << " differs from the " << N << "-row call";
            return;
          }
      };
      for (int64_t n : kRows) {
        same_rows(run(*gpu, dx, 0, n, s.m, s.k), 0, n, "offset 0");
        same_rows(run(*gpu, dx, 5, n, s.m, s.k), 5, n, "offset 5");
      }
      for (int64_t r : {int64_t(1), int64_t(8), int64_t(100), int64_t(129), N - 1})
        same_rows(run(*gpu, dx, r, 1, s.m, s.k), r, 1, "alone");
      // The same rows one float past a 16-byte boundary (the unaligned x paths).
      for (int64_t n : {int64_t(3), int64_t(16), int64_t(17), int64_t(300)}) {
        std::vector<float> shifted(size_t(1 + n * s.k), 0.f);
        std::copy(x.begin() + 9 * s.k, x.begin() + (9 + n) * s.k, shifted.begin() + 1);
        Dev ds = upload(*be, shifted);
        Dev dy = poisoned(*be, size_t(n * s.m));
        gpu->matmul(Tensor::f32(ds.p() + 1, n, s.k), Tensor::f32(dy.p(), n, s.m));
        same_rows(download(*be, dy), 9, n, "unaligned x");
      }
    }
}

// F16 weights: activations far beyond fp16's range (1e5 … 1e9) and far below its normal range
// (1e-9) keep fp32 accuracy (each row-chunk of x is scaled by a power of two before the fp16 split).
TEST_F(DenseTcCuda, F16KeepsActivationsOutsideTheFp16Range) {
  const double tol = 1e-5;
  const int64_t m = 70, k = 4096;
  Weight wt("F16", {m, k}, 9000, *be);
  DenseTensor& host = wt.host;
  QuantizedTensor& gpu = *wt.gpu;
  const std::vector<float>& w = wt.w;
  double worst = 0;
  for (int64_t n : {int64_t(1), int64_t(5), int64_t(16), int64_t(40)}) {
    auto x = random_vec(size_t(n * k), 9100 + uint64_t(n), -1.f, 1.f);
    const float scales[] = {1e-9f, 1e-4f, 1.f, 1e5f, 1e9f};
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) {
        // Whole rows at one scale, and in odd rows a different scale every 300 columns (mixed
        // within a chunk of 256 as well).
        const int sc = r % 2 ? int((r + j / 300) % 5) : int(r % 5);
        x[size_t(r * k + j)] *= scales[sc];
      }
    x[0] = 70000.f;  // one element just past fp16's largest finite value
    std::vector<float> want(size_t(n * m));
    host.matmul(Tensor::f32(x.data(), n, k), Tensor::f32(want.data(), n, m));
    Dev dx = upload(*be, x);
    const double e = dot_rel_err(run(gpu, dx, 0, n, m, k), want, x, w, n, m, k);
    EXPECT_LE(e, tol) << "n " << n;
    worst = std::max(worst, e);
  }
  std::printf("[measure] F16 tensor-core matmul, |x| from 1e-9 to 1e9: max |Δ| / Σ|x·w| = %.3g\n", worst);
}

// A captured graph replays the GEMV and the GEMM with the same bits as eager calls.
TEST_F(DenseTcCuda, GraphReplayEqualsEagerCalls) {
  const int64_t m = 300, k = 2048;
  for (const char* dtype : {"BF16", "F16"}) {
    Stored st = make_weight(dtype, m, k, 9500);
    auto gpu = load_dense_cuda(st.raw(), *be);
    for (int64_t n : {int64_t(4), int64_t(200)}) {
      Dev dx = upload(*be, random_vec(size_t(n * k), 9600, -2.f, 2.f));
      const auto eager = run(*gpu, dx, 0, n, m, k);
      Dev dy = poisoned(*be, size_t(n * m));
      ASSERT_TRUE(be->begin_capture());
      gpu->matmul(Tensor::f32(dx.p(), n, k), Tensor::f32(dy.p(), n, m));
      auto graph = be->end_capture();
      ASSERT_TRUE(graph != nullptr) << dtype << " n " << n;
      graph->launch();
      const auto replay = download(*be, dy);
      EXPECT_TRUE(same_bits(replay.data(), eager.data(), eager.size())) << dtype << " n " << n;
    }
  }
}

// Puts the process back on the variant it started with (the other tests run on it).
struct VariantScope {
  std::string was = cuda::dense_tc_variant();
  ~VariantScope() { cuda::set_dense_tc_variant(was.c_str()); }
};

// Every variant, into NaN-poisoned outputs: within the tolerance of the CPU matmul at 1, 17 and 33
// rows (the GEMV and both 32-row GEMM tilings), and every row of every n (odd ones included) bit for
// bit equal to the same row of the "base" variant's 64-row call, at offsets 0 and 5 of the batch; m
// ragged against 16, 32 and 64; k a model width, an odd multiple of 16 (4112, not of 256) and a
// multiple of 8 only (1000).
TEST_F(DenseTcCuda, EveryVariantGivesTheSameBits) {
  VariantScope keep;
  const double tol = 1e-5;
  const Shape shapes[] = {{200, 4112}, {67, 1000}, {1100, 4096}, {37, 12288}};
  const int64_t rows[] = {1, 2, 3, 4, 7, 8, 9, 16, 17, 31, 32, 33, 48, 63, 64};
  const int64_t N = 69;  // offset 5 + 64 rows
  uint64_t seed = 9700;
  for (const char* dtype : {"BF16", "F16"})
    for (Shape s : shapes) {
      Weight wt(dtype, s, seed++, *be);
      DenseTensor& host = wt.host;
      QuantizedTensor* gpu = wt.gpu.get();
      const std::vector<float>& w = wt.w;
      auto x = random_vec(size_t(N * s.k), seed++, -2.f, 2.f);
      Dev dx = upload(*be, x);
      cuda::set_dense_tc_variant("base");
      const auto want0 = run(*gpu, dx, 0, 64, s.m, s.k), want5 = run(*gpu, dx, 5, 64, s.m, s.k);
      for (int v = 0; v < cuda::dense_tc_variant_count(); ++v) {
        const char* name = cuda::dense_tc_variant_name(v);
        cuda::set_dense_tc_variant(name);
        for (int64_t n : {int64_t(1), int64_t(17), int64_t(33)}) {
          std::vector<float> want(size_t(n * s.m));
          std::vector<float> xs(x.begin(), x.begin() + n * s.k);
          host.matmul(Tensor::f32(xs.data(), n, s.k), Tensor::f32(want.data(), n, s.m));
          const double e = dot_rel_err(run(*gpu, dx, 0, n, s.m, s.k), want, xs, w, n, s.m, s.k);
          EXPECT_LE(e, tol) << name << " " << dtype << " [" << s.m << ", " << s.k << "] n " << n;
        }
        for (int64_t n : rows)
          for (int64_t row0 : {int64_t(0), int64_t(5)}) {
            const auto got = run(*gpu, dx, row0, n, s.m, s.k);
            const auto& ref = row0 == 0 ? want0 : want5;
            EXPECT_TRUE(same_bits(got.data(), ref.data(), got.size()))
                << name << " " << dtype << " [" << s.m << ", " << s.k << "] n " << n << " offset " << row0
                << ": differs from the base variant's 64-row call";
          }
      }
    }
}

// The grouped expert gather on the tensor cores (TANDEM_CUDA_DENSE_GROUPED, kernels/cuda/dense_tc.cuh):
// 12 experts, ragged groups (one expert a third of the items: several 128-item tiles; experts without
// rows; two ids out of range, NaN rows) and one expert taking every row, into poisoned outputs; every
// gathered row has its expert's own matmul bits (the order contract) and is within the matmul
// tolerance of the CPU; with the experiment off the SIMT gather serves the same call.
TEST_F(DenseTcCuda, GroupedGatherHasEachExpertsMatmulBits) {
  const bool saved = cuda::dense_grouped_gather();
  const int E = 12;
  const double tol = 1e-5;
  double worst = 0;
  uint64_t seed = 9100;
  for (const char* dtype : {"BF16", "F16"})
    for (Shape s : {Shape{300, 1024}, Shape{77, 4112}}) {
      const Experts ex(dtype, E, s.m, s.k, seed);
      const std::vector<RawTensor>& raw_store = ex.raws;
      auto set = load_dense_experts_cuda(ex.ptrs, *be);
      for (int variant = 0; variant < 2; ++variant) {
        const int per_x = variant == 0 ? 4 : 1;
        const int64_t nx = variant == 0 ? 160 : 640, rows = nx * per_x;
        std::vector<int32_t> ids;
        for (int64_t r = 0; r < rows; ++r) {
          const int e = variant == 1 ? 5 : r % 3 == 0 ? 0 : int((r * 7 + 1) % E);
          ids.push_back(int32_t(variant == 0 && (e == 3 || e == 7) ? 1 : e));
        }
        if (variant == 0) ids[37] = E, ids[250] = -1;
        const std::string what = std::string(dtype) + " [" + std::to_string(s.m) + ", " + std::to_string(s.k) +
                                 "] variant " + std::to_string(variant);
        auto x = random_vec(size_t(nx * s.k), seed++, -2.f, 2.f);
        Dev dx = upload(*be, x);
        auto dids = be->alloc(ids.size() * 4);
        be->upload(dids->data(), ids.data(), ids.size() * 4);
        auto gather = [&](bool grouped) {
          cuda::set_dense_grouped_gather(grouped);
          Dev dy = poisoned(*be, size_t(rows * s.m));
          set->gather_matmul(Tensor::f32(dx.p(), nx, s.k), static_cast<int32_t*>(dids->data()), per_x,
                             Tensor::f32(dy.p(), rows, s.m));
          return download(*be, dy);
        };
        const std::vector<float> got = gather(true), simt = gather(false);
        for (int e = 0; e < E; ++e) {
          std::vector<int64_t> mine;
          for (int64_t r = 0; r < rows; ++r)
            if (ids[size_t(r)] == e) mine.push_back(r);
          if (mine.empty()) continue;
          // The expert's own matmul on its rows' x.
          std::vector<float> xe;
          for (int64_t r : mine) xe.insert(xe.end(), x.begin() + (r / per_x) * s.k, x.begin() + (r / per_x + 1) * s.k);
          auto one = load_dense_cuda(raw_store[size_t(e)], *be);
          DenseTensor host(raw_store[size_t(e)]);
          std::vector<float> w(size_t(s.m * s.k)), want(mine.size() * size_t(s.m));
          host.dequantize(w.data());
          const int64_t n = int64_t(mine.size());
          host.matmul(Tensor::f32(xe.data(), n, s.k), Tensor::f32(want.data(), n, s.m));
          Dev dxe = upload(*be, xe);
          const std::vector<float> ref = run(*one, dxe, 0, n, s.m, s.k);
          std::vector<float> g, sg;
          for (size_t i = 0; i < mine.size(); ++i) {
            const float* gr = got.data() + mine[i] * s.m;
            EXPECT_TRUE(same_bits(gr, ref.data() + i * size_t(s.m), size_t(s.m))) << what << " expert " << e << " row " << mine[i];
            g.insert(g.end(), gr, gr + s.m);
            sg.insert(sg.end(), simt.data() + mine[i] * s.m, simt.data() + (mine[i] + 1) * s.m);
          }
          const double err = dot_rel_err(g, want, xe, w, n, s.m, s.k);
          EXPECT_LE(err, tol) << what << " expert " << e;
          EXPECT_LE(dot_rel_err(sg, want, xe, w, n, s.m, s.k), tol) << what << " expert " << e << " (simt)";
          worst = std::max(worst, err);
        }
        for (int64_t r = 0; r < rows; ++r)
          if (ids[size_t(r)] < 0 || ids[size_t(r)] >= E)
            for (int64_t o = 0; o < s.m; ++o) EXPECT_TRUE(std::isnan(got[size_t(r * s.m + o)])) << what << " row " << r;
      }
    }
  cuda::set_dense_grouped_gather(saved);
  std::printf("[measure] dense grouped gather vs cpu: max |Δ| / Σ|x·w| = %.3g (tolerance %.3g)\n", worst, tol);
}

TEST(DenseTcVariants, UnknownNameThrows) {
  VariantScope keep;
  EXPECT_THROW(cuda::set_dense_tc_variant("x7"), Error);
  EXPECT_GT(cuda::dense_tc_variant_count(), 1);
  EXPECT_EQ(cuda::dense_tc_variant_name(cuda::dense_tc_variant_count()), nullptr);
}

}  // namespace
}  // namespace tandem::safetensors::test
