// The drafted steps of a Generation (generation.h): propose → pick (StairCut) → one verify pass →
// accept → commit(n) → observe, with every proposal retro-scored against the committed text.
#include "tandem/drafting.h"
#include "tandem/generation.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <spdlog/spdlog.h>

#include "tandem/error.h"
#include "tandem/registry.h"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Acceptance is estimated per (drafter bucket × copy-run bin): a drafter whose last proposals were
// right all the way is more likely to be right again (spec/speculation.md §3).
constexpr int kCopyBins = 3;
int copy_bin(int run) { return run == 0 ? 0 : run <= 2 ? 1 : 2; }

struct DrafterSlot {
  std::string name;
  std::shared_ptr<SpeculatorFactory> factory;
  SpeculatorSettings settings;
  int buckets = 1;
  bool cheap = false;
  std::vector<int> layers;  // hidden_layers(): the target layers whose states it reads
};

// A proposal waiting to be compared with the committed text.
struct Pending {
  int drafter, bucket;
  size_t start;  // index in the history where its first token belongs
  std::vector<int32_t> tokens;
  size_t judged = 0;
};

}  // namespace

struct Drafting::Impl {
  Model& model;
  std::vector<DrafterSlot> slots;
  std::vector<std::string> names;
  std::unique_ptr<StairCut> staircut;
  DraftMetrics total;
  std::function<void(const DraftStep&)> trace;

  explicit Impl(Model& m) : model(m) {}
  void start(const DraftOptions& o);
  std::unique_ptr<Speculator> make(size_t d) const {
    SpeculatorSettings s = slots[d].settings;
    SpeculatorContext ctx;
    ctx.vocab = model.desc().vocab;
    ctx.target = &model;
    ctx.backend = &model.backend();
    ctx.desc = &model.desc();
    ctx.embedding = &model.embedding();
    ctx.lm_head = &model.lm_head();
    ctx.final_norm = model.final_norm();
    auto sp = slots[d].factory->create(ctx, s);
    check(sp != nullptr, "drafter '", slots[d].name, "': its factory made no speculator");
    return sp;
  }
};

void Drafting::Impl::start(const DraftOptions& o) {
  check(!slots.empty(), "drafting: no drafters (use plain generation instead)");
  std::vector<int> buckets;
  for (size_t d = 0; d < slots.size(); ++d) {
    auto& s = slots[d];
    names.push_back(s.name);
    auto it = o.settings.find(s.name);
    s.settings = it != o.settings.end() ? it->second : SpeculatorSettings("", "draft." + s.name, {});
    auto probe = make(d);  // validates the settings now rather than on the first request
    s.buckets = probe->buckets();
    s.cheap = probe->cheap();
    check(s.buckets >= 1, "drafter '", s.name, "': buckets() must be at least 1, found ", s.buckets);
    buckets.push_back(s.buckets * kCopyBins);
    s.layers = probe->hidden_layers();
    const int L = int(model.desc().layers.size());
    for (int l : s.layers)
      check(l >= 0 && l < L, "drafter '", s.name, "': hidden_layers() names layer ", l, ", outside the target's [0, ",
            L, ")");
  }
  // The model copies the union of what the drafters read (and what others asked of it before).
  std::vector<int> taps = model.taps();
  for (const auto& s : slots) taps.insert(taps.end(), s.layers.begin(), s.layers.end());
  std::sort(taps.begin(), taps.end());
  taps.erase(std::unique(taps.begin(), taps.end()), taps.end());
  if (taps != model.taps()) model.set_taps(taps);
  for (const auto& kv : o.settings)
    check(std::find(names.begin(), names.end(), kv.first) != names.end(), "drafting: settings for '", kv.first,
          "', which is not among the drafters in use");
  std::vector<double> costs = o.verify_costs;
  if (costs.empty()) {
    costs = measure_verify_costs(model, o.staircut.max_k + 1, o.cost_context, o.cost_reps);
    std::string t;
    for (size_t m = 0; m < costs.size(); ++m) t += fmt::format(" {}:{:.3f}", m + 1, costs[m] / costs[0]);
    spdlog::info("verify cost T_v(1) = {:.3f} ms; T_v(m)/T_v(1):{}", costs[0] * 1e3, t);
  }
  staircut = std::make_unique<StairCut>(buckets, VerifyCosts(costs), o.staircut);
  for (const auto& s : slots) {
    total.drafters.emplace_back();
    total.drafters.back().name = s.name;
  }
}

Drafting::Drafting(Model& model, PluginRegistry& registry, const DraftOptions& o) : impl_(std::make_unique<Impl>(model)) {
  for (const auto& n : o.drafters) {
    check(std::count(o.drafters.begin(), o.drafters.end(), n) == 1, "drafting: drafter '", n, "' is named twice");
    impl_->slots.push_back({n, registry.speculator(n, model.backend().device()), {}});
  }
  impl_->start(o);
}

Drafting::Drafting(Model& model, std::vector<NamedFactory> factories, const DraftOptions& o)
    : impl_(std::make_unique<Impl>(model)) {
  for (auto& f : factories) impl_->slots.push_back({f.first, f.second, {}});
  impl_->start(o);
}

Drafting::~Drafting() = default;

const DraftMetrics& Drafting::metrics() const { return impl_->total; }
void Drafting::set_trace(std::function<void(const DraftStep&)> on_step) { impl_->trace = std::move(on_step); }
StairCut& Drafting::staircut() { return *impl_->staircut; }
const std::vector<std::string>& Drafting::names() const { return impl_->names; }

struct DraftedRequest::State {
  Drafting::Impl& im;
  Sequence& seq;
  const SamplingParams sampling;
  Rng& rng;
  DraftMetrics m;
  std::vector<std::unique_ptr<Speculator>> specs;
  std::vector<int32_t> history;  // prompt + committed output
  std::vector<int32_t> fresh;    // tokens committed by the current step
  std::vector<Pending> pending;
  std::vector<int> copy_run;
  std::vector<Draft> drafts;
  std::vector<Offer> offers;
  std::vector<int32_t> block;
  std::vector<float> logits;
  std::vector<int32_t> prompt;
  size_t prefilled = 0;
  bool started = false;
  bool ended = false;
  // The planned verify pass (plan() → finish()).
  bool planned = false;
  int k = 0, drafter = -1;
  // Agreement extension: the chain's first k_main drafts are `drafter`'s, the rest (k > k_main)
  // `extender`'s, whose proposal agreed with all k_main of them (−1: not extended).
  int k_main = 0, extender = -1;
  Draft chain;  // the verified drafts (a copy: the proposals stay as the drafters made them)
  int cap = 0;  // the planned pass's most drafts (0: no drafter was asked)
  double draft_seconds = 0;
  Clock::time_point verify_start;
  int64_t tap_row0 = 0;  // the pass's first row in the model's taps
  // step() ran a plan without drafts as forward_commit: its one row is committed with the pass.
  bool precommitted = false;

  State(Drafting::Impl& i, Sequence& s, const SamplingParams& p, Rng& r) : im(i), seq(s), sampling(p), rng(r) {}

  // Drafter d's layers from the model's taps of its last forward: rows 0 … rows − 1 of that pass.
  TargetHidden hidden(size_t d, int64_t pos0, int64_t rows) const {
    TargetHidden h;
    h.pos0 = pos0;
    h.rows = rows;
    h.layers = im.slots[d].layers;
    const auto& taps = im.model.taps();
    for (int l : h.layers) {
      const size_t j = size_t(std::lower_bound(taps.begin(), taps.end(), l) - taps.begin());
      check(j < taps.size() && taps[j] == l, "drafting: the model no longer taps layer ", l, " (set_taps was called)");
      h.states.push_back(im.model.tap(j).slice_rows(tap_row0, rows));
    }
    return h;
  }

  // The drafters see the new tokens (with the states of the pass that committed them when `pos0` ≥ 0);
  // every open proposal is scored against them.
  void settle(int64_t pos0 = -1) {
    StairCut& sc = *im.staircut;
    for (size_t d = 0; d < specs.size(); ++d) {
      if (pos0 >= 0 && !im.slots[d].layers.empty())
        specs[d]->observe_hidden(fresh.data(), fresh.size(), hidden(d, pos0, int64_t(fresh.size())));
      else
        specs[d]->observe(fresh.data(), fresh.size());
    }
    history.insert(history.end(), fresh.begin(), fresh.end());
    fresh.clear();
    for (auto it = pending.begin(); it != pending.end();) {
      bool dead = false;
      while (it->judged < it->tokens.size() && it->start + it->judged < history.size()) {
        bool ok = it->tokens[it->judged] == history[it->start + it->judged];
        auto& pd = m.drafters[size_t(it->drafter)];
        ++pd.reached_at[it->judged];
        if (ok) ++pd.matched_at[it->judged];
        sc.record_acceptance(it->drafter, it->bucket, int(++it->judged), ok);
        if (!ok) {
          dead = true;
          break;
        }
      }
      if (dead) copy_run[size_t(it->drafter)] = 0;
      else if (it->judged == it->tokens.size()) ++copy_run[size_t(it->drafter)];
      it = dead || it->judged == it->tokens.size() ? pending.erase(it) : it + 1;
    }
  }
};

DraftedRequest::DraftedRequest(Drafting& drafting, Sequence& seq, const std::vector<int32_t>& prompt,
                               const SamplingParams& sampling, Rng& rng)
    : st_(std::make_unique<State>(*drafting.impl_, seq, sampling, rng)) {
  State& s = *st_;
  check(!prompt.empty(), "drafted request: the prompt is empty");
  s.prompt = prompt;
  for (size_t d = 0; d < s.im.slots.size(); ++d) {
    s.specs.push_back(s.im.make(d));
    s.specs.back()->begin(prompt.data(), prompt.size());
  }
}

void DraftedRequest::prefilled(int64_t pos0, size_t n) {
  State& s = *st_;
  check(!s.started, "drafted request: prefilled() after start()");
  check(n >= 1 && s.prefilled + n <= s.prompt.size(), "drafted request: a prefill of ", n, " tokens after ",
        s.prefilled, " of the prompt's ", s.prompt.size());
  s.prefilled += n;
  s.tap_row0 = 0;
  for (size_t d = 0; d < s.specs.size(); ++d)
    if (!s.im.slots[d].layers.empty()) s.specs[d]->observe_prompt(s.hidden(d, pos0, int64_t(n)));
}

bool DraftedRequest::restored(size_t n) {
  State& s = *st_;
  check(s.prefilled == 0 && !s.started, "drafted request: restored() after ", s.prefilled, " prompt tokens were prefilled");
  check(n >= 1 && n <= s.prompt.size(), "drafted request: ", n, " tokens restored of a prompt of ", s.prompt.size());
  for (const auto& slot : s.im.slots)
    if (!slot.layers.empty()) return false;
  s.prefilled = n;
  return true;
}

void DraftedRequest::start(int32_t first) {
  State& s = *st_;
  check(!s.started, "drafted request: start() twice");
  check(s.prefilled == s.prompt.size(), "drafted request: start() after ", s.prefilled, " of the prompt's ",
        s.prompt.size(), " tokens were prefilled");
  s.started = true;
  StairCut& sc = *s.im.staircut;
  const size_t nd = s.im.slots.size();
  s.m.tried_at.assign(size_t(sc.max_k()), 0);
  s.m.accepted_at.assign(size_t(sc.max_k()), 0);
  s.m.k_histogram.assign(size_t(sc.max_k()) + 1, 0);
  for (const auto& d : s.im.slots)
    s.m.drafters.push_back({d.name, 0, 0, 0, 0, 0, 0, s.m.tried_at, s.m.accepted_at, s.m.k_histogram, s.m.tried_at,
                            s.m.tried_at, s.m.tried_at, {}});
  s.m.generated_tokens = 1;
  sc.reset_request();
  s.history = s.prompt;
  s.copy_run.assign(nd, 0);
  s.drafts.resize(nd);
  s.fresh.push_back(first);
  s.settle();
}

DraftedRequest::~DraftedRequest() {
  if (st_->started) st_->im.total.add(st_->m);
}

bool DraftedRequest::started() const { return st_->started; }

const DraftMetrics& DraftedRequest::metrics() const { return st_->m; }

bool DraftedRequest::step(int max_tokens, const StepHooks& hooks) {
  State& s = *st_;
  bool all = false;
  plan(max_tokens, s.block, all);
  // Without drafts the pass's one token is always kept, so it is committed the way plain decoding
  // commits (the state's update queued behind the pass, before the logits' download) instead of by
  // host launches after the sampling: that wait cost ~0.2 ms a step at Bolt scale (~3 %).
  s.precommitted = s.k == 0;
  if (s.precommitted) s.im.model.forward_commit(s.seq, s.block, ForwardMode::Verify, s.logits, all);
  else s.im.model.forward(s.seq, s.block, ForwardMode::Verify, s.logits, all);
  return finish(s.logits, hooks, 0);
}

void DraftedRequest::plan(int max_tokens, std::vector<int32_t>& tokens, bool& all_positions) {
  State& s = *st_;
  check(s.started, "drafted request: step() before start()");
  check(!s.ended, "drafted request: step() after the request ended");
  check(max_tokens >= 1, "drafted request: step() needs max_tokens ≥ 1, found ", max_tokens);
  check(!s.planned, "drafted request: plan() twice without finish()");
  Drafting::Impl& im = s.im;
  Model& model = im.model;
  StairCut& sc = *im.staircut;
  DraftMetrics& m = s.m;
  const int64_t V = model.desc().vocab;
  const size_t nd = im.slots.size();

  const int32_t anchor = s.history.back();
  const int cap = int(std::min<int64_t>({sc.max_k(), max_tokens - 1, s.seq.capacity - s.seq.pos - 1}));
  s.offers.clear();
  double draft_seconds = 0;
  for (size_t d = 0; d < nd && cap > 0; ++d) {
    Draft& dr = s.drafts[d];
    dr.clear();
    if (!im.slots[d].cheap && !sc.wants(int(d), cap)) continue;
    auto tp = Clock::now();
    // Cheap drafters propose the longest chain so retro-scoring learns every position.
    s.specs[d]->propose(im.slots[d].cheap ? sc.max_k() : cap, dr);
    double dt = since(tp);
    draft_seconds += dt;
    sc.record_draft_time(int(d), dt);
    m.drafters[d].propose_seconds += dt;
    m.drafters[d].stages = s.specs[d]->stages();  // the drafter's own sums over this request
    if (dr.tokens.empty()) continue;
    const std::string& name = im.slots[d].name;
    check(dr.q.empty() || dr.q.size() == dr.tokens.size(), "drafter '", name, "': ", dr.q.size(),
          " q distributions for ", dr.tokens.size(), " tokens");
    check(dr.bucket >= 0 && dr.bucket < im.slots[d].buckets, "drafter '", name, "': bucket ", dr.bucket,
          " outside [0, ", im.slots[d].buckets, ")");
    for (int32_t t : dr.tokens)
      if (t < 0 || t >= V) fail("drafter '", name, "': proposed token ", t, " outside the vocabulary [0, ", V, ")");
    if (int(dr.tokens.size()) > sc.max_k()) {
      dr.tokens.resize(size_t(sc.max_k()));
      if (!dr.q.empty()) dr.q.resize(size_t(sc.max_k()));
    }
    int bucket = dr.bucket * kCopyBins + copy_bin(s.copy_run[d]);
    ++m.drafters[d].proposals;
    for (size_t j = 0; j < dr.tokens.size(); ++j) ++m.drafters[d].proposed_at[j];
    s.offers.push_back({int(d), std::min(int(dr.tokens.size()), cap), bucket});
    s.pending.push_back({int(d), bucket, s.history.size(), dr.tokens});
  }
  Pick pick = sc.pick(s.offers);
  int k = pick.k;
  s.chain.clear();
  s.extender = -1;
  if (k > 0) {
    const Draft& a = s.drafts[size_t(pick.drafter)];
    s.chain.tokens.assign(a.tokens.begin(), a.tokens.begin() + k);
    if (!a.q.empty()) s.chain.q.assign(a.q.begin(), a.q.begin() + k);
    // Where another drafter's proposal agrees with all k chosen drafts and goes on, the chain goes on
    // with it as far as StairCut's rate says (StairCut::extend_k; one-hot drafts only, never with a
    // fixed --draft-k): a block drafter's block that lookup also proposes is followed by lookup's
    // continuation, at the cost of verify rows only.
    int best = k, bucket = 0;
    for (const Offer& o : s.offers)
      if (o.drafter == pick.drafter) bucket = o.bucket;
    if (a.q.empty() && sc.options().force_k < 0)
      for (const Offer& o : s.offers) {
        const Draft& b = s.drafts[size_t(o.drafter)];
        if (o.drafter == pick.drafter || !b.q.empty() || o.length <= k) continue;
        if (!std::equal(s.chain.tokens.begin(), s.chain.tokens.end(), b.tokens.begin())) continue;
        const int kb = sc.extend_k(pick.drafter, bucket, k, o.drafter, o.bucket, o.length);
        if (kb > best) best = kb, s.extender = o.drafter;
      }
    if (s.extender >= 0) {
      const Draft& b = s.drafts[size_t(s.extender)];
      s.chain.tokens.insert(s.chain.tokens.end(), b.tokens.begin() + k, b.tokens.begin() + best);
    }
    s.k_main = k;
    k = int(s.chain.tokens.size());
  }
  s.block.assign(1, anchor);
  s.block.insert(s.block.end(), s.chain.tokens.begin(), s.chain.tokens.end());
  s.planned = true;
  s.k = k;
  s.cap = cap;
  s.drafter = pick.drafter;
  s.draft_seconds = draft_seconds;
  if (&tokens != &s.block) tokens = s.block;
  all_positions = k > 0;
  s.verify_start = Clock::now();
}

bool DraftedRequest::finish(std::vector<float>& logits, const StepHooks& hooks, int64_t tap_row0) {
  State& s = *st_;
  check(s.planned, "drafted request: finish() without plan()");
  s.planned = false;
  s.tap_row0 = tap_row0;
  Drafting::Impl& im = s.im;
  Model& model = im.model;
  StairCut& sc = *im.staircut;
  DraftMetrics& m = s.m;
  const int64_t V = model.desc().vocab;
  const bool greedy = s.sampling.temperature == 0.0f;
  const int k = s.k;
  const Draft* chain = k > 0 ? &s.chain : nullptr;
  const double draft_seconds = s.draft_seconds;
  const auto tv = s.verify_start;
  const int64_t pos0 = s.seq.pos - (s.precommitted ? 1 : 0);  // the pass's first position
  check(int64_t(logits.size()) == int64_t(k > 0 ? k + 1 : 1) * V, "drafted request: finish() got ", logits.size(),
        " logits for a pass of ", k + 1, " rows of ", V);

  int accepted = 0, tried = 0;
  // Row i holds the target's logits for the position after block[i]; a token is picked from it the
  // way plain decoding would (forced, or drawn after the caller's edits), and draft i + 1 survives
  // only if it is that token.
  for (int i = 0; i <= k && !s.ended; ++i) {
    float* row = logits.data() + size_t(i) * size_t(V);
    int32_t tok = 0;
    bool ok = false;
    if (hooks.observe) hooks.observe(row);
    const bool forced = hooks.forced && hooks.forced(tok);
    if (!forced && hooks.process) hooks.process(row);
    if (i == k) {  // the target's own token after the last accepted draft (the bonus row)
      if (!forced) tok = model.backend().sample(row, V, s.sampling, s.rng);
    } else {
      ++tried;
      const int32_t d = chain->tokens[size_t(i)];
      if (forced || greedy || chain->q.empty()) {
        // Speculative sampling with a one-hot q: accept d with probability p(d), else draw from
        // p without d, renormalized — which is exactly "draw x ~ p, accept iff x = d, emit x". One
        // draw per emitted token, as plain decoding makes, so a seed gives the plain text.
        if (!forced) tok = model.backend().sample(row, V, s.sampling, s.rng);
        ok = tok == d;
      } else {
        tok = speculative_accept(sampling_distribution(row, V, s.sampling), chain->q[size_t(i)], d, s.rng, ok);
      }
    }
    s.fresh.push_back(tok);
    ++m.generated_tokens;
    if (!hooks.emit(tok)) s.ended = true;
    if (i == k || !ok) break;
    ++accepted;
  }
  if (s.precommitted) check(accepted == 0, "drafted request: a pass committed with its forward accepted drafts");
  else model.commit(s.seq, accepted + 1);
  s.precommitted = false;
  const int committed = int(s.fresh.size());
  sc.record_step(k + 1, since(tv), draft_seconds, committed);

  ++m.steps;
  ++m.k_histogram[size_t(k)];
  if (k == 0) {
    ++m.plain_steps;
  } else {
    // Positions below k_main are the picked drafter's, the rest its extender's.
    const int km = s.k_main;
    auto& pd = m.drafters[size_t(s.drafter)];
    auto owner = [&](int j) -> DraftMetrics::PerDrafter& {
      return j < km ? pd : m.drafters[size_t(s.extender)];
    };
    ++m.drafts, ++pd.drafts;
    m.drafted_tokens += k, pd.drafted_tokens += km;
    m.accepted_tokens += accepted, pd.accepted_tokens += std::min(accepted, km);
    ++pd.k_histogram[size_t(km)];
    if (s.extender >= 0) {
      auto& pe = m.drafters[size_t(s.extender)];
      ++pe.extensions;
      pe.drafted_tokens += k - km, pe.accepted_tokens += std::max(0, accepted - km);
    }
    for (int j = 0; j < tried; ++j) ++m.tried_at[size_t(j)], ++owner(j).tried_at[size_t(j)];
    for (int j = 0; j < accepted; ++j) ++m.accepted_at[size_t(j)], ++owner(j).accepted_at[size_t(j)];
  }
  if (im.trace) {
    DraftStep t;
    t.committed = pos0;
    for (size_t d = 0; d < im.slots.size(); ++d)  // with cap = 0 nobody was asked: s.drafts holds old ones
      t.proposals.emplace_back(im.slots[d].name, s.cap > 0 ? s.drafts[d].tokens : std::vector<int32_t>());
    if (k > 0) t.chain = im.slots[size_t(s.drafter)].name;
    if (s.extender >= 0) t.extended_by = im.slots[size_t(s.extender)].name, t.k_chain = s.k_main;
    t.k = k;
    t.accepted = accepted;
    t.tokens = s.fresh;
    t.has_bonus = int(s.fresh.size()) == accepted + 1;
    im.trace(t);
  }
  s.settle(pos0);
  return !s.ended;
}

GenerateResult Drafting::generate(const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                  const std::function<bool(int32_t)>& on_token, DraftMetrics* out_metrics) {
  return run_generation(impl_->model, this, prompt, o, on_token, out_metrics);
}

void DraftMetrics::add(const DraftMetrics& o) {
  steps += o.steps, plain_steps += o.plain_steps, drafts += o.drafts;
  drafted_tokens += o.drafted_tokens, accepted_tokens += o.accepted_tokens, generated_tokens += o.generated_tokens;
  auto sum = [](std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  };
  sum(tried_at, o.tried_at), sum(accepted_at, o.accepted_at), sum(k_histogram, o.k_histogram);
  for (const auto& d : o.drafters) {
    auto it = std::find_if(drafters.begin(), drafters.end(), [&](const PerDrafter& x) { return x.name == d.name; });
    if (it == drafters.end()) {
      it = drafters.insert(drafters.end(), PerDrafter());
      it->name = d.name;
    }
    it->proposals += d.proposals, it->drafts += d.drafts, it->drafted_tokens += d.drafted_tokens;
    it->extensions += d.extensions;
    it->accepted_tokens += d.accepted_tokens, it->propose_seconds += d.propose_seconds;
    sum(it->tried_at, d.tried_at), sum(it->accepted_at, d.accepted_at), sum(it->k_histogram, d.k_histogram);
    sum(it->proposed_at, d.proposed_at), sum(it->reached_at, d.reached_at), sum(it->matched_at, d.matched_at);
    for (const SpeculatorStage& st : d.stages) {
      auto at = std::find_if(it->stages.begin(), it->stages.end(), [&](const SpeculatorStage& x) { return x.name == st.name; });
      if (at == it->stages.end()) at = it->stages.insert(it->stages.end(), SpeculatorStage{st.name, 0, 0, 0});
      at->count += st.count, at->seconds += st.seconds, at->items += st.items;
    }
  }
}

std::string DraftMetrics::summary() const {
  std::string s = fmt::format("drafting: {} steps ({} plain, {} drafted), {} draft tokens, {} accepted ({:.1f} %), "
                              "{:.2f} tokens per step\n",
                              steps, plain_steps, drafts, drafted_tokens, accepted_tokens, 100.0 * acceptance(),
                              tokens_per_step());
  s += "acceptance by position:";
  for (size_t j = 0; j < tried_at.size(); ++j)
    if (tried_at[j]) s += fmt::format(" {}:{:.0f}%/{}", j + 1, 100.0 * double(accepted_at[j]) / double(tried_at[j]), tried_at[j]);
  s += "\nchosen k:";
  for (size_t k = 0; k < k_histogram.size(); ++k)
    if (k_histogram[k]) s += fmt::format(" {}x{}", k, k_histogram[k]);
  s += "\n";
  for (const auto& d : drafters)
    s += fmt::format("drafter {}: {} proposals, {} verified, {} extended, {} draft tokens, {} accepted, {:.3f} ms proposing\n",
                     d.name, d.proposals, d.drafts, d.extensions, d.drafted_tokens, d.accepted_tokens,
                     d.propose_seconds * 1e3);
  return s + position_table();
}

std::string DraftMetrics::position_table() const {
  // "j:a/n" cells; positions nobody reached are left out.
  auto cells = [](const std::vector<int64_t>& hit, const std::vector<int64_t>& of) {
    std::string c;
    for (size_t j = 0; j < of.size(); ++j)
      if (of[j]) c += fmt::format(" {}:{}/{}", j + 1, j < hit.size() ? hit[j] : 0, of[j]);
    return c.empty() ? std::string(" -") : c;
  };
  std::string s;
  for (const auto& d : drafters) {
    s += fmt::format("drafter {} verified, accepted/tried at j:{}\n", d.name, cells(d.accepted_at, d.tried_at));
    s += fmt::format("drafter {} proposed, matched/reached at j:{}\n", d.name, cells(d.matched_at, d.reached_at));
  }
  return s;
}

std::vector<double> measure_verify_costs(Model& model, int max_rows, int64_t context, int reps) {
  check(max_rows >= 1 && reps >= 1 && context >= 1, "measure verify costs: max_rows, reps and context must be positive");
  auto seq = model.new_sequence(context + max_rows);
  const int64_t V = model.desc().vocab;
  std::vector<int32_t> fill(static_cast<size_t>(context));
  for (size_t i = 0; i < fill.size(); ++i) fill[i] = int32_t((i * 7919 + 17) % size_t(V));
  std::vector<float> logits;
  model.forward(*seq, fill, ForwardMode::Prefill, logits, false);
  model.commit(*seq, int(fill.size()));
  SamplingParams greedy;
  Rng rng;
  std::vector<double> out;
  for (int m = 1; m <= max_rows; ++m) {
    std::vector<int32_t> block(fill.end() - m, fill.end());
    std::vector<double> t;
    for (int rep = 0; rep <= reps; ++rep) {  // rep 0 warms this shape up and is not counted
      auto t0 = Clock::now();
      model.forward(*seq, block, ForwardMode::Verify, logits, true);
      for (int i = 0; i < m; ++i) model.backend().sample(logits.data() + size_t(i) * size_t(V), V, greedy, rng);
      model.commit(*seq, 0);  // costs as a rejection; the replay of accepted rows is a small part of a step
      if (rep > 0) t.push_back(since(t0));
    }
    std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
    out.push_back(t[t.size() / 2]);
  }
  // Verifying more rows never costs less: fit a non-decreasing table (pool adjacent violators) so
  // that timing noise cannot make a long chain look cheaper than a short one.
  std::vector<std::pair<double, int>> blocks;  // (mean, count)
  for (double x : out) {
    blocks.push_back({x, 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].first > blocks.back().first) {
      auto [m2, n2] = blocks.back();
      blocks.pop_back();
      auto& [m1, n1] = blocks.back();
      m1 = (m1 * n1 + m2 * n2) / (n1 + n2);
      n1 += n2;
    }
  }
  out.clear();
  for (auto [m, n] : blocks) out.insert(out.end(), size_t(n), m);
  return out;
}

}  // namespace tandem
