// The LiLiCorr head's CPU reference (head.h): features, lattice layers, factors, scores, walk.
#include "head.h"

#include <algorithm>
#include <cmath>

#include "tandem/error.h"

namespace tandem::lilicorr {
namespace {

// Multi-head attention over all n lattice nodes with the additive slot bias; q|k|v come from one
// in_proj. Writes [n, Hh] into `out`.
void lattice_attention(const HeadWeights& w, const HeadLayer& L, const std::vector<float>& x, int slots,
                       std::vector<float>& out) {
  const HeadConfig& c = w.c;
  const int64_t K = c.topk, n = slots * K, Hh = c.hidden;
  const int nh = c.heads;
  const int64_t hd = Hh / nh;
  std::vector<float> qkv;
  L.in_proj.apply(x.data(), n, qkv);  // [n, 3Hh]
  std::vector<float> att(size_t(n * Hh), 0.0f), p(static_cast<size_t>(n), 0.0f);
  const float scale = 1.0f / std::sqrt(float(hd));
  const int64_t R = 2 * c.block - 1;
  for (int h = 0; h < nh; ++h) {
    for (int64_t i = 0; i < n; ++i) {
      const float* q = qkv.data() + i * 3 * Hh + h * hd;
      const int64_t si = i / K;
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        const float* k = qkv.data() + j * 3 * Hh + Hh + h * hd;
        float d = 0.0f;
        for (int64_t e = 0; e < hd; ++e) d += q[e] * k[e];
        const int64_t sj = j / K;
        float b = w.relative_slot_bias[size_t(h * R + (si - sj + c.block - 1))];
        if (si == sj) b += w.same_slot_bias[size_t(h)];
        p[size_t(j)] = d * scale + b;
        mx = std::max(mx, p[size_t(j)]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - mx);
      float* o = att.data() + i * Hh + h * hd;
      for (int64_t j = 0; j < n; ++j) {
        const float* v = qkv.data() + j * 3 * Hh + 2 * Hh + h * hd;
        const float a = p[size_t(j)] / sum;
        for (int64_t e = 0; e < hd; ++e) o[e] += a * v[e];
      }
    }
  }
  L.out_proj.apply(att.data(), n, out);
}

// y = down(silu(up(x))), n rows.
void mlp(const Linear& up, const Linear& down, const float* x, int64_t n, std::vector<float>& y) {
  std::vector<float> u;
  up.apply(x, n, u);
  silu(u);
  down.apply(u.data(), n, y);
}

}  // namespace

void lattice_features(int slots, int topk, const float* logp, const std::vector<float>& norm_w,
                      const std::vector<float>& norm_b, float* feat) {
  const int64_t K = topk, n = slots * K;
  for (int s = 0; s < slots; ++s) {
    float mx = -INFINITY;
    for (int64_t k = 0; k < K; ++k) mx = std::max(mx, logp[s * K + k]);
    for (int64_t k = 0; k < K; ++k) {
      const float l = logp[s * K + k];
      float* f = feat + (s * K + k) * 5;
      f[0] = l;
      f[1] = std::exp(l);
      f[2] = l - mx;
      f[3] = float(k) / float(std::max<int64_t>(K - 1, 1));
      f[4] = k == 0 ? 1.0f : 0.0f;
    }
  }
  layer_norm(feat, n, 5, norm_w, norm_b, 1e-5f);
}

void score(const HeadWeights& w, int slots, const float* emb, const float* logp, const float* pass,
           const float* anchor, bool anchor_valid, HeadScores& out) {
  const HeadConfig& c = w.c;
  check(slots >= 1 && slots <= c.slots(), "lilicorr head: ", slots, " slots, expected 1 … ", c.slots());
  const int64_t K = c.topk, n = slots * K, H = c.model_hidden, Hh = c.hidden, F = c.factor;

  // Nodes: token_proj(E[c]) + pass_hidden_proj(p_s) + feature_mlp(LN(features)) + slot + rank.
  std::vector<float> x, t;
  if (w.token_proj.empty()) x.assign(emb, emb + n * H);
  else w.token_proj.apply(emb, n, x);
  w.pass_hidden_proj.apply(pass, slots, t);
  std::vector<float> feat(size_t(n * 5));
  lattice_features(slots, c.topk, logp, w.feature_norm_w, w.feature_norm_b, feat.data());
  std::vector<float> fm;
  mlp(w.feature_up, w.feature_down, feat.data(), n, fm);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = i / K, k = i % K;
    for (int64_t e = 0; e < Hh; ++e)
      x[size_t(i * Hh + e)] += t[size_t(s * Hh + e)] + fm[size_t(i * Hh + e)] +
                               w.slot_embedding[size_t(s * Hh + e)] + w.rank_embedding[size_t(k * Hh + e)];
  }

  // Lattice layers, pre-norm, residual.
  std::vector<float> h, d;
  for (const HeadLayer& L : w.layers) {
    h = x;
    rms_norm(h.data(), n, Hh, L.attn_norm, c.rms_eps);
    lattice_attention(w, L, h, slots, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
    h = x;
    rms_norm(h.data(), n, Hh, L.mlp_norm, c.rms_eps);
    mlp(L.up, L.down, h.data(), n, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  rms_norm(x.data(), n, Hh, w.output_norm, c.rms_eps);

  // Anchor and factors: g = silu(W_f [y; α; y⊙α] + b_f).
  std::vector<float> alpha;
  w.context_proj.apply(anchor, 1, alpha);
  if (!anchor_valid) std::fill(alpha.begin(), alpha.end(), 0.0f);
  rms_norm(alpha.data(), 1, Hh, w.anchor_norm, c.rms_eps);
  std::vector<float> cat(size_t(n * 3 * Hh)), g;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < Hh; ++e) {
      const float y = x[size_t(i * Hh + e)], a = alpha[size_t(e)];
      float* r = cat.data() + i * 3 * Hh;
      r[e] = y, r[Hh + e] = a, r[2 * Hh + e] = y * a;
    }
  w.factor_input_proj.apply(cat.data(), n, g);
  silu(g);
  std::vector<float> o, in, ao;
  w.out_head.apply(g.data(), n, o);
  w.in_head.apply(g.data(), n, in);
  w.anchor_out_head.apply(alpha.data(), 1, ao);
  normalize_rows(o.data(), n, F, c.vector_eps);
  normalize_rows(in.data(), n, F, c.vector_eps);
  normalize_rows(ao.data(), 1, F, c.vector_eps);

  out.start.assign(size_t(K), 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    float dot = 0.0f;
    for (int64_t e = 0; e < F; ++e) dot += ao[size_t(e)] * in[size_t(k * F + e)];
    out.start[size_t(k)] = dot * c.logit_scale;
  }
  out.pairs.assign(size_t((slots - 1) * K * K), 0.0f);
  for (int s = 0; s + 1 < slots; ++s)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t k2 = 0; k2 < K; ++k2) {
        const float* a = o.data() + (s * K + k) * F;
        const float* b = in.data() + ((s + 1) * K + k2) * F;
        float dot = 0.0f;
        for (int64_t e = 0; e < F; ++e) dot += a[e] * b[e];
        out.pairs[size_t((s * K + k) * K + k2)] = dot * c.logit_scale;
      }
}

std::vector<int> greedy_path(const HeadScores& s, int slots, int topk) {
  std::vector<int> path;
  const float* row = s.start.data();
  for (int i = 0; i < slots; ++i) {
    if (i > 0) row = s.pairs.data() + (size_t(i - 1) * size_t(topk) + size_t(path.back())) * size_t(topk);
    path.push_back(int(std::max_element(row, row + topk) - row));
  }
  return path;
}

}  // namespace tandem::lilicorr
