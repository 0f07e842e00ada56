// The Mamba2 mixer on the GPU: in_proj → conv → Δ → scan → gated norm → out_proj, with the verify
// log and replay that make commit(n) exact. Mirrors mixer_cpu.cpp step for step. A verify pass runs
// conv through gated norm as one kernel (launch_verify_fused); prefill runs them one by one.
#include "mixer_cuda.h"

#include <algorithm>
#include <utility>

#include "scan_cuda.cuh"
#include "tandem/cuda/util.cuh"
#include "tandem/error.h"

namespace tandem::mamba2 {

using cuda::check_cuda;
using cuda::stream;

// Activations of one forward that do not outlive it, shared by the mixers of one factory: layers
// run one after another on one stream, so a slot reused by the next layer is only overwritten by
// work queued after this layer's.
struct CudaArena {
  struct Slot {
    std::unique_ptr<Buffer> buf;
    float* get(Backend& be, int64_t floats) {
      const size_t bytes = size_t(std::max<int64_t>(floats, 1)) * sizeof(float);
      if (!buf || buf->bytes() < bytes) buf = be.alloc(bytes);
      return static_cast<float*>(buf->data());
    }
  };
  Slot proj, xbc, dt, y, z, normed, workspace;
};

namespace {

float* f32(const std::unique_ptr<Buffer>& b) { return b ? static_cast<float*>(b->data()) : nullptr; }

// A log buffer of at least `floats` floats (contents are rewritten by each pass).
float* grow(std::unique_ptr<Buffer>& b, Backend& be, int64_t floats) {
  const size_t bytes = size_t(std::max<int64_t>(floats, 1)) * sizeof(float);
  if (!b || b->bytes() < bytes) b = be.alloc(bytes);
  return static_cast<float*>(b->data());
}

std::vector<float> download(const Buffer& b, size_t floats) {
  std::vector<float> v(floats);
  check_cuda(cudaMemcpyAsync(v.data(), const_cast<Buffer&>(b).data(), floats * sizeof(float), cudaMemcpyDeviceToHost,
                             stream()),
             "mamba2: download state");
  check_cuda(cudaStreamSynchronize(stream()), "mamba2: download state");
  return v;
}

}  // namespace

Mamba2CudaState::Mamba2CudaState(const Dims& dm, Backend& backend) : dm_(dm), backend_(backend) {
  const size_t conv = size_t(dm.conv_dim * (dm.K - 1)) * sizeof(float);
  const size_t ssm = size_t(int64_t(dm.nh) * dm.P * dm.N) * sizeof(float);
  // Buffers come zeroed: the empty state.
  conv_ = backend.alloc(conv);
  next_conv_ = backend.alloc(conv);
  ssm_ = backend.alloc(ssm);
  next_ssm_ = backend.alloc(ssm);
  conv_pair_[0] = f32(conv_), conv_pair_[1] = f32(next_conv_);
  ssm_pair_[0] = f32(ssm_), ssm_pair_[1] = f32(next_ssm_);
  sel_ = backend.alloc(2 * sizeof(int));  // zeroed: buffer 0 of each pair is committed
}

int Mamba2CudaState::conv_sel() const { return f32(conv_) == conv_pair_[1] ? 1 : 0; }
int Mamba2CudaState::ssm_sel() const { return f32(ssm_) == ssm_pair_[1] ? 1 : 0; }

size_t Mamba2CudaState::bytes() const {
  size_t n = 0;
  for (const auto* b : {&conv_, &ssm_, &next_conv_, &next_ssm_, &sel_, &u_log_, &xbc_log_, &dt_log_})
    if (*b) n += (*b)->bytes();
  return n;
}

std::vector<float> Mamba2CudaState::download_conv() const { return download(*conv_, size_t(dm_.conv_dim * (dm_.K - 1))); }
std::vector<float> Mamba2CudaState::download_ssm() const {
  return download(*ssm_, size_t(int64_t(dm_.nh) * dm_.P * dm_.N));
}

Mamba2CudaMixer::Mamba2CudaMixer(const MambaDesc& desc, int hidden, WeightLoader& weights, Backend& backend,
                                 std::shared_ptr<CudaArena> arena)
    : desc_(desc), dm_(Dims::from(desc)), hidden_(hidden), backend_(backend), arena_(std::move(arena)) {
  check(hidden > 0, "mamba2: hidden size must be > 0, found ", hidden);
  check(backend.device() == "cuda", "mamba2 (cuda plugin): backend device is '", backend.device(),
        "', expected 'cuda'");
  check(dm_.N <= kMaxState, "mamba2 (cuda): state_size ", dm_.N, " exceeds the kernels' limit ", kMaxState);

  Mamba2Weights h = load_weights(desc, dm_, hidden, weights);
  auto upload = [&](const std::vector<float>& v) {
    auto b = backend.alloc(v.size() * sizeof(float));
    backend.upload(b->data(), v.data(), v.size() * sizeof(float));
    return b;
  };
  w_.in_proj = std::move(h.in_proj);
  w_.out_proj = std::move(h.out_proj);
  if (desc.proj_bias) {
    w_.in_bias = upload(h.in_bias);
    w_.out_bias = upload(h.out_bias);
  }
  w_.conv_w = upload(h.conv_w);
  if (desc.conv_bias) w_.conv_b = upload(h.conv_b);
  w_.dt_bias = upload(h.dt_bias);
  w_.d = upload(h.d);
  w_.a = upload(h.a);
  w_.norm = upload(h.norm);
  // G per pass of a batched launch; zeroed, as the kernel leaves them.
  norm_counters_ = backend.alloc(size_t(dm_.G) * kVerifyBatchMax * sizeof(unsigned));
  fused_verify_ = !cuda::env_is_one("TANDEM_MAMBA2_UNFUSED_VERIFY");
}

void Mamba2CudaMixer::poison_scratch() {
  for (CudaArena::Slot* s : {&arena_->y, &arena_->z, &arena_->normed})
    if (s->buf) check_cuda(cudaMemsetAsync(s->buf->data(), 0xff, s->buf->bytes(), stream()), "mamba2: poison scratch");
}

void Mamba2CudaState::poison_logs() {
  for (auto* b : {&u_log_, &xbc_log_, &dt_log_})
    if (*b) check_cuda(cudaMemsetAsync((*b)->data(), 0xff, (*b)->bytes(), stream()), "mamba2: poison logs");
}

Mamba2CudaMixer::~Mamba2CudaMixer() = default;

std::unique_ptr<LayerState> Mamba2CudaMixer::new_state(int64_t max_tokens) const {
  (void)max_tokens;  // the state has a fixed size; only the verify log grows, with the pass
  return std::make_unique<Mamba2CudaState>(dm_, backend_);
}

namespace {

// Mamba2CudaMixer::snapshot: the committed window [conv_dim, K−1] and SSM state [nh, P, N] (f32).
struct Mamba2CudaCopy : LayerState {
  Dims dm;
  int64_t pos = 0;
  std::unique_ptr<Buffer> conv, ssm;
  size_t bytes() const override { return conv->bytes() + ssm->bytes(); }
};

int64_t conv_floats(const Dims& dm) { return dm.conv_dim * (dm.K - 1); }
int64_t ssm_floats(const Dims& dm) { return int64_t(dm.nh) * dm.P * dm.N; }

void copy_floats(Backend& be, const Buffer& from, Buffer& to, int64_t floats) {
  be.copy(Tensor(const_cast<Buffer&>(from).data(), DType::F32, 1, floats), Tensor(to.data(), DType::F32, 1, floats));
}

const Mamba2CudaCopy& copy_of(const LayerState& s, const Dims& dm) {
  const auto* c = dynamic_cast<const Mamba2CudaCopy*>(&s);
  check(c != nullptr, "mamba2 restore: the snapshot was not made by a Mamba2 CUDA mixer");
  check_state_dims(c->dm, dm, "restore");
  return *c;
}

}  // namespace

std::unique_ptr<LayerState> Mamba2CudaMixer::snapshot(const LayerState& state, int64_t pos) const {
  const auto& st = state_as<Mamba2CudaState>(state, dm_, "snapshot", "Mamba2 CUDA mixer");
  check_copy("snapshot", st.pending(), st.pos_, pos);
  auto c = std::make_unique<Mamba2CudaCopy>();
  c->dm = dm_;
  c->pos = st.pos_;
  c->conv = backend_.alloc_detached(size_t(conv_floats(dm_)) * sizeof(float));
  c->ssm = backend_.alloc_detached(size_t(ssm_floats(dm_)) * sizeof(float));
  copy_floats(backend_, *st.conv_, *c->conv, conv_floats(dm_));
  copy_floats(backend_, *st.ssm_, *c->ssm, ssm_floats(dm_));
  return c;
}

void Mamba2CudaMixer::restore(const LayerState& snapshot, LayerState& state, int64_t pos) const {
  const Mamba2CudaCopy& c = copy_of(snapshot, dm_);
  Mamba2CudaState& st = state_of(state, "restore");
  check_copy("restore", false, c.pos, pos);
  check(!st.pending(), "mamba2 restore: the target state has a forward pass that is not committed yet");
  // conv_ and ssm_ are the committed halves of their pairs, the ones sel_ names.
  copy_floats(backend_, *c.conv, *st.conv_, conv_floats(dm_));
  copy_floats(backend_, *c.ssm, *st.ssm_, ssm_floats(dm_));
  st.pos_ = c.pos;
}

Mamba2CudaState& Mamba2CudaMixer::state_of(LayerState& state, const char* what) const {
  return state_as<Mamba2CudaState>(state, dm_, what, "Mamba2 CUDA mixer");
}

void Mamba2CudaMixer::forward(const Tensor& x, const Tensor& out, LayerState& state, const ForwardInfo& info) {
  LayerState* states[] = {&state};
  run(x, out, states, &info, 1);
}

void Mamba2CudaMixer::forward_batch(const Tensor& x, const Tensor& out, const std::vector<LayerState*>& states,
                                    const std::vector<ForwardInfo>& infos) {
  check_batch(x, states, infos);
  run(x, out, states.data(), infos.data(), infos.size());
}

// in_proj and out_proj on all rows of the B passes at once; everything between them per pass, on its
// rows of the shared scratch and its own state: the kernels a pass of that sequence alone launches,
// except that the fused verify kernels of all passes go out as one batched launch.
void Mamba2CudaMixer::run(const Tensor& x, const Tensor& out, LayerState* const* states, const ForwardInfo* infos,
                          size_t B) {
  int64_t n_all = 0;
  std::vector<Mamba2CudaState*> sts = begin_passes<Mamba2CudaState>(
      x, out, states, infos, B, hidden_, [&](LayerState& s) -> Mamba2CudaState& { return state_of(s, "forward"); }, n_all);
  for (Mamba2CudaState* st : sts) st->pass_.open = false;

  if (n_all > 0) {
    CudaArena& ar = *arena_;
    Backend& be = backend_;
    const int64_t rows = dm_.rows, d_in = dm_.d_in, cdim = dm_.conv_dim;
    // Every scratch slot is sized for all rows before the first pass takes its slice of it.
    float* proj_all = ar.proj.get(be, n_all * rows);
    float* normed_all = ar.normed.get(be, n_all * d_in);
    float* y_all = ar.y.get(be, n_all * d_in);
    w_.in_proj->matmul(x, Tensor::f32(proj_all, n_all, rows));
    if (w_.in_bias) launch_add_bias(proj_all, n_all, rows, f32(w_.in_bias), stream());
    const bool verify_all = std::all_of(infos, infos + B, [](const ForwardInfo& i) { return i.mode == ForwardMode::Verify; });
    float* z_all = verify_all && fused_verify_ ? nullptr : ar.z.get(be, n_all * d_in);

    // The fused passes go into batched launches (one per kVerifyBatchMax sequences), each pass with
    // its own group counters.
    VerifyBatch batch;
    auto flush = [&] {
      launch_verify_fused(dm_, batch, stream());
      batch.count = 0;
    };
    int64_t r0 = 0;
    for (size_t b = 0; b < B; ++b) {
      Mamba2CudaState& st = *sts[b];
      const int n = infos[b].n;
      const bool verify = infos[b].mode == ForwardMode::Verify;
      float* proj = proj_all + r0 * rows;
      float* normed = normed_all + r0 * d_in;
      float* y = y_all + r0 * d_in;
      float* z = z_all ? z_all + r0 * d_in : nullptr;
      r0 += n;
      if (n == 0) continue;
      // Verify reads the committed window and state through the device selectors (a graph may replay
      // this pass after commits); prefill is never recorded and takes the host's pointers.
      const int* sel = static_cast<const int*>(st.sel_->data());

      if (verify && fused_verify_) {
        // Everything between the two matmuls in one kernel, one launch for every sequence of the batch
        // (scan_cuda.cuh: launch_verify_fused).
        VerifyPass vp;
        vp.proj = proj, vp.n = n;
        vp.conv_w = f32(w_.conv_w), vp.conv_b = f32(w_.conv_b), vp.dt_bias = f32(w_.dt_bias);
        vp.a = f32(w_.a), vp.d = f32(w_.d), vp.norm_w = f32(w_.norm), vp.eps = desc_.eps;
        vp.windows = StatePair{{st.conv_pair_[0], st.conv_pair_[1]}, sel};
        vp.states = StatePair{{st.ssm_pair_[0], st.ssm_pair_[1]}, sel + 1};
        vp.u_log = grow(st.u_log_, be, n * cdim);
        vp.xbc_log = grow(st.xbc_log_, be, n * cdim);
        vp.dt_log = grow(st.dt_log_, be, int64_t(n) * dm_.nh);
        vp.y = y;
        vp.out = normed;
        vp.counters = static_cast<unsigned*>(norm_counters_->data()) + int64_t(batch.count) * dm_.G;
        batch.pass[batch.count++] = vp;
        if (batch.count == kVerifyBatchMax) flush();
        continue;
      }
      // Δ in fp32. The HF clamp applies only to prefill and only when asked (spec § 3.3).
      float* dt = verify ? grow(st.dt_log_, be, int64_t(n) * dm_.nh) : ar.dt.get(be, int64_t(n) * dm_.nh);
      launch_dt(proj, rows, d_in + cdim, f32(w_.dt_bias), dm_.nh, n, !verify && desc_.clamp_dt_prefill,
                desc_.time_step_min, dt, stream());

      const float* u = proj + d_in;  // pre-conv xBC rows, stride `rows`
      float* xbc = verify ? grow(st.xbc_log_, be, n * cdim) : ar.xbc.get(be, n * cdim);
      // The conv kernel also copies z (strided inside proj) into dense rows for the norm and, in a
      // verify pass, logs u for commit.
      ConvSide side;
      side.z_src = proj;
      side.z_cols = d_in;
      side.z_out = z;
      if (verify) {
        side.u_log = grow(st.u_log_, be, n * cdim);
        launch_conv_silu(StatePair{{st.conv_pair_[0], st.conv_pair_[1]}, sel}, u, rows, n, f32(w_.conv_w),
                         f32(w_.conv_b), cdim, dm_.K, xbc, cdim, stream(), side);
      } else {
        launch_conv_silu(f32(st.conv_), u, rows, n, f32(w_.conv_w), f32(w_.conv_b), cdim, dm_.K, xbc, cdim,
                         stream(), side);
      }

      const ScanInput in{xbc, cdim, dt, n};
      if (verify) {
        launch_scan_steps(dm_, in, f32(w_.a), f32(w_.d), StatePair{{st.ssm_pair_[0], st.ssm_pair_[1]}, sel + 1}, y,
                          stream());
      } else {
        launch_shift_window(f32(st.conv_), u, rows, n, cdim, dm_.K, f32(st.next_conv_), stream());
        void* ws = ar.workspace.get(be, int64_t(scan_chunked_workspace_bytes(dm_, n) / sizeof(float)) + 1);
        launch_scan_chunked(dm_, in, f32(w_.a), f32(w_.d), f32(st.ssm_), f32(st.next_ssm_), y, ws, stream());
      }
      be.gated_rms_norm(Tensor::f32(y, n, d_in), Tensor::f32(z, n, d_in), f32(w_.norm), dm_.G, desc_.eps,
                        Tensor::f32(normed, n, d_in));
    }
    if (batch.count > 0) flush();
    w_.out_proj->matmul(Tensor::f32(normed_all, n_all, d_in), out);
    if (w_.out_bias) launch_add_bias(out.f32(), n_all, hidden_, f32(w_.out_bias), stream());
  }

  for (size_t b = 0; b < B; ++b) sts[b]->pass_.record(infos[b]);
}

void Mamba2CudaMixer::commit(LayerState& state, const ForwardInfo& last, int n_accepted) {
  Mamba2CudaState& st = state_of(state, "commit");
  if (last.mode == ForwardMode::Prefill) {
    st.pass_.check_commit(last);
  } else {
    // A verify pass replayed from a graph runs none of this mixer's host code, so `last` (the Model's
    // record of the pass) is trusted, within what the state can check: the start position and logs
    // that hold its positions.
    const size_t logged = size_t(std::max(last.n, 1)) * size_t(dm_.conv_dim) * sizeof(float);
    check(st.u_log_ && st.xbc_log_ && st.dt_log_ && st.u_log_->bytes() >= logged && st.xbc_log_->bytes() >= logged,
          "mamba2 commit: no forward is pending (commit before any verify pass of ", last.n, " tokens)");
    check(last.pos0 == st.pos_, "mamba2 commit: last is {", mode_name(last.mode), ", n=", last.n, ", pos0=",
          last.pos0, "} but the state holds ", st.pos_, " committed tokens");
  }
  check_accepted(last, n_accepted);
  if (last.mode == ForwardMode::Prefill) {
    if (n_accepted > 0) {
      std::swap(st.conv_, st.next_conv_);
      std::swap(st.ssm_, st.next_ssm_);
      launch_set_selectors(static_cast<int*>(st.sel_->data()), st.conv_sel(), st.ssm_sel(), stream());
    }
  } else if (n_accepted > 0) {
    const int64_t cdim = dm_.conv_dim;
    const bool all = n_accepted == last.n;
    // The selectors after this commit: the new window is the spare; the state is the spare when all
    // positions are taken (the same step kernel produced it: the same bits), else replayed in place.
    const int conv_after = 1 - st.conv_sel(), ssm_after = all ? 1 - st.ssm_sel() : st.ssm_sel();
    const WindowShift shift{f32(st.conv_), f32(st.u_log_), cdim, n_accepted, cdim, dm_.K, f32(st.next_conv_),
                            static_cast<int*>(st.sel_->data()), conv_after, ssm_after};
    if (all) {
      launch_shift_window(shift.window, shift.u, shift.u_stride, shift.taken, shift.C, shift.K, shift.out, stream(),
                          shift.sel, shift.sel0, shift.sel1);
      std::swap(st.ssm_, st.next_ssm_);
    } else {
      // One launch replays the accepted steps on the committed state in place and shifts the window.
      const ScanInput in{f32(st.xbc_log_), cdim, f32(st.dt_log_), n_accepted};
      launch_replay_and_shift(dm_, in, f32(w_.a), f32(st.ssm_), shift, stream());
    }
    std::swap(st.conv_, st.next_conv_);
  }
  st.pos_ += n_accepted;
  st.pass_.open = false;
}

Mamba2CudaFactory::Mamba2CudaFactory() : arena_(std::make_shared<CudaArena>()) {}
Mamba2CudaFactory::~Mamba2CudaFactory() = default;

std::unique_ptr<Mixer> Mamba2CudaFactory::create(const LayerDesc& desc, int hidden, WeightLoader& weights,
                                                 Backend& backend) {
  check_layer_kind(desc);
  return std::make_unique<Mamba2CudaMixer>(desc.mamba, hidden, weights, backend, arena_);
}

}  // namespace tandem::mamba2
