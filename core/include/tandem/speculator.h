// Drafters for speculative decoding: a Speculator proposes tokens that continue a sequence, the
// target verifies them in one forward pass (tandem/drafting.h, in schedulers/slots). Plugins provide a
// SpeculatorFactory under TANDEM_KIND_SPECULATOR.
// Owner: the registry creates one factory per provider; the drafting loop owns one Speculator per
// sequence. Thread: one thread drives a Speculator (the engine thread). Sync: none; propose() returns
// host tokens.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tandem/plugin_abi.h"
#include "tandem/sampler.h"

namespace tandem {

class Model;

// What a drafter proposes: tokens d1..dn that continue the committed history.
struct Draft {
  std::vector<int32_t> tokens;
  // Optional: the distribution each token was drawn from, one per token. Empty means the drafter is
  // deterministic (q is one-hot on the token), which is what greedy and n-gram drafters are.
  std::vector<TokenDist> q;
  // Drafter-defined feature in [0, Speculator::buckets()): acceptance is estimated per bucket
  // (the lookup drafter buckets by match length).
  int bucket = 0;
  void clear() {
    tokens.clear();
    q.clear();
    bucket = 0;
  }
};

// Settings of one drafter from a profile's `draft.<name>` mapping: scalar values kept as text and
// read by the factory with typed getters that check ranges. finish() rejects keys nobody asked for,
// so a misspelt key is an error naming it, like every other profile key.
class TANDEM_API SpeculatorSettings {
 public:
  SpeculatorSettings() = default;
  // source: the profile file ("" when built in code); path: the key prefix, e.g. "draft.lookup".
  SpeculatorSettings(std::string source, std::string path, std::map<std::string, std::string> values);

  int64_t integer(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  double number(const std::string& key, double fallback, double lo, double hi);
  bool flag(const std::string& key, bool fallback);
  void finish() const;

  const std::map<std::string, std::string>& values() const { return values_; }
  void set(const std::string& key, const std::string& value) { values_[key] = value; }

 private:
  std::string key(const std::string& k) const;
  std::string source_, path_;
  std::map<std::string, std::string> values_;
  std::set<std::string> read_;
};

// What a drafter may read from the target when it is created.
struct SpeculatorContext {
  int64_t vocab = 0;
  Model* target = nullptr;  // null in unit tests of drafters that need no model
};

class Speculator {
 public:
  virtual ~Speculator() = default;
  // Starts a sequence whose committed history is `prompt`.
  virtual void begin(const int32_t* prompt, size_t n) = 0;
  // Tokens committed since the last begin/observe, in order: accepted drafts, then the target's own
  // token (which the next proposal continues from).
  virtual void observe(const int32_t* tokens, size_t n) = 0;
  // Up to max_n tokens continuing the history; an empty draft means "nothing to propose".
  virtual void propose(int max_n, Draft& out) = 0;
  // Optional: how many values Draft::bucket takes (default 1).
  virtual int buckets() const { return 1; }
  // Optional: true when propose() costs host microseconds, so the loop runs it on every step (plain
  // steps too) to keep acceptance estimates current by retro-scoring. Expensive drafters run only
  // when the picker expects them to pay, or as a probe (default false).
  virtual bool cheap() const { return false; }
};

// What a speculator plugin provides (kind TANDEM_KIND_SPECULATOR).
class SpeculatorFactory {
 public:
  virtual ~SpeculatorFactory() = default;
  // Reads its settings (call settings.finish() after the last getter) and makes a drafter for one
  // sequence. Bad values are one-line errors naming the key.
  virtual std::unique_ptr<Speculator> create(const SpeculatorContext& context, SpeculatorSettings& settings) = 0;
};

}  // namespace tandem
