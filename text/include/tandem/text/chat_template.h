// Chat templates: renders a model's Jinja chat template to prompt text with tandem's own interpreter of
// the Jinja subset that Hugging Face chat templates use, with transformers' semantics (Jinja2 with
// trim_blocks and lstrip_blocks, Python's str(), json.dumps for tojson).
// Owner: a ChatTemplate owns its parsed template, immutable after construction; copies share it.
// Thread: any; render() is const and may run on several threads at once. Sync: none needed.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tandem/plugin_abi.h"

namespace tandem {

// Bytes that valid UTF-8 never holds, so no request text can (its JSON is validated) and no sane
// template does: they bracket the user-controlled text that ChatRenderOptions::content_marks asks for.
inline constexpr char kUserTextOpen = '\xFF', kUserTextClose = '\xFE';

struct ChatRenderOptions {
  // Brackets the content text of user and tool messages (a string, joined text parts, or each
  // part's `text`) in kUserTextOpen … kUserTextClose before the template sees it, so that the caller
  // can tell it from the template's own text in the output. `whole`: all of it; `occurrences`: only
  // the occurrences of `marked_texts` in it (the added-token strings), for templates that trim or
  // compare content and would treat a bracketed whole differently.
  enum class Marks { none, whole, occurrences };
  Marks content_marks = Marks::none;
  std::vector<std::string> marked_texts;

  // A tool call's `function.arguments` given as a JSON string (the OpenAI wire form) is parsed into an
  // object, since templates iterate `arguments|items` (spec/server.md §10.2). Anything but a JSON
  // object is an error naming the message and the call; an empty string counts as {}.
  bool parse_tool_arguments = true;
  // A `content` that is a non-empty list of only {"type": "text", "text": ...} parts becomes those texts
  // joined by "\n", as vLLM does for templates that take string content.
  bool join_text_parts = true;
  // Variables set when the JSON does not set them, e.g. bos_token and eos_token from the tokenizer.
  std::vector<std::pair<std::string, std::string>> default_strings;
  // The clock of strftime_now(), in seconds since the Unix epoch (local time zone); unset = now.
  std::optional<int64_t> now_unix;
};

class TANDEM_API ChatTemplate {
 public:
  // Parses the template. A syntax error, an unknown filter or an unknown test is a tandem::Error
  // "name:line:column: what went wrong".
  explicit ChatTemplate(std::string_view source, std::string name = "chat template");
  // Reads and parses a template file; errors name the file.
  static ChatTemplate from_file(const std::string& path);

  // Renders with the variables of a JSON object: `messages`, `tools`, `add_generation_prompt` and any
  // other (`enable_thinking`, `bos_token`, ...). Like transformers, it sets nothing the JSON leaves out
  // (transformers passes tools=None when there are none; a caller wanting that sends "tools": null).
  // Bad JSON, raise_exception() and type errors are one-line tandem::Errors naming the position.
  std::string render(std::string_view variables_json, const ChatRenderOptions& options = {}) const;

  // Whether an expression of the template reads a variable of this name (e.g. "medium_effort"):
  // tells a server which switches the shipped template has.
  bool reads_variable(std::string_view name) const;
  const std::string& name() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tandem
