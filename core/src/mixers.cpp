// Attention (GQA, NoPE, KV cache), MoE (sigmoid router, optional latent projections, shared expert)
// and dense relu² MLP mixers, written against Backend ops and QuantizedTensor matmuls.
#include "mixers.h"

#include <cstring>

#include "scratch.h"
#include "tandem/error.h"

namespace tandem {
namespace {

std::unique_ptr<Buffer> upload_vector(Backend& be, const std::vector<float>& v) {
  auto b = be.alloc(std::max<size_t>(v.size() * sizeof(float), 64));
  be.upload(b->data(), v.data(), v.size() * sizeof(float));
  return b;
}

// ---- attention ----

struct KVState : LayerState {
  std::unique_ptr<Buffer> k, v;
  int64_t capacity = 0;
  size_t bytes() const override { return k->bytes() + v->bytes(); }
};

class Attention : public Mixer {
 public:
  Attention(const AttentionDesc& d, int hidden, WeightLoader& w, Backend& be) : d_(d), be_(be) {
    int64_t q = int64_t(d.n_heads) * d.head_dim, kv = int64_t(d.n_kv_heads) * d.head_dim;
    q_ = w.tensor("q_proj", {q, hidden});
    k_ = w.tensor("k_proj", {kv, hidden});
    v_ = w.tensor("v_proj", {kv, hidden});
    o_ = w.tensor("o_proj", {hidden, q});
  }
  std::unique_ptr<LayerState> new_state(int64_t max_tokens) const override {
    auto s = std::make_unique<KVState>();
    size_t bytes = size_t(max_tokens) * d_.n_kv_heads * d_.head_dim * sizeof(float);
    s->k = be_.alloc(bytes);
    s->v = be_.alloc(bytes);
    s->capacity = max_tokens;
    return s;
  }
  void forward(const Tensor& x, const Tensor& out, LayerState& state, const ForwardInfo& info) override {
    auto& s = static_cast<KVState&>(state);
    check(info.pos0 + info.n <= s.capacity, "attention: ", info.pos0 + info.n,
          " tokens exceed the context window of ", s.capacity);
    int64_t n = x.rows;
    Tensor q = sq_.f32(be_, n, q_->rows()), k = sk_.f32(be_, n, k_->rows()),
           v = sv_.f32(be_, n, v_->rows()), a = sa_.f32(be_, n, q_->rows());
    q_->matmul(x, q);
    k_->matmul(x, k);
    v_->matmul(x, v);
    // Rows past the committed length are only ever read after being rewritten, so neither forward
    // nor commit needs to clear them.
    be_.attention(q, k, v, static_cast<float*>(s.k->data()), static_cast<float*>(s.v->data()), s.capacity,
                  info.pos0, d_.n_heads, d_.n_kv_heads, d_.head_dim, a);
    o_->matmul(a, out);
  }
  void commit(LayerState&, const ForwardInfo&, int) override {}

 private:
  AttentionDesc d_;
  Backend& be_;
  std::unique_ptr<QuantizedTensor> q_, k_, v_, o_;
  Scratch sq_, sk_, sv_, sa_;
};

// ---- MoE ----

struct NoState : LayerState {
  size_t bytes() const override { return 0; }
};

// down·relu²(up·x)
struct Ffn {
  std::unique_ptr<QuantizedTensor> up, down;
  Scratch mid;
  void run(Backend& be, const Tensor& x, const Tensor& y) {
    Tensor h = mid.f32(be, x.rows, up->rows());
    up->matmul(x, h);
    be.relu2(h);
    down->matmul(h, y);
  }
};

class MoE : public Mixer {
 public:
  MoE(const MoEDesc& d, int hidden, WeightLoader& w, Backend& be) : d_(d), hidden_(hidden), be_(be) {
    gate_ = w.tensor("gate", {d.n_experts, hidden});
    if (w.has("gate.e_score_correction_bias"))
      bias_ = upload_vector(be, w.vector("gate.e_score_correction_bias", {d.n_experts}));
    int64_t in = hidden;
    if (d.latent > 0) {
      fc1_ = w.tensor("fc1_latent_proj", {d.latent, hidden});
      fc2_ = w.tensor("fc2_latent_proj", {hidden, d.latent});
      in = d.latent;
    }
    experts_.resize(d.n_experts);
    for (int e = 0; e < d.n_experts; ++e) {
      std::string p = "experts." + std::to_string(e) + ".";
      experts_[e].up = w.tensor(p + "up_proj", {d.width, in});
      experts_[e].down = w.tensor(p + "down_proj", {in, d.width});
    }
    if (d.shared_width > 0) {
      shared_.up = w.tensor("shared_experts.up_proj", {d.shared_width, hidden});
      shared_.down = w.tensor("shared_experts.down_proj", {hidden, d.shared_width});
    }
    route_.n_experts = d.n_experts;
    route_.top_k = d.top_k;
    route_.n_group = d.n_group;
    route_.topk_group = d.topk_group;
    route_.norm_topk_prob = d.norm_topk_prob;
    route_.scaling = d.scaling;
  }
  std::unique_ptr<LayerState> new_state(int64_t) const override { return std::make_unique<NoState>(); }

  // Experts run grouped (all tokens of one expert in one matmul); each token then sums its k expert
  // outputs in routing order, so a token's result does not depend on the rest of the batch.
  void forward(const Tensor& x, const Tensor& out, LayerState&, const ForwardInfo&) override {
    const int64_t n = x.rows, k = d_.top_k;
    Tensor logits = slogits_.f32(be_, n, d_.n_experts);
    gate_->matmul(x, logits);
    ids_.resize(size_t(n * k));
    wts_.resize(size_t(n * k));
    be_.moe_route(logits, bias_ ? static_cast<float*>(bias_->data()) : nullptr, route_, ids_.data(), wts_.data());

    Tensor u = x;
    if (fc1_) {
      u = su_.f32(be_, n, d_.latent);
      fc1_->matmul(x, u);
    }
    const int64_t width = u.cols;
    Tensor eo = seo_.f32(be_, n * k, width);  // expert output of (token, slot)
    std::vector<std::vector<int64_t>> rows_of(size_t(d_.n_experts));
    for (int64_t i = 0; i < n * k; ++i) rows_of[size_t(ids_[size_t(i)])].push_back(i);
    for (int e = 0; e < d_.n_experts; ++e) {
      const auto& rows = rows_of[size_t(e)];
      if (rows.empty()) continue;
      const int64_t m = int64_t(rows.size());
      Tensor in = sin_.f32(be_, m, width), res = sres_.f32(be_, m, width);
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(in.row(r), u.row(rows[size_t(r)] / k), size_t(width) * sizeof(float));
      experts_[size_t(e)].run(be_, in, res);
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(eo.row(rows[size_t(r)]), res.row(r), size_t(width) * sizeof(float));
    }
    Tensor r = sr_.f32(be_, n, width);
    for (int64_t t = 0; t < n; ++t) {
      float* dst = r.row(t);
      std::memset(dst, 0, size_t(width) * sizeof(float));
      for (int64_t j = 0; j < k; ++j) {
        const float w = wts_[size_t(t * k + j)];
        const float* src = eo.row(t * k + j);
        for (int64_t c = 0; c < width; ++c) dst[c] += w * src[c];
      }
    }
    if (fc2_) fc2_->matmul(r, out);
    else std::memcpy(out.f32(), r.f32(), out.nbytes());
    if (shared_.up) {
      Tensor s = sshared_.f32(be_, n, hidden_);
      shared_.run(be_, x, s);
      be_.add(out, s, out);
    }
  }
  void commit(LayerState&, const ForwardInfo&, int) override {}

 private:
  MoEDesc d_;
  int hidden_;
  Backend& be_;
  RouteParams route_;
  std::unique_ptr<QuantizedTensor> gate_, fc1_, fc2_;
  std::unique_ptr<Buffer> bias_;
  std::vector<Ffn> experts_;
  Ffn shared_;
  std::vector<int32_t> ids_;
  std::vector<float> wts_;
  Scratch slogits_, su_, seo_, sin_, sres_, sr_, sshared_;
};

// ---- dense MLP ----

class Mlp : public Mixer {
 public:
  Mlp(const MLPDesc& d, int hidden, WeightLoader& w, Backend& be) : be_(be) {
    ffn_.up = w.tensor("up_proj", {d.width, hidden});
    ffn_.down = w.tensor("down_proj", {hidden, d.width});
  }
  std::unique_ptr<LayerState> new_state(int64_t) const override { return std::make_unique<NoState>(); }
  void forward(const Tensor& x, const Tensor& out, LayerState&, const ForwardInfo&) override {
    ffn_.run(be_, x, out);
  }
  void commit(LayerState&, const ForwardInfo&, int) override {}

 private:
  Backend& be_;
  Ffn ffn_;
};

}  // namespace

std::unique_ptr<Mixer> make_attention(const AttentionDesc& d, int hidden, WeightLoader& w, Backend& be) {
  return std::make_unique<Attention>(d, hidden, w, be);
}
std::unique_ptr<Mixer> make_moe(const MoEDesc& d, int hidden, WeightLoader& w, Backend& be) {
  return std::make_unique<MoE>(d, hidden, w, be);
}
std::unique_ptr<Mixer> make_mlp(const MLPDesc& d, int hidden, WeightLoader& w, Backend& be) {
  return std::make_unique<Mlp>(d, hidden, w, be);
}

}  // namespace tandem
