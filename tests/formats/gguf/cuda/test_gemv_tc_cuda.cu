// The tensor-core NVFP4 and Q8_0 GEMV (formats/gguf/gemv_tc_cuda.cuh) against the CPU dequantizer
// and a float64 dot product, on fresh random weights with poisoned outputs: n = 1, 2, 3, 8, 9, 16 and
// 40 (three slabs), ragged m (not a multiple of 16) with k that ends inside a slice, and Bolt's
// in_proj [18560, 4096] and out_proj [4096, 8192] (NVFP4) or attention-sized shapes (Q8_0); every row
// bit-identical to the same row computed alone, and the workspace counters left zero. Then the
// format's wiring (GgufCudaTensor): the tc pass inside a CUDA graph capture, and TANDEM_GGUF_TC=0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda_probe.h"
#include "formats/gguf/gemv_tc_cuda.cuh"
#include "formats/gguf/gguf_format.h"
#include "formats/gguf/gguf_format_cuda.h"
#include "gguf_cuda_test_util.h"
#include "tc_check.h"
#include "plugins/backend-cuda/cuda_backend.h"

namespace tandem::gguf::test {
namespace {

struct Case {
  int64_t m, k;
  float scale;
};

class GemvTcCuda : public ::testing::TestWithParam<const char*> {};

TEST_P(GemvTcCuda, MatchesCpuForOneToSixteenRowsAndIsBatchInvariant) {
  TANDEM_SKIP_WITHOUT_CUDA();
  using namespace kcuda;
  const std::string type = GetParam();
  const QuantType& qt = *find_type(type);
  const TcType tt = *tc_type_of(type);
  const std::vector<Case> cases =
      tt == TcType::NVFP4
          ? std::vector<Case>{{100, 1216, 0.37f}, {37, 64, 1.0f}, {18560, 4096, 1.0f}, {4096, 8192, 2.5f}}
          : std::vector<Case>{{100, 1248, 0.37f}, {37, 32, 1.0f}, {1, 2080, 1.0f}, {4096, 4096, 1.0f}, {12, 17408, 2.5f}};
  uint64_t seed = 4242 + uint64_t(tt);
  for (Case c : cases) {
    SCOPED_TRACE(type + " [" + std::to_string(c.m) + ", " + std::to_string(c.k) + "]");
    const std::vector<uint8_t> bytes = random_weight(type, c.m, c.k, seed++);
    const int64_t rb = row_bytes(qt, c.k);
    std::vector<float> w(size_t(c.m * c.k));
    for (int64_t r = 0; r < c.m; ++r) qt.dequantize(bytes.data() + r * rb, w.data() + r * c.k, c.k);
    const int64_t N = 40;
    const std::vector<float> x = tandem::test::random_vec(size_t(N * c.k), seed++, -2.f, 2.f);
    // float64 reference and magnitude Σ|x·w|·|scale| for every output.
    std::vector<double> want(size_t(N * c.m)), mag(size_t(N * c.m));
    for (int64_t r = 0; r < N; ++r)
      for (int64_t o = 0; o < c.m; ++o) {
        double s = 0, a = 1e-30;
        const float* wr = w.data() + o * c.k;
        const float* xr = x.data() + r * c.k;
        for (int64_t j = 0; j < c.k; ++j) s += double(xr[j]) * wr[j], a += std::abs(double(xr[j]) * wr[j]);
        want[size_t(r * c.m + o)] = s * c.scale, mag[size_t(r * c.m + o)] = a * std::abs(c.scale);
      }
    const TcShape s = tc_shape(tt, c.m, c.k);
    const std::vector<uint8_t> rp = repack_tc(tt, bytes.data(), c.m, c.k, "w");
    DevMem dw(rp.size()), dx(x.size() * 4), dws(s.workspace_bytes()), dcnt(s.counters() * 4),
        dy(size_t((N + 1) * c.m) * 4);
    ok(cudaMemcpy(dw.p, rp.data(), rp.size(), cudaMemcpyHostToDevice), "upload w");
    ok(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
    ok(cudaMemset(dws.p, 0xFF, s.workspace_bytes()), "poison workspace");  // any contents
    ok(cudaMemset(dcnt.p, 0, s.counters() * 4), "zero counters");
    // One launch of n rows starting at row r0, the output poisoned first (one row more than written).
    auto run = [&](int64_t r0, int64_t n) {
      std::vector<float> y(size_t((n + 1) * c.m), NAN);
      cudaMemcpy(dy.p, y.data(), y.size() * 4, cudaMemcpyHostToDevice);
      launch_gemv_tc(dw.as<uint8_t>(), s, dx.as<float>() + r0 * c.k, dy.as<float>(), n, c.scale, 0, dws.as<float>(),
                     dcnt.as<unsigned>(), 0);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost);
      for (int64_t i = n * c.m; i < (n + 1) * c.m; ++i)
        if (!std::isnan(y[size_t(i)])) {
          ADD_FAILURE() << "n " << n << ": wrote past its rows at " << i;
          break;
        }
      y.resize(size_t(n * c.m));
      return y;
    };
    const int64_t alone = c.m > 10000 ? 16 : N;  // rows checked one by one (all of them on small shapes)
    const std::vector<float> single = expect_rows_match_and_stay_invariant(run, c.m, N, alone, want, mag);
    // Activations that start off 16-byte alignment (scalar loads) give the same bits.
    {
      DevMem dx2((size_t(3 * c.k) + 1) * 4);
      ok(cudaMemcpy(dx2.as<float>() + 1, x.data(), size_t(3 * c.k) * 4, cudaMemcpyHostToDevice), "upload x");
      std::vector<float> y(size_t(3 * c.m), NAN);
      cudaMemcpy(dy.p, y.data(), y.size() * 4, cudaMemcpyHostToDevice);
      launch_gemv_tc(dw.as<uint8_t>(), s, dx2.as<float>() + 1, dy.as<float>(), 3, c.scale, 0, dws.as<float>(),
                     dcnt.as<unsigned>(), 0);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost);
      EXPECT_EQ(std::memcmp(y.data(), single.data(), y.size() * 4), 0) << "unaligned x";
    }
    // The workspace counters are left zero (the next launch relies on it).
    std::vector<unsigned> cnt(s.counters());
    cudaMemcpy(cnt.data(), dcnt.p, cnt.size() * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(std::count(cnt.begin(), cnt.end(), 0u), int64_t(cnt.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GemvTcCuda, ::testing::Values("NVFP4", "Q8_0"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

// The tc GEMV of dense NVFP4 (with a `.scale` sidecar) and Q8_0 inside a CUDA graph capture: the
// captured pass allocates nothing (the lane arena was reserved at load) and replays with the bits of
// the plain pass, twice (the counters are left zero). TANDEM_GGUF_TC=0 at load takes the fp32 GEMV:
// the same values within rounding, other bits (so the switch really switches).
TEST(GgufCudaTc, CapturedPassesKeepTheBitsAndTheSwitchTurnsItOff) {
  TANDEM_SKIP_WITHOUT_CUDA();
  tandem::cuda::CudaBackend be;
  for (const char* type : {"NVFP4", "Q8_0"}) {
    const QuantType& qt = *find_type(type);
    const int64_t m = 70, k = qt.block_elems == 64 ? 1344 : 1184, n = 3;
    Stored st = make_stored(type, m, k, 501);
    StoredScale sc{0.5f};
    const RawTensor raw = st.raw(), sraw = sc.raw();
    const RawTensor* scale = qt.block_elems == 64 ? &sraw : nullptr;
    std::unique_ptr<QuantizedTensor> tc, fp32;
    {
      ScopedEnv on("TANDEM_GGUF_TC", "1");
      tc = load_gguf_cuda(raw, qt, scale, be);
    }
    {
      ScopedEnv off("TANDEM_GGUF_TC", "0");
      fp32 = load_gguf_cuda(raw, qt, scale, be);
    }
    const GgufTensor host(raw, qt, scale);
    std::vector<float> w(size_t(m * k));
    GgufTensor(raw, qt, nullptr).dequantize(w.data());
    auto x = tandem::test::random_vec(size_t(n * k), 502, -2.f, 2.f);
    std::vector<float> want(size_t(n * m));
    host.matmul(Tensor::f32(x.data(), n, k), Tensor::f32(want.data(), n, m));
    Dev dx = upload(be, x), dy = poisoned(be, size_t(n * m)), dg = poisoned(be, size_t(n * m)),
        df = poisoned(be, size_t(n * m));
    tc->matmul(Tensor::f32(dx.p(), n, k), Tensor::f32(dy.p(), n, m));
    fp32->matmul(Tensor::f32(dx.p(), n, k), Tensor::f32(df.p(), n, m));
    const auto plain = download(be, dy), off = download(be, df);
    const float s = qt.block_elems == 64 ? sc.value : 1.0f;
    auto rel_err = [&](const std::vector<float>& got) {  // max |Δ| / Σ|x·w|; NaN (unwritten) is infinite
      double worst = 0;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < m; ++o) {
          double mag = 1e-30;
          for (int64_t j = 0; j < k; ++j) mag += std::abs(double(x[size_t(r * k + j)]) * w[size_t(o * k + j)]) * s;
          const float g = got[size_t(r * m + o)];
          worst = std::max(worst, std::isnan(g) ? INFINITY : std::abs(double(g) - want[size_t(r * m + o)]) / mag);
        }
      return worst;
    };
    EXPECT_LE(rel_err(plain), 3e-5) << type << " tc";
    EXPECT_LE(rel_err(off), 3e-5) << type << " TANDEM_GGUF_TC=0";
    EXPECT_FALSE(same_bits(plain.data(), off.data(), plain.size())) << type << ": TANDEM_GGUF_TC=0 changed nothing";

    const cudaStream_t cs = cudaStreamPerThread;
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    tc->matmul(Tensor::f32(dx.p(), n, k), Tensor::f32(dg.p(), n, m));
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess) << type << ": the captured pass broke the capture";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int rep = 0; rep < 2; ++rep) {
      be.upload(dg.p(), std::vector<float>(size_t(n * m), NAN).data(), size_t(n * m) * 4);
      ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
      EXPECT_TRUE(same_bits(download(be, dg).data(), plain.data(), plain.size())) << type << " replay " << rep;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
}

}  // namespace
}  // namespace tandem::gguf::test
