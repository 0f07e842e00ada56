// The DFlash backbone's CPU reference (backbone.h).
#include "backbone.h"

#include <algorithm>
#include <cmath>

#include "tandem/error.h"

namespace tandem::lilicorr {
namespace {

// RoPE on `heads` heads at `pos`: the yarn table when the config has one, else plain θ.
void rotate(const BackboneConfig& c, float* x, int heads, int64_t pos) {
  if (!c.rope_inv_freq.empty()) rope_table(x, heads, c.head_dim, pos, c.rope_inv_freq.data(), c.rope_scale);
  else rope(x, heads, c.head_dim, pos, c.rope_theta);
}

// k = k_norm(k_proj(x)) with RoPE at pos0 + r, v = v_proj(x), for n rows.
void project_kv(const BackboneWeights& w, const BackboneLayer& L, const float* x, int64_t n, int64_t pos0,
                std::vector<float>& k, std::vector<float>& v) {
  const BackboneConfig& c = w.c;
  L.k.apply(x, n, k);
  L.v.apply(x, n, v);
  const int64_t kd = int64_t(c.kv_heads) * c.head_dim;
  for (int64_t r = 0; r < n; ++r) {
    rms_norm(k.data() + r * kd, c.kv_heads, c.head_dim, L.k_norm, c.eps);
    rotate(c, k.data() + r * kd, c.kv_heads, pos0 + r);
  }
}

}  // namespace

void context_rows(const BackboneWeights& w, const float* feats, int64_t n, std::vector<float>& out) {
  w.fc.apply(feats, n, out);
  rms_norm(out.data(), n, w.c.hidden, w.hidden_norm, w.c.eps);
}

void append_context(const BackboneWeights& w, const float* feats, int64_t n, ContextCache& cache) {
  if (n <= 0) return;
  const BackboneConfig& c = w.c;
  std::vector<float> ctx;
  context_rows(w, feats, n, ctx);
  cache.k.resize(size_t(c.layers));
  cache.v.resize(size_t(c.layers));
  std::vector<float> k, v;
  for (int l = 0; l < c.layers; ++l) {
    project_kv(w, w.layers[size_t(l)], ctx.data(), n, cache.rows, k, v);
    cache.k[size_t(l)].insert(cache.k[size_t(l)].end(), k.begin(), k.end());
    cache.v[size_t(l)].insert(cache.v[size_t(l)].end(), v.begin(), v.end());
  }
  cache.last_row.assign(ctx.end() - c.hidden, ctx.end());
  cache.rows += n;
}

void run_block(const BackboneWeights& w, const ContextCache& cache, std::vector<float> x, std::vector<float>& out) {
  const BackboneConfig& c = w.c;
  const int64_t B = c.block, H = c.hidden, hd = c.head_dim, T = cache.rows;
  const int64_t qd = int64_t(c.heads) * hd, kd = int64_t(c.kv_heads) * hd;
  const int group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(float(hd));
  check(int64_t(x.size()) == B * H, "lilicorr backbone: block of ", x.size(), " values, expected ", B * H);
  std::vector<float> h, q, k, v, att(size_t(B * qd)), d, g, u, p(size_t(T + B));
  for (int l = 0; l < c.layers; ++l) {
    const BackboneLayer& L = w.layers[size_t(l)];
    h = x;
    rms_norm(h.data(), B, H, L.input_norm, c.eps);
    L.q.apply(h.data(), B, q);
    for (int64_t r = 0; r < B; ++r) {
      rms_norm(q.data() + r * qd, c.heads, hd, L.q_norm, c.eps);
      rotate(c, q.data() + r * qd, c.heads, T + r);
    }
    project_kv(w, L, h.data(), B, T, k, v);
    const float* ck = T ? cache.k[size_t(l)].data() : nullptr;
    const float* cv = T ? cache.v[size_t(l)].data() : nullptr;
    // Every block row sees every context row and every block row (no mask).
    std::fill(att.begin(), att.end(), 0.0f);
    for (int64_t r = 0; r < B; ++r)
      for (int hq = 0; hq < c.heads; ++hq) {
        const int hk = hq / group;
        const float* qr = q.data() + r * qd + hq * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j < T + B; ++j) {
          const float* kr = j < T ? ck + j * kd + hk * hd : k.data() + (j - T) * kd + hk * hd;
          float dot = 0.0f;
          for (int64_t e = 0; e < hd; ++e) dot += qr[e] * kr[e];
          p[size_t(j)] = dot * scale;
          mx = std::max(mx, p[size_t(j)]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < T + B; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - mx);
        float* o = att.data() + r * qd + hq * hd;
        for (int64_t j = 0; j < T + B; ++j) {
          const float* vr = j < T ? cv + j * kd + hk * hd : v.data() + (j - T) * kd + hk * hd;
          const float a = p[size_t(j)] / sum;
          for (int64_t e = 0; e < hd; ++e) o[e] += a * vr[e];
        }
      }
    L.o.apply(att.data(), B, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
    h = x;
    rms_norm(h.data(), B, H, L.post_norm, c.eps);
    L.gate.apply(h.data(), B, g);
    L.up.apply(h.data(), B, u);
    for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
    L.down.apply(g.data(), B, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  out.assign(x.begin() + H, x.end());
  rms_norm(out.data(), B - 1, H, w.norm, c.eps);
}

}  // namespace tandem::lilicorr
