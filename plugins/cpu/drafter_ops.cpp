// The drafter ops of the CPU backend (tandem/backend.h: rope, attention_full and their device-position
// variants, silu_mul, scale_softcap, top_k_logprobs, and the head's attention_bias): the arithmetic of the LiLiCorr plugin's host
// reference, one row at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "kernels.h"
#include "tandem/parallel.h"

namespace tandem::cpu {
namespace {

// One query row of one head: softmax_j(q·k_j·scale (+ bias[j])) over key rows 0 … rows − 1 of k and v
// (the head's columns start at `off`), times v, into o [hd]; p is scratch [rows].
void attend(const float* qr, const Tensor& k, const Tensor& v, int64_t rows, int64_t off, int hd, float scale,
            const float* bias, float* p, float* o) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < rows; ++j) {
    const float* kr = k.row(j) + off;
    float dot = 0.0f;
    for (int e = 0; e < hd; ++e) dot += qr[e] * kr[e];
    p[j] = bias ? dot * scale + bias[j] : dot * scale;
    mx = std::max(mx, p[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < rows; ++j) sum += p[j] = std::exp(p[j] - mx);
  std::fill(o, o + hd, 0.0f);
  for (int64_t j = 0; j < rows; ++j) {
    const float* vr = v.row(j) + off;
    const float a = p[j] / sum;
    for (int e = 0; e < hd; ++e) o[e] += a * vr[e];
  }
}

}  // namespace

void rope(const Tensor& x, int heads, int hd, int64_t pos0, double theta) {
  check_rope("rope", x, heads, hd, pos0);
  const int half = hd / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int j = 0; j < half; ++j) inv[size_t(j)] = std::pow(theta, -2.0 * double(j) / double(hd));
  parallel_for(x.rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int j = 0; j < half; ++j) {
        const float a = float(double(pos0 + r) * inv[size_t(j)]);
        const float c = std::cos(a), s = std::sin(a);
        for (int h = 0; h < heads; ++h) {
          float* v = x.row(r) + int64_t(h) * hd;
          const float x1 = v[j], x2 = v[j + half];
          v[j] = x1 * c - x2 * s;
          v[j + half] = x2 * c + x1 * s;
        }
      }
  });
}

void attention_full(const Tensor& q, const Tensor& k, const Tensor& v, int64_t rows, int nq, int nkv, int hd,
                    const Tensor& out) {
  check(nq > 0 && nkv > 0 && hd > 0 && nq % nkv == 0, "attention_full: heads must be positive and nq a multiple of ",
        "nkv, found nq=", nq, " nkv=", nkv, " hd=", hd);
  const int64_t n = q.rows, qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  check_tensor("attention_full", "q", q, n, qw);
  check_tensor("attention_full", "out", out, n, qw);
  check(rows > 0 && k.rows >= rows && v.rows >= rows, "attention_full: ", rows, " key rows asked, k holds ", k.rows,
        " and v ", v.rows);
  check_tensor("attention_full", "k", k, k.rows, kw);
  check_tensor("attention_full", "v", v, v.rows, kw);
  const int group = nq / nkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  parallel_for(n * nq, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(rows));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = t / nq;
      const int hq = int(t % nq);
      attend(q.row(r) + int64_t(hq) * hd, k, v, rows, int64_t(hq / group) * hd, hd, scale, nullptr, p.data(),
             out.row(r) + int64_t(hq) * hd);
    }
  });
}

namespace {

void check_pos0_device(const char* op, int64_t pos0, const int64_t* pos0_device) {
  check_ptr(op, "pos0_device", pos0_device);
  check(*pos0_device == pos0, op, ": the position in device memory is ", *pos0_device, ", the host's ", pos0);
}

}  // namespace

void rope_at(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, double theta) {
  check_pos0_device("rope_at", pos0, pos0_device);
  rope(x, heads, hd, pos0, theta);
}

void rope_table(const Tensor& x, int heads, int hd, int64_t pos0, const int64_t* pos0_device, const float* inv_freq,
                float scale) {
  if (pos0_device) check_pos0_device("rope_table", pos0, pos0_device);
  check_rope("rope_table", x, heads, hd, pos0);
  check_ptr("rope_table", "inv_freq", inv_freq);
  const int half = hd / 2;
  parallel_for(x.rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int j = 0; j < half; ++j) {
        const float a = float(double(pos0 + r) * double(inv_freq[j]));
        const float c = std::cos(a) * scale, s = std::sin(a) * scale;
        for (int h = 0; h < heads; ++h) {
          float* v = x.row(r) + int64_t(h) * hd;
          const float x1 = v[j], x2 = v[j + half];
          v[j] = x1 * c - x2 * s;
          v[j + half] = x2 * c + x1 * s;
        }
      }
  });
}

void attention_full_at(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
                       int64_t capacity, int64_t pos0, const int64_t* pos0_device, int nq, int nkv, int hd,
                       const Tensor& out) {
  check_pos0_device("attention_full_at", pos0, pos0_device);
  check(nq > 0 && nkv > 0 && hd > 0, "attention_full_at: heads and head_dim must be positive, found nq=", nq,
        " nkv=", nkv, " hd=", hd);
  const int64_t n = q.rows, kw = int64_t(nkv) * hd;
  check_tensor("attention_full_at", "k", k, n, kw);
  check_tensor("attention_full_at", "v", v, n, kw);
  check(n > 0 && pos0 >= 0 && pos0 + n <= capacity, "attention_full_at: positions [", pos0, ", ", pos0 + n,
        ") exceed the cache capacity ", capacity);
  check_ptr("attention_full_at", "k_cache", k_cache);
  check_ptr("attention_full_at", "v_cache", v_cache);
  const size_t bytes = size_t(n * kw) * sizeof(float);
  std::memmove(k_cache + pos0 * kw, k.f32(), bytes);
  std::memmove(v_cache + pos0 * kw, v.f32(), bytes);
  attention_full(q, Tensor::f32(k_cache, capacity, kw), Tensor::f32(v_cache, capacity, kw), pos0 + n, nq, nkv, hd, out);
}

void attention_bias(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias, int heads, int hd,
                    const Tensor& out) {
  check_attention_bias(q, k, v, bias, heads, hd, out);
  const int64_t n = q.rows;
  const float scale = 1.0f / std::sqrt(float(hd));
  parallel_for(n * heads, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(n));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / heads;
      const int h = int(t % heads);
      attend(q.row(i) + int64_t(h) * hd, k, v, n, int64_t(h) * hd, hd, scale, bias.row(int64_t(h) * n + i), p.data(),
             out.row(i) + int64_t(h) * hd);
    }
  });
}

void attention_bias_qkv(const Tensor& qkv, const Tensor& qkv_bias, const Tensor& bias, int heads, int hd,
                        const Tensor& out) {
  check_attention_bias_qkv(qkv, qkv_bias, bias, heads, hd, out);
  // Unpacked (with the bias added, as mul_add_rows adds it), then attention_bias.
  const int64_t n = qkv.rows, w = int64_t(heads) * hd;
  std::vector<float> q(size_t(n * w)), k(q.size()), v(q.size());
  float* dst[3] = {q.data(), k.data(), v.data()};
  for (int64_t i = 0; i < n; ++i)
    for (int p = 0; p < 3; ++p)
      for (int64_t e = 0; e < w; ++e) {
        const float x = qkv.row(i)[p * w + e];
        dst[p][i * w + e] = qkv_bias.data ? x + qkv_bias.f32()[p * w + e] : x;
      }
  attention_bias(Tensor::f32(q.data(), n, w), Tensor::f32(k.data(), n, w), Tensor::f32(v.data(), n, w), bias, heads,
                 hd, out);
}

void silu_mul(const Tensor& g, const Tensor& u, const Tensor& out) {
  check_tensor("silu_mul", "g", g, g.rows, g.cols);
  check_tensor("silu_mul", "u", u, g.rows, g.cols);
  check_tensor("silu_mul", "out", out, g.rows, g.cols);
  const float* gp = g.f32();
  const float* up = u.f32();
  float* op = out.f32();
  for (int64_t i = 0; i < g.numel(); ++i) op[i] = gp[i] / (1.0f + std::exp(-gp[i])) * up[i];
}

void scale_softcap(const Tensor& x, float s, float cap) {
  check_tensor("scale_softcap", "x", x, x.rows, x.cols);
  float* p = x.f32();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = cap > 0 ? cap * std::tanh(s * p[i] / cap) : s * p[i];
}

void top_k_logprobs(const Tensor& logits, int k, int32_t* ids, float* logp) {
  check_tensor("top_k_logprobs", "logits", logits, logits.rows, logits.cols);
  check(k >= 1 && k <= Backend::kMaxTopK && k <= logits.cols, "top_k_logprobs: k must be in [1, ",
        std::min<int64_t>(Backend::kMaxTopK, logits.cols), "], found ", k);
  check_ptr("top_k_logprobs", "ids", ids);
  check_ptr("top_k_logprobs", "logp", logp);
  const int64_t V = logits.cols;
  parallel_for(logits.rows, 1, [&](int64_t r0, int64_t r1) {
    std::vector<int32_t> order(static_cast<size_t>(V));
    for (int64_t r = r0; r < r1; ++r) {
      const float* l = logits.row(r);
      const float mx = *std::max_element(l, l + V);
      double sum = 0.0;
      for (int64_t i = 0; i < V; ++i) sum += std::exp(double(l[i] - mx));
      const float lse = mx + float(std::log(sum));
      for (int64_t i = 0; i < V; ++i) order[size_t(i)] = int32_t(i);
      // NaNs after every number (a strict weak order), and never picked.
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [l](int32_t a, int32_t b) {
        if (std::isnan(l[a])) return false;
        if (std::isnan(l[b])) return true;
        return l[a] > l[b] || (l[a] == l[b] && a < b);
      });
      for (int j = 0; j < k; ++j) {
        const int32_t i = order[size_t(j)];
        const bool none = std::isnan(l[i]);
        ids[r * k + j] = none ? -1 : i;
        logp[r * k + j] = (none ? -INFINITY : l[i]) - lse;
      }
    }
  });
}

}  // namespace tandem::cpu
