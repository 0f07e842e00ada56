// The CPU kernels behind CpuBackend, as free functions so that other host code (format kernels, the
// Mamba2 CPU scan, GPU tests comparing against the CPU) can call them without a backend object.
// Owner: callers own every pointer. Thread: one caller at a time (kernels use tandem::parallel_for).
// Sync: each returns when its output is written.
#pragma once
#include <cstdint>

#include "tandem/backend.h"
#include "tandem/tensor.h"

namespace tandem::cpu {

// Contracts are those of the same-named Backend methods (tandem/backend.h). All tensors are f32.
// Every kernel validates its inputs before touching memory and throws a one-line tandem::Error.
// Each output row is computed by the same code in the same order whatever the number of rows or
// threads, so results are batch invariant bit for bit.
void rms_norm(const Tensor& x, const float* w, float eps, const Tensor& y);
void gated_rms_norm(const Tensor& y, const Tensor& z, const float* w, int groups, float eps,
                    const Tensor& out);
void add(const Tensor& a, const Tensor& b, const Tensor& out);
void relu2(const Tensor& x);
// out[t] = Σ_j w[t·k + j]·expert_out[t·k + j], j ascending.
void moe_combine(const Tensor& expert_out, const float* weights, int k, const Tensor& out);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
               int64_t capacity, int64_t pos0, int nq, int nkv, int hd, const Tensor& out);
void moe_route(const Tensor& logits, const float* bias, const RouteParams& p, int32_t* ids,
               float* weights);
// Drafter ops (drafter_ops.cpp).
void rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta);
void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv, int hd,
                    const Tensor& out);
// The device-position variants (Backend::rope_at, attention_full_at): host memory, so *pos0_device is
// checked against pos0.
void rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, double theta);
// Backend::rope_table: the frequency table inv_freq [hd/2] and cos/sin scale (pos0_device may be null).
void rope_table(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, const float* inv_freq,
                float scale);
void attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                       int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                       const Tensor& out);
void silu_mul(const Tensor& g, const Tensor& u, const Tensor& out);
void scale_softcap(const Tensor& x, float s, float cap);
void top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp);
// The LiLiCorr head's ops (head_ops.cpp; attention_bias and attention_bias_qkv in drafter_ops.cpp).
void mul_add_rows(const Tensor& x, const Tensor& a, const Tensor& b, int64_t group, const Tensor& out);
void attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads, int hd,
                    const Tensor& out);
void attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                        const Tensor& out);
void add_rows(const Tensor& x, const Tensor& d, const Tensor& a, int64_t ga, const Tensor& b, int64_t gb, bool silu,
              const Tensor& out);
void normalize_rows(const Tensor& x, float eps);
void group_dots(const Tensor& a, const Tensor& b, int64_t groups, float scale, const Tensor& out);

// Sampling: tandem::sample_host (tandem/sampler.h), shared with every backend.

}  // namespace tandem::cpu
