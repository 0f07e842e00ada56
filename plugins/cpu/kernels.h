// The CPU kernels behind CpuBackend, as free functions so that other host code (format kernels, the
// Mamba2 CPU scan, GPU tests comparing against the CPU) can call them without a backend object.
// Owner: callers own every pointer. Thread: one caller at a time (kernels use tandem::parallel_for).
// Sync: each returns when its output is written.
#pragma once
#include <cstdint>
#include <vector>

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

// The distribution a sampled (temperature > 0) draw picks from: the kept tokens in draw order
// (probability descending, id ascending) with their renormalized probabilities. Steps, in vLLM's
// order: softmax(logits / T) in fp64, top_k, top_p over the top-k renormalized mass, min_p
// (tandem::sampling_distribution, after this backend's own checks of p and the logits).
struct Candidates {
  std::vector<int32_t> ids;
  std::vector<double> probs;  // sums to 1
};
Candidates sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& p);
// temperature 0: argmax, lowest id on ties, no draw from rng. Otherwise one rng.uniform() draw,
// picked by inverse CDF over sampling_candidates().
int32_t sample(const float* logits, int64_t vocab, const SamplingParams& p, Rng& rng);
// Throws naming the first bad field of p.
void validate_sampling(const SamplingParams& p);

}  // namespace tandem::cpu
