// CpuBackend: host memory, and the Backend methods forwarded to the kernels.
#include "cpu_backend.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kernels.h"
#include "tandem/parallel.h"
#include "tandem/sampler.h"

namespace tandem::cpu {
namespace {

constexpr size_t kAlign = 64;  // a cache line, and enough for any vector load

class HostBuffer final : public Buffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    // aligned_alloc wants a multiple of the alignment; a 0-byte buffer still gets a valid pointer.
    const size_t rounded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    data_ = std::aligned_alloc(kAlign, rounded);
    if (!data_) fail("cpu: cannot allocate ", bytes, " bytes of host memory");
    std::memset(data_, 0, rounded);
  }
  ~HostBuffer() override { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

void check_copy(const char* op, const void* dst, const void* src, size_t bytes) {
  check(bytes == 0 || (dst && src), "cpu: ", op, " of ", bytes, " bytes with a null ",
        dst ? "source" : "destination");
}

}  // namespace

void CpuBackend::set_threads(int n) {
  check(n >= 0, "cpu: thread count must be >= 0 (0 = all cores), found ", n);
  set_thread_count(n);
}

std::unique_ptr<Buffer> CpuBackend::alloc(size_t bytes) { return std::make_unique<HostBuffer>(bytes); }

void CpuBackend::upload(void* dst, const void* src_host, size_t bytes) {
  check_copy("upload", dst, src_host, bytes);
  if (bytes) std::memmove(dst, src_host, bytes);
}

void CpuBackend::download(void* dst_host, const void* src, size_t bytes) {
  check_copy("download", dst_host, src, bytes);
  if (bytes) std::memmove(dst_host, src, bytes);
}

void CpuBackend::rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) {
  cpu::rms_norm(x, w, eps, y);
}
void CpuBackend::gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups,
                                float eps, const Tensor& out) {
  cpu::gated_rms_norm(y, z, w, groups, eps, out);
}
void CpuBackend::add(const Tensor& a, const Tensor& b, const Tensor& out) { cpu::add(a, b, out); }
void CpuBackend::relu2(const Tensor& x) { cpu::relu2(x); }
void CpuBackend::rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta) {
  cpu::rope(x, heads, hd, pos0, theta);
}
void CpuBackend::attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv,
                                int hd, const Tensor& out) {
  cpu::attention_full(q, k, v, rows, nq, nkv, hd, out);
}
void CpuBackend::rope_table(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device,
                            const float* inv_freq, float scale) {
  cpu::rope_table(x, heads, hd, pos0, pos0_device, inv_freq, scale);
}

void CpuBackend::rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, double theta) {
  cpu::rope_at(x, heads, hd, pos0, pos0_device, theta);
}
void CpuBackend::attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                                   int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                                   const Tensor& out) {
  cpu::attention_full_at(q, k, v, k_cache, v_cache, capacity, pos0, pos0_device, nq, nkv, hd, out);
}
void CpuBackend::silu_mul(const Tensor& g, const Tensor& u, const Tensor& out) { cpu::silu_mul(g, u, out); }
void CpuBackend::scale_softcap(const Tensor& x, float s, float cap) { cpu::scale_softcap(x, s, cap); }
void CpuBackend::top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp) {
  cpu::top_k_logprobs(logits, k, ids, logp);
}
void CpuBackend::mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) {
  cpu::mul_add_rows(x, a, b, group, out);
}
void CpuBackend::attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads,
                                int hd, const Tensor& out) {
  cpu::attention_bias(q, k, v, bias, heads, hd, out);
}
void CpuBackend::attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                                    const Tensor& out) {
  cpu::attention_bias_qkv(qkv, qkv_bias, bias, heads, hd, out);
}
void CpuBackend::add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb,
                          bool silu, const Tensor& out) {
  cpu::add_rows(x, d, a, ga, b, gb, silu, out);
}
void CpuBackend::normalize_rows(const Tensor& x, float eps) { cpu::normalize_rows(x, eps); }
void CpuBackend::group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out) {
  cpu::group_dots(a, b, groups, scale, out);
}
void CpuBackend::moe_combine(const Tensor& expert_out, const float* weights, int k, const Tensor& out) {
  cpu::moe_combine(expert_out, weights, k, out);
}
void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache,
                           float* v_cache, int64_t capacity, int64_t pos0, int nq, int nkv, int hd,
                           const Tensor& out) {
  cpu::attention(q, k, v, k_cache, v_cache, capacity, pos0, nq, nkv, hd, out);
}
void CpuBackend::moe_route(const Tensor& logits, const float* bias, const RouteParams& p,
                           int32_t* ids, float* weights) {
  cpu::moe_route(logits, bias, p, ids, weights);
}
int32_t CpuBackend::sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) {
  return sample_host(logits, vocab, p, rng);
}

double CpuBackend::measure_copy_bandwidth() {
  constexpr size_t kBytes = size_t(256) << 20, kChunk = size_t(4) << 20;
  HostBuffer src(kBytes), dst(kBytes);
  std::memset(src.data(), 0x5a, kBytes);  // touched, so the timed copies do not fault pages in
  auto copy = [&] {
    parallel_for(int64_t(kBytes / kChunk), 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        std::memcpy(static_cast<char*>(dst.data()) + c * kChunk, static_cast<char*>(src.data()) + c * kChunk, kChunk);
    });
  };
  copy();
  std::vector<double> times;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    copy();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return 2.0 * double(kBytes) / times[times.size() / 2];
}

size_t CpuBackend::peak_memory_bytes() const {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return size_t(u.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace tandem::cpu
