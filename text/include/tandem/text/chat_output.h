// Generated text → OpenAI message parts: reasoning (`<think>…</think>`), content and tool calls
// parsed from Nemotron's `<tool_call><function=NAME><parameter=P>…` XML (server spec §3, §4, §10).
// Owner: one parser per request. Thread: the request's thread. Sync: none (not shared).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/plugin_abi.h"

namespace tandem {

// A tool the request declared. `parameters_json` is the OpenAI `function.parameters` schema as JSON
// text (may be empty); each property's `type` decides how a `<parameter>` value is read (§10.5).
struct ToolSpec {
  std::string name;
  std::string parameters_json;
};

// A whole call, as the non-stream `message.tool_calls[i]` carries it.
struct ToolCall {
  std::string id;         // "call_" + 24 alphanumerics
  std::string name;
  std::string arguments;  // a JSON object, as text
};

// One piece of output in generation order. Streaming sends it as `delta.reasoning_content`,
// `delta.content` or `delta.tool_calls[0]`. A tool call's first delta carries id and name with
// empty arguments; later ones carry only argument fragments, whose concatenation is `arguments`.
struct ChatDelta {
  enum class Kind { reasoning, content, tool_call };
  Kind kind = Kind::content;
  std::string text;        // reasoning/content text, or the arguments fragment of a tool call
  int tool_index = -1;     // tool_call: index in message.tool_calls
  std::string tool_id;     // tool_call: set on the call's first delta only
  std::string tool_name;   // tool_call: set on the call's first delta only
};

// Everything parsed so far: the non-stream `message` (content null ⇔ empty with tool calls).
struct ChatMessage {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool had_reasoning = false;  // a reasoning span was opened (reasoning_content is then present)
};

enum class FinishCause { stop, length };  // why decoding ended: EOS/stop string, or the token limit

struct ChatOutputOptions {
  // Thinking on: the generation prompt ended in `<think>\n`, so decoding starts inside reasoning.
  bool starts_in_reasoning = false;
  // Tools the model may call; a `<function=NAME>` naming none of these stays content.
  std::vector<ToolSpec> tools;
  // Tool-call ids are derived from this (set it from the request id) so plain and drafted runs
  // of one request produce the same bytes.
  uint64_t id_seed = 0;
};

// Feed decoded text in generation order (whole UTF-8 characters, as a streaming detokenizer gives
// them); every delta returned is final. Text that may still become a tag is held back until the
// next feed or finish(). The deltas of any split of the same text concatenate to the same message.
// Rules (§10.4, §10.5): reasoning ends at `</think>` or `<tool_call>`; one '\n' next to the think
// tags and inside `<parameter>` is format, not text; content drops its leading whitespace, the
// whitespace before a call and its trailing whitespace at the end; a call naming no declared tool,
// or text that stops looking like a call before `<function=NAME>` is complete, stays content; a
// call already announced ends at stray text (which becomes content) or at the end of generation.
// Also read: `<function=` without `<tool_call>`, `</function>` closing a value, a JSON body
// {"name", "arguments"}. Tool-call ids are "call_" + 24 alphanumerics from (id_seed, index).
class TANDEM_API ChatOutputParser {
 public:
  explicit ChatOutputParser(ChatOutputOptions options);
  ~ChatOutputParser();
  ChatOutputParser(ChatOutputParser&&) noexcept;
  ChatOutputParser& operator=(ChatOutputParser&&) noexcept;

  std::vector<ChatDelta> feed(std::string_view text);
  // Flushes what was held back and returns the OpenAI finish_reason: "length" when generation
  // ended inside reasoning or by the token limit, else "tool_calls" when a call was made, else "stop".
  std::string finish(FinishCause cause, std::vector<ChatDelta>* tail = nullptr);

  const ChatMessage& message() const;
  bool in_reasoning() const;       // the engine's reasoning-budget count runs while this is true
  size_t tool_calls_closed() const;  // complete calls so far (parallel_tool_calls:false stops at 1)

  // Whole-text convenience: feed(text) then finish(cause).
  static ChatMessage parse(std::string_view text, const ChatOutputOptions& options,
                           FinishCause cause = FinishCause::stop, std::string* finish_reason = nullptr);

 private:
  struct Impl;
  Impl* impl_;
};

// --- Thinking controls (§10.3, §10.4) ---

enum class ThinkingMode { off, medium, high };

// reasoning_effort → mode: none → off; minimal/low/medium → medium; high/xhigh/max/absent → high.
// Throws tandem::Error naming `reasoning_effort` for any other value.
TANDEM_API ThinkingMode thinking_mode_from_effort(std::optional<std::string_view> reasoning_effort);

// What the template is rendered with. chat_template_kwargs (`enable_thinking`, `medium_effort`)
// win over reasoning_effort; medium falls back to high when the template lacks `medium_effort`.
struct ThinkingSettings {
  bool enable_thinking = true;
  bool medium_effort = false;
  bool medium_fell_back = false;  // medium asked for, template cannot: /props says so
};
TANDEM_API ThinkingSettings resolve_thinking(std::optional<std::string_view> reasoning_effort,
                                             std::optional<bool> kw_enable_thinking,
                                             std::optional<bool> kw_medium_effort,
                                             bool template_has_medium_effort);

// The text that closes a reasoning block, taken from how the template renders reasoning history:
// "\n</think>\n" for the Nemotron 3 Nano form `<think>\n{r}\n</think>\n`, "</think>" when the
// template writes the tag with no newlines around it (the 3.5 copy).
TANDEM_API std::string reasoning_close_text(std::string_view chat_template_source);

// Reasoning budget B (`thinking_token_budget` and aliases): once B reasoning tokens were generated
// and `</think>` has not appeared, the engine appends injection() (optional message + close text)
// as forced tokens at their real positions and continues with the answer. B < 0 = unlimited;
// B = 0 closes before the first reasoning token.
class TANDEM_API ReasoningBudget {
 public:
  explicit ReasoningBudget(int64_t budget, std::string close_text = "\n</think>\n", std::string message = "");

  // Ask before sampling each token while the parser is in_reasoning(); `reasoning_tokens` counts
  // the reasoning tokens generated so far. True exactly once: the caller then injects and calls
  // mark_closed() (reasoning that closes by itself needs no call).
  bool should_close(int64_t reasoning_tokens) const;
  void mark_closed() { closed_ = true; }
  bool closed() const { return closed_; }
  int64_t budget() const { return budget_; }
  const std::string& injection() const { return injection_; }

 private:
  int64_t budget_;
  std::string injection_;
  bool closed_ = false;
};

}  // namespace tandem
