// The plain generation loop.
#include "tandem/generate.h"

#include <algorithm>
#include <chrono>

#include "tandem/error.h"

namespace tandem {

GenerateResult generate(Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                        const std::function<bool(int32_t)>& on_token) {
  check(!prompt.empty(), "generate: the prompt is empty");
  check(int64_t(prompt.size()) + o.max_tokens <= o.context, "generate: prompt (", prompt.size(), ") + max tokens (",
        o.max_tokens, ") exceed the context window of ", o.context);
  using clock = std::chrono::steady_clock;
  GenerateResult r;
  auto seq = model.new_sequence(o.context);
  Rng rng(o.sampling.seed);
  std::vector<float> logits;
  const auto& eos = model.desc().eos_ids;

  auto t0 = clock::now();
  model.forward(*seq, prompt, ForwardMode::Prefill, logits, false);
  model.commit(*seq, int(prompt.size()));
  auto t1 = clock::now();
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  for (int i = 0; i < o.max_tokens; ++i) {
    int32_t tok = model.backend().sample(logits.data(), model.desc().vocab, o.sampling, rng);
    r.tokens.push_back(tok);
    if (on_token && !on_token(tok)) break;
    if (o.stop_at_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) {
      r.stopped_at_eos = true;
      break;
    }
    if (i + 1 == o.max_tokens) break;
    model.forward(*seq, {tok}, ForwardMode::Verify, logits, false);
    model.commit(*seq, 1);
  }
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

}  // namespace tandem
