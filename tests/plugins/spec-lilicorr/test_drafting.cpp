// The lilicorr drafter in the drafting loop on the tiny fixture target (tests/fixtures/hf/latent):
// drafted greedy text equals plain greedy text with a random LiLiCorr checkpoint (head or backbone
// only), alone and beside lookup through the plugin registry, and drafts really were proposed and
// verified (their acceptance rate is printed: a random drafter accepts little); a fitted checkpoint
// (tests/fixtures/lilicorr/fitted) that must be accepted partly (20 … 80 %); and the drafter's step on
// the target's backend against its host fp32 reference. Built twice: for the CPU, and with
// TANDEM_LILICORR_DEVICE="cuda" as test_spec_lilicorr_cuda (the target and the drafter on the GPU; skips
// without a CUDA backend, fails under TANDEM_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <fstream>
#include <numeric>

#include "device_head.h"
#include "drafter.h"
#include "golden_head.h"
#include "lili_by_hand.h"
#include "gpu_required.h"
#include "on_target.h"
#include "plugins/cpu/kernels.h"
#include "synth.h"
#include "tandem/drafting.h"
#include "tandem/generate.h"
#include "tandem/parallel.h"
#include "tandem/profile.h"
#include "tests/conformance/model_util.h"
#include "tests/schedulers/slots/drafters.h"

using namespace tandem;

namespace {

constexpr int kTokens = 48;

// A prompt and the target's greedy continuation (`extra` tokens), prefilled in one pass so that the
// model's tap buffers hold every position's taps; rows(pos0, n) hands a drafter those positions.
struct TappedText {
  Model& m;
  std::vector<int> layers;
  std::vector<int32_t> text;
  std::unique_ptr<Sequence> seq;
  TappedText(Model& model, std::vector<int> tap_layers, const std::vector<int32_t>& p, int extra)
      : m(model), layers(std::move(tap_layers)), text(p) {
    const auto cont = generate(m, p, test::run_options(extra)).tokens;
    text.insert(text.end(), cont.begin(), cont.end());
    seq = m.new_sequence(int64_t(text.size()) + 8);
    std::vector<float> logits;
    m.forward(*seq, text, ForwardMode::Prefill, logits, false);
  }
  int64_t size() const { return int64_t(text.size()); }
  TargetHidden rows(int64_t pos0, int64_t n) const {
    TargetHidden h;
    h.pos0 = pos0, h.rows = n, h.layers = layers;
    for (size_t i = 0; i < layers.size(); ++i) h.states.push_back(m.tap(i).slice_rows(pos0, n));
    return h;
  }
};

class LilicorrDrafting : public test::OnLilicorrDevice {};

std::unique_ptr<Model> load_target() { return test::load_lilicorr_target(); }

std::vector<int32_t> prompt(size_t n) {
  auto ids = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  return {ids.begin(), ids.begin() + long(n)};
}

std::string synthesize(const test::TempDir& dir, const ModelDesc& target, bool head) {
  lilicorr::LiliFactory f;
  SpeculatorSettings s("", "draft.lilicorr", {{"geometry", "tiny"}, {"head", head ? "true" : "false"}});
  const std::string path = dir.file(head ? "lili" : "plain");
  f.synthesize(path, target, s, 3);
  return path;
}

using test::Grab;

DraftOptions options(const std::string& path) {
  DraftOptions o = test::fixed_costs(7);  // verify every proposal at full width: a random drafter gets tried
  o.settings["lilicorr"] = SpeculatorSettings("", "draft.lilicorr", {{"path", path}});
  return o;
}

// Drafts verified and accepted, summed over runs.
struct Tally {
  int64_t drafted = 0, accepted = 0;
  double rate() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
};

// Drafted greedy text == plain greedy text on each prompt of `lens` tokens (prefixes of prompt_200.txt,
// or `at` tokens further on), lilicorr (the first drafter) proposed; its acceptance printed and summed.
Tally expect_lossless(Model& m, Drafting& d, const std::string& what, std::vector<size_t> lens = {5, 23},
                      size_t at = 0) {
  Tally all;
  const auto text = test::read_ids(test::data_path("hf/latent/prompt_200.txt"));
  for (size_t n : lens) {
    const std::vector<int32_t> p(text.begin() + long(at), text.begin() + long(at + n));
    const auto plain = generate(m, p, test::run_options(kTokens)).tokens;
    DraftMetrics dm;
    const auto got = d.generate(p, test::run_options(kTokens), {}, &dm).tokens;
    EXPECT_EQ(got, plain) << what << ", prompt of " << n;
    EXPECT_FALSE(dm.drafters.empty());
    if (dm.drafters.empty()) continue;
    const auto& lili = dm.drafters[0];
    EXPECT_EQ(lili.name, "lilicorr");
    EXPECT_GT(lili.proposals, 0) << dm.summary();
    EXPECT_GT(lili.drafted_tokens, 0) << dm.summary();
    std::printf("%s, prompt %zu%s: lilicorr proposed %lld times, %lld drafts verified, %lld accepted (%.1f %%)\n",
                what.c_str(), n, at ? (" at " + std::to_string(at)).c_str() : "", (long long)lili.proposals,
                (long long)lili.drafted_tokens, (long long)lili.accepted_tokens,
                lili.drafted_tokens ? 100.0 * double(lili.accepted_tokens) / double(lili.drafted_tokens) : 0.0);
    all.drafted += lili.drafted_tokens, all.accepted += lili.accepted_tokens;
  }
  return all;
}

TEST_F(LilicorrDrafting, DraftedGreedyEqualsPlainWithTheHead) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  const std::string path = synthesize(dir, m->desc(), true);
  Drafting d(*m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, options(path));
  EXPECT_EQ(m->taps(), (std::vector<int>{0, 1, 3, 4, 6, 7}));
  expect_lossless(*m, d, "lilicorr with head");
}

TEST_F(LilicorrDrafting, DraftedGreedyEqualsPlainWithTheBackboneOnly) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  const std::string path = synthesize(dir, m->desc(), false);
  Drafting d(*m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, options(path));
  expect_lossless(*m, d, "lilicorr backbone argmax");
}

// The drafter as served: looked up by name in the plugin registry, beside lookup; and its trace.
TEST_F(LilicorrDrafting, WithLookupThroughTheRegistry) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  const std::string path = synthesize(dir, m->desc(), true);
  DraftOptions o = options(path);
  o.drafters = {"lilicorr", "lookup"};
  Drafting d(*m, test::registry(), o);
  expect_lossless(*m, d, "lilicorr + lookup");

  // The trace of a run (what `tandem generate --trace-drafts` writes): each step lists lilicorr's and
  // lookup's proposals, and the steps add up to the output.
  std::vector<DraftStep> steps;
  d.set_trace([&](const DraftStep& s) { steps.push_back(s); });
  const auto p = prompt(23);
  const auto plain = generate(*m, p, test::run_options(kTokens)).tokens;
  DraftMetrics dm;
  ASSERT_EQ(d.generate(p, test::run_options(kTokens), {}, &dm).tokens, plain);
  ASSERT_EQ(int64_t(steps.size()), dm.steps);
  const test::TraceCounts c = test::check_trace(steps, p.size(), plain, {"lilicorr", "lookup"});
  EXPECT_GT(c.proposed[0], 0) << "lilicorr proposed nothing";
  ASSERT_EQ(dm.drafters.size(), 2u);
  EXPECT_EQ(std::accumulate(dm.drafters[0].proposed_at.begin(), dm.drafters[0].proposed_at.end(), int64_t(0)),
            c.proposed[0]);
  EXPECT_EQ(std::accumulate(dm.drafters[1].proposed_at.begin(), dm.drafters[1].proposed_at.end(), int64_t(0)),
            c.proposed[1]);
}

// The proposal is the first max_n tokens of the full block (the block never shrinks).
TEST_F(LilicorrDrafting, ShortProposalsAreThePrefixOfTheFullBlock) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  const std::string path = synthesize(dir, m->desc(), true);
  auto grab = std::make_shared<Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  lilicorr::LiliFactory f;
  SpeculatorSettings s("", "draft.lilicorr", {{"path", path}});
  auto sp = f.create(grab->ctx, s);
  auto& lili = static_cast<lilicorr::LiliDrafter&>(*sp);
  m->set_taps(lili.hidden_layers());
  const auto p = prompt(11);
  auto seq = m->new_sequence(64);
  std::vector<float> logits;
  m->forward(*seq, p, ForwardMode::Prefill, logits, false);
  m->commit(*seq, int(p.size()));
  test::feed_prompt(lili, *m, p, logits);
  Draft full, part;
  lili.propose(31, full);
  ASSERT_EQ(full.tokens.size(), size_t(7)) << "B − 1 drafts";
  EXPECT_EQ(lili.context_rows(), int64_t(p.size()));
  lili.propose(3, part);
  EXPECT_EQ(part.tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 3));
  EXPECT_EQ(lili.last_block(), full.tokens) << "the short proposal ran the full block";
  for (int32_t t : full.tokens) EXPECT_TRUE(t >= 0 && t < m->desc().vocab);
}

TEST_F(LilicorrDrafting, AWidthMismatchWithTheTargetIsAnError) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  ModelDesc other = m->desc();
  other.hidden = 32;
  const std::string path = synthesize(dir, other, true);
  try {
    Drafting d(*m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, options(path));
    ADD_FAILURE() << "a 32-wide drafter was accepted for a 64-wide target";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("32 wide (hidden_size), the target 64"), std::string::npos) << msg;
  }
}

}  // namespace

namespace {

// As a profile selects it: `draft: {drafters: [lilicorr, lookup], lilicorr: {path: …}}`, the path
// relative to the profile file.
TEST_F(LilicorrDrafting, AProfileSelectsItWithARelativePath) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  synthesize(dir, m->desc(), true);  // dir/lili
  const std::string yaml = dir.file("p.yaml");
  std::ofstream(yaml) << "model: " << test::data_path("hf/latent") << "\n"
                      << "draft:\n  drafters: [lilicorr, lookup]\n  lilicorr:\n    path: lili\n"
                      << "  staircut:\n    force_k: 7\n    verify_costs: [0.001, 0.00105, 0.0011, 0.00115, 0.0012, "
                         "0.00125, 0.0013, 0.00135]\n    max_k: 7\n";
  const Profile prof = load_profile(yaml);
  ASSERT_EQ(prof.draft.drafters, (std::vector<std::string>{"lilicorr", "lookup"}));
  Drafting d(*m, test::registry(), prof.draft);
  expect_lossless(*m, d, "lilicorr + lookup from a profile");
}

}  // namespace

namespace {

// Sampled: a deterministic drafter leaves a seeded run's tokens as plain decoding draws them.
TEST_F(LilicorrDrafting, SeededSampledRunsEqualPlain) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  const std::string path = synthesize(dir, m->desc(), true);
  Drafting d(*m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, options(path));
  const auto p = prompt(9);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    GenerateOptions o = test::run_options(32);
    o.sampling.temperature = seed % 2 ? 1.0f : 0.8f;
    o.sampling.seed = seed;
    const auto plain = generate(*m, p, o).tokens;
    DraftMetrics dm;
    EXPECT_EQ(d.generate(p, o, {}, &dm).tokens, plain) << "seed " << seed;
    EXPECT_GT(dm.drafters.at(0).drafted_tokens, 0) << dm.summary();
  }
}

}  // namespace

namespace {

// The largest |a − b| over two equally long vectors.
float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float d = 0.0f;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// The gap between the best and the second best of v[0 … n − 1].
float top2_margin(const float* v, int n) {
  std::vector<float> s(v, v + n);
  std::sort(s.begin(), s.end(), std::greater<float>());
  return n > 1 ? s[0] - s[1] : INFINITY;
}

// Checks the drafter's last proposal against the host reference run on the same committed rows;
// returns whether the drafts were compared (no near tie on the reference's walk).
bool expect_step_matches(Model& m, const lilicorr::DrafterWeights& ref, const lilicorr::ContextCache& cache,
                         int32_t anchor, lilicorr::LiliDrafter& lili, const std::string& what) {
  const lilicorr::BackboneConfig& c = ref.backbone.c;
  const int64_t B = c.block, S = B - 1, H = c.hidden, V = m.desc().vocab;
  const int K = ref.head ? ref.head->c.topk : 1;
  Backend& be = m.backend();
  // Host reference: the block embedded by the target's table, the fp32 backbone, the target's LM head
  // on the host rows, the CPU top-K, the fp32 head.
  std::vector<int32_t> ids(size_t(B), c.mask_token);
  ids[0] = anchor;
  auto dev = be.alloc(size_t(std::max<int64_t>(S * V, S * K * H)) * sizeof(float));
  auto dev2 = be.alloc(size_t(S * H) * sizeof(float));
  Tensor e = Tensor::f32(static_cast<float*>(dev->data()), B, H);
  m.embedding().get_rows(ids.data(), int(B), e);
  std::vector<float> x(size_t(B * H)), rows;
  be.download(x.data(), e.data, e.nbytes());
  lilicorr::run_block(ref.backbone, cache, x, rows);
  const float rows_err = max_diff(lili.backbone_rows(), rows);
  EXPECT_LT(rows_err, 2e-3f) << what << ": backbone rows";
  EXPECT_LT(max_diff(lili.anchor_row(), cache.last_row), 2e-3f) << what << ": anchor row";
  be.upload(dev2->data(), rows.data(), rows.size() * sizeof(float));
  Tensor l = Tensor::f32(static_cast<float*>(dev->data()), S, V);
  m.lm_head().matmul(Tensor::f32(static_cast<float*>(dev2->data()), S, H), l);
  std::vector<float> logits(size_t(S * V));
  be.download(logits.data(), l.data, l.nbytes());
  std::vector<int32_t> cand(size_t(S * K));
  std::vector<float> logp(size_t(S * K));
  cpu::top_k_logprobs(Tensor::f32(logits.data(), S, V), K, cand.data(), logp.data());
  EXPECT_EQ(lili.last_candidates().size(), cand.size()) << what;
  if (lili.last_candidates().size() != cand.size()) return false;
  EXPECT_LT(max_diff(lili.last_logp(), logp), 2e-3f) << what << ": candidate log-probabilities";
  // Candidate ids must agree wherever the reference's order is not a near tie.
  int checked = 0;
  for (int64_t s = 0; s < S; ++s) {
    std::vector<float> row(logits.begin() + s * V, logits.begin() + (s + 1) * V);
    std::sort(row.begin(), row.end(), std::greater<float>());
    float gap = INFINITY;
    for (int k = 0; k < K; ++k) gap = std::min(gap, row[size_t(k)] - row[size_t(k) + 1]);
    if (gap < 1e-3f) continue;
    ++checked;
    for (int k = 0; k < K; ++k)
      EXPECT_EQ(lili.last_candidates()[size_t(s * K + k)], cand[size_t(s * K + k)]) << what << ": slot " << s;
  }
  EXPECT_GT(checked, 0) << what << ": every slot was a near tie";
  std::printf("%s: backbone rows max err %.3g, %d of %lld slots' candidates compared\n", what.c_str(), rows_err,
              checked, (long long)S);
  if (!ref.head) {
    EXPECT_EQ(lili.last_block(), lili.last_candidates()) << what << ": argmax drafts";
    return checked == S;
  }
  // The device head alone: the host head on the drafter's own inputs (its backbone rows, anchor row,
  // candidates and their log-probabilities) gives its scores within the weights' rounding (BF16 exact,
  // fp32 sums in another order, and on the GPU other reduction trees and expf).
  const float head_tol = std::string(TANDEM_LILICORR_DEVICE) == "cpu" ? 1e-5f : 1e-3f;
  {
    Tensor ce = Tensor::f32(static_cast<float*>(dev->data()), S * K, H);
    m.embedding().get_rows(lili.last_candidates().data(), int(S * K), ce);
    std::vector<float> emb(size_t(S * K * H));
    be.download(emb.data(), ce.data, ce.nbytes());
    lilicorr::HeadScores own;
    lilicorr::score(*ref.head, int(S), emb.data(), lili.last_logp().data(), lili.backbone_rows().data(),
                    lili.anchor_row().data(), true, own);
    const float lambda = ref.head->c.logit_scale;
    const float start_err = max_diff(lili.last_scores().start, own.start) / lambda;
    const float pair_err = max_diff(lili.last_scores().pairs, own.pairs) / lambda;
    EXPECT_LT(start_err, head_tol) << what << ": the device head's start scores / logit_scale";
    EXPECT_LT(pair_err, head_tol) << what << ": the device head's pair scores / logit_scale";
    const std::vector<int> walk = lilicorr::greedy_path(own, int(S), K);
    bool clear = top2_margin(own.start.data(), K) > 20 * head_tol * lambda;
    for (int64_t s = 0; s + 1 < S && clear; ++s)
      clear = top2_margin(own.pairs.data() + (s * K + walk[size_t(s)]) * K, K) > 20 * head_tol * lambda;
    if (clear) EXPECT_EQ(lili.last_path(), walk) << what << ": the walk on the device head's scores";
    std::printf("%s: device head vs host head on the same inputs: start %.3g, pairs %.3g (× logit_scale %g), walk %s\n",
                what.c_str(), start_err, pair_err, lambda, clear ? "compared" : "near a tie");
  }
  // The head on the reference's candidates.
  Tensor ce = Tensor::f32(static_cast<float*>(dev->data()), S * K, H);
  m.embedding().get_rows(cand.data(), int(S * K), ce);
  std::vector<float> emb(size_t(S * K * H));
  be.download(emb.data(), ce.data, ce.nbytes());
  lilicorr::HeadScores sc;
  lilicorr::score(*ref.head, int(S), emb.data(), logp.data(), rows.data(), cache.last_row.data(), true, sc);
  if (lili.last_candidates() != cand) return false;  // a near tie reordered candidates: scores differ by design
  EXPECT_LT(max_diff(lili.last_scores().start, sc.start), 2e-2f) << what << ": start scores";
  EXPECT_LT(max_diff(lili.last_scores().pairs, sc.pairs), 2e-2f) << what << ": pair scores";
  const std::vector<int> path = lilicorr::greedy_path(sc, int(S), K);
  // Drafts agree wherever each step of the reference's walk has a clear winner.
  bool clear = top2_margin(sc.start.data(), K) > 0.05f;
  for (int64_t s = 0; s + 1 < S && clear; ++s)
    clear = top2_margin(sc.pairs.data() + (s * K + path[size_t(s)]) * K, K) > 0.05f;
  if (!clear) return false;
  for (int64_t s = 0; s < S; ++s)
    EXPECT_EQ(lili.last_block()[size_t(s)], cand[size_t(s * K + path[size_t(s)])]) << what << ": draft " << s;
  return true;
}

// The head's golden vector (golden_head.h) on the target's backend: the same weights loaded by the
// target's formats (fp32 here: the parameter rule's values are not BF16), the lattice run as backend
// ops, in one matmul call and in calls of 2 rows (the chunked path).
TEST_F(LilicorrDrafting, TheDeviceHeadReproducesTheGoldenVector) {
  auto m = load_target();
  const auto w = lilicorr::load_device_head(lilicorr::golden::golden_head(), *m);
  const auto in = lilicorr::golden::golden_inputs();
  Backend& be = m->backend();
  auto emb = lilicorr::upload_f32(be, in.emb), pass = lilicorr::upload_f32(be, in.pass),
       anchor = lilicorr::upload_f32(be, in.anchor);
  for (int64_t rows : {0, 2}) {
    lilicorr::DeviceHead head(be, w, rows);
    lilicorr::HeadScores sc;
    head.score(Tensor::f32(static_cast<float*>(emb->data()), 9, 32), in.logp.data(),
               Tensor::f32(static_cast<float*>(pass->data()), 3, 32), Tensor::f32(static_cast<float*>(anchor->data()), 1, 32),
               true, sc);
    lilicorr::golden::expect_scores(sc, std::string(TANDEM_LILICORR_DEVICE) + " head, matmul rows " + std::to_string(rows));
    EXPECT_EQ(lilicorr::greedy_path(sc, 3, 3), (std::vector<int>{0, 1, 0}));
  }
}

// The drafter's step on the target's backend (device_backbone.cpp, the LM head, top-K, device_head.cpp)
// against the host fp32 reference (backbone.cpp, head.cpp, the CPU backend's top-K) on the same committed
// rows, and the device head against the host head on the drafter's own inputs: after a
// short prompt and after one past several 64-row append chunks (the cache grows), then after plain
// steps that commit one row each. With and without the head.
TEST_F(LilicorrDrafting, TheDeviceStepMatchesTheHostReference) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  auto grab = std::make_shared<Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  for (bool head : {true, false}) {
    int compared = 0;
    const std::string path = synthesize(dir, m->desc(), head);
    const auto ref = lilicorr::load_drafter(path);
    ASSERT_EQ(bool(ref->head), head);
    lilicorr::LiliFactory f;
    for (size_t n : {5, 150}) {
      const std::string what = std::string(head ? "head" : "argmax") + ", prompt " + std::to_string(n);
      SpeculatorSettings s("", "draft.lilicorr", {{"path", path}});
      auto sp = f.create(grab->ctx, s);
      auto& lili = static_cast<lilicorr::LiliDrafter&>(*sp);
      m->set_taps(lili.hidden_layers());
      const int64_t H = m->desc().hidden, taps = int64_t(lili.hidden_layers().size());
      const auto p = prompt(n);
      auto seq = m->new_sequence(256);
      lilicorr::ContextCache cache;
      // Feeds `rows` committed rows at pos0 (the last pass's taps) to the drafter and to the reference.
      auto feed = [&](int64_t pos0, int64_t rows, const int32_t* token) {
        TargetHidden h;
        h.pos0 = pos0, h.rows = rows, h.layers = lili.hidden_layers();
        std::vector<float> feats(size_t(rows * taps * H)), one(size_t(rows * H));
        for (int64_t t = 0; t < taps; ++t) {
          h.states.push_back(m->tap(size_t(t)).slice_rows(0, rows));
          m->backend().download(one.data(), h.states.back().data, one.size() * sizeof(float));
          for (int64_t r = 0; r < rows; ++r)
            std::copy(one.begin() + r * H, one.begin() + (r + 1) * H, feats.begin() + (r * taps + t) * H);
        }
        lilicorr::append_context(ref->backbone, feats.data(), rows, cache);
        if (pos0 == 0) {
          lili.observe_prompt(h);
          lili.observe(token, 1);
        } else {
          lili.observe_hidden(token, 1, h);
        }
      };
      std::vector<float> logits;
      m->forward(*seq, p, ForwardMode::Prefill, logits, false);
      m->commit(*seq, int(p.size()));
      lili.begin(p.data(), p.size());
      int32_t last = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      feed(0, int64_t(p.size()), &last);
      for (int step = 0; step < 3; ++step) {
        Draft dr;
        lili.propose(7, dr);
        ASSERT_EQ(dr.tokens.size(), size_t(7)) << what;
        ASSERT_EQ(lili.context_rows(), cache.rows) << what;
        compared += expect_step_matches(*m, *ref, cache, last, lili, what + ", step " + std::to_string(step));
        // A plain step: the target feeds `last` and commits it; its row enters the context.
        const int64_t pos = int64_t(p.size()) + step;
        m->forward(*seq, {last}, ForwardMode::Verify, logits, false);
        m->commit(*seq, 1);
        last = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        feed(pos, 1, &last);
      }
    }
    EXPECT_GT(compared, 0) << (head ? "head" : "argmax") << ": no step's drafts could be compared";
  }
}

// The fitted drafter (tests/fixtures/lilicorr/fitted, README there: trained by
// tools/reference/lilicorr_fit.py on this target's own continuations of the prompts below) agrees with
// the target often but not always: partial acceptance, 20 … 80 % of the verified drafts.
constexpr double kMinRate = 0.2, kMaxRate = 0.8;
constexpr float kFittedTemperature = 0.5f;
const std::vector<size_t> kFittedPrompts = {5, 9, 14, 23, 31};

std::string fitted() { return test::data_path("lilicorr/fitted"); }

void expect_partial(const Tally& t, const std::string& what) {
  std::printf("%s: %lld of %lld drafts accepted (%.1f %%)\n", what.c_str(), (long long)t.accepted,
              (long long)t.drafted, 100.0 * t.rate());
  EXPECT_GT(t.drafted, 0) << what;
  EXPECT_GE(t.rate(), kMinRate) << what << ": the fitted drafter agrees too rarely";
  EXPECT_LE(t.rate(), kMaxRate) << what << ": the fitted drafter agrees nearly always (no partial acceptance)";
}

TEST_F(LilicorrDrafting, TheFittedDrafterIsAcceptedPartly) {
  auto m = load_target();
  Drafting d(*m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, options(fitted()));
  Tally t = expect_lossless(*m, d, "fitted lilicorr", kFittedPrompts);
  for (auto [at, n] : {std::pair<size_t, size_t>{24, 4}, {38, 6}}) {
    const Tally w = expect_lossless(*m, d, "fitted lilicorr", {n}, at);
    t.drafted += w.drafted, t.accepted += w.accepted;
  }
  expect_partial(t, "fitted lilicorr, greedy");
  // Prompts outside the fitting set: still lossless; their acceptance is only reported (this random
  // target's text is close to unpredictable: about 1 %, README).
  const Tally other = expect_lossless(*m, d, "fitted lilicorr (unseen prompt)", {17, 40}, 0);
  const Tally more = expect_lossless(*m, d, "fitted lilicorr (unseen prompt)", {8}, 100);
  std::printf("fitted lilicorr, unseen prompts: %lld of %lld drafts accepted (%.1f %%)\n",
              (long long)(other.accepted + more.accepted), (long long)(other.drafted + more.drafted),
              100.0 * double(other.accepted + more.accepted) / double(std::max<int64_t>(1, other.drafted + more.drafted)));
}

TEST_F(LilicorrDrafting, TheFittedDrafterWithLookup) {
  auto m = load_target();
  DraftOptions o = options(fitted());
  o.drafters = {"lilicorr", "lookup"};
  Drafting d(*m, test::registry(), o);
  expect_partial(expect_lossless(*m, d, "fitted lilicorr + lookup", kFittedPrompts), "fitted lilicorr + lookup");
}

TEST_F(LilicorrDrafting, TheFittedDrafterInSeededSampledRuns) {
  auto m = load_target();
  Drafting d(*m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, options(fitted()));
  Tally t;
  for (size_t n : {9, 23})
    for (uint64_t seed = 0; seed < 3; ++seed) {
      const auto p = prompt(n);
      GenerateOptions o = test::run_options(kTokens);
      o.sampling.temperature = kFittedTemperature;
      o.sampling.seed = seed;
      const auto plain = generate(*m, p, o).tokens;
      DraftMetrics dm;
      EXPECT_EQ(d.generate(p, o, {}, &dm).tokens, plain) << "prompt " << n << ", seed " << seed;
      ASSERT_FALSE(dm.drafters.empty());
      t.drafted += dm.drafters[0].drafted_tokens, t.accepted += dm.drafters[0].accepted_tokens;
    }
  expect_partial(t, "fitted lilicorr, sampled at temperature " + std::to_string(kFittedTemperature));
}

// The device head alone (device_head.cpp) against the host head on random inputs of the checkpoint's
// shapes, with the anchor row and without one (context_proj(a) times 0), at several rows per matmul.
TEST_F(LilicorrDrafting, TheDeviceHeadMatchesTheHostHeadWithAndWithoutAnAnchor) {
  auto m = load_target();
  test::TempDir dir("lilicorr");
  const auto ref = lilicorr::load_drafter(synthesize(dir, m->desc(), true));
  ASSERT_TRUE(ref->head);
  const lilicorr::HeadWeights& hw = *ref->head;
  const int64_t S = hw.c.slots(), K = hw.c.topk, H = hw.c.model_hidden;
  const auto dw = lilicorr::load_device_head(hw, *m);
  Backend& be = m->backend();
  auto emb = test::random_vec(size_t(S * K * H), 11), pass = test::random_vec(size_t(S * H), 12, -2.f, 2.f);
  auto anchor = test::random_vec(size_t(H), 13, -2.f, 2.f), logp = test::random_vec(size_t(S * K), 14, -9.f, -0.01f);
  for (int64_t s = 0; s < S; ++s) std::sort(logp.begin() + s * K, logp.begin() + (s + 1) * K, std::greater<float>());
  auto de = lilicorr::upload_f32(be, emb), dp = lilicorr::upload_f32(be, pass), da = lilicorr::upload_f32(be, anchor);
  const float tol = std::string(TANDEM_LILICORR_DEVICE) == "cpu" ? 1e-5f : 1e-3f, lambda = hw.c.logit_scale;
  // Matmuls in calls of 16 rows (the default), 5 rows (a short last call) and all S·K rows at once.
  for (auto [valid, rows] : {std::pair{true, int64_t(16)}, std::pair{false, int64_t(16)}, std::pair{true, int64_t(5)},
                             std::pair{true, int64_t(0)}}) {
    lilicorr::DeviceHead head(be, dw, rows);
    lilicorr::HeadScores got, want;
    head.score(Tensor::f32(static_cast<float*>(de->data()), S * K, H), logp.data(),
               Tensor::f32(static_cast<float*>(dp->data()), S, H), Tensor::f32(static_cast<float*>(da->data()), 1, H),
               valid, got);
    lilicorr::score(hw, int(S), emb.data(), logp.data(), pass.data(), anchor.data(), valid, want);
    ASSERT_EQ(got.start.size(), size_t(K));
    ASSERT_EQ(got.pairs.size(), size_t((S - 1) * K * K));
    const std::string what = std::string(valid ? "anchor" : "no anchor") + ", " + std::to_string(rows) + " rows a call";
    EXPECT_LT(max_diff(got.start, want.start) / lambda, tol) << what << ": start";
    EXPECT_LT(max_diff(got.pairs, want.pairs) / lambda, tol) << what << ": pairs";
    // Scores that depend on the inputs, not a constant: the slots' rows differ.
    EXPECT_GT(max_diff(std::vector<float>(want.pairs.begin(), want.pairs.begin() + K * K),
                       std::vector<float>(want.pairs.end() - K * K, want.pairs.end())),
              1e-3f);
  }
}

}  // namespace

// Steps that propose nothing (StairCut's k = 0) run no block pass: their committed rows wait in the
// backlog and enter the context in one batched catch-up at the next proposal, whose drafts (and
// candidates, log-probabilities and scores) are those of a drafter that projected every row as it came
// — bit for bit on the CPU. Commits of 1 … 4 rows stand for partial acceptances (the fitted drafter).
// With profile: true the stages are counted: one catch-up per proposal, over the rows since the last.
TEST_F(LilicorrDrafting, DeferredCatchUpMatchesCatchingUpEveryStep) {
  auto m = load_target();
  auto grab = std::make_shared<Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  lilicorr::LiliFactory f;
  auto make = [&](bool defer) {
    SpeculatorSettings s("", "draft.lilicorr", {{"path", fitted()}, {"defer", defer ? "true" : "false"},
                                                 {"profile", defer ? "true" : "false"}});
    return f.create(grab->ctx, s);
  };
  auto lazy_sp = make(true), eager_sp = make(false);
  auto& lazy = static_cast<lilicorr::LiliDrafter&>(*lazy_sp);
  auto& eager = static_cast<lilicorr::LiliDrafter&>(*eager_sp);
  EXPECT_TRUE(eager.stages().empty()) << "stages are measured only when asked";
  m->set_taps(lazy.hidden_layers());
  const auto p = prompt(23);
  const TappedText tt(*m, lazy.hidden_layers(), p, 40);
  const std::vector<int32_t>& text = tt.text;
  const int64_t N = tt.size();
  auto rows = [&](int64_t pos0, int64_t n) { return tt.rows(pos0, n); };
  int64_t n = int64_t(p.size()) + 1;  // committed: the prompt and the target's first token
  for (auto* dr : {&lazy, &eager}) {
    dr->begin(text.data(), p.size());
    dr->observe_prompt(rows(0, int64_t(p.size())));
    dr->observe(text.data() + p.size(), 1);
  }
  int proposals = 0, skipped = 0, compared = 0;
  int64_t caught_up = 0, since = int64_t(p.size());  // rows the lazy drafter projects at its next proposal
  for (int step = 0; n + 4 < N; ++step) {
    Draft e;
    eager.propose(7, e);
    ASSERT_EQ(e.tokens.size(), size_t(7));
    if (step % 3 != 1) {  // the lazy drafter proposes on two steps of three
      Draft l;
      lazy.propose(7, l);
      ++proposals;
      caught_up += since, since = 0;
      const std::string at = "step " + std::to_string(step) + " (" + std::to_string(n) + " committed)";
      EXPECT_EQ(lazy.context_rows(), n - 1) << at;
      EXPECT_EQ(lazy.backlog_rows(), 0) << at;
      EXPECT_EQ(l.tokens, e.tokens) << at;
      EXPECT_EQ(lazy.last_candidates(), eager.last_candidates()) << at;
      EXPECT_EQ(lazy.last_logp(), eager.last_logp()) << at;
      EXPECT_EQ(lazy.last_scores().start, eager.last_scores().start) << at;
      EXPECT_EQ(lazy.last_scores().pairs, eager.last_scores().pairs) << at;
      ++compared;
    } else {
      ++skipped;
    }
    EXPECT_EQ(lazy.block_steps(), proposals) << "a step that proposes nothing runs no block";
    // Accept 0 … 3 drafts, then the target's own token: 1 … 4 committed rows.
    const int64_t c = 1 + step % 4;
    for (auto* dr : {&lazy, &eager}) dr->observe_hidden(text.data() + n, size_t(c), rows(n - 1, c));
    since += c;
    n += c;
    if (step % 3 == 1) EXPECT_GT(lazy.backlog_rows(), 0) << "rows of a step without a proposal wait";
  }
  EXPECT_GT(compared, 5);
  EXPECT_GT(skipped, 3);
  const auto st = lazy.stages();
  ASSERT_FALSE(st.empty());
  EXPECT_EQ(st[0].name, "catch-up");
  EXPECT_EQ(st[0].count, proposals);
  EXPECT_EQ(st[0].items, caught_up) << "the catch-up projects every row committed since the last proposal";
  for (const auto& s : st)
    if (s.name != "flush" && (s.name != "head" || !lazy.last_scores().start.empty())) {
      EXPECT_EQ(s.count, proposals) << s.name;
      EXPECT_GE(s.seconds, 0.0) << s.name;
    }
}

namespace {

// Proposals replayed from the drafter's graphs (draft.lilicorr.graphs: true, the default) are those of
// op-by-op proposals bit for bit: the fitted drafter fed the same committed rows, 1 … 4 a step (partial
// acceptances), proposing on two steps of three, past the context cache's regrowth at 128 rows (the
// graphs hold its addresses: recorded again); a third drafter with profile: true records the block and
// the candidates as two graphs. Where the backend records (CUDA) the graphs were recorded and replayed;
// on the CPU nothing records and the three run the same ops.
TEST_F(LilicorrDrafting, ReplayedProposalsEqualOpByOpProposals) {
  auto m = load_target();
  auto grab = std::make_shared<Grab>();
  Drafting d(*m, {{"grab", grab}}, test::fixed_costs());
  lilicorr::LiliFactory f;
  auto make = [&](bool graphs, bool profile) {
    SpeculatorSettings s("", "draft.lilicorr", {{"path", fitted()}, {"graphs", graphs ? "true" : "false"},
                                                 {"profile", profile ? "true" : "false"}});
    return f.create(grab->ctx, s);
  };
  auto off_sp = make(false, false), on_sp = make(true, false), prof_sp = make(true, true);
  auto& off = static_cast<lilicorr::LiliDrafter&>(*off_sp);
  auto& on = static_cast<lilicorr::LiliDrafter&>(*on_sp);
  auto& prof = static_cast<lilicorr::LiliDrafter&>(*prof_sp);
  const std::vector<lilicorr::LiliDrafter*> all = {&off, &on, &prof};
  m->set_taps(off.hidden_layers());
  const auto p = prompt(23);
  const TappedText tt(*m, off.hidden_layers(), p, 140);
  const std::vector<int32_t>& text = tt.text;
  const int64_t N = tt.size();
  auto rows = [&](int64_t pos0, int64_t n) { return tt.rows(pos0, n); };
  int64_t n = int64_t(p.size()) + 1;
  for (auto* dr : all) {
    dr->begin(text.data(), p.size());
    dr->observe_prompt(rows(0, int64_t(p.size())));
    dr->observe(text.data() + p.size(), 1);
  }
  int compared = 0, drafted = 0;
  for (int step = 0; n + 4 < N; ++step) {
    if (step % 3 != 1) {
      Draft want;
      off.propose(7, want);
      ASSERT_EQ(want.tokens.size(), size_t(7));
      drafted += int(want.tokens.size());
      for (auto* dr : {&on, &prof}) {
        Draft got;
        dr->propose(7, got);
        const std::string at = std::string(dr == &on ? "graphs" : "graphs, profiled") + ", step " +
                               std::to_string(step) + " (" + std::to_string(n) + " committed)";
        EXPECT_EQ(got.tokens, want.tokens) << at;
        EXPECT_EQ(dr->last_candidates(), off.last_candidates()) << at;
        EXPECT_EQ(dr->last_logp(), off.last_logp()) << at;
        EXPECT_EQ(dr->last_scores().start, off.last_scores().start) << at;
        EXPECT_EQ(dr->last_scores().pairs, off.last_scores().pairs) << at;
        EXPECT_EQ(dr->backbone_rows(), off.backbone_rows()) << at;
      }
      ++compared;
    }
    const int64_t c = 1 + step % 4;
    for (auto* dr : all) dr->observe_hidden(text.data() + n, size_t(c), rows(n - 1, c));
    n += c;
  }
  EXPECT_GT(compared, 20);
  EXPECT_GT(drafted, 0);
  EXPECT_GT(off.context_rows(), 128) << "the context cache did not grow past its first 128 rows";
  const lilicorr::DrafterGraphStats &so = off.graph_stats(), &sg = on.graph_stats(), &sp = prof.graph_stats();
  EXPECT_EQ(so.recorded, 0);
  EXPECT_EQ(so.off, "draft.lilicorr.graphs is false");
  std::printf("graphs: %lld recorded, %lld replayed, %lld op by op (%s); profiled: %lld, %lld, %lld\n",
              (long long)sg.recorded, (long long)sg.replayed, (long long)sg.eager, sg.off.empty() ? "on" : sg.off.c_str(),
              (long long)sp.recorded, (long long)sp.replayed, (long long)sp.eager);
  if (m->backend().graphs_off_reason().empty()) {
    // Recorded on the second proposal (the block with the candidates, and the head), the block again
    // after the cache grew; every other proposal replays.
    EXPECT_EQ(sg.off, "");
    EXPECT_GE(sg.recorded, 3);
    EXPECT_GE(sg.replayed, int64_t(2 * compared) - 2 * sg.recorded - 2);
    EXPECT_GE(sp.recorded, 4) << "profiled: the block and the candidates apart";
    EXPECT_GT(sp.replayed, sg.replayed);
  } else {
    EXPECT_EQ(sg.recorded, 0);
    EXPECT_NE(sg.off, "") << "graphs are off on a backend that cannot record";
  }
  // The profiled drafter's stages still count every proposal.
  const auto st = prof.stages();
  ASSERT_FALSE(st.empty());
  for (const auto& s : st)
    if (s.name != "flush") EXPECT_EQ(s.count, compared) << s.name;
}

// Drafting with the fitted drafter gives plain text and the same acceptance with graphs and without:
// the drafts are the same.
TEST_F(LilicorrDrafting, TheFittedDrafterAcceptsTheSameWithGraphsAndWithout) {
  auto m = load_target();
  Tally tally[2];
  for (bool graphs : {false, true}) {
    DraftOptions o = options(fitted());
    o.settings["lilicorr"] =
        SpeculatorSettings("", "draft.lilicorr", {{"path", fitted()}, {"graphs", graphs ? "true" : "false"}});
    Drafting d(*m, {{"lilicorr", std::make_shared<lilicorr::LiliFactory>()}}, o);
    tally[graphs] = expect_lossless(*m, d, graphs ? "fitted lilicorr, graphs" : "fitted lilicorr, op by op",
                                    kFittedPrompts);
  }
  expect_partial(tally[1], "fitted lilicorr, graphs");
  EXPECT_EQ(tally[1].drafted, tally[0].drafted);
  EXPECT_EQ(tally[1].accepted, tally[0].accepted);
}

}  // namespace
