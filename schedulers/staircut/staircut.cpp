// StairCut: acceptance estimates, the verify-cost staircase and the hysteresis level.
#include "tandem/staircut.h"

#include <algorithm>
#include <cmath>

#include "tandem/error.h"

namespace tandem {

VerifyCosts::VerifyCosts(std::vector<double> seconds) : t_(std::move(seconds)) {
  check(!t_.empty() && t_[0] > 0 && std::isfinite(t_[0]),
        "verify costs: T_v(1), the plain step, must be a positive time in seconds");
  // Drop unknown entries past the last known one (no extrapolation), then fill gaps linearly.
  while (!(t_.back() > 0)) t_.pop_back();
  size_t last = 0;
  for (size_t i = 1; i < t_.size(); ++i) {
    check(std::isfinite(t_[i]), "verify costs: T_v(", i + 1, ") is not finite");
    if (!(t_[i] > 0)) continue;
    for (size_t g = last + 1; g < i; ++g)
      t_[g] = t_[last] + (t_[i] - t_[last]) * double(g - last) / double(i - last);
    last = i;
  }
}

void VerifyCosts::observe(int m, double seconds, double alpha) {
  if (alpha <= 0 || m < 1 || m > max_rows() || !(seconds > 0)) return;
  // The start-up table's shape (T_v(m) / T_v(1)) is kept and its level follows the machine: every
  // entry moves by the factor that moves T_v(m). Updating T_v(m) alone let a table measured at a
  // longer context keep a stale T_v(1) while only drafted steps were observed, so a drafter that is
  // never right looked cheaper than plain decoding and kept drafting (0.89x of plain on the H200).
  const double before = t_[size_t(m - 1)];
  const double f = ((1 - alpha) * before + alpha * seconds) / before;
  for (double& t : t_) t *= f;
}

AcceptanceStats::AcceptanceStats(std::vector<int> buckets_per_drafter, int max_k, int halve_after)
    : buckets_(std::move(buckets_per_drafter)), max_k_(max_k), halve_after_(halve_after) {
  check(max_k_ >= 1, "acceptance stats: max_k must be at least 1, found ", max_k_);
  for (int b : buckets_) {
    check(b >= 1, "acceptance stats: a drafter needs at least one bucket, found ", b);
    cells_.emplace_back(size_t(b) * size_t(max_k_));
  }
}

AcceptanceStats::Cell& AcceptanceStats::cell(int d, int bucket, int j) {
  return const_cast<Cell&>(static_cast<const AcceptanceStats&>(*this).cell(d, bucket, j));
}

const AcceptanceStats::Cell& AcceptanceStats::cell(int d, int bucket, int j) const {
  if (d < 0 || size_t(d) >= buckets_.size() || bucket < 0 || bucket >= buckets_[size_t(d)] || j < 1 || j > max_k_)
    fail("acceptance stats: no cell for drafter ", d, ", bucket ", bucket, ", position ", j);
  return cells_[size_t(d)][size_t(bucket) * size_t(max_k_) + size_t(j - 1)];
}

// Shrinkage (empirical Bayes) instead of a flat Beta(1, 1) per cell: a cell's observations are
// weighed against a prior of strength kPriorWeight whose mean is what the drafter already showed.
// Position 1's prior mean is the drafter's position-1 record in its other buckets (Beta(1, 1) over
// them: 0.5 when there is none); position j's is this bucket's estimate at j − 1. With flat priors
// every position a drafter had not yet been scored at counted as a coin flip, so a drafter right
// 100 % of the time at the positions it had been verified at looked poor for any longer chain, and a
// new feature bucket (a copy-run bin reached for the first time) started from scratch: on the H200
// the oracle drafter stayed at k = 3 for a whole 256-token run where k = 15 was 1.3x faster.
double AcceptanceStats::prior_mean_first(int d, int bucket) const {
  double a = 1, b = 1;
  for (int o = 0; o < buckets_[size_t(d)]; ++o)
    if (o != bucket) {
      const Cell& c = cell(d, o, 1);
      a += c.a - 1, b += c.b - 1;
    }
  return a / (a + b);
}

double AcceptanceStats::shrunk(const Cell& c, double mean) {
  return (c.a - 1 + kPriorWeight * mean) / (c.a - 1 + c.b - 1 + kPriorWeight);
}

double AcceptanceStats::p(int d, int bucket, int j) const {
  double e = shrunk(cell(d, bucket, 1), prior_mean_first(d, bucket));
  for (int i = 2; i <= j; ++i) e = shrunk(cell(d, bucket, i), e);
  return e;
}

void AcceptanceStats::record(int d, int bucket, int j, bool accepted) {
  if (j > max_k_) return;  // retro-scored past the longest chain: nothing to learn for the picker
  Cell& c = cell(d, bucket, j);
  (accepted ? c.a : c.b) += 1;
  if (c.a + c.b - 2 > halve_after_) {
    c.a = 1 + (c.a - 1) / 2;
    c.b = 1 + (c.b - 1) / 2;
  }
}

void AcceptanceStats::set(int d, int bucket, int j, double accepted, double rejected) {
  Cell& c = cell(d, bucket, j);
  c.a = 1 + accepted;
  c.b = 1 + rejected;
}

double AcceptanceStats::expected_tokens(int d, int bucket, int k) const {
  double e = 1, run = 1, pj = 0;
  for (int j = 1; j <= k; ++j) {
    pj = shrunk(cell(d, bucket, j), j == 1 ? prior_mean_first(d, bucket) : pj);
    e += run *= pj;
  }
  return e;
}

StairCut::StairCut(std::vector<int> buckets_per_drafter, VerifyCosts costs, const StairCutOptions& o)
    : o_(o), costs_(std::move(costs)) {
  check(o_.max_k >= 1, "staircut: max_k must be at least 1, found ", o_.max_k);
  check(costs_.max_rows() >= 1, "staircut: the verify cost table is empty");
  draft_seconds_.assign(buckets_per_drafter.size(), 0.0);
  draft_samples_.assign(buckets_per_drafter.size(), 0);
  acc_ = AcceptanceStats(std::move(buckets_per_drafter), o_.max_k, o_.halve_after);
  reset_request();
}

void StairCut::reset_request() {
  level_ = 0;
  streak_ = 0;
  forced_plain_ = 0;
  probe_wait_.assign(draft_seconds_.size(), 0);
  guard_seconds_.assign(size_t(std::max(o_.guard_window, 0)), 0.0);
  guard_tokens_.assign(guard_seconds_.size(), 0);
  guard_next_ = guard_count_ = 0;
}

int StairCut::max_k() const { return std::min(o_.max_k, costs_.max_rows() - 1); }

double StairCut::score(int d, int bucket, int k) const {
  if (k == 0) return 1.0 / costs_.at(1);
  return acc_.expected_tokens(d, bucket, k) / (draft_seconds_[size_t(d)] + costs_.at(k + 1));
}

int StairCut::best_k(int d, int bucket, int max_len) const {
  int best = 0;
  double s = 0;
  for (int k = 1; k <= std::min(max_len, max_k()); ++k)
    if (double r = score(d, bucket, k); r > s) s = r, best = k;
  return best;
}

int StairCut::extend_k(int a, int bucket_a, int k, int b, int bucket_b, int max_len) const {
  const double t = draft_seconds_[size_t(a)] + draft_seconds_[size_t(b)];
  double e = 1, run = 1;
  for (int j = 1; j <= k; ++j) e += run *= acc_.p(a, bucket_a, j);
  int best = k;
  double rate = e / (t + costs_.at(k + 1));
  for (int j = k + 1; j <= std::min(max_len, max_k()); ++j) {
    e += run *= acc_.p(b, bucket_b, j);
    if (double r = e / (t + costs_.at(j + 1)); r > rate) rate = r, best = j;
  }
  return best;
}

StairCut::Best StairCut::best_of(const std::vector<Offer>& offers, int k_cap) const {
  Best b;
  for (const Offer& o : offers) {
    int len = std::min(o.length, max_k());
    for (int k = 1; k <= std::min(len, k_cap); ++k)
      if (double r = score(o.drafter, o.bucket, k); r > b.score) b = {o.drafter, k, len, r};
  }
  return b;
}

Pick StairCut::plain() {
  double s0 = score(0, 0, 0);
  for (int& w : probe_wait_) ++w;
  return {-1, 0, s0, s0};
}

Pick StairCut::chosen(const Best& b) const { return {b.drafter, b.k, b.score, score(0, 0, 0)}; }

Pick StairCut::pick(const std::vector<Offer>& offers) {
  if (forced_plain_ > 0) {
    --forced_plain_;
    return plain();
  }
  if (o_.force_k >= 0) {  // fixed width: the best drafter at min(force_k, its length)
    Best b;
    for (const Offer& o : offers)
      if (int k = std::min({o.length, o_.force_k, max_k()}); k > 0)
        if (double r = score(o.drafter, o.bucket, k); b.drafter < 0 || r > b.score) b = {o.drafter, k, o.length, r};
    return b.drafter < 0 ? plain() : chosen(b);
  }
  const double s0 = score(0, 0, 0);
  const Best all = best_of(offers, max_k());
  if (all.drafter < 0) return plain();  // nothing offered: the level waits for the next offer

  int want = -1;  // the level a challenger asks for this step (0 = plain), −1 = none
  if (level_ == 0) {
    if (all.score > s0 * (1 + o_.margin_plain)) want = all.k;
  } else {
    double level_score = 0;
    for (const Offer& o : offers)
      if (int k = std::min({o.length, level_, max_k()}); k > 0)
        level_score = std::max(level_score, score(o.drafter, o.bucket, k));
    // A best k below the level only challenges it when the proposal was long enough for more.
    bool other = all.k > level_ || (all.k < level_ && all.k < all.length);
    // Entering drafting takes the margin; leaving it does not: a level that no longer beats plain
    // costs time every step (a drafter that is never right, with a cheap extra row, would otherwise
    // stay drafting at up to h0 slower than plain). The band [1, 1 + h0] · R_0 is the hysteresis.
    if (s0 > all.score) want = 0;
    else if (other && all.score > level_score * (1 + o_.margin)) want = all.k;
  }
  streak_ = want >= 0 ? streak_ + 1 : 0;
  if (streak_ >= std::max(o_.persist_steps, 1)) {
    level_ = want;
    streak_ = 0;
  }
  if (level_ == 0) return plain();
  // The step verifies the level (cut to the proposal), on the drafter that scores best there. A
  // shorter cut wins only by the margin: this block's bucket may say it is worse than usual, but
  // noise alone must not move k.
  Best at_level;
  for (const Offer& o : offers)
    if (int k = std::min({o.length, level_, max_k()}); k > 0)
      if (double r = score(o.drafter, o.bucket, k); r > at_level.score) at_level = {o.drafter, k, o.length, r};
  const Best shorter = best_of(offers, at_level.k);
  return chosen(shorter.score > at_level.score * (1 + o_.margin) ? shorter : at_level);
}

// Plain steps between probes of drafter d: probe_every, stretched so that one proposal every interval
// costs at most probe_budget of the plain steps' time (a 9 ms drafter beside a 6 ms step: 75 steps at
// 2 %). A drafter not measured yet is probed at probe_every.
int StairCut::probe_interval(int d) const {
  const double t = draft_seconds_[size_t(d)], plain = costs_.at(1);
  if (o_.probe_budget <= 0 || !(t > 0) || !(plain > 0)) return o_.probe_every;
  const double steps = std::ceil(t / (o_.probe_budget * plain));
  return int(std::min(1e6, std::max(double(o_.probe_every), steps)));
}

bool StairCut::wants(int d, int max_len) {
  if (forced_plain_ > 0) return false;
  if (o_.force_k >= 0) return o_.force_k > 0;
  if (level_ > 0) return true;
  int& wait = probe_wait_[size_t(d)];
  if (o_.probe_every > 0 && wait >= probe_interval(d)) {
    wait = 0;
    return true;
  }
  const double s0 = score(0, 0, 0);
  for (int b = 0; b < acc_.buckets(d); ++b)
    if (int k = best_k(d, b, max_len); k > 0 && score(d, b, k) > s0 * (1 + o_.margin_plain)) return true;
  return false;
}

void StairCut::record_acceptance(int d, int bucket, int j, bool accepted) { acc_.record(d, bucket, j, accepted); }

void StairCut::record_draft_time(int d, double seconds) {
  if (o_.cost_ewma <= 0 || !(seconds >= 0)) return;
  double& t = draft_seconds_[size_t(d)];
  t = draft_samples_[size_t(d)]++ == 0 ? seconds : (1 - o_.cost_ewma) * t + o_.cost_ewma * seconds;
}

void StairCut::record_step(int rows, double verify_seconds, double draft_seconds, int tokens) {
  costs_.observe(rows, verify_seconds, o_.cost_ewma);
  if (rows <= 1 || guard_seconds_.empty()) return;
  guard_seconds_[guard_next_] = verify_seconds + draft_seconds;
  guard_tokens_[guard_next_] = tokens;
  guard_next_ = (guard_next_ + 1) % guard_seconds_.size();
  if (++guard_count_ < guard_seconds_.size()) return;
  double sec = 0;
  long tok = 0;
  for (size_t i = 0; i < guard_seconds_.size(); ++i) sec += guard_seconds_[i], tok += guard_tokens_[i];
  if (sec > 0 && double(tok) / sec < o_.guard_ratio * score(0, 0, 0)) {
    forced_plain_ = std::max(o_.guard_plain_steps, 0);
    level_ = 0;
    streak_ = 0;
    guard_next_ = guard_count_ = 0;  // after the plain stretch, judge a fresh window
  }
}

}  // namespace tandem
