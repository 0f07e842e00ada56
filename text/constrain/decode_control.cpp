// Reasoning watch, budget close and the post-reasoning constraints of one chat request.
#include "tandem/text/decode_control.h"

#include <cmath>
#include <limits>

#include <spdlog/spdlog.h>

#include "tandem/text/text_codec.h"

namespace tandem {

namespace {
bool wants_call(const OutputRules& r) {
  return r.tool_choice == ToolChoice::required || r.tool_choice == ToolChoice::named;
}
}  // namespace

DecodeControl::DecodeControl(const OutputVocab& vocab, const OutputRules& rules, const std::vector<ToolSpec>& tools,
                             bool starts_in_reasoning, const std::string& close_text)
    : v_(vocab),
      rules_(rules),
      text_(vocab.codec, {}),
      parser_(ChatOutputOptions{starts_in_reasoning, tools, 0}),
      in_reasoning_(starts_in_reasoning),
      budget_(rules.reasoning_budget, close_text, rules.reasoning_budget_message) {
  started_ = !rules_.json && !wants_call(rules_);
}

bool DecodeControl::forced(int32_t& token) {
  if (forced_.empty() && in_reasoning_ && budget_.should_close(reasoning_tokens_)) {
    budget_.mark_closed();
    for (int32_t t : v_.encode(budget_.injection())) forced_.push_back(t);
  }
  if (forced_.empty()) return false;
  token = forced_.front();
  forced_.pop_front();
  return true;
}

void DecodeControl::start_constraint() {
  started_ = true;
  // Whatever the answer holds already (normally nothing: the parser drops the newline after
  // </think>) must be part of the value.
  const std::string& carried = parser_.message().content;
  if (rules_.json) {
    json_.emplace(*rules_.json, v_.json);
    if (!carried.empty() && !json_->accept_bytes(carried))
      spdlog::warn("JSON constraint: the answer began with text the schema does not allow ({} bytes)", carried.size());
  } else if (wants_call(rules_)) {
    call_.emplace(v_, rules_.tools, true);
  }
}

void DecodeControl::mask(float* logits) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  if (!started_ && !in_reasoning_ && forced_.empty()) start_constraint();
  if (end_only_) {
    mask_ = v_.is_end;
  } else if (json_) {
    json_->allowed(mask_);
    mask_.resize(size_t(v_.vocab), 0);
  } else if (call_) {
    call_->allowed(mask_);
  } else {
    // Free text. While a constraint waits for the end of reasoning, the model may not open a call
    // there (reasoning would end at it, outside the constraint).
    if (!started_ && v_.tool_call_token >= 0) logits[v_.tool_call_token] = kOff;
    return;
  }
  bool any = false, any_finite = false;
  for (int id = 0; id < v_.vocab; ++id) {
    if (!mask_[size_t(id)]) logits[id] = kOff;
    else any = true, any_finite |= logits[id] != kOff;
  }
  if (!any) {
    // Nothing may follow: end the answer.
    for (int32_t e : v_.end_ids) mask_[size_t(e)] = 1, logits[e] = 0;
  } else if (!any_finite) {
    // Everything allowed was masked before (min_tokens holds back the end): the constraint wins.
    for (int id = 0; id < v_.vocab; ++id)
      if (mask_[size_t(id)]) logits[id] = 0;
  }
}

void DecodeControl::on_token(int32_t token, bool was_forced) {
  const bool is_end = token >= 0 && token < v_.vocab && v_.is_end[size_t(token)];
  if (!is_end) parser_.feed(text_.push(token));
  const bool was_reasoning = in_reasoning_;
  in_reasoning_ = parser_.in_reasoning();
  if (was_reasoning && in_reasoning_ && !was_forced) ++reasoning_tokens_;

  if (json_) {
    if (!json_->accept(token)) spdlog::warn("JSON constraint: token {} was not allowed", token);
    done_ = json_->finished();
    return;
  }
  if (call_) {
    if (!call_->accept(token)) spdlog::warn("tool-call constraint: token {} was not allowed", token);
    if (call_->done()) {
      call_.reset();
      // required/named take the end token inside the constraint; auto goes on, or ends at once.
      if (is_end) done_ = true;
      else if (!rules_.parallel_tool_calls) end_only_ = true;
    }
    return;
  }
  if (end_only_) {
    done_ = is_end;
    return;
  }
  // auto: the model opened a call itself; the lazy grammar keeps it well-formed (llama.cpp's trigger).
  if (token == v_.tool_call_token && rules_.tool_choice == ToolChoice::auto_ && !rules_.tools.empty()) {
    call_.emplace(v_, rules_.tools, !rules_.parallel_tool_calls);
    call_->accept(token);
    return;
  }
  if (!rules_.parallel_tool_calls && parser_.tool_calls_closed() > 0) end_only_ = true;
}

}  // namespace tandem
