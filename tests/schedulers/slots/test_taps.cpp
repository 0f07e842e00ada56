// Target hidden states for drafters (Model::set_taps, Speculator::hidden_layers): a toy drafter reads
// the residual after the layers it declares for every committed row of the prefill, plain steps and
// verify passes with partial acceptance, and each row must equal, bit for bit, what the model's own
// forward held at that layer boundary (Model::set_forward_observer, op by op, in a separate run); on
// a GPU the checked run replays recorded passes. The SpeculatorContext's embedding, LM head and final
// norm must give the model's own numbers. Built twice: for the CPU, and with TANDEM_TAPS_DEVICE="cuda"
// as test_taps_cuda (skips without a CUDA device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "drafters.h"
#include "tandem/drafting.h"
#include "tandem/generate.h"
#include "tandem/generation.h"
#include "tandem/parallel.h"
#include "tandem/weights.h"
#include "tests/conformance/model_util.h"

using namespace tandem;

namespace {

#ifndef TANDEM_TAPS_DEVICE
#define TANDEM_TAPS_DEVICE "cpu"
#endif

constexpr int kTokens = 120;

std::vector<float> download(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  be.download(v.data(), t.data, t.nbytes());
  return v;
}

std::unique_ptr<Model> load(const std::string& name) {
  LoadOptions o;
  o.path = test::data_path("hf/" + name);
  o.device = TANDEM_TAPS_DEVICE;
  auto m = Model::load(o, test::registry());
  set_thread_count(1);
  return m;
}

std::vector<int32_t> prompt(const std::string& name, size_t n) {
  auto ids = test::read_ids(test::data_path("hf/" + name + "/prompt_200.txt"));
  return {ids.begin(), ids.begin() + long(n)};
}

// What one tap drafter received, call by call (one call per target pass, in order).
struct TapLog {
  struct Call {
    bool prompt = false;
    int64_t pos0 = 0, rows = 0;
    std::vector<std::vector<float>> states;  // per declared layer, [rows, hidden]
  };
  std::vector<Call> calls;
  int64_t rows = 0;         // positions received in all
  int64_t argmax_rows = 0;  // rows whose recomputed logits were checked against the committed token
  std::vector<std::string> errors;
  void error(std::string e) {
    if (errors.size() < 10) errors.push_back(std::move(e));
  }
};

// An oracle drafter (drafts right or corrupted, and none at every third proposal: plain steps) that
// declares `layers` and logs the states it receives. It checks what the interface promises on the
// spot: consecutive positions from 0, rows == tokens, and, when it reads the last layer, that
// lm_head · final norm of row i (through the context's weights) picks tokens[i], greedy.
class TapDrafter : public test::OracleDrafter {
 public:
  TapDrafter(const SpeculatorContext& ctx, std::vector<int> layers, std::shared_ptr<TapLog> log,
             std::shared_ptr<std::vector<int32_t>> truth, bool drafts)
      : OracleDrafter(std::move(truth), 0.3, ctx.vocab, 11), ctx_(ctx), layers_(std::move(layers)),
        log_(std::move(log)), drafts_(drafts) {
    const int64_t H = ctx_.desc->hidden;
    hn_ = ctx_.backend->alloc(size_t(kMaxRows * H) * sizeof(float));  // now: no buffer comes or goes mid-run
    lg_ = ctx_.backend->alloc(size_t(kMaxRows * ctx_.vocab) * sizeof(float));
    last_ = int(std::find(layers_.begin(), layers_.end(), int(ctx_.desc->layers.size()) - 1) - layers_.begin());
  }
  std::vector<int> hidden_layers() const override { return layers_; }
  void begin(const int32_t* p, size_t n) override {
    OracleDrafter::begin(p, n);
    next_pos_ = 0;
  }
  void observe_prompt(const TargetHidden& h) override {
    take(h, true);
    if (last_ < int(layers_.size())) last_prompt_pick_ = argmax(h, h.rows - 1);
  }
  void observe(const int32_t* t, size_t n) override {
    // Only the prefill's token arrives here: every later step comes with its states.
    if (first_seen_ || n != 1) log_->error("observe() without states for " + std::to_string(n) + " tokens");
    if (last_prompt_pick_ >= 0 && t[0] != last_prompt_pick_)
      log_->error("the last prompt row picks " + std::to_string(last_prompt_pick_) + ", the prefill's token is " +
                  std::to_string(t[0]));
    first_seen_ = true;
    OracleDrafter::observe(t, n);
  }
  void observe_hidden(const int32_t* t, size_t n, const TargetHidden& h) override {
    if (!first_seen_) log_->error("observe_hidden() before the prefill's token");
    if (h.rows != int64_t(n)) log_->error("rows " + std::to_string(h.rows) + " for " + std::to_string(n) + " tokens");
    take(h, false);
    if (last_ < int(layers_.size()))
      for (size_t i = 0; i < n; ++i, ++log_->argmax_rows)
        if (int32_t a = argmax(h, int64_t(i)); a != t[i])
          log_->error("row " + std::to_string(i) + " at " + std::to_string(h.pos0 + int64_t(i)) + " picks " +
                      std::to_string(a) + ", the committed token is " + std::to_string(t[i]));
    OracleDrafter::observe(t, n);
  }
  void propose(int max_n, Draft& out) override {
    out.clear();
    if (drafts_ && ++proposals_ % 3 != 0) OracleDrafter::propose(max_n, out);
  }

 private:
  static constexpr int64_t kMaxRows = 256;

  void take(const TargetHidden& h, bool prompt) {
    if (h.pos0 != next_pos_)
      log_->error("states at position " + std::to_string(h.pos0) + ", expected " + std::to_string(next_pos_));
    if (h.layers != layers_ || h.states.size() != layers_.size()) log_->error("layers differ from the declared");
    TapLog::Call c{prompt, h.pos0, h.rows, {}};
    for (const Tensor& s : h.states) {
      if (s.rows != h.rows || s.cols != ctx_.desc->hidden || s.dtype != DType::F32)
        log_->error("a state tensor of " + std::to_string(s.rows) + "×" + std::to_string(s.cols));
      c.states.push_back(download(*ctx_.backend, s));
    }
    log_->calls.push_back(std::move(c));
    next_pos_ += h.rows;
    log_->rows += h.rows;
  }
  int32_t argmax(const TargetHidden& h, int64_t row) {
    Backend& be = *ctx_.backend;
    const int64_t H = ctx_.desc->hidden;
    Tensor x = h.states[size_t(last_)].slice_rows(row, 1);
    Tensor hn = Tensor::f32(static_cast<float*>(hn_->data()), 1, H);
    Tensor lg = Tensor::f32(static_cast<float*>(lg_->data()), 1, ctx_.vocab);
    be.rms_norm(x, ctx_.final_norm, ctx_.desc->eps, hn);
    ctx_.lm_head->matmul(hn, lg);
    auto l = download(be, lg);
    return int32_t(std::max_element(l.begin(), l.end()) - l.begin());  // lowest id on ties, as sample()
  }

  SpeculatorContext ctx_;
  std::vector<int> layers_;
  std::shared_ptr<TapLog> log_;
  bool drafts_;
  std::unique_ptr<Buffer> hn_, lg_;
  int last_ = 0;
  int64_t next_pos_ = 0;
  int32_t last_prompt_pick_ = -1;
  bool first_seen_ = false;
  int proposals_ = 0;
};

class TapFactory : public SpeculatorFactory {
 public:
  TapFactory(std::vector<int> layers, std::shared_ptr<TapLog> log, std::shared_ptr<std::vector<int32_t>> truth,
             bool drafts)
      : layers_(std::move(layers)), log_(std::move(log)), truth_(std::move(truth)), drafts_(drafts) {}
  std::unique_ptr<Speculator> create(const SpeculatorContext& ctx, SpeculatorSettings& s) override {
    s.finish();
    check(ctx.backend && ctx.desc && ctx.embedding && ctx.lm_head && ctx.final_norm, "tap drafter: context incomplete");
    return std::make_unique<TapDrafter>(ctx, layers_, log_, truth_, drafts_);
  }
  void fresh_log() { *log_ = TapLog{}; }

 private:
  std::vector<int> layers_;
  std::shared_ptr<TapLog> log_;
  std::shared_ptr<std::vector<int32_t>> truth_;
  bool drafts_;
};

// The model's own residual after every layer of every pass, op by op: passes[c][layer] = [n, hidden].
struct Observed {
  std::vector<std::map<int, std::vector<float>>> passes;
  std::vector<std::vector<float>> embedded;  // x after the embedding, per pass
};

// `record` (optional): passes run while it is false are not recorded (another sequence's).
void observe_all(Model& m, Observed& o, const bool* record = nullptr) {
  Backend& be = m.backend();
  m.set_forward_observer([&m, &o, &be, record](int stage, const Tensor& x) {
    if (record && !*record) return;
    if (stage == -1) {
      o.passes.emplace_back();
      o.embedded.push_back(download(be, x));
    } else if (stage < int(m.desc().layers.size())) {
      o.passes.back()[stage] = download(be, x);
    }
  });
}

class Taps : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (std::string(TANDEM_TAPS_DEVICE) == "cpu") return;
    try {
      test::registry().backend(TANDEM_TAPS_DEVICE);
    } catch (const std::exception& e) {
      GTEST_SKIP() << "no " << TANDEM_TAPS_DEVICE << " backend here: " << e.what();
    }
  }
};

// Compares a drafter's log with the observed passes: call c is pass c, its rows are the pass's first
// rows, its states the declared layers' residuals.
void expect_matches(const TapLog& log, const std::vector<int>& layers, const Observed& ref, int64_t hidden,
                    const std::string& what) {
  for (const auto& e : log.errors) ADD_FAILURE() << what << ": " << e;
  ASSERT_EQ(log.calls.size(), ref.passes.size()) << what << ": one call per target pass";
  for (size_t c = 0; c < log.calls.size(); ++c) {
    const auto& call = log.calls[c];
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& want = ref.passes[c].at(layers[l]);
      ASSERT_LE(size_t(call.rows * hidden), want.size()) << what << " call " << c;
      const std::vector<float> head(want.begin(), want.begin() + call.rows * hidden);
      EXPECT_EQ(call.states[l], head) << what << ": call " << c << " (pos " << call.pos0 << ", " << call.rows
                                      << " rows), layer " << layers[l];
    }
  }
}

TEST_P(Taps, DrafterReadsTheCommittedRowsOfEveryPass) {
  auto model = load(GetParam());
  Model& m = *model;
  const int L = int(m.desc().layers.size());
  const int64_t H = m.desc().hidden;
  const auto p = prompt(GetParam(), 37);  // longer than one 16-token SSD chunk
  const auto plain = generate(m, p, test::run_options(kTokens)).tokens;
  auto truth = std::make_shared<std::vector<int32_t>>(p);
  truth->insert(truth->end(), plain.begin(), plain.end());

  // Two drafters reading overlapping layers in their own order: the model taps the union.
  const std::vector<int> a_layers{L - 1, 0, 2}, b_layers{2, 1};
  auto a_log = std::make_shared<TapLog>(), b_log = std::make_shared<TapLog>();
  auto a = std::make_shared<TapFactory>(a_layers, a_log, truth, true);
  auto b = std::make_shared<TapFactory>(b_layers, b_log, truth, false);
  auto run = [&](Observed* ref, DraftMetrics& dm) {
    a->fresh_log(), b->fresh_log();
    if (ref) observe_all(m, *ref);
    Drafting d(m, {{"a", a}, {"b", b}}, test::fixed_costs(4));
    EXPECT_EQ(m.taps(), (std::vector<int>{0, 1, 2, L - 1}));
    auto got = d.generate(p, test::run_options(kTokens), {}, &dm).tokens;
    m.set_forward_observer(nullptr);
    EXPECT_EQ(got, plain) << "taps must not change the output";
  };

  Observed ref;
  DraftMetrics dm_ref, dm;
  run(&ref, dm_ref);  // op by op, the observer recording every layer
  const GraphStats before = m.graph_stats();
  run(nullptr, dm);   // as served: graphs on where the backend records them
  std::printf("%s: %s", GetParam(), dm.summary().c_str());
  EXPECT_GT(dm.plain_steps, 0) << dm.summary();
  EXPECT_GT(dm.accepted_tokens, 0) << dm.summary();
  EXPECT_LT(dm.accepted_tokens, dm.drafted_tokens) << "some drafts must be rejected: " << dm.summary();
  if (std::string(TANDEM_TAPS_DEVICE) != "cpu") {
    EXPECT_GT(m.graph_stats().replayed - before.replayed, 10) << "the checked run should replay recorded passes";
    EXPECT_GT(m.graph_stats().captured - before.captured, 0);
  }

  for (const auto* log : {a_log.get(), b_log.get()}) {
    ASSERT_FALSE(log->calls.empty());
    EXPECT_TRUE(log->calls[0].prompt);
    EXPECT_EQ(log->calls[0].pos0, 0);
    EXPECT_EQ(log->calls[0].rows, int64_t(p.size()));
    // Every position fed and kept, once: the prompt and every output token but the last (never fed).
    EXPECT_EQ(log->rows, int64_t(p.size() + plain.size()) - 1);
  }
  EXPECT_EQ(a_log->argmax_rows, int64_t(plain.size()) - 1);
  expect_matches(*a_log, a_layers, ref, H, "drafter a");
  expect_matches(*b_log, b_layers, ref, H, "drafter b");
}

// The slot scheduler's way: a Generation prefills the prompt in parts, with another sequence's
// passes in between; every part's rows reach the drafter, then the steps' rows.
TEST_P(Taps, PromptInPartsWhileAnotherSequenceRuns) {
  auto model = load(GetParam());
  Model& m = *model;
  const int L = int(m.desc().layers.size());
  constexpr int kOut = 60;
  const auto p = prompt(GetParam(), 50);
  const auto plain = generate(m, p, test::run_options(kOut)).tokens;
  auto truth = std::make_shared<std::vector<int32_t>>(p);
  truth->insert(truth->end(), plain.begin(), plain.end());
  const std::vector<int> layers{L - 1, 1};
  auto log = std::make_shared<TapLog>();
  Drafting d(m, {{"a", std::make_shared<TapFactory>(layers, log, truth, true)}}, test::fixed_costs(3));

  Observed ref;
  bool mine = true;
  observe_all(m, ref, &mine);
  auto other = m.new_sequence(256);
  std::vector<float> other_logits;
  std::vector<int32_t> out;
  {
    Generation gen(m, &d, p, 256, 16, SamplingParams{});
    StepHooks hooks;
    hooks.emit = [&](int32_t t) {
      out.push_back(t);
      return int(out.size()) < kOut;
    };
    for (bool going = true; going;) {
      const bool prefill = gen.prefilling();
      going = gen.step(kOut - int(out.size()), hooks);
      if (prefill) {  // another slot's pass between the parts
        mine = false;
        m.forward(*other, {p[gen.prefilled() % p.size()]}, ForwardMode::Prefill, other_logits, false);
        m.commit(*other, 1);
        mine = true;
      }
    }
    ASSERT_NE(gen.draft_metrics(), nullptr);
    EXPECT_GT(gen.draft_metrics()->accepted_tokens, 0) << gen.draft_metrics()->summary();
  }
  m.set_forward_observer(nullptr);
  EXPECT_EQ(out, plain);
  ASSERT_GE(log->calls.size(), size_t(4));
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_TRUE(log->calls[c].prompt) << c;
    EXPECT_EQ(log->calls[c].rows, c < 3 ? 16 : 2) << c;
  }
  EXPECT_EQ(log->rows, int64_t(p.size() + plain.size()) - 1);
  expect_matches(*log, layers, ref, m.desc().hidden, "parts");
}

TEST_P(Taps, ContextWeightsGiveTheModelsNumbers) {
  auto model = load(GetParam());
  Model& m = *model;
  Backend& be = m.backend();
  const int64_t H = m.desc().hidden, V = m.desc().vocab;
  SpeculatorContext ctx;
  struct Grab : SpeculatorFactory {
    SpeculatorContext* out;
    explicit Grab(SpeculatorContext* o) : out(o) {}
    std::unique_ptr<Speculator> create(const SpeculatorContext& c, SpeculatorSettings& s) override {
      s.finish();
      *out = c;
      return std::make_unique<test::RandomDrafter>(1, c.vocab, 1);
    }
  };
  Drafting d(m, {{"grab", std::make_shared<Grab>(&ctx)}}, test::fixed_costs());
  ASSERT_EQ(ctx.backend, &be);
  ASSERT_EQ(ctx.desc, &m.desc());
  ASSERT_TRUE(ctx.embedding && ctx.lm_head && ctx.final_norm);
  EXPECT_EQ(ctx.embedding->shape(), (std::vector<int64_t>{V, H}));
  EXPECT_EQ(ctx.lm_head->shape(), (std::vector<int64_t>{V, H}));

  const auto p = prompt(GetParam(), 23);
  const int n = int(p.size());
  Observed ref;
  observe_all(m, ref);
  m.set_taps({int(m.desc().layers.size()) - 1});
  auto seq = m.new_sequence(64);
  std::vector<float> logits;
  m.forward(*seq, p, ForwardMode::Prefill, logits, true);
  m.set_forward_observer(nullptr);

  auto x = be.alloc(size_t(n * H) * sizeof(float)), y = be.alloc(size_t(n * V) * sizeof(float));
  Tensor xt = Tensor::f32(static_cast<float*>(x->data()), n, H), yt = Tensor::f32(static_cast<float*>(y->data()), n, V);
  ctx.embedding->get_rows(p.data(), n, xt);
  EXPECT_EQ(download(be, xt), ref.embedded.at(0)) << "embedding rows";
  // The last layer's tap equals the observer's residual, and lm_head · final norm of it the logits.
  EXPECT_EQ(download(be, m.tap(0)), ref.passes.at(0).at(int(m.desc().layers.size()) - 1));
  be.rms_norm(m.tap(0), ctx.final_norm, ctx.desc->eps, xt);
  ctx.lm_head->matmul(xt, yt);
  EXPECT_EQ(download(be, yt), logits) << "lm_head of the final-normed hidden state";
}

TEST_P(Taps, BadLayersAreErrorsNamingThem) {
  auto model = load(GetParam());
  Model& m = *model;
  const int L = int(m.desc().layers.size());
  EXPECT_THROW(m.set_taps({L}), Error);
  auto log = std::make_shared<TapLog>();
  auto f = std::make_shared<TapFactory>(std::vector<int>{0, -1}, log, std::make_shared<std::vector<int32_t>>(), false);
  try {
    Drafting d(m, {{"bad", f}}, test::fixed_costs());
    ADD_FAILURE() << "a drafter declaring layer -1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drafter 'bad': hidden_layers() names layer -1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(m.taps().empty()) << "a failed start sets no taps";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Taps, ::testing::Values("latent", "nolatent"));

}  // namespace
