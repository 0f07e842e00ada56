// The engine's hand on one chat request's output (spec/server.md §10.4, §10.5, §11): it follows the
// generated text with its own ChatOutputParser to know when reasoning ends, closes reasoning by
// forcing tokens once the budget is spent, and after reasoning masks logits so the answer is the
// requested JSON or tool call, then an end token.
// Owner: one per running chat job, owned by its slot; borrows the OutputVocab and the job's rules.
// Thread: the engine thread. Sync: none.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "tandem/text/output_rules.h"
#include "tandem/text/chat_output.h"
#include "tandem/text/json_constraint.h"
#include "tandem/text/text_stream.h"
#include "tandem/text/tool_constraint.h"

namespace tandem {

class DecodeControl {
 public:
  // `close_text`: what closes reasoning in this model's template (reasoning_close_text).
  DecodeControl(const OutputVocab& vocab, const OutputRules& rules, const std::vector<ToolSpec>& tools,
                bool starts_in_reasoning, const std::string& close_text);

  // Before each token: true when it is forced (the budget's close sequence), written to `token`.
  bool forced(int32_t& token);
  // Before sampling: sets every logit that may not come next to -inf.
  void mask(float* logits);
  // After each token, forced or sampled.
  void on_token(int32_t token, bool was_forced);
  // The constrained answer is over: an end token was accepted, or nothing else may follow.
  bool done() const { return done_; }
  int64_t reasoning_tokens() const { return reasoning_tokens_; }

 private:
  void start_constraint();

  const OutputVocab& v_;
  const OutputRules& rules_;
  TextStream text_;
  ChatOutputParser parser_;
  bool in_reasoning_;
  int64_t reasoning_tokens_ = 0;
  ReasoningBudget budget_;
  std::deque<int32_t> forced_;
  bool started_ = false;  // the post-reasoning constraint began (or there is none)
  std::optional<JsonConstraint> json_;
  std::optional<ToolCallConstraint> call_;
  bool end_only_ = false;  // parallel_tool_calls false after a call, or a finished constraint
  bool done_ = false;
  std::vector<uint8_t> mask_;
};

}  // namespace tandem
