// The tensor-core SSD scan of prefill (plugins/mamba2/ssd_cuda.cu: launch_scan_chunked) against the
// CPU chunked scan (scan_cpu.h: scan_chunked) on fresh random inputs with a nonzero initial state: y
// and the final state within 1e-4 of the largest value, at lengths around the kernel's chunk (1, 17,
// Qc − 1, Qc, Qc + 1, 3·Qc + 5, 1000), one group, one group per head, and ragged P and N. Outputs,
// final state and workspace hold NaN before every launch, so an entry the kernels fail to write (or
// read before writing) shows. Passes split on the chunk grid give the bits of one pass.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_probe.h"
#include "rel_err.h"
#include "scan_cpu.h"
#include "scan_cuda.cuh"
#include "test_util.h"

namespace tandem::mamba2::test {
namespace {

using tandem::test::random_vec;

void ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

// A device copy of a host vector, freed at scope exit.
struct DevBuf {
  float* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t count) : n(count) { ok(cudaMalloc(&p, std::max<size_t>(n, 1) * 4), "cudaMalloc"); }
  DevBuf(const std::vector<float>& v) : DevBuf(v.size()) { put(v); }
  ~DevBuf() { cudaFree(p); }
  void put(const std::vector<float>& v) {
    ok(cudaMemcpyAsync(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice, cudaStreamPerThread), "upload");
  }
  void poison() { put(std::vector<float>(n, NAN)); }
  std::vector<float> get() const {
    std::vector<float> v(n);
    ok(cudaMemcpyAsync(v.data(), p, n * 4, cudaMemcpyDeviceToHost, cudaStreamPerThread), "download");
    ok(cudaStreamSynchronize(cudaStreamPerThread), "sync");
    return v;
  }
};

Dims dims_of(int nh, int P, int G, int N, int Q) {
  Dims dm;
  dm.nh = nh, dm.P = P, dm.G = G, dm.N = N, dm.K = 4, dm.Q = Q;
  dm.d_in = int64_t(nh) * P;
  dm.conv_dim = dm.d_in + 2 * int64_t(G) * N;
  dm.rows = dm.d_in + dm.conv_dim + nh;
  return dm;
}

// Random scan inputs of n positions: x, B, C in [−1, 1] with a row stride 3 past conv_dim, Δ in
// [0.005, 0.1] and A in [−8, −1] (Nemotron-H's ranges: Λ reaches about −50 over a chunk of 64), D in
// [−1, 1], and an initial state in [−1, 1].
struct Inputs {
  int64_t stride;
  std::vector<float> xbc, dt, a, d, s0;
  Inputs(const Dims& dm, int n, uint64_t seed)
      : stride(dm.conv_dim + 3),
        xbc(random_vec(size_t(std::max(n, 1) * stride), seed)),
        dt(random_vec(size_t(std::max(n, 1)) * dm.nh, seed + 1, 0.005f, 0.1f)),
        a(random_vec(size_t(dm.nh), seed + 2, -8.0f, -1.0f)),
        d(random_vec(size_t(dm.nh), seed + 3)),
        s0(random_vec(size_t(dm.nh) * dm.P * dm.N, seed + 4)) {}
};

struct GpuScan {
  std::vector<float> y, s;
};

// launch_scan_chunked of positions [r0, r0 + n) of `in`, from state s_from.
GpuScan run_gpu(const Dims& dm, const Inputs& in, int r0, int n, const std::vector<float>& s_from) {
  const std::vector<float> xbc(in.xbc.begin() + r0 * in.stride, in.xbc.begin() + (r0 + n) * in.stride);
  const std::vector<float> dt(in.dt.begin() + int64_t(r0) * dm.nh, in.dt.begin() + int64_t(r0 + n) * dm.nh);
  DevBuf dxbc(xbc), ddt(dt), da(in.a), dd(in.d), ds_in(s_from), ds_out(s_from.size());
  DevBuf dy(size_t(std::max(n, 1)) * dm.d_in), ws(scan_chunked_workspace_bytes(dm, n) / 4);
  ds_out.poison(), dy.poison(), ws.poison();
  const ScanInput si{dxbc.p, in.stride, ddt.p, n};
  launch_scan_chunked(dm, si, da.p, dd.p, ds_in.p, ds_out.p, dy.p, ws.p, cudaStreamPerThread);
  ok(cudaStreamSynchronize(cudaStreamPerThread), "scan_chunked");
  GpuScan out{dy.get(), ds_out.get()};
  out.y.resize(size_t(n) * dm.d_in);
  return out;
}

struct Shape {
  const char* name;
  int nh, P, G, N, Q;
};

TEST(Mamba2Cuda, SsdChunkedScanMatchesCpuScan) {
  TANDEM_SKIP_WITHOUT_CUDA();
  const Shape shapes[] = {
      {"small Q=16", 4, 8, 2, 16, 16},           // chunk 16: 1000 tokens take 63 chunks, 4 workspace segments
      {"one group Q=128", 8, 64, 1, 128, 128},   // Nemotron's chunk 128 → 64
      {"group per head Q=48", 6, 40, 6, 200, 48},  // ragged P and N (N no multiple of 8 or 32)
      {"P 130 N 72 Q=100", 3, 130, 1, 72, 100},  // three P tiles, two N tiles, chunk 50
      {"bolt", 128, 64, 8, 128, 128},
  };
  double worst_y = 0, worst_s = 0;
  uint64_t seed = 1000;
  for (const Shape& sh : shapes) {
    const Dims dm = dims_of(sh.nh, sh.P, sh.G, sh.N, sh.Q);
    const int qc = ssd_chunk_len(dm.Q);
    std::vector<int> lengths{1, 17, qc - 1, qc, qc + 1, 3 * qc + 5, 1000};
    if (sh.nh == 128) lengths = {17, qc + 1, 3 * qc + 5, 1000};  // the CPU scan is slow at Bolt's size
    for (int n : lengths) {
      const std::string what = std::string(sh.name) + " (chunk " + std::to_string(qc) + ") n=" + std::to_string(n);
      SCOPED_TRACE(what);
      const Inputs in(dm, n, seed += 10);
      std::vector<float> y(size_t(n) * dm.d_in), s(in.s0.size());
      scan_chunked(dm, ScanInput{in.xbc.data(), in.stride, in.dt.data(), n}, in.a.data(), in.d.data(), in.s0.data(),
                   s.data(), y.data());
      const GpuScan got = run_gpu(dm, in, 0, n, in.s0);
      const double ey = rel_err(got.y, y), es = rel_err(got.s, s);
      worst_y = std::max(worst_y, ey), worst_s = std::max(worst_s, es);
      EXPECT_LT(ey, 1e-4) << "y";
      EXPECT_LT(es, 1e-4) << "final state";
    }
  }
  std::printf("[measure] mamba2 ssd scan (3xTF32) vs cpu scan: max |Δ|/max|ref| y %.3g, state %.3g (tolerance 1e-4)\n",
              worst_y, worst_s);
}

// No work: the state is copied through, y untouched.
TEST(Mamba2Cuda, SsdChunkedScanOfNoTokensCopiesTheState) {
  TANDEM_SKIP_WITHOUT_CUDA();
  const Dims dm = dims_of(4, 8, 2, 16, 16);
  const Inputs in(dm, 0, 77);
  EXPECT_EQ(run_gpu(dm, in, 0, 0, in.s0).s, in.s0);
}

// Passes split at multiples of the model's chunk give the bits of one pass (scan_chunked's contract),
// here with chunk_size 128 (kernel chunk 64) and 1100 tokens (18 chunks: two workspace segments).
TEST(Mamba2Cuda, SsdChunkedScanSplitOnChunkGridIsBitExact) {
  TANDEM_SKIP_WITHOUT_CUDA();
  const Dims dm = dims_of(8, 64, 2, 128, 128);
  const int n = 1100;
  const Inputs in(dm, n, 99);
  const GpuScan whole = run_gpu(dm, in, 0, n, in.s0);
  for (int split : {128, 256, 768}) {
    const GpuScan a = run_gpu(dm, in, 0, split, in.s0);
    const GpuScan b = run_gpu(dm, in, split, n - split, a.s);
    std::vector<float> y = a.y;
    y.insert(y.end(), b.y.begin(), b.y.end());
    EXPECT_EQ(std::memcmp(y.data(), whole.y.data(), y.size() * 4), 0) << "y, split at " << split;
    EXPECT_EQ(std::memcmp(b.s.data(), whole.s.data(), b.s.size() * 4), 0) << "state, split at " << split;
  }
}

}  // namespace
}  // namespace tandem::mamba2::test
