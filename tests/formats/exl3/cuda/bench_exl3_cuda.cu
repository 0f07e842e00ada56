// Decode-GEMV time of the EXL3 CUDA kernels on Bolt-shape's matrices at the 2.0 pack's bit widths
// (spec/nemotron_h.md § 13.3–13.4, spec/formats.md § 5.10): Mamba in/out K=4, shared expert K=4,
// 9 routed experts per layer K=2 (width 2304, near Bolt-shape's mean 2285), lm_head K=6, all mul1.
// Prints µs per matrix at one activation row, the bandwidth as a fraction of the device's copy
// bandwidth, and the sum per token (40 Mamba + 40 MoE layers + head) to set against exllamav3's
// ~6.7 ms per token on an H200. A benchmark, not a test: run it on the GPU machine. Weights rotate
// over copies that exceed the L2; each time is the median of 7 runs of a CUDA graph of the calls
// (plain stream launches beside it). `--prefill` instead times the prefill GEMMs (dense matmuls and
// routed gathers at 2048 and 8192 rows) under the three implementations of TANDEM_EXL3_PREFILL (old, block
// and the row-scale default), µs and TFLOP/s.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "exl3_test_util.h"
#include "formats/exl3/exl3_format_cuda.h"
#include "formats/exl3/matmul_cuda.cuh"
#include "plugins/backend-cuda/cuda_backend.h"
#include "tandem/cuda/util.h"
#include "cuda_timing.cuh"
#include "test_util.h"

using namespace tandem;
using exl3_test::GroupBuilder;
using exl3_test::RandomLinear;
using test::ck;
using test::time_graph;
using test::time_stream;

namespace {

struct Result {
  double ms = 0, stream_ms = 0, graph_ms = 0, gbytes = 0;
};

struct Dev {
  std::unique_ptr<Buffer> buf;
  float* p() const { return static_cast<float*>(buf->data()); }
};
Dev upload(Backend& be, const std::vector<float>& v) {
  Dev d{be.alloc(v.size() * 4)};
  be.upload(d.buf->data(), v.data(), v.size() * 4);
  return d;
}

void finish(Result& r) { r.ms = r.graph_ms > 0 ? r.graph_ms : r.stream_ms; }

// y[n, out] = x · Wᵀ for a K-bit mul1 weight [out, in], rotating over copies that exceed 256 MB.
Result bench_matmul(cuda::CudaBackend& be, int64_t out, int64_t in, int K, int64_t n) {
  GroupBuilder b;
  RandomLinear(in, out, K, 2, 1234, 1.0 / std::sqrt(double(in))).store(b, "w");
  const TensorGroup g = b.group("w");
  auto first = exl3::load_exl3_cuda(g, be);
  const size_t bytes = first->bytes();
  const int copies = int(std::max<size_t>(1, (size_t(256) << 20) / bytes + 1));
  std::vector<std::unique_ptr<QuantizedTensor>> w;
  w.push_back(std::move(first));
  for (int c = 1; c < copies; ++c) w.push_back(exl3::load_exl3_cuda(g, be));
  Dev x = upload(be, test::random_vec(size_t(n * in), 5, -1.f, 1.f));
  Dev y = upload(be, std::vector<float>(size_t(n * out), NAN));
  auto call = [&](int i) { w[size_t(i % copies)]->matmul(Tensor::f32(x.p(), n, in), Tensor::f32(y.p(), n, out)); };
  const int calls = std::max(copies, 20);
  Result r;
  r.stream_ms = time_stream(call, calls);
  r.graph_ms = time_graph(call, calls);
  r.gbytes = double(bytes) / 1e9;
  finish(r);
  std::vector<float> host(size_t(n * out));
  be.download(host.data(), y.p(), host.size() * 4);
  for (float v : host)
    if (std::isnan(v)) {
      std::fprintf(stderr, "[%lld, %lld] K=%d: unwritten output\n", (long long)out, (long long)in, K);
      std::exit(3);
    }
  return r;
}

// One MoE projection of a decode step: `tokens` × `used` experts of [out, in] out of `experts`.
Result bench_gather(cuda::CudaBackend& be, int experts, int used, int64_t out, int64_t in, int K, int64_t tokens) {
  GroupBuilder b;
  std::vector<TensorGroup> groups;
  for (int e = 0; e < experts; ++e)
    RandomLinear(in, out, K, 2, uint64_t(77 + e), 1.0 / std::sqrt(double(in))).store(b, "e" + std::to_string(e));
  for (int e = 0; e < experts; ++e) groups.push_back(b.group("e" + std::to_string(e)));
  auto set = exl3::load_exl3_experts_cuda(groups, be);
  const int rounds = 16;  // different experts each call, so the L2 holds few of them
  std::vector<int32_t> ids;
  for (int c = 0; c < rounds; ++c)
    for (int64_t t = 0; t < tokens * used; ++t) ids.push_back(int32_t((c * 131 + t * 7) % experts));
  auto dids = be.alloc(ids.size() * 4);
  be.upload(dids->data(), ids.data(), ids.size() * 4);
  Dev x = upload(be, test::random_vec(size_t(tokens * in), 5, -1.f, 1.f));
  Dev y = upload(be, std::vector<float>(size_t(tokens * used * out), NAN));
  auto call = [&](int i) {
    set->gather_matmul(Tensor::f32(x.p(), tokens, in),
                       static_cast<int32_t*>(dids->data()) + size_t(i % rounds) * size_t(tokens * used), used,
                       Tensor::f32(y.p(), tokens * used, out));
  };
  Result r;
  r.stream_ms = time_stream(call, 32);
  r.graph_ms = time_graph(call, 32);
  r.gbytes = double(set->bytes()) / experts * double(tokens * used) / 1e9;
  finish(r);
  return r;
}

double g_copy_gbs = 0;

// ---- prefill (--prefill): TANDEM_EXL3_PREFILL's three implementations (old, block, row), same process ----

// µs per call of fn under each prefill implementation (stream launches, median of 7 runs of `calls`).
template <class F>
void prefill_row(const char* what, double flops, F fn, int calls) {
  using exl3::kcuda::PrefillImpl;
  const PrefillImpl impls[3] = {PrefillImpl::kOld, PrefillImpl::kBlockScale, PrefillImpl::kRowScale};
  double us[3];
  for (int i = 0; i < 3; ++i) {
    exl3::kcuda::set_prefill_impl(impls[i]);
    us[i] = time_stream(fn, calls) * 1e3;
  }
  // TFLOP/s: the model's 2·rows·out·in, and the tensor cores' work (×2: the input's hi + lo halves).
  std::printf("%-52s old %9.1f us %6.1f TF/s | block %9.1f us %6.1f TF/s (mma %6.1f) | %5.2fx | row scale %9.1f us "
              "%6.1f TF/s %5.2fx block\n",
              what, us[0], flops / us[0] * 1e-6, us[1], flops / us[1] * 1e-6, 2 * flops / us[1] * 1e-6, us[0] / us[1],
              us[2], flops / us[2] * 1e-6, us[1] / us[2]);
}

void check_written(const char* what, cuda::CudaBackend& be, const Dev& y, size_t count) {
  std::vector<float> host(count);
  be.download(host.data(), y.p(), count * 4);
  for (float v : host)
    if (std::isnan(v)) {
      std::fprintf(stderr, "%s: unwritten output\n", what);
      std::exit(3);
    }
}

void bench_prefill_matmul(cuda::CudaBackend& be, const char* name, int64_t out, int64_t in, int K, int64_t rows) {
  GroupBuilder b;
  RandomLinear(in, out, K, 2, 4321, 1.0 / std::sqrt(double(in))).store(b, "w");
  auto w = exl3::load_exl3_cuda(b.group("w"), be);
  Dev x = upload(be, test::random_vec(size_t(rows * in), 5, -1.f, 1.f));
  Dev y = upload(be, std::vector<float>(size_t(rows * out), NAN));
  auto call = [&](int) { w->matmul(Tensor::f32(x.p(), rows, in), Tensor::f32(y.p(), rows, out)); };
  const std::string what = std::string(name) + " [" + std::to_string(out) + ", " + std::to_string(in) + "] K=" +
                           std::to_string(K) + " rows " + std::to_string(rows);
  prefill_row(what.c_str(), 2.0 * double(rows) * double(out) * double(in), call, rows > 4096 ? 3 : 8);
  check_written(what.c_str(), be, y, size_t(rows * out));
}

// A routed projection of a prefill chunk: `tokens` × 9 ids drawn from `experts` (a hash: ragged
// groups, ~tokens·9/experts rows an expert).
void bench_prefill_gather(cuda::CudaBackend& be, const char* name, int experts, int64_t out, int64_t in, int K,
                          int64_t tokens) {
  const int used = 9;
  GroupBuilder b;
  std::vector<TensorGroup> groups;
  for (int e = 0; e < experts; ++e)
    RandomLinear(in, out, K, 2, uint64_t(99 + e), 1.0 / std::sqrt(double(in))).store(b, "e" + std::to_string(e));
  for (int e = 0; e < experts; ++e) groups.push_back(b.group("e" + std::to_string(e)));
  auto set = exl3::load_exl3_experts_cuda(groups, be);
  std::vector<int32_t> ids;
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t t = 0; t < tokens * used; ++t) {
    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 29, h += 0x9E3779B97F4A7C15ull;
    ids.push_back(int32_t(h % uint64_t(experts)));
  }
  auto dids = be.alloc(ids.size() * 4);
  be.upload(dids->data(), ids.data(), ids.size() * 4);
  Dev x = upload(be, test::random_vec(size_t(tokens * in), 5, -1.f, 1.f));
  Dev y = upload(be, std::vector<float>(size_t(tokens * used * out), NAN));
  auto call = [&](int) {
    set->gather_matmul(Tensor::f32(x.p(), tokens, in), static_cast<int32_t*>(dids->data()), used,
                       Tensor::f32(y.p(), tokens * used, out));
  };
  const std::string what = std::string(name) + " " + std::to_string(experts) + "x[" + std::to_string(out) + ", " +
                           std::to_string(in) + "] K=" + std::to_string(K) + " " + std::to_string(tokens) + "x9";
  prefill_row(what.c_str(), 2.0 * double(tokens * used) * double(out) * double(in), call, tokens > 4096 ? 2 : 4);
  check_written(what.c_str(), be, y, size_t(tokens * used * out));
}

int prefill_main(cuda::CudaBackend& be) {
  const exl3::kcuda::PrefillImpl saved = exl3::kcuda::prefill_impl();
  for (int64_t rows : {2048, 8192}) {
    std::printf("-- prefill, %lld rows: dense (Bolt-shape EXL3 2.0: K=4) --\n", (long long)rows);
    bench_prefill_matmul(be, "in_proj", 18560, 4096, 4, rows);
    bench_prefill_matmul(be, "out_proj", 4096, 8192, 4, rows);
    bench_prefill_matmul(be, "shared up", 5376, 4096, 4, rows);
    bench_prefill_matmul(be, "shared down", 4096, 5376, 4, rows);
    bench_prefill_matmul(be, "latent fc1", 1024, 4096, 4, rows);
    bench_prefill_matmul(be, "latent fc2", 4096, 1024, 4, rows);
    bench_prefill_matmul(be, "[8192, 4096]", 8192, 4096, 4, rows);
    std::printf("-- prefill, %lld tokens x 9: routed gathers (K=2) --\n", (long long)rows);
    bench_prefill_gather(be, "routed up", 346, 2304, 1024, 2, rows);
    bench_prefill_gather(be, "routed down", 346, 1024, 2304, 2, rows);
    bench_prefill_gather(be, "routed up", 432, 2560, 1024, 2, rows);
    bench_prefill_gather(be, "routed down", 256, 1024, 1792, 2, rows);
  }
  exl3::kcuda::set_prefill_impl(saved);
  return 0;
}

double row(const char* what, const Result& r) {
  const double gbs = r.gbytes / (r.ms * 1e-3);
  std::printf("%-46s %8.2f MB  graph %8.2f us  stream %8.2f us  %6.0f GB/s  %5.1f%% of copy\n", what, r.gbytes * 1e3,
              r.graph_ms * 1e3, r.stream_ms * 1e3, gbs, g_copy_gbs > 0 ? 100 * gbs / g_copy_gbs : 0.0);
  return r.ms;
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::device_count() == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool all = !(argc > 1 && std::strcmp(argv[1], "--short") == 0);
  cudaDeviceProp prop;
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s, %d SMs, L2 %.0f MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
  cuda::CudaBackend be;
  if (argc > 1 && std::strcmp(argv[1], "--prefill") == 0) return prefill_main(be);
  g_copy_gbs = be.measure_copy_bandwidth() / 1e9;
  std::printf("device-to-device copy: %.0f GB/s (read + write)\n", g_copy_gbs);
  std::printf("-- Bolt-shape EXL3 2.0, 1 activation row (PyTorch [out, in]) --\n");
  const double in_proj = row("in_proj  [18560, 4096] K=4", bench_matmul(be, 18560, 4096, 4, 1));
  const double out_proj = row("out_proj [4096, 8192]  K=4", bench_matmul(be, 4096, 8192, 4, 1));
  const double sh_up = row("shared up   [5376, 4096] K=4", bench_matmul(be, 5376, 4096, 4, 1));
  const double sh_down = row("shared down [4096, 5376] K=4", bench_matmul(be, 4096, 5376, 4, 1));
  const Result up = bench_gather(be, 128, 9, 2304, 1024, 2, 1);
  const double r_up = row("routed up   9 x [2304, 1024] K=2 (gather)", up);
  const Result down = bench_gather(be, 128, 9, 1024, 2304, 2, 1);
  const double r_down = row("routed down 9 x [1024, 2304] K=2 (gather)", down);
  const Result head_r = bench_matmul(be, 131072, 4096, 6, 1);
  const double head = row("lm_head [131072, 4096] K=6", head_r);
  const double lat1 = row("latent fc1 [1024, 4096] K=4 (not in the sum)", bench_matmul(be, 1024, 4096, 4, 1));
  const double lat2 = row("latent fc2 [4096, 1024] K=4 (not in the sum)", bench_matmul(be, 4096, 1024, 4, 1));
  row("tiny [128, 128] K=4 (one block: the fixed cost of a launch)", bench_matmul(be, 128, 128, 4, 1));
  const double layer = in_proj + out_proj + sh_up + sh_down + r_up + r_down;
  const double token = 40 * layer + head;
  std::printf("per token: Mamba in/out, shared and 9 routed experts per layer x40 layers, head = %.3f ms "
              "(exllamav3 ~6.7 ms: %.1fx; target <= 1.3 ms)\n",
              token, 6.7 / token);
  std::printf("  with the latent projections: %.3f ms\n", token + 40 * (lat1 + lat2));
  if (!all) return 0;
  std::printf("-- verify and prefill (rows of x) --\n");
  for (int64_t n : {2, 4, 8, 16, 64, 512}) {
    const std::string a = "in_proj [18560, 4096] K=4 n=" + std::to_string(n);
    row(a.c_str(), bench_matmul(be, 18560, 4096, 4, n));
    const std::string b = "shared up [5376, 4096] K=4 n=" + std::to_string(n);
    row(b.c_str(), bench_matmul(be, 5376, 4096, 4, n));
  }
  row("routed up 16 tokens x 9 [2304, 1024] K=2", bench_gather(be, 128, 9, 2304, 1024, 2, 16));
  row("routed up 512 tokens x 9 [2304, 1024] K=2 (grouped)", bench_gather(be, 128, 9, 2304, 1024, 2, 512));
  std::printf("-- every K, [16384, 4096], n=1 --\n");
  for (int K = 1; K <= 8; ++K) {
    const std::string a = "[16384, 4096] K=" + std::to_string(K);
    row(a.c_str(), bench_matmul(be, 16384, 4096, K, 1));
  }
  return 0;
}
