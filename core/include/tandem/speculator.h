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

#include "tandem/error.h"
#include "tandem/model_config.h"
#include "tandem/plugin_abi.h"
#include "tandem/sampler.h"
#include "tandem/tensor.h"

namespace tandem {

class Backend;
class Model;
class QuantizedTensor;

// The target's hidden states of consecutive committed positions pos0 … pos0 + rows − 1: the residual
// stream after each layer a drafter declared (Speculator::hidden_layers()), as the target computed it
// when it fed the token at that position. The logits of position p (lm_head · final norm of the
// state after the last layer) are the row the token at p + 1 was picked from.
// Owner: the Model (tap buffers); valid only during the call that receives it. Sync: the states are
// written in stream order before the call; read them with ops on SpeculatorContext::backend or copy
// them (Backend::copy) to keep them.
struct TargetHidden {
  int64_t pos0 = 0;
  int64_t rows = 0;
  std::vector<int> layers;     // as hidden_layers() gave them
  std::vector<Tensor> states;  // states[i]: layer layers[i], [rows, hidden] f32 on the target's backend
};

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
  // A string value (a path, a name); `fallback` when absent. Error: present but empty.
  std::string text(const std::string& key, const std::string& fallback);
  void finish() const;
  // The profile file the settings came from ("" when built in code), to resolve relative paths.
  const std::string& source() const { return source_; }

  const std::map<std::string, std::string>& values() const { return values_; }
  void set(const std::string& key, const std::string& value) { values_[key] = value; }

 private:
  std::string key(const std::string& k) const;
  std::string source_, path_;
  std::map<std::string, std::string> values_;
  std::set<std::string> read_;
};

// What a drafter may read from the target when it is created. The weights live on `backend` (the
// target's device, which is the drafter's): embedding rows through get_rows, the LM head through
// matmul, the final norm through backend->rms_norm(x, final_norm, desc->eps, y).
struct SpeculatorContext {
  int64_t vocab = 0;
  Model* target = nullptr;  // null in unit tests of drafters that need no model (and so are the rest)
  Backend* backend = nullptr;
  const ModelDesc* desc = nullptr;
  const QuantizedTensor* embedding = nullptr;  // [vocab, hidden]
  const QuantizedTensor* lm_head = nullptr;    // [vocab, hidden]
  const float* final_norm = nullptr;           // [hidden], device memory
};

// Time a drafter spent in one stage of its work (benchmarks; Speculator::stages()).
struct SpeculatorStage {
  std::string name;
  int64_t count = 0;    // times the stage ran
  double seconds = 0;   // in all
  int64_t items = 0;    // what the stage counts (rows, tokens), in all; 0 = nothing
};

class Speculator {
 public:
  virtual ~Speculator() = default;
  // Starts a sequence whose committed history is `prompt`.
  virtual void begin(const int32_t* prompt, size_t n) = 0;
  // Tokens committed since the last begin/observe, in order: accepted drafts, then the target's own
  // token (which the next proposal continues from).
  virtual void observe(const int32_t* tokens, size_t n) = 0;
  // Optional: layers (0 … n_layers − 1) whose output hidden states this drafter reads; they arrive
  // with the committed rows below, copied during the target's own passes (no extra pass).
  virtual std::vector<int> hidden_layers() const { return {}; }
  // Optional (drafters with hidden_layers()): the prompt's states, one call per prefill pass in order
  // (pos0 = 0 first), after begin() and before the first observe().
  virtual void observe_prompt(const TargetHidden& hidden) { (void)hidden; }
  // Optional: observe() with the states of the pass's committed positions, called instead of it after
  // each step when hidden_layers() is not empty (a name of its own, so overriding it hides nothing):
  // hidden.rows == n, and row i is the position whose logits picked tokens[i] (row 0: the token fed
  // first, the previous step's own token). The token the prefill picked arrives by observe(tokens, 1):
  // its row came with observe_prompt.
  virtual void observe_hidden(const int32_t* tokens, size_t n, const TargetHidden& hidden) {
    (void)hidden;
    observe(tokens, n);
  }
  // Up to max_n tokens continuing the history; an empty draft means "nothing to propose".
  virtual void propose(int max_n, Draft& out) = 0;
  // Optional: how many values Draft::bucket takes (default 1).
  virtual int buckets() const { return 1; }
  // Optional: true when propose() costs host microseconds, so the loop runs it on every step (plain
  // steps too) to keep acceptance estimates current by retro-scoring. Expensive drafters run only
  // when the picker expects them to pay, or as a probe (default false).
  virtual bool cheap() const { return false; }
  // Optional (benchmarks): the time of each stage of this drafter's work so far, when its settings
  // asked it to measure them (measuring synchronizes the device between stages, so it is never on by
  // default). Empty: not measured (the default).
  virtual std::vector<SpeculatorStage> stages() const { return {}; }
};

// What a speculator plugin provides (kind TANDEM_KIND_SPECULATOR).
class SpeculatorFactory {
 public:
  virtual ~SpeculatorFactory() = default;
  // Reads its settings (call settings.finish() after the last getter) and makes a drafter for one
  // sequence. Bad values are one-line errors naming the key.
  virtual std::unique_ptr<Speculator> create(const SpeculatorContext& context, SpeculatorSettings& settings) = 0;
  // Optional (drafters with weights of their own; `tandem synth --drafter NAME`): writes a checkpoint
  // with random weights, in the drafter's real layout, for a target of shape `target` into the folder
  // `path`. `settings` are the drafter's synthesis keys (finish() them). Default: an error.
  virtual void synthesize(const std::string& path, const ModelDesc& target, SpeculatorSettings& settings,
                          uint64_t seed) {
    (void)path, (void)target, (void)settings, (void)seed;
    fail("this drafter has no weights to synthesize");
  }
};

}  // namespace tandem
