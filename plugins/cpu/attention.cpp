// Causal GQA attention without positional encoding, over an f32 KV cache.
#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "kernels.h"
#include "tandem/parallel.h"

namespace tandem::cpu {

void attention(const Tensor& q, const Tensor& k, const Tensor& v, float* k_cache, float* v_cache,
               int64_t capacity, int64_t pos0, int nq, int nkv, int hd, const Tensor& out) {
  check(nq > 0 && nkv > 0 && hd > 0, "attention: heads and head_dim must be positive, found nq=", nq,
        " nkv=", nkv, " hd=", hd);
  check(nq % nkv == 0, "attention: query heads ", nq, " are not a multiple of kv heads ", nkv);
  const int64_t n = q.rows, qw = int64_t(nq) * hd, kw = int64_t(nkv) * hd;
  check_tensor("attention", "q", q, n, qw);
  check_tensor("attention", "k", k, n, kw);
  check_tensor("attention", "v", v, n, kw);
  check_tensor("attention", "out", out, n, qw);
  check(pos0 >= 0 && pos0 + n <= capacity, "attention: positions [", pos0, ", ", pos0 + n,
        ") exceed the cache capacity ", capacity);
  check_ptr("attention", "k_cache", k_cache);
  check_ptr("attention", "v_cache", v_cache);

  // memmove: the caller may have projected k/v straight into the cache rows.
  for (int64_t i = 0; i < n; ++i) {
    std::memmove(k_cache + (pos0 + i) * kw, k.row(i), size_t(kw) * sizeof(float));
    std::memmove(v_cache + (pos0 + i) * kw, v.row(i), size_t(kw) * sizeof(float));
  }

  const int group = nq / nkv;
  const float scale = 1.0f / std::sqrt(float(hd));
  const int64_t tasks = n * nq;
  // Work per task grows with the context; aim for ~64K multiply-adds per chunk.
  const int64_t per_task = (pos0 + n) * int64_t(hd) * 2;
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(per_task, 1));
  parallel_for(tasks, grain, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> scores;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / nq;
      const int h = int(t % nq);
      const int64_t len = pos0 + i + 1;
      const float* qh = q.row(i) + int64_t(h) * hd;
      const int64_t kv_off = int64_t(h / group) * hd;
      float* o = out.row(i) + int64_t(h) * hd;
      // Queries of one row read only cache rows < len, already written above, so the result of a
      // row never depends on the other rows of the call.
      if (int64_t(scores.size()) < len) scores.resize(size_t(len));
      float m = -INFINITY;
      for (int64_t p = 0; p < len; ++p) {
        scores[p] = dot(qh, k_cache + p * kw + kv_off, hd) * scale;
        m = std::max(m, scores[p]);
      }
      float sum = 0.0f;
      for (int64_t p = 0; p < len; ++p) {
        scores[p] = std::exp(scores[p] - m);
        sum += scores[p];
      }
      for (int d = 0; d < hd; ++d) o[d] = 0.0f;
      for (int64_t p = 0; p < len; ++p) {
        const float* vp = v_cache + p * kw + kv_off;
        const float s = scores[p];
        for (int d = 0; d < hd; ++d) o[d] += s * vp[d];
      }
      const float inv = 1.0f / sum;
      for (int d = 0; d < hd; ++d) o[d] *= inv;
    }
  });
}

}  // namespace tandem::cpu
