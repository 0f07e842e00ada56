// The Mamba2 mixer on the CPU: in_proj → conv → Δ → scan → gated norm → out_proj, with the verify
// log and replay that make commit(n) exact.
#include "mixer_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "tandem/error.h"

namespace tandem::mamba2 {
namespace {

// Activations of one forward that do not outlive it. One arena per thread, shared by all layers,
// so a long prefill does not leave a per-layer buffer behind.
struct Scratch {
  std::vector<float> proj, xbc, dt, y, z, normed;
};
thread_local Scratch t_scratch;

float* grow(std::vector<float>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
  return v.data();
}

void add_bias(float* rows, int64_t n, int64_t cols, const std::vector<float>& bias) {
  if (bias.empty()) return;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cols; ++c) rows[t * cols + c] += bias[size_t(c)];
}

}  // namespace

Mamba2State::Mamba2State(const Dims& dm)
    : dm_(dm),
      conv_(size_t(dm.conv_dim * (dm.K - 1)), 0.0f),
      ssm_(size_t(int64_t(dm.nh) * dm.P * dm.N), 0.0f) {}

size_t Mamba2State::bytes() const {
  size_t n = 0;
  for (const auto* v : {&conv_, &ssm_, &next_conv_, &next_ssm_, &u_log_, &xbc_log_, &dt_log_})
    n += v->capacity() * sizeof(float);
  return n;
}

Mamba2Mixer::Mamba2Mixer(const MambaDesc& desc, int hidden, WeightLoader& weights, Backend& backend)
    : desc_(desc), dm_(Dims::from(desc)), hidden_(hidden), backend_(backend) {
  check(hidden > 0, "mamba2: hidden size must be > 0, found ", hidden);
  // Host kernels read the weights and activations directly.
  check(backend.is_host(), "mamba2 (cpu plugin): backend '", backend.device(),
        "' is not host-addressable, expected a host backend");

  w_ = load_weights(desc, dm_, hidden, weights);
}

std::unique_ptr<LayerState> Mamba2Mixer::new_state(int64_t max_tokens) const {
  (void)max_tokens;  // the state has a fixed size; only the verify log grows, with the pass
  return std::make_unique<Mamba2State>(dm_);
}

std::unique_ptr<LayerState> Mamba2Mixer::snapshot(const LayerState& state, int64_t pos) const {
  const auto& st = state_as<Mamba2State>(state, dm_, "snapshot", "Mamba2 mixer");
  check_copy("snapshot", st.pending(), st.pos_, pos);
  auto c = std::make_unique<Mamba2State>(dm_);
  c->pos_ = st.pos_;
  c->conv_ = st.conv_;
  c->ssm_ = st.ssm_;
  return c;
}

void Mamba2Mixer::restore(const LayerState& snapshot, LayerState& state, int64_t pos) const {
  const auto& c = state_as<Mamba2State>(snapshot, dm_, "restore", "Mamba2 mixer");
  Mamba2State& st = state_of(state, "restore");
  check_copy("restore", c.pending(), c.pos_, pos);
  check(!st.pending(), "mamba2 restore: the target state has a forward pass that is not committed yet");
  st.conv_ = c.conv_;
  st.ssm_ = c.ssm_;
  st.pos_ = c.pos_;
}

Mamba2State& Mamba2Mixer::state_of(LayerState& state, const char* what) const {
  return state_as<Mamba2State>(state, dm_, what, "Mamba2 mixer");
}

void Mamba2Mixer::forward(const Tensor& x, const Tensor& out, LayerState& state, const ForwardInfo& info) {
  LayerState* states[] = {&state};
  run(x, out, states, &info, 1);
}

void Mamba2Mixer::forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>& states,
                                const std::vector<ForwardInfo>& infos) {
  check_batch(x, states, infos);
  run(x, out, states.data(), infos.data(), infos.size());
}

// in_proj, the gated norm and out_proj on all rows of the B passes at once; Δ, the conv and the scan
// per pass on its own rows and state. Each row's result is the one a pass of its sequence alone makes.
void Mamba2Mixer::run(const Tensor& x, const Tensor& out, LayerState* const* states, const ForwardInfo* infos,
                      size_t B) {
  int64_t n = 0;
  std::vector<Mamba2State*> sts = begin_passes<Mamba2State>(
      x, out, states, infos, B, hidden_, [&](LayerState& s) -> Mamba2State& { return state_of(s, "forward"); }, n);
  for (Mamba2State* st : sts) st->pass_.open = false;

  if (n > 0) {
    Scratch& sc = t_scratch;
    const int64_t rows = dm_.rows, d_in = dm_.d_in, cdim = dm_.conv_dim;
    float* proj_all = grow(sc.proj, n * rows);
    w_.in_proj->matmul(x, Tensor::f32(proj_all, n, rows));
    add_bias(proj_all, n, rows, w_.in_bias);
    float* y_all = grow(sc.y, n * d_in);

    int64_t r0 = 0;
    for (size_t b = 0; b < B; ++b) {
      Mamba2State& st = *sts[b];
      const int nb = infos[b].n;
      const bool verify = infos[b].mode == ForwardMode::Verify;
      const float* proj = proj_all + r0 * rows;
      float* y = y_all + r0 * d_in;
      r0 += nb;
      if (nb == 0) continue;

      // Δ in fp32. The HF clamp applies only to prefill and only when asked (spec § 3.3).
      float* dt = verify ? grow(st.dt_log_, int64_t(nb) * dm_.nh) : grow(sc.dt, int64_t(nb) * dm_.nh);
      const bool clamp = !verify && desc_.clamp_dt_prefill;
      for (int t = 0; t < nb; ++t)
        for (int h = 0; h < dm_.nh; ++h) {
          float v = softplus(proj[t * rows + d_in + cdim + h] + w_.dt_bias[size_t(h)]);
          dt[int64_t(t) * dm_.nh + h] = clamp ? std::max(v, desc_.time_step_min) : v;
        }

      const float* u = proj + d_in;  // pre-conv xBC rows, stride `rows`
      float* xbc = verify ? grow(st.xbc_log_, nb * cdim) : grow(sc.xbc, nb * cdim);
      conv_silu(st.conv_.data(), u, rows, nb, w_.conv_w.data(), w_.conv_b.empty() ? nullptr : w_.conv_b.data(),
                cdim, dm_.K, xbc, cdim);

      const ScanInput in{xbc, cdim, dt, nb};
      grow(st.next_ssm_, int64_t(st.ssm_.size()));
      if (verify) {
        float* log = grow(st.u_log_, nb * cdim);
        for (int t = 0; t < nb; ++t) std::memcpy(log + t * cdim, u + t * rows, size_t(cdim) * sizeof(float));
        scan_steps(dm_, in, w_.a.data(), w_.d.data(), st.ssm_.data(), st.next_ssm_.data(), y);
      } else {
        shift_window(st.conv_.data(), u, rows, nb, cdim, dm_.K, grow(st.next_conv_, int64_t(st.conv_.size())));
        scan_chunked(dm_, in, w_.a.data(), w_.d.data(), st.ssm_.data(), st.next_ssm_.data(), y);
      }
    }

    // z is strided inside proj; the norm takes dense rows.
    float* z = grow(sc.z, n * d_in);
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(z + t * d_in, proj_all + t * rows, size_t(d_in) * sizeof(float));
    float* normed = grow(sc.normed, n * d_in);
    backend_.gated_rms_norm(Tensor::f32(y_all, n, d_in), Tensor::f32(z, n, d_in), w_.norm.data(), dm_.G,
                            desc_.eps, Tensor::f32(normed, n, d_in));
    w_.out_proj->matmul(Tensor::f32(normed, n, d_in), out);
    add_bias(out.f32(), n, hidden_, w_.out_bias);
  }

  for (size_t b = 0; b < B; ++b) sts[b]->pass_.record(infos[b]);
}

void Mamba2Mixer::commit(LayerState& state, const ForwardInfo& last, int n_accepted) {
  Mamba2State& st = state_of(state, "commit");
  st.pass_.check_commit(last);
  check_accepted(last, n_accepted);
  if (last.mode == ForwardMode::Prefill) {
    if (n_accepted > 0) {
      std::swap(st.conv_, st.next_conv_);
      std::swap(st.ssm_, st.next_ssm_);
    }
  } else if (n_accepted > 0) {
    const int64_t cdim = dm_.conv_dim;
    shift_window(st.conv_.data(), st.u_log_.data(), cdim, n_accepted, cdim, dm_.K,
                 grow(st.next_conv_, int64_t(st.conv_.size())));
    std::swap(st.conv_, st.next_conv_);
    if (n_accepted == last.n) {
      std::swap(st.ssm_, st.next_ssm_);  // the same step function produced it: the same bits
    } else {
      const ScanInput in{st.xbc_log_.data(), cdim, st.dt_log_.data(), n_accepted};
      replay_steps(dm_, in, w_.a.data(), st.ssm_.data());
    }
  }
  st.pos_ += n_accepted;
  st.pass_.open = false;
}

std::unique_ptr<Mixer> Mamba2Factory::create(const LayerDesc& desc, int hidden, WeightLoader& weights,
                                             Backend& backend) {
  check_layer_kind(desc);
  return std::make_unique<Mamba2Mixer>(desc.mamba, hidden, weights, backend);
}

}  // namespace tandem::mamba2
