// A Backend wrapper for tests that counts every buffer the wrapped backend hands out (live bytes,
// peak, allocations, detached ones), e.g. to check that memory goes back to its baseline; its memory
// epoch counts releases of buffers from alloc(), as a device backend's does.
// Owner: the buffers share the Counts, so a buffer may outlive its backend. Thread: whoever drives
// the model allocates; read the counts after synchronizing with that thread (not atomics).
#pragma once
#include <algorithm>
#include <memory>
#include <string>

#include "tandem/backend.h"

namespace tandem::test {

// What a CountingBackend's buffers hold, shared with them so a buffer may outlive its backend.
struct Counts {
  size_t live = 0, peak = 0;
  int64_t allocs = 0, releases = 0;
  int64_t detached = 0;  // allocs that came from alloc_detached()
  uint64_t epoch = 0;    // releases of buffers from alloc()
};

class CountedBuffer final : public Buffer {
 public:
  CountedBuffer(std::unique_ptr<Buffer> inner, std::shared_ptr<Counts> counts, bool detached = false)
      : inner_(std::move(inner)), counts_(std::move(counts)), detached_(detached) {
    counts_->live += inner_->bytes();
    counts_->peak = std::max(counts_->peak, counts_->live);
    ++counts_->allocs;
    if (detached_) ++counts_->detached;
  }
  ~CountedBuffer() override {
    counts_->live -= inner_->bytes();
    ++counts_->releases;
    if (!detached_) ++counts_->epoch;
  }
  void* data() override { return inner_->data(); }
  size_t bytes() const override { return inner_->bytes(); }

 private:
  std::unique_ptr<Buffer> inner_;
  std::shared_ptr<Counts> counts_;
  bool detached_;
};

// The CPU backend, with every buffer it hands out counted.
class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::shared_ptr<Backend> inner) : in_(std::move(inner)) {}
  std::shared_ptr<Counts> counts = std::make_shared<Counts>();

  std::string device() const override { return in_->device(); }
  bool host = true;  // false: claims device memory (is_host), though the buffers stay the CPU's
  bool is_host() const override { return host && in_->is_host(); }
  void set_threads(int n) override { in_->set_threads(n); }
  std::unique_ptr<Buffer> alloc(size_t bytes) override {
    return std::make_unique<CountedBuffer>(in_->alloc(bytes), counts);
  }
  std::unique_ptr<Buffer> alloc_detached(size_t bytes) override {
    return std::make_unique<CountedBuffer>(in_->alloc_detached(bytes), counts, true);
  }
  uint64_t memory_epoch() const override { return counts->epoch; }
  void upload(void* dst, const void* src, size_t bytes) override { in_->upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { in_->download(dst, src, bytes); }
  void synchronize() override { in_->synchronize(); }
  void rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y) override { in_->rms_norm(x, w, eps, y); }
  void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                      const Tensor& out) override {
    in_->gated_rms_norm(y, z, w, groups, eps, out);
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& out) override { in_->add(a, b, out); }
  void relu2(const Tensor& x) override { in_->relu2(x); }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, float* kc, float* vc, int64_t capacity,
                 int64_t pos0, int nq, int nkv, int hd, const Tensor& out) override {
    in_->attention(q, k, v, kc, vc, capacity, pos0, nq, nkv, hd, out);
  }
  void attention_at(const Tensor& q, const Tensor& k, const Tensor& v, float* kc, float* vc, int64_t capacity,
                    int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd, const Tensor& out) override {
    in_->attention_at(q, k, v, kc, vc, capacity, pos0, pos0_device, nq, nkv, hd, out);
  }
  void moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids, float* w) override {
    in_->moe_route(logits, bias, p, ids, w);
  }
  void moe_combine(const Tensor& eo, const float* w, int k, const Tensor& out) override { in_->moe_combine(eo, w, k, out); }
  int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng) override {
    return in_->sample(logits, vocab, p, rng);
  }
  void rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta) override {
    in_->rope(x, heads, hd, pos0, theta);
  }
  void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv, int hd,
                      const Tensor& out) override {
    in_->attention_full(q, k, v, rows, nq, nkv, hd, out);
  }
  void rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, double theta) override {
    in_->rope_at(x, heads, hd, pos0, pos0_device, theta);
  }
  void attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* kc, float* vc, int64_t capacity,
                         int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd, const Tensor& out) override {
    in_->attention_full_at(q, k, v, kc, vc, capacity, pos0, pos0_device, nq, nkv, hd, out);
  }
  void silu_mul(const Tensor& g, const Tensor& u, const Tensor& out) override { in_->silu_mul(g, u, out); }
  void scale_softcap(const Tensor& x, float s, float cap) override { in_->scale_softcap(x, s, cap); }
  void top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp) override {
    in_->top_k_logprobs(logits, k, ids, logp);
  }
  void mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out) override {
    in_->mul_add_rows(x, a, b, group, out);
  }
  void attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads, int hd,
                      const Tensor& out) override {
    in_->attention_bias(q, k, v, bias, heads, hd, out);
  }
  void attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                          const Tensor& out) override {
    in_->attention_bias_qkv(qkv, qkv_bias, bias, heads, hd, out);
  }
  void add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb, bool silu,
                const Tensor& out) override {
    in_->add_rows(x, d, a, ga, b, gb, silu, out);
  }
  void normalize_rows(const Tensor& x, float eps) override { in_->normalize_rows(x, eps); }
  void group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out) override {
    in_->group_dots(a, b, groups, scale, out);
  }

 private:
  std::shared_ptr<Backend> in_;
};

}  // namespace tandem::test
