// Test drafters for the drafting loop: random (rejected everywhere), oracle (the plain run's own
// continuation, optionally corrupted), and a sampling drafter that reports its q.
#pragma once
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "tandem/generate.h"
#include "tandem/error.h"
#include "tandem/drafting.h"
#include "tandem/speculator.h"

namespace tandem::test {

// A factory from a function that makes the speculator.
class FnFactory : public SpeculatorFactory {
 public:
  explicit FnFactory(std::function<std::unique_ptr<Speculator>()> make) : make_(std::move(make)) {}
  std::unique_ptr<Speculator> create(const SpeculatorContext&, SpeculatorSettings& s) override {
    s.finish();
    return make_();
  }

 private:
  std::function<std::unique_ptr<Speculator>()> make_;
};

// Keeps the history; subclasses propose from it.
class HistoryDrafter : public Speculator {
 public:
  void begin(const int32_t* p, size_t n) override { h_.assign(p, p + n); }
  void observe(const int32_t* t, size_t n) override { h_.insert(h_.end(), t, t + n); }

 protected:
  std::vector<int32_t> h_;
};

// `len` uniformly random tokens; a tiny model's argmax matches one with probability 1/V.
class RandomDrafter : public HistoryDrafter {
 public:
  RandomDrafter(int len, int64_t vocab, uint64_t seed) : len_(len), vocab_(vocab), g_(seed) {}
  void propose(int max_n, Draft& out) override {
    out.clear();
    for (int i = 0; i < std::min(max_n, len_); ++i) out.tokens.push_back(int32_t(g_() % uint64_t(vocab_)));
  }
  bool cheap() const override { return true; }

 private:
  int len_;
  int64_t vocab_;
  std::mt19937_64 g_;
};

// The true continuation: `truth` is prompt + the plain run's output. Each proposed token is replaced
// by a wrong one with probability `corrupt` (partial accepts).
class OracleDrafter : public HistoryDrafter {
 public:
  OracleDrafter(std::shared_ptr<std::vector<int32_t>> truth, double corrupt, int64_t vocab, uint64_t seed,
                bool cheap = true)
      : truth_(std::move(truth)), corrupt_(corrupt), vocab_(vocab), g_(seed), cheap_(cheap) {}
  void begin(const int32_t* p, size_t n) override {
    HistoryDrafter::begin(p, n);
    check(n <= truth_->size() && std::equal(p, p + n, truth_->begin()), "oracle drafter: the prompt is not its truth's");
  }
  void propose(int max_n, Draft& out) override {
    out.clear();
    std::uniform_real_distribution<double> u(0, 1);
    for (size_t i = h_.size(); i < truth_->size() && int(out.tokens.size()) < max_n; ++i) {
      int32_t t = (*truth_)[i];
      if (u(g_) < corrupt_) t = int32_t((uint64_t(t) + 1 + g_() % uint64_t(vocab_ - 1)) % uint64_t(vocab_));
      out.tokens.push_back(t);
    }
  }
  bool cheap() const override { return cheap_; }

 private:
  std::shared_ptr<std::vector<int32_t>> truth_;
  double corrupt_;
  int64_t vocab_;
  std::mt19937_64 g_;
  bool cheap_;
};

template <class T, class... A>
std::shared_ptr<SpeculatorFactory> factory_of(A... args) {
  return std::make_shared<FnFactory>([=]() { return std::make_unique<T>(args...); });
}

// Verify costs shaped like a GPU's (verifying 32 rows costs 2.5 plain steps) and frozen, so the
// picker's choices depend on acceptance only; no throughput guard (the table is not this machine's).
inline DraftOptions fixed_costs(int force_k = -1) {
  DraftOptions o;
  for (int m = 1; m <= 32; ++m) o.verify_costs.push_back(1e-3 * (1 + 0.05 * (m - 1)));
  o.staircut.cost_ewma = 0;
  o.staircut.guard_window = 0;
  o.staircut.force_k = force_k;
  return o;
}

// Checks a drafted run's trace (Drafting::set_trace) against its output: one DraftStep per verify
// pass, each naming every drafter in order; committed lengths chain from the prompt (+ accepted + 1);
// accepted ≤ k; the accepted tokens are the verified chain's prefix and a rejected draft differs from
// the target's token (greedy); the first token plus every step's tokens are the output.
struct TraceCounts {
  std::vector<int64_t> proposed;  // tokens proposed, per drafter
  int partial = 0, full = 0;      // verified chains partly rejected / accepted whole
  int extended = 0;               // chains another drafter extended (it agreed with all of them)
  int past_extension = 0;         // of those, steps that accepted drafts of the extension
};
inline TraceCounts check_trace(const std::vector<DraftStep>& steps, size_t prompt_size,
                               const std::vector<int32_t>& output, const std::vector<std::string>& names) {
  TraceCounts c;
  c.proposed.assign(names.size(), 0);
  int64_t committed = int64_t(prompt_size);
  std::vector<int32_t> emitted;
  if (!output.empty()) emitted.push_back(output[0]);  // the prefill picks the first token
  for (const DraftStep& s : steps) {
    EXPECT_EQ(s.committed, committed);
    EXPECT_LE(s.accepted, s.k);
    EXPECT_EQ(s.k == 0, s.chain.empty());
    EXPECT_EQ(s.tokens.size(), size_t(s.accepted) + (s.has_bonus ? 1 : 0));
    if (s.proposals.size() != names.size()) {
      ADD_FAILURE() << "a step lists " << s.proposals.size() << " drafters, expected " << names.size();
      return c;
    }
    const std::vector<int32_t>*chain = nullptr, *ext = nullptr;
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(s.proposals[i].first, names[i]);
      c.proposed[i] += int64_t(s.proposals[i].second.size());
      if (s.proposals[i].first == s.chain) chain = &s.proposals[i].second;
      if (!s.extended_by.empty() && s.proposals[i].first == s.extended_by) ext = &s.proposals[i].second;
    }
    if (s.k > 0) {
      // The verified drafts: the chain drafter's first k_chain, then (extended) the extender's, whose
      // proposal agrees with those and goes on.
      const int kc = s.extended_by.empty() ? s.k : s.k_chain;
      if (!chain || int(chain->size()) < kc || kc < 1 || kc > s.k) {
        ADD_FAILURE() << "the verified chain '" << s.chain << "' is not a prefix of its drafter's proposal";
        return c;
      }
      std::vector<int32_t> verified(chain->begin(), chain->begin() + kc);
      if (!s.extended_by.empty()) {
        if (!ext || int(ext->size()) < s.k || kc == s.k || !std::equal(verified.begin(), verified.end(), ext->begin())) {
          ADD_FAILURE() << "the chain's extension by '" << s.extended_by << "' does not agree with its proposal";
          return c;
        }
        verified.insert(verified.end(), ext->begin() + kc, ext->begin() + s.k);
        ++c.extended;
      }
      for (int i = 0; i < s.accepted && size_t(i) < s.tokens.size(); ++i) EXPECT_EQ(s.tokens[size_t(i)], verified[size_t(i)]);
      if (s.has_bonus && s.accepted < s.k) EXPECT_NE(s.bonus(), verified[size_t(s.accepted)]);
      c.partial += s.accepted < s.k, c.full += s.accepted == s.k;
      c.past_extension += !s.extended_by.empty() && s.accepted > kc;
    }
    emitted.insert(emitted.end(), s.tokens.begin(), s.tokens.end());
    committed += s.accepted + 1;
  }
  EXPECT_EQ(emitted, output) << "the trace's tokens are not the output";
  return c;
}

inline GenerateOptions run_options(int max_tokens, bool stop_at_eos = false, int64_t context = 512) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.context = context;
  o.stop_at_eos = stop_at_eos;
  return o;
}

}  // namespace tandem::test

namespace tandem::test {

// Draws each proposed token from q(history), a distribution the test supplies, and reports q so
// that verification uses speculative sampling (min(1, p/q), residual max(0, p − q)). Proposes
// while q knows the history; a fresh seed per sequence keeps runs deterministic.
class SamplingDrafter : public HistoryDrafter {
 public:
  using QFn = std::function<bool(const std::vector<int32_t>& history, TokenDist& q)>;
  SamplingDrafter(QFn q, int len, uint64_t seed) : q_(std::move(q)), len_(len), g_(seed) {}
  void propose(int max_n, Draft& out) override {
    out.clear();
    std::vector<int32_t> h = h_;
    TokenDist q;
    std::uniform_real_distribution<double> u(0, 1);
    while (int(out.tokens.size()) < std::min(max_n, len_) && q_(h, q)) {
      double x = u(g_), cum = 0;
      size_t i = 0;
      while (i + 1 < q.ids.size() && x >= (cum += q.probs[i])) ++i;
      out.tokens.push_back(q.ids[i]);
      out.q.push_back(q);
      h.push_back(q.ids[i]);
    }
  }
  bool cheap() const override { return true; }

 private:
  QFn q_;
  int len_;
  std::mt19937_64 g_;
};

}  // namespace tandem::test
