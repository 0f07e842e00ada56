// The checks both Mamba2 mixers (CPU and CUDA) run on their arguments, so that both reject the same
// inputs with the same message: the layer description, forward()'s activations, a state's dims and
// a commit against the pending pass.
// Owner: n/a. Thread: any. Sync: none (host checks).
#pragma once
#include <cstdint>
#include <vector>

#include "scan_cpu.h"
#include "tandem/error.h"
#include "tandem/layer.h"

namespace tandem::mamba2 {

inline const char* mode_name(ForwardMode m) { return m == ForwardMode::Prefill ? "prefill" : "verify"; }

inline void check_layer_kind(const LayerDesc& desc) {
  check(desc.kind == LayerKind::Mamba, "mamba2: asked to build a layer of kind ", int(desc.kind),
        ", expected Mamba (", int(LayerKind::Mamba), ")");
}

inline void check_activation(const Tensor& t, const char* what, int n, int hidden) {
  check(t.dtype == DType::F32, "mamba2 forward: ", what, " must be f32, found ", dtype_name(t.dtype));
  check(t.rows == n && t.cols == hidden, "mamba2 forward: ", what, " is [", t.rows, ", ", t.cols, "], expected [", n,
        ", ", hidden, "]");
}

// A pass (of a forward, or one sequence's of a forward_batch) starts at the state's committed
// length; x and out then hold [Σ n, hidden] f32 (check_activation).
inline void check_pass_start(const ForwardInfo& info, int64_t committed) {
  check(info.n >= 0, "mamba2 forward: info.n must be >= 0, found ", info.n);
  check(info.pos0 == committed, "mamba2 forward: info.pos0 is ", info.pos0, " but the state holds ", committed,
        " committed tokens");
}


// forward_batch's arguments: a state per pass, the passes' rows adding up to x's, verify passes only.
inline void check_batch(const Tensor& x, const std::vector<LayerState*>& states, const std::vector<ForwardInfo>& infos) {
  check(states.size() == infos.size(), "mamba2 forward_batch: ", states.size(), " states for ", infos.size(),
        " passes");
  (void)batch_row_offsets(infos, x.rows);
  for (const ForwardInfo& i : infos)
    check(i.mode == ForwardMode::Verify, "mamba2 forward_batch: a ", mode_name(i.mode), " pass, expected verify");
}

// A state `s` made for another layer shape than the mixer's `dm`.
inline void check_state_dims(const Dims& s, const Dims& dm, const char* what) {
  check(s.nh == dm.nh && s.P == dm.P && s.G == dm.G && s.N == dm.N && s.K == dm.K, "mamba2 ", what,
        ": the state is for nh=", s.nh, " P=", s.P, " G=", s.G, " N=", s.N, " K=", s.K, ", this mixer has nh=", dm.nh,
        " P=", dm.P, " G=", dm.G, " N=", dm.N, " K=", dm.K);
}

// `state` as the mixer's own state type S (made by `made_by`), for a mixer of dims `dm`.
template <class S>
S& state_as(LayerState& state, const Dims& dm, const char* what, const char* made_by) {
  auto* st = dynamic_cast<S*>(&state);
  check(st != nullptr, "mamba2 ", what, ": the state was not made by a ", made_by);
  check_state_dims(st->dims(), dm, what);
  return *st;
}
template <class S>
const S& state_as(const LayerState& state, const Dims& dm, const char* what, const char* made_by) {
  return state_as<S>(const_cast<LayerState&>(state), dm, what, made_by);
}

// Mixer::snapshot / restore: a state with no pending pass, at the position asked for.
inline void check_copy(const char* what, bool pending, int64_t committed, int64_t pos) {
  check(!pending, "mamba2 ", what, ": a forward pass is not committed yet");
  check(committed == pos, "mamba2 ", what, ": asked at position ", pos, " but the state holds ", committed,
        " committed tokens");
}

// The pass a state holds between forward() and commit(), in both mixers: forward() drops the last
// one (a forward without commit is replaced) and records its own; commit() checks `last` against it.
struct PendingPass {
  bool open = false;
  ForwardMode mode = ForwardMode::Verify;
  int n = 0;
  int64_t pos0 = 0;

  void record(const ForwardInfo& info) { open = true, mode = info.mode, n = info.n, pos0 = info.pos0; }
  void check_commit(const ForwardInfo& last) const {
    check(open, "mamba2 commit: no forward is pending (commit twice, or before any forward)");
    check(last.mode == mode && last.n == n && last.pos0 == pos0, "mamba2 commit: last is {", mode_name(last.mode),
          ", n=", last.n, ", pos0=", last.pos0, "} but the pending forward was {", mode_name(mode), ", n=", n,
          ", pos0=", pos0, "}");
  }
};

// The states of B passes (forward: B = 1) as the mixer's state type S, checked against their passes
// and x/out ([Σ n, hidden] f32), with their pending passes dropped; `state_of` casts one state.
template <class S, class StateOf>
std::vector<S*> begin_passes(const Tensor& x, const Tensor& out, LayerState* const* states, const ForwardInfo* infos,
                             size_t B, int hidden, StateOf state_of, int64_t& rows) {
  std::vector<S*> sts;
  rows = 0;
  for (size_t b = 0; b < B; ++b) {
    sts.push_back(&state_of(*states[b]));
    rows += infos[b].n;
  }
  for (size_t b = 0; b < B; ++b) check_pass_start(infos[b], sts[b]->pos());
  check_activation(x, "input x", int(rows), hidden);
  check_activation(out, "output", int(rows), hidden);
  return sts;
}

// n_accepted within the last pass; a prefill is taken whole.
inline void check_accepted(const ForwardInfo& last, int n_accepted) {
  check(n_accepted >= 0 && n_accepted <= last.n, "mamba2 commit: n_accepted must be in [0, ", last.n, "], found ",
        n_accepted);
  if (last.mode == ForwardMode::Prefill)
    check(n_accepted == last.n, "mamba2 commit: a prefill of ", last.n,
          " tokens must be committed whole, found n_accepted = ", n_accepted);
}

}  // namespace tandem::mamba2
