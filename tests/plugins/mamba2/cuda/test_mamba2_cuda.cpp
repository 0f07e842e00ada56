// The Mamba2 CUDA mixer against the CPU mixer on the same random weights (prefill across chunk
// shapes, verify, commit), and the GPU's own bit-exactness: a verify pass of n tokens gives the bits
// of n single steps, and commit(n) leaves the state those steps leave.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_probe.h"
#include "fakes.h"
#include "formats/safetensors/dense_cuda.h"
#include "mixer_cpu.h"
#include "mixer_cuda.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"

namespace tandem::mamba2::test {
namespace {

using tandem::test::random_vec;
constexpr int kHidden = 32;

// The MapLoader's weights as F32 device tensors (through the safetensors CUDA loader).
class CudaLoader : public WeightLoader {
 public:
  CudaLoader(const MapLoader& host, Backend& be) : host_(host), be_(be) {}
  bool has(const std::string& name) const override { return host_.has(name); }
  std::string full_name(const std::string& name) const override { return host_.full_name(name); }
  std::unique_ptr<QuantizedTensor> tensor(const std::string& name, const std::vector<int64_t>& shape) override {
    const auto& t = host_.tensors.at(name);
    check(t.shape == shape, "weight '", name, "': shape mismatch");
    RawTensor raw{full_name(name), "F32", t.shape, reinterpret_cast<const uint8_t*>(t.data.data()),
                  t.data.size() * sizeof(float), "memory"};
    return safetensors::load_dense_cuda(raw, be_);
  }
  std::vector<float> vector(const std::string& name, const std::vector<int64_t>& shape) override {
    return const_cast<MapLoader&>(host_).vector(name, shape);
  }

 private:
  const MapLoader& host_;
  Backend& be_;
};

MambaDesc small_desc() {
  MambaDesc d;
  d.n_heads = 4, d.head_dim = 8, d.n_groups = 2, d.state_size = 16, d.conv_kernel = 4, d.chunk_size = 16;
  return d;
}
// Wider rows: N = 128 spans 4 registers per lane, P = 64 spans 8 warps, Q = 64.
MambaDesc wide_desc() {
  MambaDesc d;
  d.n_heads = 8, d.head_dim = 64, d.n_groups = 2, d.state_size = 128, d.conv_kernel = 4, d.chunk_size = 64;
  return d;
}

struct Pair {
  MambaDesc desc;
  MapLoader w;
  TestBackend host_be;
  cuda::CudaBackend gpu_be;
  Mamba2CudaFactory factory;
  std::unique_ptr<Mamba2Mixer> cpu;
  std::unique_ptr<Mixer> gpu;
  Pair(MambaDesc d, uint64_t seed) : desc(d), w(random_weights(d, kHidden, seed)) {
    cpu = std::make_unique<Mamba2Mixer>(desc, kHidden, w, host_be);
    CudaLoader cl(w, gpu_be);
    LayerDesc ld;
    ld.kind = LayerKind::Mamba;
    ld.mamba = desc;
    gpu = factory.create(ld, kHidden, cl, gpu_be);
  }

  std::vector<float> run_cpu(Mamba2State& st, const std::vector<float>& x, int r0, int n, ForwardMode m,
                             int commit = -1) {
    std::vector<float> xin(x.begin() + r0 * kHidden, x.begin() + (r0 + n) * kHidden), out(size_t(n) * kHidden);
    const ForwardInfo info{st.pos(), n, m};
    cpu->forward(Tensor::f32(xin.data(), n, kHidden), Tensor::f32(out.data(), n, kHidden), st, info);
    cpu->commit(st, info, commit < 0 ? n : commit);
    return out;
  }
  // commit < 0: commit all; commit = −2: leave pending.
  std::vector<float> run_gpu(Mamba2CudaState& st, const std::vector<float>& x, int r0, int n, ForwardMode m,
                             int commit = -1) {
    std::vector<float> xin(x.begin() + r0 * kHidden, x.begin() + (r0 + n) * kHidden);
    auto dx = gpu_be.alloc(xin.size() * 4), dout = gpu_be.alloc(xin.size() * 4);
    gpu_be.upload(dx->data(), xin.data(), xin.size() * 4);
    std::vector<float> nan(xin.size(), NAN);
    gpu_be.upload(dout->data(), nan.data(), nan.size() * 4);
    const ForwardInfo info{st.pos(), n, m};
    gpu->forward(Tensor::f32(static_cast<float*>(dx->data()), n, kHidden),
                 Tensor::f32(static_cast<float*>(dout->data()), n, kHidden), st, info);
    if (commit != -2) gpu->commit(st, info, commit < 0 ? n : commit);
    std::vector<float> out(xin.size());
    gpu_be.download(out.data(), dout->data(), out.size() * 4);
    return out;
  }
  std::unique_ptr<Mamba2CudaState> fresh_gpu() {
    return std::unique_ptr<Mamba2CudaState>(static_cast<Mamba2CudaState*>(gpu->new_state(1024).release()));
  }
  Mamba2State fresh_cpu() const { return Mamba2State(cpu->dims()); }
};

// max |got − ref| / max |ref|.
double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  double scale = 1e-30, m = 0;
  for (float v : ref) scale = std::max(scale, double(std::abs(v)));
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    m = std::max(m, std::abs(double(got[i]) - ref[i]));
  }
  return m / scale;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// The CPU mixer (fp32 with double matmul and norm) against the GPU's fp32: 1e-4 of the largest value.
constexpr double kTol = 1e-4;
double g_worst = 0;
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  const double e = rel_err(got, want);
  g_worst = std::max(g_worst, e);
  EXPECT_LT(e, kTol) << what;
}

TEST(Mamba2Cuda, PrefillMatchesCpuAcrossChunkShapes) {
  TANDEM_SKIP_WITHOUT_CUDA();
  for (bool wide : {false, true}) {
    Pair L(wide ? wide_desc() : small_desc(), wide ? 11 : 7);
    for (int n : {1, 15, 16, 37, 130}) {
      auto x = random_vec(size_t(n) * kHidden, 100 + n);
      Mamba2State cs = L.fresh_cpu();
      auto gs = L.fresh_gpu();
      auto want = L.run_cpu(cs, x, 0, n, ForwardMode::Prefill);
      auto got = L.run_gpu(*gs, x, 0, n, ForwardMode::Prefill);
      const std::string what = std::string(wide ? "wide" : "small") + " n=" + std::to_string(n);
      expect_close(got, want, "output, " + what);
      expect_close(gs->download_ssm(), cs.ssm(), "ssm state, " + what);
      expect_close(gs->download_conv(), cs.conv(), "conv window, " + what);
      // A second prefill continues from the cached state.
      auto x2 = random_vec(size_t(33) * kHidden, 200 + n);
      expect_close(L.run_gpu(*gs, x2, 0, 33, ForwardMode::Prefill), L.run_cpu(cs, x2, 0, 33, ForwardMode::Prefill),
                   "second prefill, " + what);
      expect_close(gs->download_ssm(), cs.ssm(), "ssm after second prefill, " + what);
    }
  }
  std::printf("[measure] mamba2 cuda vs cpu mixer: max |Δ|/max|ref| = %.3g (tolerance %.3g)\n", g_worst, kTol);
}

TEST(Mamba2Cuda, VerifyMatchesCpu) {
  TANDEM_SKIP_WITHOUT_CUDA();
  for (bool wide : {false, true}) {
    Pair L(wide ? wide_desc() : small_desc(), 21);
    auto x = random_vec(size_t(28) * kHidden, 300);
    Mamba2State cs = L.fresh_cpu();
    auto gs = L.fresh_gpu();
    L.run_cpu(cs, x, 0, 20, ForwardMode::Prefill);
    L.run_gpu(*gs, x, 0, 20, ForwardMode::Prefill);
    expect_close(L.run_gpu(*gs, x, 20, 8, ForwardMode::Verify), L.run_cpu(cs, x, 20, 8, ForwardMode::Verify),
                 wide ? "verify wide" : "verify small");
    expect_close(gs->download_ssm(), cs.ssm(), "ssm after verify");
    expect_close(gs->download_conv(), cs.conv(), "conv after verify");
  }
}

// A verify pass of k+1 tokens against k+1 single committed steps: every row bit for bit, and
// commit(n) leaves the state (conv window and SSM) of n steps, from which the next step continues.
TEST(Mamba2Cuda, VerifyIsBatchInvariantAndCommitIsExact) {
  TANDEM_SKIP_WITHOUT_CUDA();
  for (bool wide : {false, true}) {
    Pair L(wide ? wide_desc() : small_desc(), 31);
    const int p0 = 20, steps = 16;
    auto x = random_vec(size_t(p0 + steps + 1) * kHidden, 400);
    auto plain = L.fresh_gpu();
    L.run_gpu(*plain, x, 0, p0, ForwardMode::Prefill);
    std::vector<std::vector<float>> out, ssm{plain->download_ssm()}, conv{plain->download_conv()};
    for (int t = 0; t < steps; ++t) {
      out.push_back(L.run_gpu(*plain, x, p0 + t, 1, ForwardMode::Verify));
      ssm.push_back(plain->download_ssm());
      conv.push_back(plain->download_conv());
    }
    for (int k = 1; k <= 15; ++k) {
      auto st = L.fresh_gpu();
      L.run_gpu(*st, x, 0, p0, ForwardMode::Prefill);
      auto all = L.run_gpu(*st, x, p0, k + 1, ForwardMode::Verify, -2);
      for (int i = 0; i <= k; ++i)
        EXPECT_TRUE(same_bits(std::vector<float>(all.begin() + i * kHidden, all.begin() + (i + 1) * kHidden),
                              out[size_t(i)]))
            << "k " << k << " row " << i;
      const int n = (k * 7) % (k + 2);
      L.gpu->commit(*st, ForwardInfo{p0, k + 1, ForwardMode::Verify}, n);
      EXPECT_TRUE(same_bits(st->download_ssm(), ssm[size_t(n)])) << "ssm after commit(" << n << ") of " << k + 1;
      EXPECT_TRUE(same_bits(st->download_conv(), conv[size_t(n)])) << "conv after commit(" << n << ") of " << k + 1;
      EXPECT_TRUE(same_bits(L.run_gpu(*st, x, p0 + n, 1, ForwardMode::Verify), out[size_t(n)]))
          << "step after commit(" << n << ") of " << k + 1;
    }
  }
}

// Prefill passes split on the chunk grid give the bits of one pass, as long as every part takes the
// same dense-matmul kernel (above 16 rows; decode-sized passes use the batch-invariant GEMV).
TEST(Mamba2Cuda, PrefillSplitOnChunkGridIsBitExact) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Pair L(small_desc(), 41);
  auto x = random_vec(size_t(80) * kHidden, 500);
  auto one = L.fresh_gpu(), two = L.fresh_gpu();
  auto whole = L.run_gpu(*one, x, 0, 80, ForwardMode::Prefill);
  auto a = L.run_gpu(*two, x, 0, 48, ForwardMode::Prefill);
  auto b = L.run_gpu(*two, x, 48, 32, ForwardMode::Prefill);
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_TRUE(same_bits(a, whole));
  EXPECT_TRUE(same_bits(one->download_ssm(), two->download_ssm()));
}

TEST(Mamba2Cuda, CommitRulesAreEnforced) {
  TANDEM_SKIP_WITHOUT_CUDA();
  Pair L(small_desc(), 51);
  auto x = random_vec(size_t(8) * kHidden, 600);
  auto st = L.fresh_gpu();
  EXPECT_THROW(L.gpu->commit(*st, ForwardInfo{0, 1, ForwardMode::Verify}, 1), Error);
  L.run_gpu(*st, x, 0, 5, ForwardMode::Prefill, -2);
  EXPECT_THROW(L.gpu->commit(*st, ForwardInfo{0, 5, ForwardMode::Prefill}, 3), Error);
  L.gpu->commit(*st, ForwardInfo{0, 5, ForwardMode::Prefill}, 5);
  EXPECT_EQ(st->pos(), 5);
  Mamba2State cpu_state = L.fresh_cpu();
  std::vector<float> buf(kHidden);
  EXPECT_THROW(L.gpu->forward(Tensor::f32(buf.data(), 1, kHidden), Tensor::f32(buf.data(), 1, kHidden), cpu_state,
                              ForwardInfo{0, 1, ForwardMode::Verify}),
               Error);
}

}  // namespace
}  // namespace tandem::mamba2::test
