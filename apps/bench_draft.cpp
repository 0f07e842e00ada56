// Drafted decode in `tandem bench`: the test drafters, one drafted run against its plain run, and
// the table and JSON of what StairCut did.
#include "bench_draft.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "tandem/error.h"
#include "tandem/registry.h"

namespace tandem::cli {
namespace {

// Proposes each of the truth's next tokens with probability `right`, else a different token: always
// the truth (oracle, 1), never (wrong, 0: the next id), or each position independently from a seeded
// draw (oracle=P: a uniformly drawn other id when wrong). Cheap: it proposes every step, so
// StairCut's retro-scoring sees all of its tokens.
class TruthDrafter final : public Speculator {
 public:
  TruthDrafter(std::shared_ptr<std::vector<int32_t>> truth, double right, int64_t vocab, uint64_t seed)
      : truth_(std::move(truth)), right_(right), vocab_(vocab), rng_(seed) {}
  void begin(const int32_t* p, size_t n) override {
    check(n <= truth_->size() && std::equal(p, p + n, truth_->begin()),
          "bench drafter: the prompt is not the start of the plain run it replays");
    h_.assign(p, p + n);
  }
  void observe(const int32_t* t, size_t n) override { h_.insert(h_.end(), t, t + n); }
  void propose(int max_n, Draft& out) override {
    out.clear();
    for (size_t i = h_.size(); i < truth_->size() && int(out.tokens.size()) < max_n; ++i) {
      const int32_t t = (*truth_)[i];
      if (right_ >= 1.0) out.tokens.push_back(t);
      else if (right_ <= 0.0) out.tokens.push_back(int32_t((int64_t(t) + 1) % vocab_));
      else if (std::uniform_real_distribution<double>(0, 1)(rng_) < right_) out.tokens.push_back(t);
      else out.tokens.push_back(int32_t((uint64_t(t) + 1 + rng_() % uint64_t(vocab_ - 1)) % uint64_t(vocab_)));
    }
  }
  bool cheap() const override { return true; }

 private:
  std::shared_ptr<std::vector<int32_t>> truth_;
  double right_;
  int64_t vocab_;
  std::mt19937_64 rng_;
  std::vector<int32_t> h_;
};

class TruthFactory final : public SpeculatorFactory {
 public:
  TruthFactory(std::shared_ptr<std::vector<int32_t>> truth, double right) : truth_(std::move(truth)), right_(right) {}
  std::unique_ptr<Speculator> create(const SpeculatorContext& c, SpeculatorSettings& s) override {
    s.finish();
    // Each speculator (one per request, and Drafting's start-up probe) draws its own seeded stream.
    return std::make_unique<TruthDrafter>(truth_, right_, c.vocab, kTruthSeed + created_++);
  }

 private:
  static constexpr uint64_t kTruthSeed = 0x5eed;
  std::shared_ptr<std::vector<int32_t>> truth_;
  double right_;
  uint64_t created_ = 0;
};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

}  // namespace

bool is_test_drafter(const std::string& name) {
  return name == "oracle" || name == "wrong" || name.rfind("oracle=", 0) == 0;
}

double test_drafter_right(const std::string& name) {
  if (name == "oracle") return 1.0;
  if (name == "wrong") return 0.0;
  check(name.rfind("oracle=", 0) == 0, "bench drafter '", name, "': not a test drafter (oracle, wrong, oracle=P)");
  const std::string v = name.substr(7);
  char* end = nullptr;
  const double p = v.empty() ? -1.0 : std::strtod(v.c_str(), &end);
  check(!v.empty() && end && *end == '\0' && p >= 0.0 && p <= 1.0, "bench drafter '", name,
        "': expected oracle=P with P, the probability of each token being right, in [0, 1]; found '", v, "'");
  return p;
}

std::vector<Drafting::NamedFactory> drafter_factories(const std::vector<std::string>& names, PluginRegistry& registry,
                                                      const std::string& device,
                                                      std::shared_ptr<std::vector<int32_t>> truth) {
  std::vector<Drafting::NamedFactory> out;
  for (const auto& n : names) {
    if (is_test_drafter(n)) out.emplace_back(n, std::make_shared<TruthFactory>(truth, test_drafter_right(n)));
    else out.emplace_back(n, registry.speculator(n, device));
  }
  return out;
}

std::vector<std::vector<std::string>> parse_draft_sets(const std::string& list) {
  std::vector<std::vector<std::string>> sets;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ':')) {
    sets.push_back(parse_drafter_names(item));
    check(!sets.back().empty(), "tandem bench: --draft '", list, "': 'none' is not a set of drafters to bench");
  }
  check(!sets.empty(), "tandem bench: --draft needs NAME[,NAME…][:NAME[,NAME…]…]");
  return sets;
}

void check_same_tokens(const std::vector<int32_t>& plain, const std::vector<int32_t>& drafted, const std::string& what) {
  const size_t n = std::min(plain.size(), drafted.size());
  size_t i = 0;
  while (i < n && plain[i] == drafted[i]) ++i;
  if (i == n && plain.size() == drafted.size()) return;
  if (i == n)
    fail(what, ": the drafted output has ", drafted.size(), " tokens, the plain one ", plain.size(),
         " (equal up to there) — drafting must not change the output");
  fail(what, ": the drafted output differs from the plain one at generated token ", i, ": plain ", plain[i],
       ", drafted ", drafted[i], " — drafting must not change the output");
}

DraftRun bench_drafting(Model& model, PluginRegistry& registry, const DraftOptions& options,
                        const std::vector<int32_t>& prompt, const GenerateResult& plain, const GenerateOptions& g) {
  check(g.sampling.temperature == 0.0f, "tandem bench: drafting is benchmarked greedy");
  auto truth = std::make_shared<std::vector<int32_t>>(prompt);
  truth->insert(truth->end(), plain.tokens.begin(), plain.tokens.end());
  DraftRun run;
  run.drafters = joined(options.drafters);
  run.tokens = int(plain.tokens.size()) - 1;
  run.plain_seconds = plain.decode_seconds;
  Drafting drafting(model, drafter_factories(options.drafters, registry, model.backend().device(), truth), options);
  run.verify_costs = drafting.staircut().costs().table();
  GenerateResult r = drafting.generate(prompt, g, {}, &run.metrics);
  run.drafted_seconds = r.decode_seconds;
  check_same_tokens(plain.tokens, r.tokens, "tandem bench --draft " + run.drafters);
  return run;
}

void print_draft_run(const DraftRun& r) {
  const DraftMetrics& m = r.metrics;
  std::printf("  drafting with %s (%d tokens, output equal to plain)\n", r.drafters.c_str(), r.tokens);
  std::printf("    %-20s plain %.2f tok/s, drafted %.2f tok/s, ratio %.2fx\n", "decode", r.plain_tps(), r.drafted_tps(),
              r.plain_tps() > 0 ? r.drafted_tps() / r.plain_tps() : 0.0);
  std::printf("    %-20s %lld steps (%lld plain), %.2f tokens per step, %lld of %lld drafts accepted (%.1f %%)\n", "steps",
              (long long)m.steps, (long long)m.plain_steps, m.tokens_per_step(), (long long)m.accepted_tokens,
              (long long)m.drafted_tokens, 100 * m.acceptance());
  std::printf("    %-20s", "chosen k (k x steps)");
  for (size_t k = 0; k < m.k_histogram.size(); ++k)
    if (m.k_histogram[k]) std::printf(" %zux%lld", k, (long long)m.k_histogram[k]);
  std::printf("\n    %-20s", "accepted at j (%/n)");
  for (size_t j = 0; j < m.tried_at.size(); ++j)
    if (m.tried_at[j])
      std::printf(" %zu:%.0f/%lld", j + 1, 100.0 * double(m.accepted_at[j]) / double(m.tried_at[j]), (long long)m.tried_at[j]);
  std::printf("\n    %-20s", "T_v(m)/T_v(1)");
  for (size_t i = 0; i < r.verify_costs.size() && i < 16; ++i) std::printf(" %zu:%.2f", i + 1, r.verify_costs[i] / r.verify_costs[0]);
  if (!r.verify_costs.empty()) std::printf("  (T_v(1) = %.3f ms)", r.verify_costs[0] * 1e3);
  std::printf("\n");
  for (const auto& d : m.drafters)
    std::printf("    drafter %-11s %lld proposals, %lld verified, %lld extended, %lld of %lld accepted, %.3f ms proposing\n",
                d.name.c_str(), (long long)d.proposals, (long long)d.drafts, (long long)d.extensions,
                (long long)d.accepted_tokens, (long long)d.drafted_tokens, d.propose_seconds * 1e3);
  for (const auto& d : m.drafters)
    for (const SpeculatorStage& st : d.stages) {
      std::printf("    stage %-15s %-12s %lld x, mean %.1f us", d.name.c_str(), st.name.c_str(), (long long)st.count,
                  st.count ? st.seconds * 1e6 / double(st.count) : 0.0);
      if (st.items) std::printf(", %.2f rows per run", st.count ? double(st.items) / double(st.count) : 0.0);
      std::printf("\n");
    }
  std::stringstream table(m.position_table());
  for (std::string line; std::getline(table, line);) std::printf("    %s\n", line.c_str());
}

void write_draft_runs(rapidjson::PrettyWriter<rapidjson::StringBuffer>& w, const std::vector<DraftRun>& runs) {
  auto num = [&](const char* k, double v) { w.Key(k), w.Double(v); };
  auto i64 = [&](const char* k, int64_t v) { w.Key(k), w.Int64(v); };
  auto array = [&](const char* k, const std::vector<int64_t>& v) {
    w.Key(k), w.StartArray();
    for (int64_t x : v) w.Int64(x);
    w.EndArray();
  };
  w.StartArray();
  for (const DraftRun& r : runs) {
    const DraftMetrics& m = r.metrics;
    w.StartObject();
    w.Key("drafters"), w.String(r.drafters.c_str());
    i64("tokens", r.tokens);
    num("plain_tokens_per_s", r.plain_tps());
    num("drafted_tokens_per_s", r.drafted_tps());
    num("ratio", r.plain_tps() > 0 ? r.drafted_tps() / r.plain_tps() : 0);
    w.Key("output_equal"), w.Bool(true);
    i64("steps", m.steps);
    i64("plain_steps", m.plain_steps);
    i64("draft_tokens", m.drafted_tokens);
    i64("accepted_tokens", m.accepted_tokens);
    num("acceptance", m.acceptance());
    num("tokens_per_step", m.tokens_per_step());
    array("chosen_k", m.k_histogram);
    array("tried_at_position", m.tried_at);
    array("accepted_at_position", m.accepted_at);
    w.Key("verify_seconds"), w.StartArray();
    for (double t : r.verify_costs) w.Double(t);
    w.EndArray();
    w.Key("per_drafter"), w.StartArray();
    for (const auto& d : m.drafters) {
      w.StartObject();
      w.Key("name"), w.String(d.name.c_str());
      i64("proposals", d.proposals);
      i64("drafts", d.drafts);
      i64("extensions", d.extensions);
      i64("draft_tokens", d.drafted_tokens);
      i64("accepted_tokens", d.accepted_tokens);
      num("propose_seconds", d.propose_seconds);
      array("tried_at_position", d.tried_at);
      array("accepted_at_position", d.accepted_at);
      array("proposed_at_position", d.proposed_at);
      array("reached_at_position", d.reached_at);
      array("matched_at_position", d.matched_at);
      w.Key("stages"), w.StartArray();
      for (const SpeculatorStage& st : d.stages) {
        w.StartObject();
        w.Key("name"), w.String(st.name.c_str());
        i64("count", st.count);
        num("seconds", st.seconds);
        i64("rows", st.items);
        w.EndObject();
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
}

}  // namespace tandem::cli
