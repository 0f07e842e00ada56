// The DFlash backbone on the target's backend (device_backbone.h).
#include "device_backbone.h"

#include <algorithm>
#include <cstring>

#include "quant.h"
#include "tandem/error.h"
#include "tandem/model.h"

namespace tandem::lilicorr {
namespace {

// The values of a host weight as stored bytes: BF16 when every value is a BF16 number (a BF16
// checkpoint's, read exactly), else F32.
RawTensor raw_weight(WeightSource& d, const std::string& name, std::vector<int64_t> shape, const float* v,
                     int64_t n) {
  bool bf16 = true;
  for (int64_t i = 0; i < n && bf16; ++i) {
    uint32_t b;
    std::memcpy(&b, v + i, 4);
    bf16 = (b & 0xffffu) == 0;
  }
  std::vector<uint8_t>& bytes = d.bytes.emplace_back(size_t(n) * (bf16 ? 2 : 4));
  for (int64_t i = 0; i < n; ++i) {
    uint32_t b;
    std::memcpy(&b, v + i, 4);
    if (bf16) {
      const uint16_t h = uint16_t(b >> 16);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(bytes.data() + 4 * i, &b, 4);
    }
  }
  RawTensor r;
  r.name = name + ".weight";
  r.dtype = bf16 ? "BF16" : "F32";
  r.shape = std::move(shape);
  r.data = bytes.data();
  r.nbytes = bytes.size();
  r.file = "lilicorr drafter";
  return r;
}

DeviceLinear device_linear(DeviceWeights& d, Model& target, const std::string& name, const Linear& l) {
  return load_linear(d.src, target, name, l);  // quant.h: NVFP4 through the target's formats
}

// RoPE from pos0 (read from *pos0_device when given): the yarn table when the config has one, else θ.
void rotate(Backend& be, const DeviceWeights& w, const Tensor& x, int heads, int64_t pos0, const int64_t* pos0_device) {
  const BackboneConfig& c = w.c;
  if (w.rope_inv_freq)
    be.rope_table(x, heads, c.head_dim, pos0, pos0_device, static_cast<const float*>(w.rope_inv_freq->data()),
                  c.rope_scale);
  else if (pos0_device)
    be.rope_at(x, heads, c.head_dim, pos0, pos0_device, c.rope_theta);
  else
    be.rope(x, heads, c.head_dim, pos0, c.rope_theta);
}

}  // namespace

std::unique_ptr<Buffer> upload_f32(Backend& be, const std::vector<float>& v) {
  auto b = be.alloc(v.size() * sizeof(float));
  be.upload(b->data(), v.data(), v.size() * sizeof(float));
  return b;
}

DeviceLinear load_linear(WeightSource& d, Model& target, const std::string& name, int64_t out, int64_t in,
                         const float* w, const std::vector<float>& bias) {
  const RawTensor& r = d.raws.emplace_back(raw_weight(d, name, {out, in}, w, out * in));
  TensorGroup g;
  g.prefix = name;
  g.members = {&r};
  g.shape = {out, in};
  DeviceLinear L;
  L.w = target.load_weight(g);
  check(L.w->rows() == out && L.w->cols() == in, "lilicorr: ", name, " loaded as ", L.w->rows(), "×", L.w->cols(),
        ", expected ", out, "×", in);
  if (!bias.empty()) L.bias = upload_f32(target.backend(), bias);
  return L;
}

void apply(Backend& be, const DeviceLinear& L, const Tensor& x, const Tensor& y) {
  L.w->matmul(x, y);
  if (L.bias) be.mul_add_rows(y, Tensor(), Tensor::f32(static_cast<float*>(L.bias->data()), 1, y.cols), y.rows, y);
}

std::shared_ptr<const DeviceWeights> load_device_weights(const BackboneWeights& w, Model& target) {
  auto d = std::make_shared<DeviceWeights>();
  const BackboneConfig& c = w.c;
  d->c = c;
  Backend& be = target.backend();
  check(c.block <= kRowChunk, "lilicorr: block_size ", c.block, " exceeds the device drafter's ", kRowChunk, " rows");
  const int64_t H = c.hidden, taps = int64_t(c.target_layers.size());
  // fc [H, taps·H] as one [H, H] weight per tap: fc(cat_t s_t) = Σ_t fc_t(s_t), read from the taps in place.
  for (int64_t t = 0; t < taps; ++t)
    d->fc.push_back(device_linear(*d, target, "fc.tap" + std::to_string(t), slice_cols(w.fc, t * H, H, false, "fc")));
  if (!c.rope_inv_freq.empty()) d->rope_inv_freq = upload_f32(be, c.rope_inv_freq);
  d->hidden_norm = upload_f32(be, w.hidden_norm);
  d->norm = upload_f32(be, w.norm);
  for (int l = 0; l < c.layers; ++l) {
    const BackboneLayer& L = w.layers[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    DeviceLayer D;
    D.input_norm = upload_f32(be, L.input_norm);
    D.post_norm = upload_f32(be, L.post_norm);
    D.q_norm = upload_f32(be, L.q_norm);
    D.k_norm = upload_f32(be, L.k_norm);
    D.q = device_linear(*d, target, p + "self_attn.q_proj", L.q);
    D.k = device_linear(*d, target, p + "self_attn.k_proj", L.k);
    D.v = device_linear(*d, target, p + "self_attn.v_proj", L.v);
    D.o = device_linear(*d, target, p + "self_attn.o_proj", L.o);
    D.gate = device_linear(*d, target, p + "mlp.gate_proj", L.gate);
    D.up = device_linear(*d, target, p + "mlp.up_proj", L.up);
    D.down = device_linear(*d, target, p + "mlp.down_proj", L.down);
    d->layers.push_back(std::move(D));
  }
  return d;
}

DeviceBackbone::DeviceBackbone(Backend& backend, std::shared_ptr<const DeviceWeights> w)
    : be_(backend), w_(std::move(w)) {
  const BackboneConfig& c = w_->c;
  const int64_t R = kRowChunk, H = c.hidden, qd = int64_t(c.heads) * c.head_dim;
  auto f32 = [&](int64_t n) { return be_.alloc_detached(size_t(n) * sizeof(float)); };
  ctx_ = f32(R * H);
  h_ = f32(R * H);
  d_ = f32(R * H);
  q_ = f32(int64_t(c.block) * qd);
  att_ = f32(int64_t(c.block) * qd);
  g_ = f32(int64_t(c.block) * c.intermediate);
  u_ = f32(int64_t(c.block) * c.intermediate);
  last_ = f32(H);
  const int64_t kd = int64_t(c.kv_heads) * c.head_dim;
  kb_ = f32(int64_t(c.block) * kd);
  vb_ = f32(int64_t(c.block) * kd);
  static_assert(sizeof(int64_t) == 2 * sizeof(float), "the block's position takes two floats' room");
  pos_ = f32(2);
  k_.resize(size_t(c.layers));
  v_.resize(size_t(c.layers));
  reserve(2 * kRowChunk);
}

Tensor DeviceBackbone::buf(const std::unique_ptr<Buffer>& b, int64_t rows, int64_t cols) const {
  return Tensor::f32(static_cast<float*>(b->data()), rows, cols);
}

Tensor DeviceBackbone::last_row() const { return buf(last_, 1, w_->c.hidden); }

void DeviceBackbone::reserve(int64_t rows) {
  if (rows <= capacity_) return;
  const BackboneConfig& c = w_->c;
  const int64_t kd = int64_t(c.kv_heads) * c.head_dim;
  const int64_t cap = std::max(rows, 2 * capacity_);
  for (auto* cache : {&k_, &v_})
    for (auto& b : *cache) {
      auto grown = be_.alloc_detached(size_t(cap * kd) * sizeof(float));
      if (b && rows_ > 0)
        be_.copy(buf(b, rows_, kd), Tensor::f32(static_cast<float*>(grown->data()), rows_, kd));
      b = std::move(grown);
    }
  capacity_ = cap;
  ++generation_;
}

void DeviceBackbone::project_kv(size_t l, const Tensor& h, const Tensor& k, const Tensor& v, int64_t pos0,
                                const int64_t* pos0_device) {
  const BackboneConfig& c = w_->c;
  const DeviceLayer& L = w_->layers[l];
  apply(be_, L.k, h, k);
  apply(be_, L.v, h, v);
  const Tensor heads(k.data, DType::F32, k.rows * c.kv_heads, c.head_dim);
  be_.rms_norm(heads, static_cast<const float*>(L.k_norm->data()), c.eps, heads);
  rotate(be_, *w_, k, c.kv_heads, pos0, pos0_device);
}

void DeviceBackbone::append(const std::vector<Tensor>& taps, int64_t r0, int64_t n) {
  const BackboneConfig& c = w_->c;
  const int64_t H = c.hidden;
  check(taps.size() == w_->fc.size(), "lilicorr: ", taps.size(), " tapped layers, expected ", w_->fc.size());
  for (int64_t done = 0; done < n;) {
    const int64_t m = std::min(kRowChunk, n - done);
    reserve(rows_ + m + c.block);
    const Tensor ctx = buf(ctx_, m, H), d = buf(d_, m, H);
    for (size_t t = 0; t < taps.size(); ++t) {
      const Tensor x = taps[t].slice_rows(r0 + done, m);
      if (t == 0) {
        w_->fc[t].w->matmul(x, ctx);
      } else if (!w_->fc[t].w->matmul_fused(x, ctx, Epilogue::Accumulate)) {
        w_->fc[t].w->matmul(x, d);
        be_.add(ctx, d, ctx);
      }
    }
    be_.rms_norm(ctx, static_cast<const float*>(w_->hidden_norm->data()), c.eps, ctx);
    const int64_t kd = int64_t(c.kv_heads) * c.head_dim;
    for (size_t l = 0; l < w_->layers.size(); ++l)
      project_kv(l, ctx, buf(k_[l], capacity_, kd).slice_rows(rows_, m), buf(v_[l], capacity_, kd).slice_rows(rows_, m),
                 rows_, nullptr);
    be_.copy(ctx.slice_rows(m - 1, 1), buf(last_, 1, H));
    rows_ += m;
    prepared_ = -1;
    done += m;
  }
}

void DeviceBackbone::prepare_block() {
  reserve(rows_ + w_->c.block);
  be_.upload(pos_->data(), &rows_, sizeof(int64_t));
  prepared_ = rows_;
}

void DeviceBackbone::run_block(const Tensor& x, const Tensor& out) {
  const BackboneConfig& c = w_->c;
  const int64_t B = c.block, H = c.hidden, hd = c.head_dim, T = rows_;
  const int64_t qd = int64_t(c.heads) * hd, kd = int64_t(c.kv_heads) * hd;
  check(x.rows == B && x.cols == H && out.rows == B - 1 && out.cols == H, "lilicorr: block ", x.rows, "×", x.cols,
        " into ", out.rows, "×", out.cols, ", expected ", B, "×", H, " into ", B - 1, "×", H);
  check(prepared_ == T && T + B <= capacity_, "lilicorr: a block pass at position ", T,
        " without prepare_block() (prepared for ", prepared_, ")");
  const int64_t* pos = block_position();
  const Tensor h = buf(h_, B, H), d = buf(d_, B, H), q = buf(q_, B, qd), att = buf(att_, B, qd);
  const Tensor g = buf(g_, B, c.intermediate), u = buf(u_, B, c.intermediate);
  const Tensor kb = buf(kb_, B, kd), vb = buf(vb_, B, kd);
  for (size_t l = 0; l < w_->layers.size(); ++l) {
    const DeviceLayer& L = w_->layers[l];
    be_.rms_norm(x, static_cast<const float*>(L.input_norm->data()), c.eps, h);
    apply(be_, L.q, h, q);
    const Tensor qh(q.data, DType::F32, B * c.heads, hd);
    be_.rms_norm(qh, static_cast<const float*>(L.q_norm->data()), c.eps, qh);
    rotate(be_, *w_, q, c.heads, T, pos);
    // The block's K/V go into the cache rows after the context (at the device's position, so that a
    // recording holds no row address), which the next append overwrites.
    project_kv(l, h, kb, vb, T, pos);
    be_.attention_full_at(q, kb, vb, static_cast<float*>(k_[l]->data()), static_cast<float*>(v_[l]->data()),
                          capacity_, T, pos, c.heads, c.kv_heads, int(hd), att);
    apply(be_, L.o, att, d);
    be_.add_rms_norm(x, d, static_cast<const float*>(L.post_norm->data()), c.eps, h);
    apply(be_, L.gate, h, g);
    apply(be_, L.up, h, u);
    be_.silu_mul(g, u, g);
    apply(be_, L.down, g, d);
    be_.add(x, d, x);
  }
  be_.rms_norm(x.slice_rows(1, B - 1), static_cast<const float*>(w_->norm->data()), c.eps, out);
}

}  // namespace tandem::lilicorr
