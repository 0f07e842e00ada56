// StairCut: picks, each step, which drafter's chain to verify and how many of its tokens (k; 0 = a
// plain step), maximizing expected committed tokens per second (spec/speculation.md §5).
// Owner: the drafting loop owns one StairCut per Drafting session (estimates pooled over requests;
// hysteresis state reset per request). Thread: one thread at a time. Sync: none (host arithmetic).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tandem/draft_options.h"

namespace tandem {


// T_v(m): wall time of a verify step with m rows (m = 1 is a plain step), seconds.
class VerifyCosts {
 public:
  VerifyCosts() = default;
  // seconds[m − 1] = T_v(m); entries ≤ 0 are unknown and interpolated from their neighbours.
  // Unknown entries past the last known one stay unusable: a cost is never extrapolated.
  explicit VerifyCosts(std::vector<double> seconds);
  int max_rows() const { return int(t_.size()); }
  double at(int m) const { return t_[std::size_t(m - 1)]; }
  // Folds a measured step into T_v(m) with weight alpha (0 = ignore), scaling every entry by the
  // same factor: the table's shape stays that measured at start-up, its level follows the machine.
  void observe(int m, double seconds, double alpha);
  const std::vector<double>& table() const { return t_; }

 private:
  std::vector<double> t_;
};

// Acceptance counts per (drafter, bucket, position j = 1..max_k), each shrunk towards a prior mean
// (position 1: the drafter's other buckets; position j: this bucket's estimate at j − 1):
// p(j) = P(draft j accepted | drafts 1..j−1 accepted).
class AcceptanceStats {
 public:
  AcceptanceStats() = default;
  AcceptanceStats(std::vector<int> buckets_per_drafter, int max_k, int halve_after);
  int buckets(int drafter) const { return buckets_[std::size_t(drafter)]; }
  double p(int drafter, int bucket, int j) const;
  void record(int drafter, int bucket, int j, bool accepted);
  // Replaces a cell's counts (tests, warm starts): successes and failures beyond the prior.
  void set(int drafter, int bucket, int j, double accepted, double rejected);
  // E(k) = 1 + Σ_{i ≤ k} Π_{j ≤ i} p(j)
  double expected_tokens(int drafter, int bucket, int k) const;

 private:
  struct Cell {
    double a = 1, b = 1;  // 1 + accepted, 1 + rejected (halved alike)
  };
  static constexpr double kPriorWeight = 2;  // the prior counts as this many trials
  static double shrunk(const Cell& c, double mean);
  double prior_mean_first(int drafter, int bucket) const;
  Cell& cell(int drafter, int bucket, int j);
  const Cell& cell(int drafter, int bucket, int j) const;
  std::vector<std::vector<Cell>> cells_;  // [drafter][bucket · max_k + j − 1]
  std::vector<int> buckets_;
  int max_k_ = 0;
  int halve_after_ = 4000;
};

// One drafter's offer this step: a proposal of `length` tokens in feature bucket `bucket`
// (length 0 = nothing to offer).
struct Offer {
  int drafter = 0;
  int length = 0;
  int bucket = 0;
};

struct Pick {
  int drafter = -1;  // −1 with k = 0: plain step
  int k = 0;
  double score = 0;        // expected tokens per second of the pick
  double plain_score = 0;  // 1 / T_v(1)
};

class StairCut {
 public:
  StairCut(std::vector<int> buckets_per_drafter, VerifyCosts costs, const StairCutOptions& options);

  // R_d(k) = E_d(k) / (T_d + T_v(k + 1)); k = 0 is the plain step, 1 / T_v(1).
  double score(int drafter, int bucket, int k) const;
  // The k in [1, max_len] with the highest score (ties: the smaller k).
  int best_k(int drafter, int bucket, int max_len) const;
  // The longest chain that can be verified.
  int max_k() const;
  // Drafter b's proposal agrees with all k drafts of a's pick and goes on: the cut in [k, max_len]
  // with the highest expected tokens per second, positions 1..k at a's acceptance and k+1.. at b's
  // (p(j), given the drafts before it accepted), both drafters' time paid. k: keep a's chain.
  int extend_k(int a, int bucket_a, int k, int b, int bucket_b, int max_len) const;

  // Chooses this step's chain and cut; updates the stairs (hysteresis level) and the guard.
  Pick pick(const std::vector<Offer>& offers);
  // Before running an expensive drafter: could a chain of up to max_len of its tokens beat the
  // current choice (bucket-free estimate), or is a probe due?
  bool wants(int drafter, int max_len);
  // Plain steps between two probes of a drafter (probe_every, stretched by probe_budget).
  int probe_interval(int drafter) const;

  // Retro-scoring: draft j (1-based) of a proposal in `bucket`, compared with committed text.
  void record_acceptance(int drafter, int bucket, int j, bool accepted);
  // Host time of one propose() call.
  void record_draft_time(int drafter, double seconds);
  // A finished step: `rows` verified rows (k + 1; 1 = plain), the wall time of its verify (forward,
  // acceptance, commit) and of its drafting, the tokens it committed. Updates T_v(rows) and the
  // never-slower guard.
  void record_step(int rows, double verify_seconds, double draft_seconds, int tokens);

  // A new request: clears the level, streaks and guard; keeps acceptance and cost estimates.
  void reset_request();

  int level() const { return level_; }
  const VerifyCosts& costs() const { return costs_; }
  AcceptanceStats& acceptance() { return acc_; }
  const StairCutOptions& options() const { return o_; }

 private:
  struct Best {
    int drafter = -1, k = 0, length = 0;
    double score = 0;
  };
  Best best_of(const std::vector<Offer>& offers, int k_cap) const;
  Pick plain();
  Pick chosen(const Best& b) const;

  StairCutOptions o_;
  VerifyCosts costs_;
  AcceptanceStats acc_;
  std::vector<double> draft_seconds_;  // T_d per drafter (EWMA)
  std::vector<int> draft_samples_;
  int level_ = 0;            // k_s; 0 = plain
  int streak_ = 0;           // consecutive steps a challenger beat the level
  std::vector<int> probe_wait_;  // per drafter: plain steps since it last ran
  int forced_plain_ = 0;     // guard: plain steps left
  std::vector<double> guard_seconds_;  // last drafted steps (ring)
  std::vector<int> guard_tokens_;
  std::size_t guard_next_ = 0, guard_count_ = 0;
};

}  // namespace tandem
