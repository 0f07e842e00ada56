// Dense BF16/F16 matmul on the GPU (kernels/cuda/dense.cu: the tensor-core kernels of dense_tc.cu,
// or with --simt the SIMT GEMV and tiled kernel they replaced) against the device's copy bandwidth:
// the model widths [4096, 4096], [12288, 4096], [4096, 12288], [4096, 24576] and the small router
// [496, 4096] at n = 1, 8, 16, 64 and 2048 rows of x. A benchmark, not a test: run it on the GPU
// machine. Weights rotate over enough copies to exceed the L2 several times; each time is the median
// of 7 runs of CUDA-graph replays (launch gaps excluded) and, beside it, of plain stream launches.
// Prints µs, weight GB/s (and % of the copy bandwidth) and TFLOP/s (2·m·k·n, the useful work; the hi +
// mid + lo split runs three times as many tensor-core products). --variants times every tensor-core
// variant (tandem/cuda/util.h) at n = 1, 2, 4, 8, 16, 32, 64 (graph replays only) and prints, for each,
// the largest |y − y_default| over the call's outputs, which must be 0 (the variants share one contract).
//   bench_dense_cuda [--f16] [--simt] [--short] [--variants]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_timing.cuh"
#include "tandem/cuda/dense.cuh"
#include "tandem/cuda/util.h"

using namespace tandem;
using tandem::test::ck;
using tandem::test::time_graph;
using tandem::test::time_stream;

namespace {

uint64_t next(uint64_t& s) {
  s ^= s << 13, s ^= s >> 7, s ^= s << 17;
  return s;
}

// Random weights of magnitude in [2^-7, 1) as raw 16-bit patterns.
std::vector<uint16_t> random_weight(bool f16, size_t count, uint64_t seed) {
  std::vector<uint16_t> v(count);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& h : v) {
    const uint64_t r = next(s);
    const uint16_t sign = uint16_t((r >> 63) << 15);
    if (f16) h = uint16_t(sign | uint16_t((8 + (r >> 32) % 7) << 10) | uint16_t(r & 0x3FF));
    else h = uint16_t(sign | uint16_t((120 + (r >> 32) % 7) << 7) | uint16_t(r & 0x7F));
  }
  return v;
}

double copy_gbs() {
  const size_t bytes = size_t(1) << 30;
  void *a, *b;
  ck(cudaMalloc(&a, bytes), "malloc");
  ck(cudaMalloc(&b, bytes), "malloc");
  ck(cudaMemset(a, 1, bytes), "memset");
  const double ms = time_stream(
      [&](int) { ck(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cudaStreamPerThread), "copy"); }, 5);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(bytes) / (ms * 1e6);
}

// One timed problem: enough copies of a random [m, k] weight to defeat L2 (≥ 256 MiB), a random x of
// n rows and an output y, freed with the problem.
struct Problem {
  cuda::WType t;
  int64_t m, k, n;
  size_t bytes;
  int copies;
  std::vector<void*> w;
  float *x = nullptr, *y = nullptr;
  Problem(bool f16, int64_t m_, int64_t k_, int64_t n_, uint64_t seed)
      : t(f16 ? cuda::WType::F16 : cuda::WType::BF16), m(m_), k(k_), n(n_), bytes(size_t(m_ * k_) * 2),
        copies(int(std::max<size_t>(1, (size_t(256) << 20) / bytes + 1))), w(size_t(copies), nullptr) {
    const std::vector<uint16_t> host = random_weight(f16, size_t(m * k), uint64_t(m * 31 + k));
    for (void*& p : w) {
      ck(cudaMalloc(&p, bytes), "malloc weights");
      ck(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), "upload weights");
    }
    std::vector<float> hx(size_t(n * k));
    for (float& v : hx) v = float(int64_t(next(seed) % 2000001) - 1000000) * 1e-6f;
    ck(cudaMalloc(&x, hx.size() * 4), "malloc x");
    ck(cudaMalloc(&y, size_t(n * m) * 4), "malloc y");
    ck(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice), "upload x");
  }
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;
  ~Problem() {
    for (void* p : w) cudaFree(p);
    cudaFree(x);
    cudaFree(y);
  }
  // y = x · W_iᵀ with the i-th copy of the weight.
  void call(int i) const { cuda::launch_dense_matmul(t, w[size_t(i % copies)], m, k, x, n, y, cudaStreamPerThread); }
};

void bench(bool f16, int64_t m, int64_t k, int64_t n, double copy) {
  const Problem pr(f16, m, k, n, 12345);
  const size_t bytes = pr.bytes;
  const int copies = pr.copies;
  float* y = pr.y;
  ck(cudaMemset(y, 0xFF, size_t(n * m) * 4), "poison y");
  auto call = [&](int i) { pr.call(i); };
  const int calls = std::max(copies, n >= 1024 ? 4 : 20);
  const double stream_ms = time_stream(call, calls), graph_ms = time_graph(call, calls);
  std::vector<float> hy(size_t(n * m));
  ck(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost), "download y");
  for (float v : hy)
    if (std::isnan(v)) {
      std::fprintf(stderr, "[%lld, %lld] n=%lld: unwritten output\n", (long long)m, (long long)k, (long long)n);
      std::exit(3);
    }
  const double ms = graph_ms > 0 ? graph_ms : stream_ms;
  const double gbs = double(bytes) / (ms * 1e6);
  char name[64];
  std::snprintf(name, sizeof name, "%s [%lld, %lld] n=%lld", f16 ? "F16" : "BF16", (long long)m, (long long)k,
                (long long)n);
  std::printf("%-30s graph %9.2f us  stream %9.2f us  %7.0f GB/s  %5.1f%% of copy  %7.2f TFLOP/s\n", name,
              graph_ms * 1e3, stream_ms * 1e3, gbs, 100 * gbs / copy, 2.0 * double(m * k) * double(n) / (ms * 1e9));
}

// Every variant on one shape and row count: graph µs and % of copy, and the largest |Δ| of its output
// against the default variant's (bits: NaN counts as a difference). Returns false on any difference.
bool bench_variants(bool f16, int64_t m, int64_t k, int64_t n, double copy) {
  const Problem pr(f16, m, k, n, 12345 + uint64_t(n));
  const size_t bytes = pr.bytes;
  const int copies = pr.copies;
  float* y = pr.y;
  const std::string dflt = cuda::dense_tc_variant();
  std::vector<float> ref, hy(size_t(n * m));
  auto result = [&](const char* v) {
    cuda::set_dense_tc_variant(v);
    ck(cudaMemset(y, 0xFF, size_t(n * m) * 4), "poison y");
    pr.call(0);
    ck(cudaStreamSynchronize(cudaStreamPerThread), "matmul");
    ck(cudaMemcpy(hy.data(), y, hy.size() * 4, cudaMemcpyDeviceToHost), "download y");
  };
  result(dflt.c_str());
  ref = hy;
  bool same = true;
  std::printf("%s [%lld, %lld] n=%-3lld", f16 ? "F16" : "BF16", (long long)m, (long long)k, (long long)n);
  for (int i = 0; i < cuda::dense_tc_variant_count(); ++i) {
    const char* v = cuda::dense_tc_variant_name(i);
    result(v);
    double diff = 0;
    for (size_t j = 0; j < hy.size(); ++j) {
      if (std::memcmp(&hy[j], &ref[j], 4) == 0) continue;
      const double d = std::fabs(double(hy[j]) - double(ref[j]));
      diff = std::max(diff, std::isnan(d) ? INFINITY : d > 0 ? d : 1e-300);  // 1e-300: ±0, equal values
    }
    same = same && diff == 0;
    auto call = [&](int c) { pr.call(c); };
    const double ms = time_graph(call, std::max(copies, 20));
    const double gbs = double(bytes) / (ms * 1e6);
    std::printf("  %s %7.2f us %3.0f%%%s", v, ms * 1e3, 100 * gbs / copy, diff == 0 ? "" : " DIFF");
    if (diff != 0) std::printf("(%.3g)", diff);
  }
  std::printf("\n");
  cuda::set_dense_tc_variant(dflt.c_str());
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  bool f16 = false, simt = false, brief = false, variants = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--f16") == 0) f16 = true;
    else if (std::strcmp(argv[i], "--simt") == 0) simt = true;
    else if (std::strcmp(argv[i], "--short") == 0) brief = true;
    else if (std::strcmp(argv[i], "--variants") == 0) variants = true;
    else {
      std::fprintf(stderr, "usage: bench_dense_cuda [--f16] [--simt] [--short] [--variants]\n");
      return 1;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  // Read once by the first matmul: set before any.
  if (simt) setenv("TANDEM_CUDA_DENSE_SIMT", "1", 1);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  cudaDeviceProp prop;
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  const double copy = copy_gbs();
  std::printf("device: %s, %d SMs, L2 %.0f MB; copy %.0f GB/s (read + write); kernels: %s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize / 1e6, copy, simt ? "SIMT" : "tensor cores");
  struct Shape {
    int64_t m, k;
  };
  const Shape shapes[] = {{4096, 4096}, {12288, 4096}, {4096, 12288}, {4096, 24576}, {496, 4096}};
  if (variants) {
    std::printf("default variant: %s\n", cuda::dense_tc_variant());
    bool same = true;
    for (Shape s : shapes)
      for (int64_t n : {1, 2, 4, 8, 16, 32, 64}) same = bench_variants(f16, s.m, s.k, n, copy) && same;
    std::printf("variants %s\n", same ? "bit-identical to the default" : "DIFFER from the default");
    return same ? 0 : 4;
  }
  for (Shape s : shapes) {
    for (int64_t n : {1, 8, 16, 64, 2048}) {
      if (brief && n > 16 && n != 64) continue;
      if (simt && n == 2048 && s.k > 4096) continue;  // the SIMT GEMM takes seconds there
      bench(f16, s.m, s.k, n, copy);
    }
  }
  return 0;
}
