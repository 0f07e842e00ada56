// A LiliDrafter driven by hand in tests: Grab keeps the context the drafting loop gives its drafters
// (to make one with LiliFactory::create), feed_prompt gives it what the loop would after a prefill.
// Owner: the test. Thread: the test's. Sync: none beyond the ops it queues.
#pragma once
#include <algorithm>
#include <vector>

#include "drafter.h"
#include "tandem/drafting.h"
#include "tests/schedulers/slots/drafters.h"
#include "tandem/model.h"

namespace tandem::test {

// A factory that keeps the context the drafting loop gives its drafters, to make a LiliDrafter by hand.
struct Grab : SpeculatorFactory {
  SpeculatorContext ctx;
  std::unique_ptr<Speculator> create(const SpeculatorContext& c, SpeculatorSettings& s) override {
    s.finish();
    ctx = c;
    return std::make_unique<RandomDrafter>(1, c.vocab, 1);
  }
};

// What the drafting loop gives the drafter after the target's prefill of `p`: the prompt, its tapped
// rows (the model's taps, set to lili.hidden_layers() before the prefill) and the target's greedy
// first token from the prefill's last-row `logits`.
inline void feed_prompt(lilicorr::LiliDrafter& lili, Model& m, const std::vector<int32_t>& p,
                        const std::vector<float>& logits) {
  lili.begin(p.data(), p.size());
  TargetHidden h;
  h.pos0 = 0, h.rows = int64_t(p.size()), h.layers = lili.hidden_layers();
  for (size_t i = 0; i < h.layers.size(); ++i) h.states.push_back(m.tap(i).slice_rows(0, h.rows));
  lili.observe_prompt(h);
  const int32_t first = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  lili.observe(&first, 1);
}

}  // namespace tandem::test
