// Decode-GEMV bandwidth of the GGUF CUDA kernels against the device's copy bandwidth: the three
// matrices that dominate NVIDIA's 2-bit Bolt file at one activation row (NVFP4 in_proj 18560×4096,
// IQ2_XXS shared expert 5376×4096, Q8_0 lm_head 131072×4096), then a table of every block type and
// the verify/gather shapes, then the prefill GEMMs (--prefill: those alone). A benchmark, not a test:
// run it on the GPU machine. Weights rotate over enough copies to exceed the L2 several times; each
// time is the median of 7 runs of CUDA-graph replays (launch gaps excluded) and, beside it, of plain
// stream launches. --tc: the tensor-core NVFP4 and Q8_0 GEMV (formats/gguf/gemv_tc_cuda.cuh, the
// format's default for 1..16 rows) beside the fp32 and mma GEMVs on the same weights, then the IQ2_XXS
// prototype (gemv_tc_iq2_cuda.cuh) and its grouped MoE gather beside the fp32 gather.
#include <cuda_runtime.h>

#include <algorithm>
#include <random>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "formats/gguf/gemv_tc_cuda.cuh"
#include "formats/gguf/gemv_tc_iq2_cuda.cuh"
#include "formats/gguf/gguf_format_cuda.h"
#include "formats/gguf/mma_cuda.cuh"
#include "cuda_timing.cuh"
#include "gguf_cuda_test_util.h"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"

using namespace tandem;
using namespace tandem::gguf;
namespace gt = tandem::gguf::test;
using tandem::test::ck;
using tandem::test::time_graph;
using tandem::test::time_stream;

namespace {

__global__ void read_kernel(const uint4* p, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = p[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads
}

struct Ceilings {
  double copy_gbs = 0, read_gbs = 0;
};

Ceilings measure_ceilings() {
  const size_t bytes = size_t(2) << 30;
  void *a, *b;
  unsigned* out;
  ck(cudaMalloc(&a, bytes), "malloc");
  ck(cudaMalloc(&b, bytes), "malloc");
  ck(cudaMalloc(&out, 4), "malloc");
  ck(cudaMemset(a, 1, bytes), "memset");
  const cudaStream_t s = cudaStreamPerThread;
  Ceilings c;
  const double copy_ms =
      time_stream([&](int) { ck(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s), "copy"); }, 5);
  c.copy_gbs = 2.0 * double(bytes) / (copy_ms * 1e6);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const double read_ms = time_stream(
      [&](int) {
        read_kernel<<<sms * 8, 512, 0, s>>>(static_cast<const uint4*>(a), bytes / 16, out);
      },
      5);
  c.read_gbs = double(bytes) / (read_ms * 1e6);
  cudaFree(a);
  cudaFree(b);
  cudaFree(out);
  return c;
}

struct Result {
  double stream_ms, graph_ms, gbytes;
};

// y[n, m] = x · Wᵀ for a `type` weight [m, k], rotating over copies that exceed 256 MB together.
Result bench_matmul(cuda::CudaBackend& be, const std::string& type, int64_t m, int64_t k, int64_t n) {
  gt::Stored st = gt::make_stored(type, m, k, 1234);
  const size_t bytes = st.bytes.size();
  const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / bytes + 1));
  std::vector<std::unique_ptr<QuantizedTensor>> w;
  for (int c = 0; c < copies; ++c) w.push_back(load_gguf_cuda(st.raw(), *find_type(type), nullptr, be));
  gt::Dev x = gt::upload(be, tandem::test::random_vec(size_t(n * k), 5, -1.f, 1.f));
  gt::Dev y = gt::poisoned(be, size_t(n * m));
  auto call = [&](int i) {
    w[size_t(i % copies)]->matmul(Tensor::f32(x.p(), n, k), Tensor::f32(y.p(), n, m));
  };
  const int calls = std::max(copies, 20);
  Result r;
  r.stream_ms = time_stream(call, calls);
  r.graph_ms = time_graph(call, calls);
  r.gbytes = double(bytes) / 1e9;
  for (float v : gt::download(be, y))
    if (std::isnan(v)) {
      std::fprintf(stderr, "%s: unwritten output\n", type.c_str());
      std::exit(3);
    }
  return r;
}

// The MoE up projection of one decode step: 1 token, `used` experts of [m, k] out of `experts`.
Result bench_gather(cuda::CudaBackend& be, const std::string& type, int experts, int used, int64_t m, int64_t k,
                    int64_t tokens) {
  std::vector<uint8_t> stack = gt::random_weight(type, m * experts, k, 99);
  const size_t per = stack.size() / size_t(experts);
  std::vector<RawTensor> raws;
  for (int e = 0; e < experts; ++e)
    raws.push_back(RawTensor{"e" + std::to_string(e), type, {m, k}, stack.data() + size_t(e) * per, per, ""});
  std::vector<const RawTensor*> ex, sc(size_t(experts), nullptr);
  for (auto& r : raws) ex.push_back(&r);
  auto set = load_gguf_experts_cuda(ex, sc, be);
  const int rounds = 16;  // different experts each call, so the L2 holds none of them
  std::vector<int32_t> ids;
  for (int c = 0; c < rounds; ++c)
    for (int64_t t = 0; t < tokens * used; ++t) ids.push_back(int32_t((c * 131 + t * 7) % experts));
  auto dids = be.alloc(ids.size() * 4);
  be.upload(dids->data(), ids.data(), ids.size() * 4);
  gt::Dev x = gt::upload(be, tandem::test::random_vec(size_t(tokens * k), 5, -1.f, 1.f));
  gt::Dev y = gt::poisoned(be, size_t(tokens * used * m));
  auto call = [&](int i) {
    set->gather_matmul(Tensor::f32(x.p(), tokens, k),
                       static_cast<int32_t*>(dids->data()) + size_t(i % rounds) * size_t(tokens * used), used,
                       Tensor::f32(y.p(), tokens * used, m));
  };
  Result r;
  r.stream_ms = time_stream(call, 32);
  r.graph_ms = time_graph(call, 32);
  r.gbytes = double(per) * double(tokens * used) / 1e9;  // rows read (an expert picked twice counts twice)
  return r;
}

void row(const char* what, const Result& r, const Ceilings& c) {
  const double ms = r.graph_ms > 0 ? r.graph_ms : r.stream_ms;
  const double gbs = r.gbytes / (ms * 1e-3);
  std::printf("%-44s %9.2f MB  graph %8.2f us  stream %8.2f us  %7.0f GB/s  %5.1f%% of copy  %5.1f%% of read\n", what,
              r.gbytes * 1e3, r.graph_ms * 1e3, r.stream_ms * 1e3, gbs, 100 * gbs / c.copy_gbs,
              100 * gbs / c.read_gbs);
}

// Prefill on the tensor cores (gemm_cuda.cuh): µs per call and TFLOP/s (2·m·k·rows, the GEMM's useful
// work; the hi + lo split runs twice as many tensor-core products).
void prefill_row(const char* what, const Result& r, int64_t m, int64_t k, int64_t rows) {
  const double ms = r.graph_ms > 0 ? r.graph_ms : r.stream_ms;
  std::printf("%-52s graph %9.1f us  stream %9.1f us  %7.1f TFLOP/s\n", what, r.graph_ms * 1e3, r.stream_ms * 1e3,
              2.0 * double(m) * double(k) * double(rows) / (ms * 1e-3) / 1e12);
}

// `only`: a comma-separated list of types to time (empty: every type); `narrow_only`: the short
// chunks on narrow matrices alone.
void bench_prefill(cuda::CudaBackend& be, const std::string& only, bool narrow_only = false) {
  auto wanted = [&](const char* t) {
    return only.empty() || ("," + only + ",").find("," + std::string(t) + ",") != std::string::npos;
  };
  std::printf("-- prefill: tensor-core GEMM and grouped gathers (512 tokens) --\n");
  for (const char* t : {"IQ2_XXS", "NVFP4", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "IQ3_XXS", "IQ3_S",
                        "IQ2_XS", "IQ2_S", "IQ1_M"}) {
    if (!wanted(t) || narrow_only) continue;
    for (int64_t n : {64, 512}) {
      const std::string name = std::string(t) + " in_proj [18560, 4096] n=" + std::to_string(n);
      prefill_row(name.c_str(), bench_matmul(be, t, 18560, 4096, n), 18560, 4096, n);
    }
    const std::string up = std::string(t) + " routed up 512 x 9 of 128 [2304, 1024]";
    prefill_row(up.c_str(), bench_gather(be, t, 128, 9, 2304, 1024, 512), 2304, 1024, 512 * 9);
    const std::string down = std::string(t) + " routed down 512 x 9 of 128 [1024, 2304]";
    prefill_row(down.c_str(), bench_gather(be, t, 128, 9, 1024, 2304, 512), 1024, 2304, 512 * 9);
  }
  // Short chunks on matrices of few 128-row tiles (a chat turn's few hundred tokens): whether the
  // grid fills the GPU; the weights' GB/s beside the TFLOP/s (a chunk this short is bound by one or
  // the other).
  std::printf("-- prefill: short chunks on narrow matrices (weights GB/s) --\n");
  struct Narrow {
    const char* what;
    int64_t m, k;
  };
  for (const char* t : {"NVFP4", "Q8_0", "Q4_K"}) {
    if (!wanted(t)) continue;
    for (Narrow sh : {Narrow{"out_proj", 4096, 8192}, Narrow{"latent down", 1024, 4096}})
      for (int64_t n : {32, 128, 512}) {
        const Result r = bench_matmul(be, t, sh.m, sh.k, n);
        const double ms = r.graph_ms > 0 ? r.graph_ms : r.stream_ms;
        std::printf("%-8s %-12s [%5lld, %5lld] n=%-4lld %3lld tiles of 128  graph %8.1f us  %6.1f TFLOP/s  %6.0f GB/s\n",
                    t, sh.what, (long long)sh.m, (long long)sh.k, (long long)n,
                    (long long)(((sh.m + 127) / 128) * ((n + 127) / 128)), ms * 1e3,
                    2.0 * double(sh.m) * double(sh.k) * double(n) / (ms * 1e-3) / 1e12, r.gbytes / (ms * 1e-3));
      }
  }
}

// Enough copies of `bytes` to rotate past the L2 several times (256 MiB in all).
int copies_past_l2(size_t bytes) { return int(std::max<size_t>(1, (size_t(256) << 20) / bytes + 1)); }
// `copies` device copies of host bytes, each with `pad` bytes of slack after it.
std::vector<void*> upload_copies(const std::vector<uint8_t>& host, int copies, size_t pad) {
  std::vector<void*> out(size_t(copies), nullptr);
  for (void*& p : out) {
    ck(cudaMalloc(&p, host.size() + pad), "malloc");
    ck(cudaMemcpy(p, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  }
  return out;
}

// The tensor-core GEMV (gemv_tc_cuda.cuh; what the format runs for 1..16 rows of dense NVFP4 and
// Q8_0) against the fp32 GEMV (TANDEM_GGUF_TC=0) and the opt-in mma GEMV, called directly on the same
// random weights (the same copies rotated past the L2), n = 1 .. 16. The tc bytes are its repack.
// Its outputs are compared with the fp32 GEMV's at the end of each row (max |Δ| over max |y|).
template <class Dec>
void bench_tc_shape(const Ceilings& c, const char* type, int64_t m, int64_t k) {
  const cudaStream_t s = cudaStreamPerThread;
  const kcuda::TcType tt = *kcuda::tc_type_of(type);
  const std::vector<uint8_t> blocks = gt::random_weight(type, m, k, 77);
  const std::vector<uint8_t> rp = kcuda::repack_tc(tt, blocks.data(), m, k, "bench");
  const kcuda::TcShape ts = kcuda::tc_shape(tt, m, k);
  const kcuda::TcPlan plan = kcuda::tc_plan(ts);
  const int copies = copies_past_l2(blocks.size());
  const std::vector<void*> raw = upload_copies(blocks, copies, 64), tc = upload_copies(rp, copies, 0);
  void *ws, *cnt, *x, *y0, *y1;
  ck(cudaMalloc(&ws, ts.workspace_bytes()), "malloc");
  ck(cudaMalloc(&cnt, ts.counters() * 4), "malloc");
  ck(cudaMemset(cnt, 0, ts.counters() * 4), "memset");
  const std::vector<float> xv = tandem::test::random_vec(size_t(16 * k), 5, -1.f, 1.f);
  ck(cudaMalloc(&x, xv.size() * 4), "malloc");
  ck(cudaMemcpy(x, xv.data(), xv.size() * 4, cudaMemcpyHostToDevice), "upload");
  ck(cudaMalloc(&y0, size_t(16 * m) * 4), "malloc");
  ck(cudaMalloc(&y1, size_t(16 * m) * 4), "malloc");
  const int calls = std::max(copies, 20);
  auto tc_run = [&](int i, int64_t n, const kcuda::TcPlan& pl) {
    kcuda::launch_gemv_tc(static_cast<const uint8_t*>(tc[size_t(i % copies)]), ts, static_cast<const float*>(x),
                          static_cast<float*>(y1), n, 1.0f, 0, static_cast<float*>(ws), static_cast<unsigned*>(cnt), s,
                          &pl);
  };
  for (int64_t n : {1, 2, 4, 8, 16}) {
    CudaMatmulArgs a;
    a.m = m, a.k = k, a.row_bytes = row_bytes(*find_type(type), k), a.n = n;
    a.x = static_cast<const float*>(x), a.y = static_cast<float*>(y0);
    auto fp32 = [&](int i) {
      a.w = static_cast<const uint8_t*>(raw[size_t(i % copies)]);
      kcuda::matmul_impl<Dec>(a, s);
    };
    auto mma = [&](int i) {
      a.w = static_cast<const uint8_t*>(raw[size_t(i % copies)]);
      kcuda::launch_mma_gemv<Dec>(a, s);
    };
    auto tcg = [&](int i) { tc_run(i, n, plan); };
    const double t0 = time_graph(fp32, calls), t1 = time_graph(mma, calls), t2 = time_graph(tcg, calls);
    std::vector<float> r0(size_t(n * m)), r1(size_t(n * m));
    fp32(0), tcg(0);
    ck(cudaStreamSynchronize(s), "sync");
    ck(cudaMemcpy(r0.data(), y0, r0.size() * 4, cudaMemcpyDeviceToHost), "download");
    ck(cudaMemcpy(r1.data(), y1, r1.size() * 4, cudaMemcpyDeviceToHost), "download");
    double dmax = 0, ymax = 0;
    for (size_t i = 0; i < r0.size(); ++i) {
      dmax = std::max(dmax, std::isnan(r1[i]) ? INFINITY : std::abs(double(r1[i]) - r0[i]));
      ymax = std::max(ymax, std::abs(double(r0[i])));
    }
    const double gb = double(blocks.size()) / 1e9, gbt = double(ts.bytes()) / 1e9;
    std::printf("%s [%lld, %lld] n=%-2lld  fp32 %7.2f us %5.0f GB/s | mma %7.2f us %5.0f GB/s | "
                "tc %7.2f us %5.0f GB/s (%4.1f%% of copy)  tc vs fp32 %.1e\n",
                type, (long long)m, (long long)k, (long long)n, t0 * 1e3, gb / (t0 * 1e-3), t1 * 1e3,
                gb / (t1 * 1e-3), t2 * 1e3, gbt / (t2 * 1e-3), 100 * gbt / (t2 * 1e-3) / c.copy_gbs, dmax / ymax);
  }
  // The one tuning knob: tiles per warp (the plan's occupancy-based choice first).
  for (int64_t n : {1, 16})
    for (int tpw : {0, 1, 2, 3, 4, 6}) {
      kcuda::TcPlan pl = plan;
      if (tpw) pl.tiles_per_warp[0] = pl.tiles_per_warp[1] = tpw;
      const double t = time_graph([&](int i) { tc_run(i, n, pl); }, calls);
      std::printf("  tc n=%-2lld tiles_per_warp %d%s: %7.2f us %5.0f GB/s\n", (long long)n,
                  pl.tiles_per_warp[n > 8 ? 1 : 0], tpw ? "" : " (auto)", t * 1e3, double(ts.bytes()) / 1e9 / (t * 1e-3));
    }
  for (int i = 0; i < copies; ++i) cudaFree(raw[size_t(i)]), cudaFree(tc[size_t(i)]);
  cudaFree(ws), cudaFree(cnt), cudaFree(x), cudaFree(y0), cudaFree(y1);
}
void bench_tc(const Ceilings& c) {
  std::printf("-- decode GEMV: fp32 (TANDEM_GGUF_TC=0) | mma (TANDEM_GGUF_MMA) | tc (the default, gemv_tc_cuda.cuh) --\n");
  bench_tc_shape<kcuda::DecNVFP4>(c, "NVFP4", 18560, 4096);  // Bolt's Mamba in_proj
  bench_tc_shape<kcuda::DecNVFP4>(c, "NVFP4", 4096, 8192);   // and out_proj
  bench_tc_shape<kcuda::DecQ8_0>(c, "Q8_0", 4096, 4096);     // an attention projection's size
  bench_tc_shape<kcuda::DecQ8_0>(c, "Q8_0", 131072, 4096);   // lm_head
}

// max |y1 − y0| over max |y0| for n device floats each (NaN in y1: infinity), after the stream's work.
double max_rel_diff(const void* y0, const void* y1, size_t n, cudaStream_t s) {
  std::vector<float> r0(n), r1(n);
  ck(cudaStreamSynchronize(s), "sync");
  ck(cudaMemcpy(r0.data(), y0, n * 4, cudaMemcpyDeviceToHost), "download");
  ck(cudaMemcpy(r1.data(), y1, n * 4, cudaMemcpyDeviceToHost), "download");
  double dmax = 0, ymax = 0;
  for (size_t i = 0; i < n; ++i) {
    dmax = std::max(dmax, std::isnan(r1[i]) ? INFINITY : std::abs(double(r1[i]) - r0[i]));
    ymax = std::max(ymax, std::abs(double(r0[i])));
  }
  return dmax / ymax;
}

// The tensor-core IQ2_XXS GEMV prototype (gemv_tc_iq2_cuda.cuh) against the fp32 and mma GEMVs on
// Bolt's shared expert, a [4096, 4096] and a routed expert, n = 1 .. 16 (copies rotated past the L2);
// then its grouped gather against the fp32 gather on Bolt's routed experts (346 of [2304, 1024] up and
// [1024, 2304] down, top-9, random distinct experts per token, 32 id sets so the L2 holds few). The
// gathers' GB/s count each distinct expert's bytes once (what a step must read).
void bench_tc_iq2(const Ceilings& c) {
  std::printf("-- IQ2_XXS decode GEMV: fp32 (default) | mma (TANDEM_GGUF_MMA) | tc prototype (gemv_tc_iq2_cuda.cuh) --\n");
  const cudaStream_t s = cudaStreamPerThread;
  void *grid, *tab;
  const std::vector<uint8_t> tables = kcuda::iq2tc_tables();
  ck(cudaMalloc(&grid, sizeof(iq2tc_tables_detail::iq2xxs_grid)), "malloc");
  ck(cudaMemcpy(grid, iq2tc_tables_detail::iq2xxs_grid, sizeof(iq2tc_tables_detail::iq2xxs_grid),
                cudaMemcpyHostToDevice), "upload");
  ck(cudaMalloc(&tab, tables.size()), "malloc");
  ck(cudaMemcpy(tab, tables.data(), tables.size(), cudaMemcpyHostToDevice), "upload");
  const int64_t shapes[4][2] = {{5376, 4096}, {4096, 5376}, {4096, 4096}, {2304, 1024}};
  for (const auto& sh : shapes) {
    const int64_t m = sh[0], k = sh[1];
    const std::vector<uint8_t> blocks = gt::random_weight("IQ2_XXS", m, k, 78);
    const std::vector<uint8_t> rp = kcuda::repack_iq2_xxs_tc(blocks.data(), m, k, "bench");
    const kcuda::Iq2TcShape ts = kcuda::iq2tc_shape(m, k);
    const int copies = copies_past_l2(blocks.size());
    const std::vector<void*> raw = upload_copies(blocks, copies, 64), tc = upload_copies(rp, copies, 0);
    void *ws, *x, *y0, *y1;
    ck(cudaMalloc(&ws, ts.workspace_bytes()), "malloc");
    ck(cudaMemset(ws, 0, ts.workspace_bytes()), "memset");
    const std::vector<float> xv = tandem::test::random_vec(size_t(16 * k), 5, -1.f, 1.f);
    ck(cudaMalloc(&x, xv.size() * 4), "malloc");
    ck(cudaMemcpy(x, xv.data(), xv.size() * 4, cudaMemcpyHostToDevice), "upload");
    ck(cudaMalloc(&y0, size_t(16 * m) * 4), "malloc");
    ck(cudaMalloc(&y1, size_t(16 * m) * 4), "malloc");
    const int calls = std::max(copies, 20);
    for (int64_t n : {1, 2, 4, 8, 16}) {
      CudaMatmulArgs a;
      a.m = m, a.k = k, a.row_bytes = k / 256 * 66, a.n = n, a.grid = grid;
      a.x = static_cast<const float*>(x), a.y = static_cast<float*>(y0);
      auto fp32 = [&](int i) {
        a.w = static_cast<const uint8_t*>(raw[size_t(i % copies)]);
        kcuda::matmul_impl<kcuda::DecIQ2_XXS>(a, s);
      };
      auto mma = [&](int i) {
        a.w = static_cast<const uint8_t*>(raw[size_t(i % copies)]);
        kcuda::launch_mma_gemv<kcuda::DecIQ2_XXS>(a, s);
      };
      auto tcg = [&](int i) {
        kcuda::launch_gemv_tc_iq2(static_cast<const uint8_t*>(tc[size_t(i % copies)]), ts, tab,
                                  static_cast<const float*>(x), static_cast<float*>(y1), n, 1.0f, 0, ws, s);
      };
      const double t0 = time_graph(fp32, calls), t1 = time_graph(mma, calls), t2 = time_graph(tcg, calls);
      fp32(0), tcg(0);
      const double diff = max_rel_diff(y0, y1, size_t(n * m), s);
      const double gb = double(blocks.size()) / 1e9, gbt = double(ts.bytes()) / 1e9;
      std::printf("IQ2_XXS [%lld, %lld] n=%-2lld  fp32 %7.2f us %5.0f GB/s | mma %7.2f us %5.0f GB/s | "
                  "tc %7.2f us %5.0f GB/s (%4.1f%% of copy)  tc vs fp32 %.1e\n",
                  (long long)m, (long long)k, (long long)n, t0 * 1e3, gb / (t0 * 1e-3), t1 * 1e3, gb / (t1 * 1e-3),
                  t2 * 1e3, gbt / (t2 * 1e-3), 100 * gbt / (t2 * 1e-3) / c.copy_gbs, diff);
    }
    for (int64_t n : {1, 16})
      for (int tpw : {0, 1, 2, 4}) {
        auto tcg = [&](int i) {
          kcuda::launch_gemv_tc_iq2(static_cast<const uint8_t*>(tc[size_t(i % copies)]), ts, tab,
                                    static_cast<const float*>(x), static_cast<float*>(y1), n, 1.0f, 0, ws, s, tpw);
        };
        const double t = time_graph(tcg, calls);
        std::printf("  tc n=%-2lld tiles_per_warp %d%s: %7.2f us %5.0f GB/s\n", (long long)n,
                    tpw ? tpw : kcuda::iq2tc_tiles_per_warp(ts, n > 8 ? 2 : 1, 1), tpw ? "" : " (auto)", t * 1e3,
                    double(ts.bytes()) / 1e9 / (t * 1e-3));
      }
    for (int i = 0; i < copies; ++i) cudaFree(raw[size_t(i)]), cudaFree(tc[size_t(i)]);
    cudaFree(ws), cudaFree(x), cudaFree(y0), cudaFree(y1);
  }

  std::printf("-- IQ2_XXS MoE gather, Bolt routed experts (346, top-9): fp32 gather | tc grouped gather --\n");
  const int E = 346, used = 9, rounds = 32;
  const int64_t gshapes[2][2] = {{2304, 1024}, {1024, 2304}};
  for (const auto& sh : gshapes) {
    const int64_t m = sh[0], k = sh[1];
    const std::vector<uint8_t> stack = gt::random_weight("IQ2_XXS", m * E, k, 99);
    const kcuda::Iq2TcShape ts = kcuda::iq2tc_shape(m, k);
    const int64_t per = m * (k / 256 * 66), eb = int64_t(ts.bytes());
    std::vector<uint8_t> rstack(size_t(E * eb));
    for (int e = 0; e < E; ++e) {
      const std::vector<uint8_t> rp = kcuda::repack_iq2_xxs_tc(stack.data() + e * per, m, k, "bench");
      std::copy(rp.begin(), rp.end(), rstack.begin() + e * eb);
    }
    void *raw, *rtc, *ws, *x, *y0, *y1, *ids;
    ck(cudaMalloc(&raw, stack.size() + 64), "malloc");
    ck(cudaMemcpy(raw, stack.data(), stack.size(), cudaMemcpyHostToDevice), "upload");
    ck(cudaMalloc(&rtc, rstack.size()), "malloc");
    ck(cudaMemcpy(rtc, rstack.data(), rstack.size(), cudaMemcpyHostToDevice), "upload");
    const size_t wsb = ts.workspace_bytes(int64_t(kcuda::kTcMaxRows) * used);
    ck(cudaMalloc(&ws, wsb), "malloc");
    ck(cudaMemset(ws, 0, wsb), "memset");
    const std::vector<float> xv = tandem::test::random_vec(size_t(16 * k), 5, -1.f, 1.f);
    ck(cudaMalloc(&x, xv.size() * 4), "malloc");
    ck(cudaMemcpy(x, xv.data(), xv.size() * 4, cudaMemcpyHostToDevice), "upload");
    ck(cudaMalloc(&y0, size_t(16 * used * m) * 4), "malloc");
    ck(cudaMalloc(&y1, size_t(16 * used * m) * 4), "malloc");
    ck(cudaMalloc(&ids, size_t(rounds * 16 * used) * 4), "malloc");
    for (int64_t tokens : {1, 4, 16}) {
      std::mt19937_64 rng{uint64_t(tokens)};
      std::vector<int32_t> hid(size_t(rounds * tokens * used));
      double distinct = 0;  // mean distinct experts per call
      for (int r = 0; r < rounds; ++r) {
        std::vector<char> any(E, 0);
        for (int64_t t = 0; t < tokens; ++t) {
          std::vector<char> taken(E, 0);
          for (int j = 0; j < used; ++j) {
            int e;
            do e = int(rng() % E);
            while (taken[size_t(e)]);
            taken[size_t(e)] = 1, any[size_t(e)] = 1;
            hid[size_t((r * tokens + t) * used + j)] = e;
          }
        }
        distinct += double(std::count(any.begin(), any.end(), 1)) / rounds;
      }
      ck(cudaMemcpy(ids, hid.data(), hid.size() * 4, cudaMemcpyHostToDevice), "upload");
      auto ids_of = [&](int i) { return static_cast<const int32_t*>(ids) + size_t(i % rounds) * size_t(tokens * used); };
      CudaMatmulArgs a;
      a.m = m, a.k = k, a.row_bytes = k / 256 * 66, a.n = tokens * used, a.grid = grid;
      a.w = static_cast<const uint8_t*>(raw), a.per_x = used, a.n_experts = E, a.expert_bytes = per;
      a.x = static_cast<const float*>(x), a.y = static_cast<float*>(y0);
      auto fp32 = [&](int i) {
        a.ids = ids_of(i);
        kcuda::gather_impl<kcuda::DecIQ2_XXS>(a, s);
      };
      auto tcg = [&](int i) {
        kcuda::launch_gather_tc_iq2(static_cast<const uint8_t*>(rtc), eb, E, nullptr, ts, tab,
                                    static_cast<const float*>(x), ids_of(i), used, static_cast<float*>(y1), tokens,
                                    1.0f, 0, ws, s);
      };
      const double t0 = time_graph(fp32, 64), t1 = time_graph(tcg, 64);
      fp32(0), tcg(0);
      const double diff = max_rel_diff(y0, y1, size_t(tokens * used * m), s);
      const double gb = distinct * double(per) / 1e9;
      std::printf("IQ2_XXS gather [%lld, %lld] %2lld tokens x %d (%.1f distinct)  fp32 %7.2f us %5.0f GB/s | "
                  "tc %7.2f us %5.0f GB/s (%4.1f%% of copy)  tc vs fp32 %.1e\n",
                  (long long)m, (long long)k, (long long)tokens, used, distinct, t0 * 1e3, gb / (t0 * 1e-3),
                  t1 * 1e3, gb / (t1 * 1e-3), 100 * gb / (t1 * 1e-3) / c.copy_gbs, diff);
    }
    cudaFree(raw), cudaFree(rtc), cudaFree(ws), cudaFree(x), cudaFree(y0), cudaFree(y1), cudaFree(ids);
  }
  cudaFree(grid), cudaFree(tab);
}

// --llama: the llama activation mode (TANDEM_GGUF_ACTIVATIONS=llama at load: Q8_K activations and
// the __dp4a kernels of llama_act_cuda.cu, the rounding kernel's time included) beside the default
// fp32 path on the same weights, for the Bolt routed experts (346, top-9; up [2304, 1024], down
// [1024, 2304]) and the shared expert's dense matrices.
void bench_llama(cuda::CudaBackend& be, const Ceilings& c) {
  std::printf("-- IQ2_XXS: fp32 activations (default) | llama mode (Q8_K + dp4a), CUDA-graph replays --\n");
  auto both = [&](const std::string& what, const std::function<Result()>& f) {
    unsetenv("TANDEM_GGUF_ACTIVATIONS");
    const Result a = f();
    setenv("TANDEM_GGUF_ACTIVATIONS", "llama", 1);
    const Result b = f();
    unsetenv("TANDEM_GGUF_ACTIVATIONS");
    std::printf("%-44s fp32 %8.2f us %6.0f GB/s | llama %8.2f us %6.0f GB/s (%4.1f%% of copy)  %.2fx\n",
                what.c_str(), a.graph_ms * 1e3, a.gbytes / (a.graph_ms * 1e-3), b.graph_ms * 1e3,
                b.gbytes / (b.graph_ms * 1e-3), 100 * b.gbytes / (b.graph_ms * 1e-3) / c.copy_gbs,
                a.graph_ms / b.graph_ms);
  };
  for (int64_t n : {1, 4, 8, 16}) {
    both("dense [5376, 4096] n=" + std::to_string(n), [&] { return bench_matmul(be, "IQ2_XXS", 5376, 4096, n); });
    both("dense [4096, 5376] n=" + std::to_string(n), [&] { return bench_matmul(be, "IQ2_XXS", 4096, 5376, n); });
  }
  for (int64_t t : {1, 4, 8, 16}) {
    both("gather up [2304, 1024] " + std::to_string(t) + " x 9 of 346",
         [&] { return bench_gather(be, "IQ2_XXS", 346, 9, 2304, 1024, t); });
    both("gather down [1024, 2304] " + std::to_string(t) + " x 9 of 346",
         [&] { return bench_gather(be, "IQ2_XXS", 346, 9, 1024, 2304, t); });
  }
}

}  // namespace

// Arguments: none (everything), --short (the three decode matrices), --prefill [T1,T2,…] (the prefill
// GEMMs, of those types only when named), --narrow [T1,…] (its short chunks on narrow matrices alone),
// --llama (the llama activation mode's IQ2_XXS kernels beside the fp32 ones),
// --tc (the tensor-core NVFP4 and Q8_0 GEMV beside the fp32 and mma GEMVs, then the IQ2_XXS prototype
// and its grouped gather beside the fp32 ones).

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows survive a later abort
  const bool all = !(argc > 1 && std::strcmp(argv[1], "--short") == 0);
  cudaDeviceProp prop;
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s, %d SMs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
  cuda::CudaBackend be;
  if (argc > 1 && std::strcmp(argv[1], "--narrow") == 0) {
    bench_prefill(be, argc > 2 ? argv[2] : "", true);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--prefill") == 0) {
    bench_prefill(be, argc > 2 ? argv[2] : "");
    return 0;
  }
  const Ceilings c = measure_ceilings();
  std::printf("ceilings: device-to-device copy %.0f GB/s (read + write), read-only kernel %.0f GB/s\n", c.copy_gbs,
              c.read_gbs);
  if (argc > 1 && std::strcmp(argv[1], "--llama") == 0) {
    bench_llama(be, c);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--tc") == 0) {
    bench_tc(c);
    bench_tc_iq2(c);
    return 0;
  }
  std::printf("-- decode GEMV, 1 activation row (PyTorch [out, in]; ggml ne {in, out}) --\n");
  row("NVFP4   [18560, 4096] n=1 (ssm_in)", bench_matmul(be, "NVFP4", 18560, 4096, 1), c);
  row("IQ2_XXS [5376, 4096]  n=1 (shared up)", bench_matmul(be, "IQ2_XXS", 5376, 4096, 1), c);
  row("Q8_0    [131072, 4096] n=1 (lm_head)", bench_matmul(be, "Q8_0", 131072, 4096, 1), c);
  if (!all) return 0;
  row("NVFP4   [4096, 18560] n=1 (transposed)", bench_matmul(be, "NVFP4", 4096, 18560, 1), c);
  row("IQ2_XXS [4096, 5376]  n=1 (shared down)", bench_matmul(be, "IQ2_XXS", 4096, 5376, 1), c);
  std::printf("-- every block type, [16384, 4096], n=1 --\n");
  for (const char* t : {"F32", "F16", "BF16", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS",
                        "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_M", "NVFP4"}) {
    const std::string name = std::string(t) + " [16384, 4096] n=1";
    row(name.c_str(), bench_matmul(be, t, 16384, 4096, 1), c);
  }
  std::printf("-- verify and prefill (rows of x) --\n");
  for (int64_t n : {4, 8, 16, 64}) {
    for (const char* t : {"IQ2_XXS", "NVFP4", "Q8_0"}) {
      const std::string name = std::string(t) + " [16384, 4096] n=" + std::to_string(n);
      row(name.c_str(), bench_matmul(be, t, 16384, 4096, n), c);
    }
  }
  std::printf("-- MoE gather: 22 of 512 experts (Bolt: latent 1024, expert width 2688) --\n");
  row("IQ2_XXS gather, 1 token x 22 experts", bench_gather(be, "IQ2_XXS", 512, 22, 2688, 1024, 1), c);
  row("IQ2_XXS gather, 16 tokens x 22 experts", bench_gather(be, "IQ2_XXS", 512, 22, 2688, 1024, 16), c);
  row("IQ2_XXS gather [1024, 2560], 1 x 22", bench_gather(be, "IQ2_XXS", 512, 22, 1024, 2560, 1), c);
  row("NVFP4 gather [2688, 1024], 1 x 22", bench_gather(be, "NVFP4", 512, 22, 2688, 1024, 1), c);
  bench_prefill(be, "");
  return 0;
}
