// Token masks for one tool call in Nemotron's XML form (spec/server.md §10.5), for tool_choice
// required/named and for a call the model opened itself under auto:
//   <tool_call>\n<function=NAME>\n  (<parameter=KEY>\nVALUE\n</parameter>\n)*  </function>\n</tool_call>
// The fixed text is offered as token sequences (the tokenizer's own spelling of each alternative);
// a JSON-typed VALUE is masked by a JsonConstraint, a string VALUE by per-token byte rules.
// Owner: OutputVocab is per model, built once and shared read-only; a ToolCallConstraint is one
// request's matcher and borrows both its OutputVocab and its grammars. Thread: OutputVocab any; a
// ToolCallConstraint the engine thread. Sync: none.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/text/output_rules.h"
#include "tandem/text/json_constraint.h"

namespace tandem {

class TextCodec;

// The model's vocabulary as the constraints see it.
struct OutputVocab {
  OutputVocab(const TextCodec& codec, int vocab, std::vector<int32_t> end_ids);
  // Text → ids with special tokens parsed (the fixed text of calls, the reasoning close).
  std::vector<int32_t> encode(const std::string& text) const;

  const TextCodec& codec;
  int vocab;
  std::vector<int32_t> end_ids;
  std::vector<std::string> bytes;  // per id; "" for control tokens
  std::vector<uint8_t> is_end;
  std::vector<uint8_t> plain;      // may be inside a string value: text without '\n' or '<'
  ConstraintVocab json;
  int32_t tool_call_token = -1;    // `<tool_call>` when it is one token
};

class ToolCallConstraint {
 public:
  // `end_after`: an end token must follow `</tool_call>` (required, named, parallel_tool_calls
  // false); otherwise the constraint is done after `</tool_call>`.
  ToolCallConstraint(const OutputVocab& vocab, const std::vector<ToolGrammar>& tools, bool end_after);

  void allowed(std::vector<uint8_t>& mask) const;
  bool accept(int32_t token);  // false (state unchanged) when the token is not allowed
  bool done() const { return phase_ == Phase::done; }

 private:
  enum class Action { tool, param, param_and_value, value_closed, call_closed, end };
  struct Alt {
    std::vector<int32_t> tokens;
    Action action;
    int arg = 0;
  };
  enum class Phase { choose, text, json, done };

  void choose(std::vector<Alt> alts, size_t matched = 0);
  void offer_params();
  void after(const Alt& a);
  void close_value(size_t matched);
  std::pair<int, int> text_step(int32_t token) const;

  const OutputVocab& v_;
  const std::vector<ToolGrammar>& tools_;
  bool end_after_;
  Phase phase_ = Phase::choose;
  std::vector<Alt> alts_;        // choose: the alternatives still matching
  size_t matched_ = 0;           // choose: tokens matched so far
  int tool_ = -1;                // the call's tool
  std::vector<uint8_t> written_; // per parameter of the tool
  int param_ = -1;               // text/json: the parameter being written
  int64_t value_chars_ = 0;      // text: characters so far
  int utf8_ = 0;                 // text: UTF-8 state (0 = between characters)
  std::optional<JsonConstraint> value_;  // json
  std::vector<int32_t> close_;   // "\n</parameter>\n"
};

}  // namespace tandem
