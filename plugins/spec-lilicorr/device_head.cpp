// The LiLiCorr head on the target's backend (device_head.h).
#include "device_head.h"

#include <algorithm>

#include "quant.h"
#include "tandem/error.h"
#include "tandem/model.h"

namespace tandem::lilicorr {
namespace {

DeviceLinear head_linear(DeviceHeadWeights& d, Model& target, const std::string& name, const Linear& l) {
  return load_linear(d.src, target, "lilicorr." + name, l);  // quant.h: NVFP4 through the target's formats
}

// Columns c0 … c0 + n − 1 of l, with its bias or without.
Linear cols_of(const Linear& l, int64_t c0, int64_t n, bool bias) {
  return slice_cols(l, c0, n, bias, "lilicorr.factor_input_proj");
}

// l without its bias (the bias goes into a table of the head's instead).
Linear no_bias(Linear l) {
  l.b.clear();
  return l;
}

// b[e], or 0 for an empty bias.
float bias_at(const Linear& l, int64_t e) { return l.b.empty() ? 0.0f : l.b[size_t(e)]; }

}  // namespace

std::shared_ptr<const DeviceHeadWeights> load_device_head(const HeadWeights& w, Model& target) {
  auto d = std::make_shared<DeviceHeadWeights>();
  const HeadConfig& c = w.c;
  d->c = c;
  Backend& be = target.backend();
  const int64_t S = c.slots(), K = c.topk, n = S * K, Hh = c.hidden, B = c.block, R = 2 * B - 1;
  check(c.heads > 0 && Hh % c.heads == 0, "lilicorr head: lilicorr_hidden_size ", Hh, " is not a multiple of ",
        "lilicorr_num_heads ", c.heads);
  if (!w.token_proj.empty()) d->token_proj = head_linear(*d, target, "token_proj", no_bias(w.token_proj));
  d->pass_hidden_proj = head_linear(*d, target, "pass_hidden_proj", no_bias(w.pass_hidden_proj));
  d->context_proj = head_linear(*d, target, "context_proj", w.context_proj);
  d->feature_up = head_linear(*d, target, "feature_mlp.up_proj", w.feature_up);
  d->feature_down = head_linear(*d, target, "feature_mlp.down_proj", no_bias(w.feature_down));
  d->feature_norm_w = w.feature_norm_w;
  d->feature_norm_b = w.feature_norm_b;
  std::vector<float> nodes(size_t(n * Hh));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < Hh; ++e)
      nodes[size_t(i * Hh + e)] = w.slot_embedding[size_t((i / K) * Hh + e)] +
                                  w.rank_embedding[size_t((i % K) * Hh + e)] + bias_at(w.token_proj, e) +
                                  bias_at(w.feature_down, e) + bias_at(w.pass_hidden_proj, e);
  d->node_embedding = upload_f32(be, nodes);
  // bias[h, i, j] = rel[h, slot_i − slot_j + B − 1] + same[h]·[slot_i = slot_j], as head.cpp adds them.
  std::vector<float> bias(size_t(c.heads * n * n));
  for (int h = 0; h < c.heads; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const int64_t si = i / K, sj = j / K;
        float b = w.relative_slot_bias[size_t(h * R + (si - sj + B - 1))];
        if (si == sj) b += w.same_slot_bias[size_t(h)];
        bias[size_t((h * n + i) * n + j)] = b;
      }
  d->attention_bias = upload_f32(be, bias);
  for (size_t j = 0; j < w.layers.size(); ++j) {
    const HeadLayer& L = w.layers[j];
    const std::string p = "layers." + std::to_string(j) + ".";
    DeviceHeadLayer D;
    D.attn_norm = upload_f32(be, L.attn_norm);
    D.mlp_norm = upload_f32(be, L.mlp_norm);
    D.qkv = head_linear(*d, target, p + "attn.in_proj", L.in_proj);
    D.out_proj = head_linear(*d, target, p + "attn.out_proj", L.out_proj);
    D.up = head_linear(*d, target, p + "mlp.up_proj", L.up);
    D.down = head_linear(*d, target, p + "mlp.down_proj", L.down);
    d->layers.push_back(std::move(D));
  }
  d->output_norm = upload_f32(be, w.output_norm);
  d->anchor_norm = upload_f32(be, w.anchor_norm);
  d->factor_y = head_linear(*d, target, "factor_input_proj.y", cols_of(w.factor_input_proj, 0, Hh, true));
  d->factor_a = head_linear(*d, target, "factor_input_proj.anchor", cols_of(w.factor_input_proj, Hh, Hh, false));
  d->factor_ya = head_linear(*d, target, "factor_input_proj.product", cols_of(w.factor_input_proj, 2 * Hh, Hh, false));
  d->out_head = head_linear(*d, target, "out_head", no_bias(w.out_head));
  d->in_head = head_linear(*d, target, "in_head", no_bias(w.in_head));
  d->anchor_out_head = head_linear(*d, target, "anchor_out_head", no_bias(w.anchor_out_head));
  const int64_t F = c.factor;
  std::vector<float> vb(size_t((2 * n + 1) * F));
  for (int64_t i = 0; i < 2 * n + 1; ++i)
    for (int64_t e = 0; e < F; ++e)
      vb[size_t(i * F + e)] = bias_at(i < n ? w.out_head : i < 2 * n ? w.in_head : w.anchor_out_head, e);
  d->vector_bias = upload_f32(be, vb);
  return d;
}

DeviceHead::DeviceHead(Backend& backend, std::shared_ptr<const DeviceHeadWeights> w, int64_t matmul_rows)
    : be_(backend), w_(std::move(w)), matmul_rows_(matmul_rows) {
  check(matmul_rows_ >= 0, "lilicorr head: ", matmul_rows_, " rows per matmul, expected 0 (all) or more");
  const HeadConfig& c = w_->c;
  const int64_t S = c.slots(), K = c.topk, n = S * K, Hh = c.hidden, F = c.factor;
  // Every buffer now, detached (Backend::alloc_detached): none comes or goes while the target records
  // graphs, and freeing them with the drafter leaves the target's graphs recorded.
  auto f32 = [&](int64_t m) { return be_.alloc_detached(size_t(std::max<int64_t>(m, 1)) * sizeof(float)); };
  feat_.resize(size_t(n * 5));
  feat_dev_ = f32(n * 5);
  x_ = f32(n * Hh), h_ = f32(n * Hh), d_ = f32(n * Hh);
  qkv_ = f32(n * 3 * Hh), att_ = f32(n * Hh);
  u_ = f32(n * c.mlp);
  t_ = f32(S * Hh), alpha_ = f32(Hh), ga_ = f32(Hh);
  vec_ = f32((2 * n + 1) * F);
  scores_ = f32(K + (S - 1) * K * K);
}

Tensor DeviceHead::buf(const std::unique_ptr<Buffer>& b, int64_t rows, int64_t cols) const {
  return Tensor::f32(static_cast<float*>(b->data()), rows, cols);
}

Tensor DeviceHead::bias(const DeviceLinear& L, int64_t cols) const { return L.bias ? buf(L.bias, 1, cols) : Tensor(); }

void DeviceHead::matmul(const DeviceLinear& L, const Tensor& x, const Tensor& y) {
  const int64_t step = matmul_rows_ > 0 ? matmul_rows_ : x.rows;
  for (int64_t r = 0; r < x.rows; r += step) {
    const int64_t m = std::min(step, x.rows - r);
    L.w->matmul(x.slice_rows(r, m), y.slice_rows(r, m));
  }
}

void DeviceHead::score(const Tensor& emb, const float* logp, const Tensor& pass, const Tensor& anchor, bool anchor_valid,
                       HeadScores& out) {
  features(logp);
  run(emb, pass, anchor, anchor_valid);
  fetch(out);
}

void DeviceHead::features(const float* logp) {
  const HeadConfig& c = w_->c;
  lattice_features(int(c.slots()), int(c.topk), logp, w_->feature_norm_w, w_->feature_norm_b, feat_.data());
  be_.upload(feat_dev_->data(), feat_.data(), feat_.size() * sizeof(float));
}

void DeviceHead::fetch(HeadScores& out) {
  const HeadConfig& c = w_->c;
  const int64_t S = c.slots(), K = c.topk;
  std::vector<float> all(size_t(K + (S - 1) * K * K));
  be_.download(all.data(), scores_->data(), all.size() * sizeof(float));
  out.start.assign(all.begin(), all.begin() + K);
  out.pairs.assign(all.begin() + K, all.end());
}

void DeviceHead::run(const Tensor& emb, const Tensor& pass, const Tensor& anchor, bool anchor_valid) {
  const DeviceHeadWeights& W = *w_;
  const HeadConfig& c = W.c;
  const int64_t S = c.slots(), K = c.topk, n = S * K, H = c.model_hidden, Hh = c.hidden, F = c.factor;
  const int hd = int(Hh / c.heads);
  check(emb.rows == n && emb.cols == H && pass.rows == S && pass.cols == H && anchor.rows == 1 && anchor.cols == H,
        "lilicorr head: candidates ", emb.rows, "×", emb.cols, ", rows ", pass.rows, "×", pass.cols, ", anchor ",
        anchor.rows, "×", anchor.cols, "; expected ", n, "×", H, ", ", S, "×", H, ", 1×", H);
  auto norm = [](const std::unique_ptr<Buffer>& b) { return static_cast<const float*>(b->data()); };
  const Tensor x = buf(x_, n, Hh), h = buf(h_, n, Hh), d = buf(d_, n, Hh), u = buf(u_, n, c.mlp), none;

  // Nodes: token_proj(E[c]) + feature_mlp(LN(features)) + pass_hidden_proj(p_s) + slot + rank, the three
  // linears' biases in the node table: one add_rows.
  if (W.token_proj.w) matmul(W.token_proj, emb, x);
  matmul(W.feature_up, buf(feat_dev_, n, 5), h);
  be_.add_rows(h, none, bias(W.feature_up, Hh), n, none, 1, true, h);
  matmul(W.feature_down, h, d);
  const Tensor t = buf(t_, S, Hh);
  matmul(W.pass_hidden_proj, pass, t);
  be_.add_rows(W.token_proj.w ? x : emb, d, t, K, buf(W.node_embedding, n, Hh), 1, false, x);

  // Lattice layers, pre-norm, residual; q|k|v from one matmul, their bias added by the attention.
  const Tensor qkv = buf(qkv_, n, 3 * Hh), att = buf(att_, n, Hh);
  const Tensor abias = buf(W.attention_bias, int64_t(c.heads) * n, n);
  for (const DeviceHeadLayer& L : W.layers) {
    be_.rms_norm(x, norm(L.attn_norm), c.rms_eps, h);
    matmul(L.qkv, h, qkv);
    be_.attention_bias_qkv(qkv, bias(L.qkv, 3 * Hh), abias, c.heads, hd, att);
    matmul(L.out_proj, att, d);
    be_.add_rows(x, d, bias(L.out_proj, Hh), n, none, 1, false, x);
    be_.rms_norm(x, norm(L.mlp_norm), c.rms_eps, h);
    matmul(L.up, h, u);
    be_.add_rows(u, none, bias(L.up, c.mlp), n, none, 1, true, u);
    matmul(L.down, u, d);
    be_.add_rows(x, d, bias(L.down, Hh), n, none, 1, false, x);
  }
  const Tensor y = h;
  be_.rms_norm(x, norm(W.output_norm), c.rms_eps, y);

  // Anchor and factors: g = silu(W_y·y + W_{y⊙α}·(y⊙α) + W_α·α + b_f).
  const Tensor alpha = buf(alpha_, 1, Hh), ga = buf(ga_, 1, Hh);
  matmul(W.context_proj, anchor, alpha);
  if (anchor_valid) be_.add_rows(alpha, none, bias(W.context_proj, Hh), 1, none, 1, false, alpha);
  else be_.scale_softcap(alpha, 0.0f, 0.0f);
  be_.rms_norm(alpha, norm(W.anchor_norm), c.rms_eps, alpha);
  const Tensor g = x;  // the lattice state is spent
  const Tensor ya = buf(qkv_, n, Hh);  // and so are q|k|v
  matmul(W.factor_y, y, g);
  be_.mul_add_rows(y, alpha, Tensor(), n, ya);
  matmul(W.factor_ya, ya, d);
  matmul(W.factor_a, alpha, ga);
  be_.add_rows(g, d, ga, n, bias(W.factor_y, Hh), n, true, g);

  // o | i | ao in one buffer: their biases (one table) and the normalization are one op each.
  const Tensor vec = buf(vec_, 2 * n + 1, F);
  const Tensor o = vec.slice_rows(0, n), in = vec.slice_rows(n, n), ao = vec.slice_rows(2 * n, 1);
  matmul(W.out_head, g, o);
  matmul(W.in_head, g, in);
  matmul(W.anchor_out_head, alpha, ao);
  be_.add_rows(vec, none, buf(W.vector_bias, 2 * n + 1, F), 1, none, 1, false, vec);
  be_.normalize_rows(vec, c.vector_eps);

  // start[k] = λ⟨ao, i[0, k]⟩; pairs[s][k][k′] = λ⟨o[s, k], i[s + 1, k′]⟩: one download (fetch).
  float* sc = static_cast<float*>(scores_->data());
  be_.group_dots(ao, in.slice_rows(0, K), 1, c.logit_scale, Tensor::f32(sc, 1, K));
  if (S > 1)
    be_.group_dots(o.slice_rows(0, (S - 1) * K), in.slice_rows(K, (S - 1) * K), S - 1, c.logit_scale,
                   Tensor::f32(sc + K, S - 1, K * K));
}

}  // namespace tandem::lilicorr
