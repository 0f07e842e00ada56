// Timing for the GPU benchmarks (bench_*_cuda): median milliseconds per call on the per-thread
// stream, eagerly and through one captured graph. Owner: none. Thread: one caller. Sync: each timing
// synchronizes on its events. Include from .cu files only.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace tandem::test {

inline void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda error %s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double time_stream(F fn, int calls) {
  const cudaStream_t s = cudaStreamPerThread;
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  for (int i = 0; i < calls; ++i) fn(i);  // warm-up
  std::vector<double> t;
  for (int rep = 0; rep < 7; ++rep) {
    ck(cudaEventRecord(a, s), "record");
    for (int i = 0; i < calls; ++i) fn(i);
    ck(cudaEventRecord(b, s), "record");
    ck(cudaEventSynchronize(b), "sync");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t.push_back(double(ms) / calls);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// The same through one captured graph of `calls` launches; 0 when capture is refused.
template <class F>
double time_graph(F fn, int calls) {
  const cudaStream_t s = cudaStreamPerThread;
  cudaGraph_t graph;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  for (int i = 0; i < calls; ++i) fn(i);
  if (cudaStreamEndCapture(s, &graph) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaGraphExec_t exec;
  if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaGraphDestroy(graph);
    return 0;
  }
  const double ms = time_stream([&](int) { ck(cudaGraphLaunch(exec, s), "graph launch"); }, 1) / calls;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms;
}

}  // namespace tandem::test
