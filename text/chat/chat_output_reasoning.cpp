// Thinking controls (server spec §10.3, §10.4): reasoning_effort → template kwargs, the close
// text a reasoning budget injects, and when to inject it.
#include <string>

#include "tandem/text/chat_output.h"
#include "tandem/error.h"

namespace tandem {

ThinkingMode thinking_mode_from_effort(std::optional<std::string_view> effort) {
  if (!effort) return ThinkingMode::high;
  const std::string_view e = *effort;
  if (e == "none") return ThinkingMode::off;
  if (e == "minimal" || e == "low" || e == "medium") return ThinkingMode::medium;
  if (e == "high" || e == "xhigh" || e == "max") return ThinkingMode::high;
  fail("reasoning_effort: expected none, minimal, low, medium, high, xhigh or max, found '", e, "'");
}

ThinkingSettings resolve_thinking(std::optional<std::string_view> reasoning_effort,
                                  std::optional<bool> kw_enable_thinking, std::optional<bool> kw_medium_effort,
                                  bool template_has_medium_effort) {
  ThinkingMode mode = thinking_mode_from_effort(reasoning_effort);
  ThinkingSettings s;
  s.enable_thinking = kw_enable_thinking.value_or(mode != ThinkingMode::off);
  s.medium_effort = kw_medium_effort.value_or(s.enable_thinking && mode == ThinkingMode::medium);
  if (s.medium_effort && !template_has_medium_effort) {
    s.medium_effort = false;
    s.medium_fell_back = true;
  }
  return s;
}

std::string reasoning_close_text(std::string_view tpl) {
  // Jinja string literals hold the escape `\n` as two characters.
  if (tpl.find("\\n</think>\\n") != std::string_view::npos) return "\n</think>\n";
  if (tpl.find("\\n</think>") != std::string_view::npos) return "\n</think>";
  if (tpl.find("</think>\\n") != std::string_view::npos) return "</think>\n";
  return "</think>";
}

ReasoningBudget::ReasoningBudget(int64_t budget, std::string close_text, std::string message)
    : budget_(budget), injection_(std::move(message) + close_text) {}

bool ReasoningBudget::should_close(int64_t reasoning_tokens) const {
  return !closed_ && budget_ >= 0 && reasoning_tokens >= budget_;
}

}  // namespace tandem
