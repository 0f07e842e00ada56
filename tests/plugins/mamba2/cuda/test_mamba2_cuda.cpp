// The Mamba2 CUDA mixer against the CPU mixer on the same random weights (prefill across chunk
// shapes, verify, commit), and the GPU's own bit-exactness: a verify pass of n tokens gives the bits
// of n single steps, and commit(n) leaves the state those steps leave. The fused verify kernel
// (launch_verify_fused) is also held to the bits of the separate kernels it replaces
// (TANDEM_MAMBA2_UNFUSED_VERIFY=1) at small, odd and Bolt-sized dims, to graph replay after commits,
// and, batched over sequences (forward_batch), to each sequence's own pass.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "cuda_probe.h"
#include "fakes.h"
#include "formats/safetensors/dense_cuda.h"
#include "mixer_cpu.h"
#include "mixer_cuda.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "rel_err.h"
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

// The mixer dims of Nemotron-H "Bolt" (hidden 4096 there; the tests keep hidden small, which only
// sizes the two matmuls): 128 heads of 64, 8 groups, state 128, d_inner 8192, conv_dim 10240.
MambaDesc bolt_desc() {
  MambaDesc d;
  d.n_heads = 128, d.head_dim = 64, d.n_groups = 8, d.state_size = 128, d.conv_kernel = 4, d.chunk_size = 128;
  return d;
}
// Ragged shapes for the fused kernel: P = 40 fills one 32-row block and 8 rows of a second, N = 200
// is no multiple of 32 (8 registers per lane), 3 groups, K = 3, no conv bias, projection biases.
MambaDesc odd_desc() {
  MambaDesc d;
  d.n_heads = 6, d.head_dim = 40, d.n_groups = 3, d.state_size = 200, d.conv_kernel = 3, d.chunk_size = 16;
  d.conv_bias = false, d.proj_bias = true;
  return d;
}
const char* desc_name(const MambaDesc& d) {
  return d.n_heads == 128 ? "bolt" : d.n_heads == 6 ? "odd" : d.state_size == 128 ? "wide" : "small";
}

struct Pair {
  MambaDesc desc;
  MapLoader w;
  TestBackend host_be;
  cuda::CudaBackend gpu_be;
  Mamba2CudaFactory factory;
  std::unique_ptr<Mamba2Mixer> cpu;
  std::unique_ptr<Mixer> gpu;
  std::unique_ptr<Mixer> gpu_unfused;  // the same weights through the separate verify kernels
  Pair(MambaDesc d, uint64_t seed) : desc(d), w(random_weights(d, kHidden, seed)) {
    cpu = std::make_unique<Mamba2Mixer>(desc, kHidden, w, host_be);
    CudaLoader cl(w, gpu_be);
    LayerDesc ld;
    ld.kind = LayerKind::Mamba;
    ld.mamba = desc;
    gpu = factory.create(ld, kHidden, cl, gpu_be);
    // The switch is read when a mixer is built.
    setenv("TANDEM_MAMBA2_UNFUSED_VERIFY", "1", 1);
    gpu_unfused = factory.create(ld, kHidden, cl, gpu_be);
    unsetenv("TANDEM_MAMBA2_UNFUSED_VERIFY");
  }
  Mamba2CudaMixer& fused() { return static_cast<Mamba2CudaMixer&>(*gpu); }

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
                             int commit = -1, Mixer* mixer = nullptr) {
    Mixer& mx = mixer ? *mixer : *gpu;
    std::vector<float> xin(x.begin() + r0 * kHidden, x.begin() + (r0 + n) * kHidden);
    auto dx = gpu_be.alloc(xin.size() * 4), dout = gpu_be.alloc(xin.size() * 4);
    gpu_be.upload(dx->data(), xin.data(), xin.size() * 4);
    std::vector<float> nan(xin.size(), NAN);
    gpu_be.upload(dout->data(), nan.data(), nan.size() * 4);
    const ForwardInfo info{st.pos(), n, m};
    mx.forward(Tensor::f32(static_cast<float*>(dx->data()), n, kHidden),
               Tensor::f32(static_cast<float*>(dout->data()), n, kHidden), st, info);
    if (commit != -2) mx.commit(st, info, commit < 0 ? n : commit);
    std::vector<float> out(xin.size());
    gpu_be.download(out.data(), dout->data(), out.size() * 4);
    return out;
  }
  std::unique_ptr<Mamba2CudaState> fresh_gpu() {
    return std::unique_ptr<Mamba2CudaState>(static_cast<Mamba2CudaState*>(gpu->new_state(1024).release()));
  }
  Mamba2State fresh_cpu() const { return Mamba2State(cpu->dims()); }
};

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

// Prefill runs the tensor-core SSD scan (ssd_cuda.cu, chunks of ssd_chunk_len(chunk_size) tokens);
// the CPU mixer runs its fp32 chunked scan with chunks of chunk_size. Lengths straddle both chunk
// grids; 300 tokens at chunk 16 take 19 chunks (two workspace segments).
TEST(Mamba2Cuda, PrefillMatchesCpuAcrossChunkShapes) {
  TANDEM_SKIP_WITHOUT_CUDA();
  uint64_t seed = 7;
  for (const MambaDesc& desc : {small_desc(), wide_desc(), odd_desc(), bolt_desc()}) {
    Pair L(desc, seed += 4);
    for (int n : {1, 15, 16, 37, 65, 130, 300}) {
      auto x = random_vec(size_t(n) * kHidden, 100 + n);
      Mamba2State cs = L.fresh_cpu();
      auto gs = L.fresh_gpu();
      auto want = L.run_cpu(cs, x, 0, n, ForwardMode::Prefill);
      auto got = L.run_gpu(*gs, x, 0, n, ForwardMode::Prefill);
      const std::string what = std::string(desc_name(desc)) + " n=" + std::to_string(n);
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
  for (const MambaDesc& desc : {small_desc(), wide_desc(), odd_desc(), bolt_desc()}) {
    SCOPED_TRACE(desc_name(desc));
    Pair L(desc, 31);
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

// forward_batch's one fused launch for all sequences (grid z = sequence, launches of at most
// kVerifyBatchMax passes) against each sequence's own pass on a twin state: output rows, SSM state
// and conv window bit for bit, with passes of different lengths and commits of different sizes, at 3
// and 16 sequences (at most 16 rows: the batch-invariant regime of the two matmuls around the kernel,
// Model::batch_max_rows). At 19 sequences (two launches, 19 rows: in_proj then runs its wider tiling,
// whose bits differ) within kTol of the solo passes. Scratch and logs are NaN before every batched pass.
TEST(Mamba2Cuda, BatchedFusedVerifyEqualsSoloPasses) {
  TANDEM_SKIP_WITHOUT_CUDA();
  for (const MambaDesc& desc : {odd_desc(), bolt_desc()}) {
    for (int B : {3, 16, 19}) {
      const bool exact = B <= 16;
      SCOPED_TRACE(std::string(desc_name(desc)) + " B=" + std::to_string(B));
      Pair L(desc, 83);
      std::vector<std::unique_ptr<Mamba2CudaState>> batched, solo;
      std::vector<std::vector<float>> xs;
      for (int b = 0; b < B; ++b) {
        const int p0 = 5 + 3 * b;
        xs.push_back(random_vec(size_t(p0 + 64) * kHidden, 900 + uint64_t(b)));
        batched.push_back(L.fresh_gpu());
        solo.push_back(L.fresh_gpu());
        L.run_gpu(*batched.back(), xs.back(), 0, p0, ForwardMode::Prefill);
        L.run_gpu(*solo.back(), xs.back(), 0, p0, ForwardMode::Prefill);
      }
      for (int step = 0; step < 3; ++step) {
        std::vector<ForwardInfo> infos;
        std::vector<LayerState*> states;
        std::vector<float> xin;
        for (int b = 0; b < B; ++b) {
          const int n = B <= 4 ? 1 + (b + step) % 4 : 1;
          infos.push_back(ForwardInfo{batched[size_t(b)]->pos(), n, ForwardMode::Verify});
          states.push_back(batched[size_t(b)].get());
          const auto& x = xs[size_t(b)];
          xin.insert(xin.end(), x.begin() + infos.back().pos0 * kHidden, x.begin() + (infos.back().pos0 + n) * kHidden);
        }
        const int64_t rows = int64_t(xin.size()) / kHidden;
        auto dx = L.gpu_be.alloc(xin.size() * 4), dout = L.gpu_be.alloc(xin.size() * 4);
        L.gpu_be.upload(dx->data(), xin.data(), xin.size() * 4);
        std::vector<float> nan(xin.size(), NAN);
        L.gpu_be.upload(dout->data(), nan.data(), nan.size() * 4);
        for (auto& st : batched) st->poison_logs();
        L.fused().poison_scratch();
        L.gpu->forward_batch(Tensor::f32(static_cast<float*>(dx->data()), rows, kHidden),
                             Tensor::f32(static_cast<float*>(dout->data()), rows, kHidden), states, infos);
        std::vector<float> got(xin.size());
        L.gpu_be.download(got.data(), dout->data(), got.size() * 4);
        int64_t r0 = 0;
        for (int b = 0; b < B; ++b) {
          const ForwardInfo& i = infos[size_t(b)];
          const int accept = (b + 2 * step) % (i.n + 1);
          L.gpu->commit(*batched[size_t(b)], i, accept);
          auto want = L.run_gpu(*solo[size_t(b)], xs[size_t(b)], int(i.pos0), i.n, ForwardMode::Verify, accept);
          const std::vector<float> rows(got.begin() + r0 * kHidden, got.begin() + (r0 + i.n) * kHidden);
          const auto ssm = batched[size_t(b)]->download_ssm(), conv = batched[size_t(b)]->download_conv();
          const auto want_ssm = solo[size_t(b)]->download_ssm(), want_conv = solo[size_t(b)]->download_conv();
          const std::string what = "step " + std::to_string(step) + " sequence " + std::to_string(b);
          if (exact) {
            EXPECT_TRUE(same_bits(rows, want)) << what << ": rows";
            EXPECT_TRUE(same_bits(ssm, want_ssm)) << what << ": ssm after commit(" << accept << ")";
            EXPECT_TRUE(same_bits(conv, want_conv)) << what << ": conv after commit(" << accept << ")";
          } else {
            EXPECT_LT(rel_err(rows, want), kTol) << what << ": rows";
            EXPECT_LT(rel_err(ssm, want_ssm), kTol) << what << ": ssm after commit(" << accept << ")";
            EXPECT_LT(rel_err(conv, want_conv), kTol) << what << ": conv after commit(" << accept << ")";
          }
          r0 += i.n;
        }
      }
    }
  }
}

// The fused verify kernel against the CPU mixer (within kTol) and against the separate kernels it
// replaces (bit for bit: output, SSM state and conv window after every commit), through passes of
// n = 1, 2, 5, 16 with full, partial and empty accepts. Logs and scratch are NaN before every fused
// pass, so an entry the kernel fails to write reaches the output or the committed state.
TEST(Mamba2Cuda, FusedVerifyMatchesCpuAndSeparateKernels) {
  TANDEM_SKIP_WITHOUT_CUDA();
  struct Pass {
    int n, accept;
  };
  const Pass passes[] = {{1, 1}, {2, 1}, {5, 3}, {16, 16}, {16, 7}, {5, 0}, {1, 1}, {2, 2}};
  for (const MambaDesc& desc : {small_desc(), wide_desc(), odd_desc(), bolt_desc()}) {
    SCOPED_TRACE(desc_name(desc));
    Pair L(desc, 61);
    const int p0 = 20;
    auto x = random_vec(size_t(p0 + 64) * kHidden, 700);
    Mamba2State cs = L.fresh_cpu();
    auto fs = L.fresh_gpu(), us = L.fresh_gpu();
    L.run_cpu(cs, x, 0, p0, ForwardMode::Prefill);
    L.run_gpu(*fs, x, 0, p0, ForwardMode::Prefill);
    L.run_gpu(*us, x, 0, p0, ForwardMode::Prefill, -1, L.gpu_unfused.get());
    double worst_out = 0, worst_ssm = 0, worst_conv = 0;
    int r = p0, mismatches = 0;
    for (const Pass& ps : passes) {
      const std::string what = std::string(desc_name(desc)) + " n=" + std::to_string(ps.n) + " at " +
                               std::to_string(r) + " accept " + std::to_string(ps.accept);
      fs->poison_logs();
      L.fused().poison_scratch();
      auto got = L.run_gpu(*fs, x, r, ps.n, ForwardMode::Verify, ps.accept);
      auto sep = L.run_gpu(*us, x, r, ps.n, ForwardMode::Verify, ps.accept, L.gpu_unfused.get());
      auto want = L.run_cpu(cs, x, r, ps.n, ForwardMode::Verify, ps.accept);
      const double e_out = rel_err(got, want), e_ssm = rel_err(fs->download_ssm(), cs.ssm()),
                   e_conv = rel_err(fs->download_conv(), cs.conv());
      worst_out = std::max(worst_out, e_out), worst_ssm = std::max(worst_ssm, e_ssm);
      worst_conv = std::max(worst_conv, e_conv);
      EXPECT_LT(e_out, kTol) << "output vs cpu, " << what;
      EXPECT_LT(e_ssm, kTol) << "ssm vs cpu, " << what;
      EXPECT_LT(e_conv, kTol) << "conv vs cpu, " << what;
      const bool out_same = same_bits(got, sep), ssm_same = same_bits(fs->download_ssm(), us->download_ssm()),
                 conv_same = same_bits(fs->download_conv(), us->download_conv());
      mismatches += !out_same + !ssm_same + !conv_same;
      EXPECT_TRUE(out_same) << "output vs separate kernels, " << what;
      EXPECT_TRUE(ssm_same) << "ssm vs separate kernels, " << what;
      EXPECT_TRUE(conv_same) << "conv vs separate kernels, " << what;
      EXPECT_EQ(fs->pos(), cs.pos()) << what;
      r += ps.accept;
    }
    std::printf("[measure] mamba2 fused verify, %s: max |Δ|/max|ref| vs cpu: out %.3g, ssm %.3g, conv %.3g "
                "(tolerance %.3g); %d of %d comparisons with the separate kernels differ in any bit\n",
                desc_name(desc), worst_out, worst_ssm, worst_conv, kTol, mismatches,
                3 * int(sizeof(passes) / sizeof(passes[0])));
  }
}

// A verify pass recorded once in a CUDA graph and replayed after commits of every size (all, some,
// none) reads the committed window and state through the selectors and finds the group counters
// reset: each replay gives the bits of the same pass run directly on a twin state.
TEST(Mamba2Cuda, FusedVerifyGraphReplaysAfterCommits) {
  TANDEM_SKIP_WITHOUT_CUDA();
  for (const MambaDesc& desc : {small_desc(), bolt_desc()}) {
    SCOPED_TRACE(desc_name(desc));
    Pair L(desc, 71);
    if (!L.gpu_be.graphs_off_reason().empty()) GTEST_SKIP() << L.gpu_be.graphs_off_reason();
    const int p0 = 20, n = 5;
    auto x = random_vec(size_t(p0 + 64) * kHidden, 800);
    auto gs = L.fresh_gpu(), ps = L.fresh_gpu();
    L.run_gpu(*gs, x, 0, p0, ForwardMode::Prefill);
    L.run_gpu(*ps, x, 0, p0, ForwardMode::Prefill);
    // One direct pass of n on each first: logs and scratch reach their size, so the capture allocates
    // nothing.
    L.run_gpu(*gs, x, p0, n, ForwardMode::Verify);
    L.run_gpu(*ps, x, p0, n, ForwardMode::Verify);
    auto dx = L.gpu_be.alloc(size_t(n) * kHidden * 4), dout = L.gpu_be.alloc(size_t(n) * kHidden * 4);
    const Tensor tx = Tensor::f32(static_cast<float*>(dx->data()), n, kHidden);
    const Tensor tout = Tensor::f32(static_cast<float*>(dout->data()), n, kHidden);
    ASSERT_TRUE(L.gpu_be.begin_capture());
    L.gpu->forward(tx, tout, *gs, ForwardInfo{gs->pos(), n, ForwardMode::Verify});
    auto graph = L.gpu_be.end_capture();
    ASSERT_TRUE(graph) << "the verify pass could not be recorded";
    int r = p0 + n;
    for (int accept : {5, 2, 0, 3, 1, 5, 4, 0, 5}) {
      const std::string what = "replay at " + std::to_string(r) + " accept " + std::to_string(accept);
      L.gpu_be.upload(dx->data(), x.data() + size_t(r) * kHidden, size_t(n) * kHidden * 4);
      std::vector<float> out(size_t(n) * kHidden, NAN);
      L.gpu_be.upload(dout->data(), out.data(), out.size() * 4);
      graph->launch();
      L.gpu_be.download(out.data(), dout->data(), out.size() * 4);
      L.gpu->commit(*gs, ForwardInfo{gs->pos(), n, ForwardMode::Verify}, accept);
      auto want = L.run_gpu(*ps, x, r, n, ForwardMode::Verify, accept);
      EXPECT_TRUE(same_bits(out, want)) << "output, " << what << " (rel err " << rel_err(out, want) << ")";
      EXPECT_TRUE(same_bits(gs->download_ssm(), ps->download_ssm())) << "ssm, " << what;
      EXPECT_TRUE(same_bits(gs->download_conv(), ps->download_conv())) << "conv, " << what;
      r += accept;
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
