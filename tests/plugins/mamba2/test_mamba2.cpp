// Tests plugins/mamba2: prefill and verify against a float64 reference, bit-exact batch invariance
// and commit/replay, and the errors of bad descs, weights, states and calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include "fakes.h"
#include "mixer_cpu.h"
#include "reference.h"

namespace tandem::mamba2::test {
namespace {

using tandem::test::random_vec;
constexpr int kHidden = 32;

MambaDesc small_desc() {
  MambaDesc d;
  d.n_heads = 4;
  d.head_dim = 8;
  d.n_groups = 2;
  d.state_size = 16;
  d.conv_kernel = 4;
  d.chunk_size = 16;
  return d;
}

std::vector<float> inputs(int n, uint64_t seed) { return random_vec(size_t(n) * kHidden, seed); }
std::vector<float> rows(const std::vector<float>& x, int r0, int n) {
  return std::vector<float>(x.begin() + r0 * kHidden, x.begin() + (r0 + n) * kHidden);
}

struct Layer {
  MambaDesc desc;
  MapLoader w;
  TestBackend backend;
  std::unique_ptr<Mamba2Mixer> mixer;
  explicit Layer(MambaDesc d = small_desc(), uint64_t seed = 7)
      : desc(d), w(random_weights(d, kHidden, seed)) {
    mixer = std::make_unique<Mamba2Mixer>(desc, kHidden, w, backend);
  }
  Mamba2State fresh() const { return Mamba2State(mixer->dims()); }

  // Rows [r0, r0+n) of x through one forward; the pass stays pending.
  std::vector<float> forward(Mamba2State& st, const std::vector<float>& x, int r0, int n, ForwardMode mode) {
    std::vector<float> xin = rows(x, r0, n), out(size_t(n) * kHidden);
    mixer->forward(Tensor::f32(xin.data(), n, kHidden), Tensor::f32(out.data(), n, kHidden), st,
                   ForwardInfo{st.pos(), n, mode});
    return out;
  }
  std::vector<float> run(Mamba2State& st, const std::vector<float>& x, int r0, int n, ForwardMode mode) {
    const ForwardInfo info{st.pos(), n, mode};
    auto out = forward(st, x, r0, n, mode);
    mixer->commit(st, info, n);
    return out;
  }
};

// The reference's output for rows [r0, r0+n) of x, after it has run rows [0, r0).
std::vector<double> reference_rows(const Layer& L, const std::vector<float>& x, int r0, int n) {
  RefState ref(L.desc);
  reference_mixer(L.desc, kHidden, L.w, rows(x, 0, r0), r0, ref, false);
  return reference_mixer(L.desc, kHidden, L.w, rows(x, r0, n), n, ref, false);
}

// max |got − ref| relative to max |ref|.
template <class A, class B>
double rel_err(const A& got, const B& ref) {
  double scale = 1e-30;
  for (auto v : ref) scale = std::max(scale, std::abs(double(v)));
  return tandem::test::max_abs_diff(got, ref) / scale;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same_state(const Mamba2State& a, const Mamba2State& b, const std::string& what) {
  EXPECT_EQ(a.pos(), b.pos()) << what;
  EXPECT_TRUE(same_bits(a.conv(), b.conv())) << what << ": conv windows differ";
  EXPECT_TRUE(same_bits(a.ssm(), b.ssm())) << what << ": SSM states differ";
}

// fp32 mixer against float64: observed errors are at most 4.3e-7 of the largest value; 5e-6
// leaves room, while a wrong formula is off by more than 1e-3.
constexpr double kTol = 5e-6;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Mamba2Prefill, MatchesReferenceAcrossChunkShapes) {
  Layer L;
  for (int n : {1, 15, 16, 17, 32, 70}) {
    auto x = inputs(n, 100 + n);
    Mamba2State st = L.fresh();
    auto out = L.run(st, x, 0, n, ForwardMode::Prefill);
    RefState ref(L.desc);
    auto want = reference_mixer(L.desc, kHidden, L.w, x, n, ref, false);
    EXPECT_LT(rel_err(out, want), kTol) << "n=" << n;
    EXPECT_LT(rel_err(st.ssm(), ref.ssm), kTol) << "n=" << n;
    EXPECT_LT(rel_err(st.conv(), ref.conv), kTol) << "n=" << n;
    EXPECT_EQ(st.pos(), n);
  }
}

TEST(Mamba2Prefill, ContinuesFromCachedState) {
  Layer L;
  auto x = inputs(70, 1);
  Mamba2State one = L.fresh(), two = L.fresh();
  auto whole = L.run(one, x, 0, 70, ForwardMode::Prefill);
  auto first = L.run(two, x, 0, 37, ForwardMode::Prefill);
  auto second = L.run(two, x, 37, 33, ForwardMode::Prefill);
  EXPECT_TRUE(same_bits(first, rows(whole, 0, 37)))
      << "the first 37 rows should not depend on what follows (chunk grid starts at 0 in both)";
  EXPECT_LT(rel_err(second, rows(whole, 37, 33)), kTol);
  EXPECT_LT(rel_err(two.ssm(), one.ssm()), kTol);
  EXPECT_TRUE(same_bits(two.conv(), one.conv()));  // the window is copied inputs
  EXPECT_EQ(two.pos(), 70);

  // The second part also matches the reference continued from its own state.
  EXPECT_LT(rel_err(second, reference_rows(L, x, 37, 33)), kTol);
}

// Passes split on the chunk grid run the very same chunks: the same bits as one pass.
TEST(Mamba2Prefill, SplitOnChunkGridIsBitExact) {
  Layer L;
  auto x = inputs(70, 16);
  Mamba2State one = L.fresh(), two = L.fresh();
  auto whole = L.run(one, x, 0, 70, ForwardMode::Prefill);
  auto first = L.run(two, x, 0, 32, ForwardMode::Prefill);
  auto second = L.run(two, x, 32, 38, ForwardMode::Prefill);
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_TRUE(same_bits(first, whole));
  expect_same_state(two, one, "split at 32");
}

TEST(Mamba2Verify, MatchesReference) {
  Layer L;
  auto x = inputs(28, 2);
  Mamba2State st = L.fresh();
  L.run(st, x, 0, 20, ForwardMode::Prefill);
  auto out = L.run(st, x, 20, 8, ForwardMode::Verify);
  EXPECT_LT(rel_err(out, reference_rows(L, x, 20, 8)), kTol);
  RefState ref(L.desc);
  reference_mixer(L.desc, kHidden, L.w, x, 28, ref, false);
  EXPECT_LT(rel_err(st.ssm(), ref.ssm), kTol);
}

// Verify of k+1 tokens, row by row and state after commit, equals k+1 single-token steps, bitwise.
TEST(Mamba2Verify, BatchInvariant) {
  Layer L;
  auto x = inputs(20 + 16, 3);
  Mamba2State base = L.fresh();
  L.run(base, x, 0, 20, ForwardMode::Prefill);
  for (int k = 0; k <= 15; ++k) {
    Mamba2State batch = base, steps = base;
    auto all = L.run(batch, x, 20, k + 1, ForwardMode::Verify);
    for (int i = 0; i <= k; ++i) {
      auto one = L.run(steps, x, 20 + i, 1, ForwardMode::Verify);
      EXPECT_TRUE(same_bits(one, rows(all, i, 1))) << "k=" << k << " row " << i;
    }
    expect_same_state(batch, steps, "k=" + std::to_string(k));
  }
}

// commit(n) after a verify of k+1 tokens equals n plain steps: the state bytes and the next step.
TEST(Mamba2Verify, CommitAnyPrefixEqualsPlainSteps) {
  Layer L;
  auto x = inputs(20 + 16, 4);
  auto drafts = inputs(16, 5);  // what the pass verified beyond the accepted prefix
  auto next = inputs(1, 6);
  Mamba2State base = L.fresh();
  L.run(base, x, 0, 20, ForwardMode::Prefill);
  for (int k = 0; k <= 15; ++k)
    for (int n = 0; n <= k + 1; ++n) {
      const std::string what = "k=" + std::to_string(k) + " n=" + std::to_string(n);
      std::vector<float> block = rows(x, 20, n), rest = rows(drafts, 0, k + 1 - n);
      block.insert(block.end(), rest.begin(), rest.end());
      Mamba2State spec = base, plain = base;
      const ForwardInfo info{spec.pos(), k + 1, ForwardMode::Verify};
      L.forward(spec, block, 0, k + 1, ForwardMode::Verify);
      L.mixer->commit(spec, info, n);
      for (int i = 0; i < n; ++i) L.run(plain, x, 20 + i, 1, ForwardMode::Verify);
      expect_same_state(spec, plain, what);
      if (n == 0) expect_same_state(spec, base, what + " (commit(0) keeps the state)");
      EXPECT_TRUE(same_bits(L.run(spec, next, 0, 1, ForwardMode::Verify), L.run(plain, next, 0, 1, ForwardMode::Verify)))
          << what;
    }
}

TEST(Mamba2Verify, ForwardWithoutCommitIsDropped) {
  Layer L;
  auto x = inputs(20, 8);
  auto junk = inputs(5, 9);
  Mamba2State a = L.fresh(), b = L.fresh();
  L.run(a, x, 0, 16, ForwardMode::Prefill);
  L.run(b, x, 0, 16, ForwardMode::Prefill);
  L.forward(a, junk, 0, 5, ForwardMode::Verify);
  L.forward(a, junk, 0, 3, ForwardMode::Prefill);
  EXPECT_TRUE(same_bits(L.run(a, x, 16, 4, ForwardMode::Verify), L.run(b, x, 16, 4, ForwardMode::Verify)));
  expect_same_state(a, b, "after a dropped pass");
}

TEST(Mamba2Verify, EmptyPassCommitsNothing) {
  Layer L;
  auto x = inputs(4, 10);
  Mamba2State st = L.fresh();
  L.run(st, x, 0, 4, ForwardMode::Prefill);
  Mamba2State before = st;
  L.run(st, x, 0, 0, ForwardMode::Verify);
  expect_same_state(st, before, "empty verify");
}

TEST(Mamba2Clamp, PrefillClampsOnlyWhenAsked) {
  MambaDesc d = small_desc();
  d.clamp_dt_prefill = true;
  d.time_step_min = 0.08f;  // most Δ here lie in [0.02, 0.3]
  Layer L(d);
  auto x = inputs(40, 11);
  Mamba2State pre = L.fresh(), ver = L.fresh();
  auto out = L.run(pre, x, 0, 40, ForwardMode::Prefill);
  RefState clamped(d), plain(d);
  auto want = reference_mixer(d, kHidden, L.w, x, 40, clamped, true);
  auto unclamped = reference_mixer(d, kHidden, L.w, x, 40, plain, false);
  EXPECT_LT(rel_err(out, want), kTol);
  EXPECT_GT(rel_err(out, unclamped), 100 * kTol) << "the clamp should matter for these weights";
  // Verify never clamps (spec § 3.3, speculation § 4.6 rule 5).
  EXPECT_LT(rel_err(L.run(ver, x, 0, 40, ForwardMode::Verify), unclamped), kTol);
}

TEST(Mamba2Weights, ProjBiasWithoutConvBias) {
  MambaDesc d = small_desc();
  d.proj_bias = true;
  d.conv_bias = false;
  Layer L(d, 21);
  auto x = inputs(24, 12);
  Mamba2State st = L.fresh();
  auto out = L.run(st, x, 0, 24, ForwardMode::Prefill);
  RefState ref(d);
  EXPECT_LT(rel_err(out, reference_mixer(d, kHidden, L.w, x, 24, ref, false)), kTol);
}

TEST(Mamba2Weights, GgufStoredAMatchesALog) {
  Layer L;
  MapLoader gguf = L.w;
  std::vector<float> a = gguf.at("A_log");
  for (float& v : a) v = -std::exp(v);
  gguf.tensors.erase("A_log");
  gguf.tensors["A"] = {{L.desc.n_heads}, a};
  TestBackend be;
  Mamba2Mixer m(L.desc, kHidden, gguf, be);
  EXPECT_TRUE(same_bits(m.weights().a, L.mixer->weights().a));
  auto x = inputs(9, 13);
  Mamba2State s1 = L.fresh(), s2 = L.fresh();
  std::vector<float> o1(9 * kHidden), o2(9 * kHidden);
  const ForwardInfo info{0, 9, ForwardMode::Prefill};
  L.mixer->forward(Tensor::f32(x.data(), 9, kHidden), Tensor::f32(o1.data(), 9, kHidden), s1, info);
  m.forward(Tensor::f32(x.data(), 9, kHidden), Tensor::f32(o2.data(), 9, kHidden), s2, info);
  EXPECT_TRUE(same_bits(o1, o2));
}

TEST(Mamba2Weights, LoaderErrorsNameTheTensor) {
  const MambaDesc d = small_desc();
  auto build = [&](const std::function<void(MapLoader&)>& edit) {
    MapLoader w = random_weights(d, kHidden, 3);
    edit(w);
    TestBackend be;
    return message_of([&] { Mamba2Mixer m(d, kHidden, w, be); });
  };
  EXPECT_EQ(build([](MapLoader&) {}), "(no error)");
  std::string msg = build([&](MapLoader& w) { w.tensors["in_proj"].shape = {d.in_proj_rows() - 1, kHidden + 1}; });
  EXPECT_NE(msg.find("'backbone.layers.0.mixer.in_proj'"), std::string::npos) << msg;
  msg = build([&](MapLoader& w) { w.tensors["conv1d"].shape = {d.conv_dim(), 2, 2}; });
  EXPECT_NE(msg.find("mixer.conv1d'"), std::string::npos) << msg;
  msg = build([](MapLoader& w) { w.tensors.erase("D"); });
  EXPECT_NE(msg.find("mixer.D' is missing"), std::string::npos) << msg;
  msg = build([](MapLoader& w) { w.tensors.erase("A_log"); });
  EXPECT_NE(msg.find("mixer.A_log' is missing"), std::string::npos) << msg;
  msg = build([](MapLoader& w) { w.tensors.erase("conv1d.bias"); });
  EXPECT_NE(msg.find("mixer.conv1d.bias' is missing"), std::string::npos) << msg;
}

TEST(Mamba2Desc, BadDescErrorsNameTheField) {
  auto error_for = [](const std::function<void(MambaDesc&)>& edit) {
    LayerDesc ld;
    ld.kind = LayerKind::Mamba;
    ld.mamba = small_desc();
    MapLoader w = random_weights(ld.mamba, kHidden, 3);
    edit(ld.mamba);
    TestBackend be;
    Mamba2Factory f;
    return message_of([&] { f.create(ld, kHidden, w, be); });
  };
  EXPECT_EQ(error_for([](MambaDesc&) {}), "(no error)");
  EXPECT_NE(error_for([](MambaDesc& d) { d.n_groups = 3; }).find("multiple of n_groups"), std::string::npos);
  EXPECT_NE(error_for([](MambaDesc& d) { d.n_heads = 0; }).find("n_heads"), std::string::npos);
  EXPECT_NE(error_for([](MambaDesc& d) { d.head_dim = -1; }).find("head_dim"), std::string::npos);
  EXPECT_NE(error_for([](MambaDesc& d) { d.n_groups = 0; }).find("n_groups"), std::string::npos);
  EXPECT_NE(error_for([](MambaDesc& d) { d.state_size = 0; }).find("state_size"), std::string::npos);
  EXPECT_NE(error_for([](MambaDesc& d) { d.conv_kernel = 1; }).find("conv_kernel"), std::string::npos);
  EXPECT_NE(error_for([](MambaDesc& d) { d.chunk_size = 0; }).find("chunk_size"), std::string::npos);

  LayerDesc attn;
  attn.kind = LayerKind::Attention;
  MapLoader w;
  TestBackend be;
  EXPECT_NE(message_of([&] { Mamba2Factory().create(attn, kHidden, w, be); }).find("expected Mamba"),
            std::string::npos);
  // The CPU mixer asks whether the backend's memory is host memory, not what the device is called.
  be.host = false;
  MapLoader ok = random_weights(small_desc(), kHidden, 3);
  EXPECT_NE(message_of([&] { Mamba2Mixer m(small_desc(), kHidden, ok, be); }).find("backend 'cpu' is not host-addressable"),
            std::string::npos);
}

TEST(Mamba2Calls, BadCallsAreErrors) {
  Layer L;
  auto x = inputs(10, 14);
  Mamba2State st = L.fresh();
  const ForwardInfo pre{0, 10, ForwardMode::Prefill};
  L.forward(st, x, 0, 10, ForwardMode::Prefill);
  EXPECT_NE(message_of([&] { L.mixer->commit(st, pre, 9); }).find("committed whole"), std::string::npos);
  EXPECT_NE(message_of([&] { L.mixer->commit(st, ForwardInfo{0, 10, ForwardMode::Verify}, 10); })
                .find("but the pending forward was {prefill, n=10, pos0=0}"),
            std::string::npos);
  L.mixer->commit(st, pre, 10);
  EXPECT_NE(message_of([&] { L.mixer->commit(st, pre, 10); }).find("no forward is pending"), std::string::npos);

  const ForwardInfo ver{10, 3, ForwardMode::Verify};
  L.forward(st, x, 0, 3, ForwardMode::Verify);
  EXPECT_NE(message_of([&] { L.mixer->commit(st, ver, 4); }).find("n_accepted must be in [0, 3]"),
            std::string::npos);

  std::vector<float> out(3 * kHidden);
  auto bad_pos = [&] {
    L.mixer->forward(Tensor::f32(x.data(), 3, kHidden), Tensor::f32(out.data(), 3, kHidden), st,
                     ForwardInfo{2, 3, ForwardMode::Verify});
  };
  EXPECT_NE(message_of(bad_pos).find("info.pos0 is 2"), std::string::npos);
  auto bad_cols = [&] {
    L.mixer->forward(Tensor::f32(x.data(), 3, kHidden - 1), Tensor::f32(out.data(), 3, kHidden), st,
                     ForwardInfo{10, 3, ForwardMode::Verify});
  };
  EXPECT_NE(message_of(bad_cols).find("input x is [3, 31]"), std::string::npos);

  MambaDesc other = small_desc();
  other.state_size = 8;
  Mamba2State foreign{Dims::from(other)};
  auto wrong_state = [&] {
    L.mixer->forward(Tensor::f32(x.data(), 3, kHidden), Tensor::f32(out.data(), 3, kHidden), foreign,
                     ForwardInfo{0, 3, ForwardMode::Verify});
  };
  EXPECT_NE(message_of(wrong_state).find("the state is for"), std::string::npos);
}

TEST(Mamba2State, BytesCountStateAndLog) {
  Layer L;
  const MambaDesc& d = L.desc;
  Mamba2State st = L.fresh();
  const size_t fixed = (size_t(d.conv_dim()) * (d.conv_kernel - 1) + size_t(d.d_inner()) * d.state_size) * 4;
  EXPECT_EQ(st.bytes(), fixed);
  auto x = inputs(6, 15);
  L.forward(st, x, 0, 6, ForwardMode::Verify);
  const size_t ssm = size_t(d.d_inner()) * d.state_size * 4;  // the pending final state
  EXPECT_GE(st.bytes(), fixed + ssm + 6 * (2 * size_t(d.conv_dim()) + d.n_heads) * 4);
}

}  // namespace
}  // namespace tandem::mamba2::test
