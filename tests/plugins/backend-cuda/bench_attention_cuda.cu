// The flash prefill attention (plugins/backend-cuda/attention_prefill_cuda.cu) at Nemotron-H's head
// shape (32 query heads, 2 kv heads, head dim 128): one pass of --rows rows (default 2048, the prefill
// chunk) after pos0 = 0, 6144, 14336, 30720 and 129024 earlier keys, as the chunks of 8k, 16k, 32k and
// 131k prompts read it. A benchmark, not a test: run it on the GPU machine. Prints the median µs of
// 7 timed runs of 3 calls (the fp16 split of the keys included), the useful TFLOP/s (4·nq·hd per
// visible (row, key) pair: Q·Kᵀ and P·V; the hi + lo split runs three times as many tensor-core
// products).
//   bench_attention_cuda [--rows N]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_timing.cuh"
#include "plugins/backend-cuda/kernels_cuda.cuh"

using tandem::test::ck;
using tandem::test::time_stream;

int main(int argc, char** argv) {
  int64_t rows = 2048;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_attention_cuda [--rows N]\n");
      return 2;
    }
  }
  const int nq = 32, nkv = 2, hd = 128;
  const int64_t max_pos0 = 129024, cap = max_pos0 + rows, qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  std::vector<float> host(size_t(cap * kw));
  uint64_t s = 88172645463325252ull;
  for (float& x : host) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = float(int64_t(s >> 40) % 2001 - 1000) / 1000.0f;
  }
  float *q, *kc, *vc, *out;
  void* ws;
  const size_t ws_bytes = tandem::cuda::attention_prefill_workspace_bytes(cap, nkv, hd);
  ck(cudaMalloc(&q, size_t(rows * qw) * 4), "q");
  ck(cudaMalloc(&kc, size_t(cap * kw) * 4), "k");
  ck(cudaMalloc(&vc, size_t(cap * kw) * 4), "v");
  ck(cudaMalloc(&out, size_t(rows * qw) * 4), "out");
  ck(cudaMalloc(&ws, ws_bytes), "ws");
  ck(cudaMemcpy(q, host.data(), size_t(rows * qw) * 4, cudaMemcpyHostToDevice), "q");
  ck(cudaMemcpy(kc, host.data(), size_t(cap * kw) * 4, cudaMemcpyHostToDevice), "k");
  ck(cudaMemcpy(vc, host.data(), size_t(cap * kw) * 4, cudaMemcpyHostToDevice), "v");
  tandem::cuda::prepare_attention_prefill();
  std::printf("flash prefill attention, nq %d nkv %d hd %d, %lld rows a pass\n", nq, nkv, hd, (long long)rows);
  for (int64_t pos0 : {int64_t(0), int64_t(6144), int64_t(14336), int64_t(30720), max_pos0}) {
    const double pairs = double(rows) * double(pos0) + double(rows) * double(rows + 1) / 2;  // visible (row, key)
    const double flop = 4.0 * nq * hd * pairs;
    const double us = 1000.0 * time_stream(  // ms per call
        [&](int) {
          tandem::cuda::launch_attention_prefill(q, kc, vc, rows, pos0, nq, nkv, hd, out, ws, ws_bytes,
                                                 cudaStreamPerThread);
        },
        3);
    std::printf("  pos0 %7lld: %9.1f us  %6.1f TFLOP/s useful (%.1f keys/row avg)\n", (long long)pos0, us,
                flop / us * 1e-6, pairs / double(rows));
  }
  ck(cudaDeviceSynchronize(), "sync");
  return 0;
}
