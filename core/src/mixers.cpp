// Attention (GQA, NoPE, KV cache), MoE (sigmoid router, optional latent projections, shared expert)
// and dense relu² MLP mixers, written against Backend ops and QuantizedTensor matmuls. Their
// activations live in the Model's MixerScratch, shared by all layers.
#include "mixers.h"

#include "scratch.h"
#include "tandem/error.h"

namespace tandem {
namespace {

// Backend lanes for the span of one mixer's forward: join() on every way out, so an exception
// thrown by an op between fork and join does not leave the backend's lanes open.
class Lanes {
 public:
  Lanes(Backend& be, int n) : be_(be) { be_.fork(n); }
  ~Lanes() {
    if (!joined_) try {
        be_.join();
      } catch (...) {  // already unwinding from the op's own error, which is the one to report
      }
  }
  void to(int i) { be_.lane(i); }
  void wait(int i) { be_.wait_lane(i); }
  void join() {
    joined_ = true;
    be_.join();
  }

 private:
  Backend& be_;
  bool joined_ = false;
};

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
  Attention(const AttentionDesc& d, int hidden, WeightLoader& w, Backend& be, const int64_t* pos0_device,
            MixerScratch& s)
      : d_(d), be_(be), pos0_device_(pos0_device), s_(s) {
    int64_t q = int64_t(d.n_heads) * d.head_dim, kv = int64_t(d.n_kv_heads) * d.head_dim;
    q_ = w.tensor("q_proj", {q, hidden});
    k_ = w.tensor("k_proj", {kv, hidden});
    v_ = w.tensor("v_proj", {kv, hidden});
    o_ = w.tensor("o_proj", {hidden, q});
    s.attn_q.fit(q), s.attn_k.fit(kv), s.attn_v.fit(kv), s.attn_out.fit(q);
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
    LayerState* states[] = {&state};
    run(x, out, states, &info, 1);
  }
  // The projections once on every sequence's rows; the KV append and attention per sequence, each
  // reading its position from its own entry of the Model's position array.
  void forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>& states,
                     const std::vector<ForwardInfo>& infos) override {
    check(states.size() == infos.size(), "attention: ", states.size(), " states for ", infos.size(), " passes");
    run(x, out, states.data(), infos.data(), infos.size());
  }
  void commit(LayerState&, const ForwardInfo&, int) override {}

 private:
  void run(const Tensor& x, const Tensor& out, LayerState* const* states, const ForwardInfo* infos, size_t B) {
    const std::vector<int64_t> off = batch_row_offsets({infos, infos + B}, x.rows);
    for (size_t b = 0; b < B; ++b) {
      auto& s = static_cast<KVState&>(*states[b]);
      check(infos[b].pos0 + infos[b].n <= s.capacity, "attention: ", infos[b].pos0 + infos[b].n,
            " tokens exceed the context window of ", s.capacity);
    }
    int64_t n = x.rows;
    Tensor q = s_.attn_q.f32(be_, n, q_->rows()), k = s_.attn_k.f32(be_, n, k_->rows()),
           v = s_.attn_v.f32(be_, n, v_->rows()), a = s_.attn_out.f32(be_, n, q_->rows());
    // q, k and v are independent: three lanes, so that three latency-bound matmuls overlap.
    Lanes lanes(be_, 3);
    lanes.to(1);
    k_->matmul(x, k);
    lanes.to(2);
    v_->matmul(x, v);
    lanes.to(0);
    q_->matmul(x, q);
    lanes.join();
    // Rows past the committed length are only ever read after being rewritten, so neither forward
    // nor commit needs to clear them. The position goes through device memory (the Model writes it
    // before each pass), so a captured pass replays at any position.
    for (size_t b = 0; b < B; ++b) {
      auto& s = static_cast<KVState&>(*states[b]);
      const int64_t r0 = off[b], r = infos[b].n;
      be_.attention_at(q.slice_rows(r0, r), k.slice_rows(r0, r), v.slice_rows(r0, r),
                       static_cast<float*>(s.k->data()), static_cast<float*>(s.v->data()), s.capacity, infos[b].pos0,
                       pos0_device_ + b, d_.n_heads, d_.n_kv_heads, d_.head_dim, a.slice_rows(r0, r));
    }
    o_->matmul(a, out);
  }
  // A snapshot is a KVState of `pos` rows; only the committed rows are copied.
  std::unique_ptr<LayerState> snapshot(const LayerState& state, int64_t pos) const override {
    const auto& s = kv_of(state, pos, "snapshot");
    auto c = std::make_unique<KVState>();
    c->capacity = pos;
    c->k = be_.alloc_detached(std::max<size_t>(size_t(pos) * row_bytes(), 64));
    c->v = be_.alloc_detached(std::max<size_t>(size_t(pos) * row_bytes(), 64));
    copy_rows(s, *c, pos);
    return c;
  }
  void restore(const LayerState& snapshot, LayerState& state, int64_t pos) const override {
    const auto& c = kv_of(snapshot, pos, "restore");
    kv_of(state, pos, "restore");
    auto& s = static_cast<KVState&>(state);
    copy_rows(c, s, pos);
  }

 private:
  size_t row_bytes() const { return size_t(d_.n_kv_heads) * d_.head_dim * sizeof(float); }
  static const KVState& kv_of(const LayerState& state, int64_t pos, const char* what) {
    const auto* s = dynamic_cast<const KVState*>(&state);
    check(s != nullptr, "attention ", what, ": the state was not made by an attention mixer");
    check(pos >= 0 && pos <= s->capacity, "attention ", what, ": ", pos, " tokens, the state holds ", s->capacity);
    return *s;
  }
  void copy_rows(const KVState& from, KVState& to, int64_t pos) const {
    if (pos == 0) return;
    const int64_t cols = int64_t(d_.n_kv_heads) * d_.head_dim;
    be_.copy(Tensor(from.k->data(), DType::F32, pos, cols), Tensor(to.k->data(), DType::F32, pos, cols));
    be_.copy(Tensor(from.v->data(), DType::F32, pos, cols), Tensor(to.v->data(), DType::F32, pos, cols));
  }

  AttentionDesc d_;
  Backend& be_;
  const int64_t* pos0_device_;
  MixerScratch& s_;
  std::unique_ptr<QuantizedTensor> q_, k_, v_, o_;
};

// ---- MoE ----

struct NoState : LayerState {
  size_t bytes() const override { return 0; }
};

// Mixers without per-sequence state (MoE, MLP): a snapshot holds nothing.
class Stateless : public Mixer {
 public:
  std::unique_ptr<LayerState> new_state(int64_t) const override { return std::make_unique<NoState>(); }
  void commit(LayerState&, const ForwardInfo&, int) override {}
  std::unique_ptr<LayerState> snapshot(const LayerState&, int64_t) const override {
    return std::make_unique<NoState>();
  }
  void restore(const LayerState&, LayerState&, int64_t) const override {}
};

// down·relu²(up·x), relu²(up·x) in the ffn_mid slot.
struct Ffn {
  std::unique_ptr<QuantizedTensor> up, down;
  void run(Backend& be, MixerScratch& s, const Tensor& x, const Tensor& y) {
    Tensor h = s.ffn_mid.f32(be, x.rows, up->rows());
    if (!up->matmul_fused(x, h, Epilogue::Relu2)) {  // relu² in the up matmul where the format can
      up->matmul(x, h);
      be.relu2(h);
    }
    down->matmul(h, y);
  }
};

class MoE : public Stateless {
 public:
  MoE(const MoEDesc& d, int hidden, WeightLoader& w, Backend& be, MixerScratch& s)
      : d_(d), hidden_(hidden), be_(be), s_(s) {
    gate_ = w.tensor("gate", {d.n_experts, hidden});
    if (w.has("gate.e_score_correction_bias"))
      bias_ = upload_vector(be, w.vector("gate.e_score_correction_bias", {d.n_experts}));
    int64_t in = hidden;
    if (d.latent > 0) {
      fc1_ = w.tensor("fc1_latent_proj", {d.latent, hidden});
      fc2_ = w.tensor("fc2_latent_proj", {hidden, d.latent});
      in = d.latent;
    }
    std::vector<std::string> up, down;
    for (int e = 0; e < d.n_experts; ++e) {
      up.push_back("experts." + std::to_string(e) + ".up_proj");
      down.push_back("experts." + std::to_string(e) + ".down_proj");
    }
    up_ = w.experts(up, {d.width, in});
    down_ = w.experts(down, {in, d.width});
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
    s.moe_logits.fit(d.n_experts), s.moe_ids.fit(d.top_k), s.moe_weights.fit(d.top_k);
    if (fc1_) s.moe_latent.fit(d.latent), s.moe_sum.fit(d.latent);
    s.moe_hidden.fit(int64_t(d.top_k) * d.width), s.moe_expert_out.fit(int64_t(d.top_k) * in);
    if (shared_.up) s.moe_shared.fit(hidden), s.ffn_mid.fit(d.shared_width);
  }

  // Every (token, slot) runs its expert as one row of a gathered matmul; each token then sums its k
  // outputs in slot order (moe_combine), so a token's result does not depend on the batch.
  // The shared expert and the latent down-projection do not depend on the routing: they run on lanes
  // of their own (Backend::fork) beside the router, each in its own scratch slots, so that their
  // latency-bound matmuls overlap the routed chain instead of queuing behind it.
  // With a latent fc2, the shared expert writes `out` itself and fc2 adds the routed part into it
  // (fused into fc2 where the format can): one add kernel fewer on the layer's critical path. a + b is
  // b + a in IEEE arithmetic, so the bits are those of routed + shared.
  void forward(const Tensor& x, const Tensor& out, LayerState&, const ForwardInfo&) override { run(x, out); }
  // No state: every sequence's rows run as one pass (each row's result does not depend on the others).
  void forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>&,
                     const std::vector<ForwardInfo>& infos) override {
    (void)batch_row_offsets(infos, x.rows);
    run(x, out);
  }
  void commit(LayerState&, const ForwardInfo&, int) override {}

 private:
  void run(const Tensor& x, const Tensor& out) {
    const int64_t n = x.rows, k = d_.top_k;
    const int shared_lane = shared_.up ? 1 : 0, latent_lane = fc1_ ? 1 + shared_lane : 0;
    const bool shared_into_out = shared_.up && fc2_;
    Lanes lanes(be_, 1 + (shared_.up ? 1 : 0) + (fc1_ ? 1 : 0));
    Tensor s;
    if (shared_.up) {
      lanes.to(shared_lane);
      s = shared_into_out ? out : s_.moe_shared.f32(be_, n, hidden_);
      shared_.run(be_, s_, x, s);
    }
    Tensor u = x;
    if (fc1_) {
      lanes.to(latent_lane);
      u = s_.moe_latent.f32(be_, n, d_.latent);
      fc1_->matmul(x, u);
    }
    lanes.to(0);
    Tensor logits = s_.moe_logits.f32(be_, n, d_.n_experts);
    gate_->matmul(x, logits);
    Tensor ids = s_.moe_ids.f32(be_, n, k), wts = s_.moe_weights.f32(be_, n, k);  // ids: the f32 slot as i32
    int32_t* id = static_cast<int32_t*>(ids.data);
    be_.moe_route(logits, bias_ ? static_cast<float*>(bias_->data()) : nullptr, route_, id, wts.f32());
    if (fc1_) lanes.wait(latent_lane);

    Tensor h = s_.moe_hidden.f32(be_, n * k, d_.width), eo = s_.moe_expert_out.f32(be_, n * k, u.cols);
    if (!up_->gather_matmul_fused(u, id, int(k), h, Epilogue::Relu2)) {
      up_->gather_matmul(u, id, int(k), h);
      be_.relu2(h);
    }
    down_->gather_matmul(h, id, 1, eo);
    Tensor r = fc2_ ? s_.moe_sum.f32(be_, n, u.cols) : out;
    be_.moe_combine(eo, wts.f32(), int(k), r);
    if (shared_into_out) {
      lanes.wait(shared_lane);  // out holds the shared expert's result
      if (!fc2_->matmul_fused(r, out, Epilogue::Accumulate)) {
        Tensor t = s_.moe_shared.f32(be_, n, hidden_);
        fc2_->matmul(r, t);
        be_.add(out, t, out);
      }
    } else if (fc2_) {
      fc2_->matmul(r, out);
    }
    lanes.join();
    if (shared_.up && !shared_into_out) be_.add(out, s, out);
  }

  MoEDesc d_;
  int hidden_;
  Backend& be_;
  MixerScratch& s_;
  RouteParams route_;
  std::unique_ptr<QuantizedTensor> gate_, fc1_, fc2_;
  std::unique_ptr<Buffer> bias_;
  std::unique_ptr<ExpertSet> up_, down_;
  Ffn shared_;
};

// ---- dense MLP ----

class Mlp : public Stateless {
 public:
  Mlp(const MLPDesc& d, int hidden, WeightLoader& w, Backend& be, MixerScratch& s) : be_(be), s_(s) {
    ffn_.up = w.tensor("up_proj", {d.width, hidden});
    ffn_.down = w.tensor("down_proj", {hidden, d.width});
    s.ffn_mid.fit(d.width);
  }
  void forward(const Tensor& x, const Tensor& out, LayerState&, const ForwardInfo&) override {
    ffn_.run(be_, s_, x, out);
  }
  void forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>&,
                     const std::vector<ForwardInfo>& infos) override {
    (void)batch_row_offsets(infos, x.rows);
    ffn_.run(be_, s_, x, out);
  }

 private:
  Backend& be_;
  MixerScratch& s_;
  Ffn ffn_;
};

}  // namespace

std::unique_ptr<Mixer> make_attention(const AttentionDesc& d, int hidden, WeightLoader& w, Backend& be,
                                      const int64_t* pos0_device, MixerScratch& scratch) {
  return std::make_unique<Attention>(d, hidden, w, be, pos0_device, scratch);
}
std::unique_ptr<Mixer> make_moe(const MoEDesc& d, int hidden, WeightLoader& w, Backend& be, MixerScratch& scratch) {
  return std::make_unique<MoE>(d, hidden, w, be, scratch);
}
std::unique_ptr<Mixer> make_mlp(const MLPDesc& d, int hidden, WeightLoader& w, Backend& be, MixerScratch& scratch) {
  return std::make_unique<Mlp>(d, hidden, w, be, scratch);
}

}  // namespace tandem
