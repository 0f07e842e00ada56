// The host backend: 64-byte aligned host memory and the reference kernels of kernels.h.
// Owner: the registry creates it; buffers it allocates own their memory. Thread: one driving thread
// (kernels fan out over tandem::parallel_for). Sync: every op is complete when it returns.
#pragma once
#include <memory>
#include <string>

#include "tandem/backend.h"

namespace tandem::cpu {

class CpuBackend final : public Backend {
 public:
  std::string device() const override { return "cpu"; }
  bool is_host() const override { return true; }
  void set_threads(int n) override;

  std::unique_ptr<Buffer> alloc(size_t bytes) override;
  void upload(void* dst, const void* src_host, size_t bytes) override;
  void download(void* dst_host, const void* src, size_t bytes) override;

  void rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) override;
  void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                      const Tensor& out) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void relu2(const Tensor& x) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                 int64_t capacity, int64_t pos0, int nq, int nkv, int hd, const Tensor& out) override;
  void moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids,
                 float* weights) override;
  void moe_combine(const Tensor& expert_out, const float* weights, int k, const Tensor& out) override;
  void rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta) override;
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv, int hd,
                      const Tensor& out) override;
  // The device-position variants check *pos0_device (host memory here) against pos0.
  void rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, double theta) override;
  void rope_table(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, const float* inv_freq,
                  float scale) override;
  void attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                         int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                         const Tensor& out) override;
  void silu_mul(const Tensor& g, const Tensor& u, const Tensor& out) override;
  void scale_softcap(const Tensor& x, float s, float cap) override;
  void top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp) override;
  void mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) override;
  void attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads, int hd,
                      const Tensor& out) override;
  void attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                          const Tensor& out) override;
  void add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb, bool silu,
                const Tensor& out) override;
  void normalize_rows(const Tensor& x, float eps) override;
  void group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out) override;
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) override;
  // memcpy between two 256 MiB host buffers on every worker thread.
  double measure_copy_bandwidth() override;
  // The process's peak resident memory (host memory is this backend's device memory).
  size_t peak_memory_bytes() const override;
};

}  // namespace tandem::cpu
