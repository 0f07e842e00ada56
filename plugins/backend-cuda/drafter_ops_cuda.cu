// The drafter ops of the CUDA backend (tandem/backend.h: rope, attention_full and their device-position
// variants rope_at, attention_full_at, silu_mul, scale_softcap, and the head's attention_bias and
// attention_bias_qkv; top_k_logprobs is in top_k_cuda.cu), for drafters with layers of their own (the
// DFlash backbone of spec-lilicorr).
// Reductions run in fixed trees that depend on the row's width only, so a row's bits never depend on n.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tandem/cuda/util.cuh"
#include "kernels_cuda.cuh"

namespace tandem::cuda {
namespace {

constexpr int kEltThreads = 256;
constexpr int kAttWarps = 4;

// pos0_dev: null, or where the first row's position lies (rope_at; pos0 is then unused). inv_freq: null
// (theta^(−2j/hd), rope and rope_at), or a table [hd/2] in device memory with a cos/sin scale
// (rope_table: a drafter's rope_scaling, the CPU twin's arithmetic — the angle the f32-rounded exact
// product, cos and sin in f32, each times `scale`; 1 for the plain forms, which leaves their bits).
__global__ void rope_kernel(float* x, int64_t rows, int heads, int hd, int64_t pos0, const int64_t* pos0_dev,
                            double theta, const float* inv_freq, float scale) {
  pdl_wait();
  pdl_trigger();
  if (pos0_dev) pos0 = *pos0_dev;
  const int half = hd / 2;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    for (int t = threadIdx.x; t < heads * half; t += blockDim.x) {
      const int h = t / half, j = t % half;
      const double inv = inv_freq ? double(inv_freq[j]) : pow(theta, -2.0 * double(j) / double(hd));
      const float a = float(double(pos0 + r) * inv);
      const float c = __fmul_rn(cosf(a), scale), s = __fmul_rn(sinf(a), scale);
      float* v = x + r * int64_t(heads) * hd + int64_t(h) * hd;
      const float x1 = v[j], x2 = v[j + half];
      v[j] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
      v[j + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
    }
}

// One block per (query row, query head): kAttWarps warps take keys j ≡ warp (mod kAttWarps), each
// with an online softmax whose lanes hold head dims lane, lane + 32, …; the warps merge in order.
// bias: null (attention_full), or [nq·n, rows] added to the scaled scores (attention_bias; n = gridDim.x).
// pos0_dev: null, or the key rows are *pos0_dev + n (attention_full_at; `rows` is then unused, bias null).
// kPacked (attention_bias_qkv): q, k and v are column blocks of one packed qkv [n, 3·nq·hd] (q, k, v point at
// their first row), with qkv_bias (null or [3·nq·hd], q's, k's and v's blocks) added to each element read.
template <bool kPacked>
__global__ void attention_full_kernel(const float* q, const float* k, const float* v, const float* bias, int64_t rows,
                                      const int64_t* pos0_dev, int nq, int nkv, int hd, float scale, float* out,
                                      const float* qkv_bias) {
  constexpr int kPer = kMaxHeadDim / 32;
  __shared__ float sm[kAttWarps], sl[kAttWarps];
  __shared__ float sacc[kAttWarps][kMaxHeadDim];
  pdl_wait();
  pdl_trigger();
  if (pos0_dev) rows = *pos0_dev + int64_t(gridDim.x);
  const int64_t r = blockIdx.x;
  const int hq = blockIdx.y, hk = hq / (nq / nkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  const int64_t qs = kPacked ? 3 * qw : qw, ks = kPacked ? 3 * qw : kw;  // row strides
  const float* qr = q + r * qs + int64_t(hq) * hd;
  const float* br = bias ? bias + (int64_t(hq) * gridDim.x + r) * rows : nullptr;
  float qv[kPer], acc[kPer], kb[kPer], vb[kPer];
  const int per = (hd + 31) / 32;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    const bool in = i < per && e < hd;
    qv[i] = in ? qr[e] : 0.0f;
    acc[i] = 0.0f;
    kb[i] = vb[i] = 0.0f;
    if (kPacked && qkv_bias && in) {
      qv[i] = __fadd_rn(qv[i], qkv_bias[int64_t(hq) * hd + e]);
      kb[i] = qkv_bias[qw + int64_t(hk) * hd + e];
      vb[i] = qkv_bias[2 * qw + int64_t(hk) * hd + e];
    }
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j < rows; j += kAttWarps) {
    const float* kr = k + j * ks + int64_t(hk) * hd;
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      if (i < per && e < hd) d = fmaf(qv[i], kPacked ? __fadd_rn(kr[e], kb[i]) : kr[e], d);
    }
    const float s = br ? fmaf(warp_sum(d), scale, br[j]) : warp_sum(d) * scale;
    const float mn = fmaxf(m, s);
    const float c = expf(m - mn), p = expf(s - mn);
    l = l * c + p;
    const float* vr = v + j * ks + int64_t(hk) * hd;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      if (i < per && e < hd) acc[i] = fmaf(p, kPacked ? __fadd_rn(vr[e], vb[i]) : vr[e], acc[i] * c);
    }
    m = mn;
  }
  if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    if (i < per && e < hd) sacc[warp][e] = acc[i];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kAttWarps; ++w) M = fmaxf(M, sm[w]);
  float L = 0.0f;
  for (int w = 0; w < kAttWarps; ++w) L += sm[w] == -INFINITY ? 0.0f : sl[w] * expf(sm[w] - M);
  float* o = out + r * qw + int64_t(hq) * hd;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float a = 0.0f;
    for (int w = 0; w < kAttWarps; ++w)
      if (sm[w] != -INFINITY) a += sacc[w][e] * expf(sm[w] - M);
    o[e] = a / L;
  }
}

__global__ void silu_mul_kernel(const float* g, const float* u, int64_t n, float* out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gv = g[i];
    out[i] = __fmul_rn(gv / (1.0f + expf(-gv)), u[i]);
  }
}

__global__ void scale_softcap_kernel(float* x, int64_t n, float s, float cap) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = cap > 0 ? cap * tanhf(__fmul_rn(s, x[i]) / cap) : __fmul_rn(s, x[i]);
}

unsigned elt_blocks(int64_t n) { return unsigned(std::min<int64_t>(ceil_div(n, kEltThreads), 65535 * 8)); }

}  // namespace

void launch_rope(float* x, int64_t rows, int heads, int hd, int64_t pos0, double theta, cudaStream_t stream,
                 const int64_t* pos0_device) {
  if (rows == 0) return;
  launch(rope_kernel, dim3(unsigned(std::min<int64_t>(rows, 65535))), dim3(128), 0, stream,
         pos0_device ? "rope_at" : "rope", x, rows, heads, hd, pos0, pos0_device, theta,
         static_cast<const float*>(nullptr), 1.0f);
}

void launch_rope_table(float* x, int64_t rows, int heads, int hd, int64_t pos0, const int64_t* pos0_device,
                       const float* inv_freq, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  launch(rope_kernel, dim3(unsigned(std::min<int64_t>(rows, 65535))), dim3(128), 0, stream, "rope_table", x, rows,
         heads, hd, pos0, pos0_device, 0.0, inv_freq, scale);
}

void launch_attention_full(const float* q, const float* k, const float* v, int64_t n, int64_t rows, int nq, int nkv,
                           int hd, float* out, cudaStream_t stream, const int64_t* pos0_device) {
  if (n == 0) return;
  launch(attention_full_kernel<false>, dim3(unsigned(n), unsigned(nq)), dim3(32 * kAttWarps), 0, stream,
         pos0_device ? "attention_full_at" : "attention_full", q, k, v, static_cast<const float*>(nullptr), rows,
         pos0_device, nq, nkv, hd, 1.0f / sqrtf(float(hd)), out, static_cast<const float*>(nullptr));
}

void launch_attention_bias(const float* q, const float* k, const float* v, const float* bias, int64_t n, int heads,
                           int hd, float* out, cudaStream_t stream) {
  if (n == 0) return;
  launch(attention_full_kernel<false>, dim3(unsigned(n), unsigned(heads)), dim3(32 * kAttWarps), 0, stream,
         "attention_bias", q, k, v, bias, n, static_cast<const int64_t*>(nullptr), heads, heads, hd,
         1.0f / sqrtf(float(hd)), out, static_cast<const float*>(nullptr));
}

void launch_attention_bias_qkv(const float* qkv, const float* qkv_bias, const float* bias, int64_t n, int heads, int hd,
                               float* out, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t w = int64_t(heads) * hd;
  launch(attention_full_kernel<true>, dim3(unsigned(n), unsigned(heads)), dim3(32 * kAttWarps), 0, stream,
         "attention_bias_qkv", qkv, qkv + w, qkv + 2 * w, bias, n, static_cast<const int64_t*>(nullptr), heads, heads,
         hd, 1.0f / sqrtf(float(hd)), out, qkv_bias);
}

void launch_silu_mul(const float* g, const float* u, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  launch(silu_mul_kernel, dim3(elt_blocks(n)), dim3(kEltThreads), 0, stream, "silu_mul", g, u, n, out);
}

void launch_scale_softcap(float* x, int64_t n, float s, float cap, cudaStream_t stream) {
  if (n == 0) return;
  launch(scale_softcap_kernel, dim3(elt_blocks(n)), dim3(kEltThreads), 0, stream, "scale_softcap", x, n, s, cap);
}

}  // namespace tandem::cuda
