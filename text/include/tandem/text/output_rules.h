// What the engine enforces on a chat request's output: JSON mode (spec/server.md §11), tool_choice
// and parallel_tool_calls (§10.5), the reasoning budget (§10.4). Compiled from the request on the
// HTTP thread, so that a schema the constraint cannot follow is a 400 naming it; read by the engine
// thread (decode_control.h).
// Owner: value types; a Job holds its own copy. Thread: any. Sync: none (immutable once built).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "tandem/text/json_constraint.h"

namespace tandem {

// One parameter of a tool, as the call constraint writes its value (§10.5: the parser keeps string
// values raw and reads every other type as JSON).
struct ToolParam {
  enum class Kind {
    text,    // a raw string: one line, no '<', min/max_length characters
    json,    // a JSON value matching `schema`
    choice,  // one of `choices`, written as they are (enum/const)
  };
  std::string name;
  bool required = false;
  Kind kind = Kind::text;
  std::optional<JsonSchema> schema;
  std::vector<std::string> choices;
  int64_t min_length = 0, max_length = -1;  // -1 = no limit
};

struct ToolGrammar {
  std::string name;
  std::vector<ToolParam> params;  // in the order the schema lists them
};

enum class ToolChoice { auto_, none, required, named };

struct OutputRules {
  std::optional<JsonSchema> json;  // response_format json_object / json_schema: the answer is that JSON
  ToolChoice tool_choice = ToolChoice::auto_;
  // required: any of these; named: exactly one entry; auto: every declared tool, constraining a call
  // once the model opens one with the `<tool_call>` token (empty when a schema cannot be compiled).
  std::vector<ToolGrammar> tools;
  bool parallel_tool_calls = true;
  int64_t reasoning_budget = -1;          // reasoning tokens before the server closes thinking; -1 = unlimited
  std::string reasoning_budget_message;   // injected before the close text
};

// Grammars of the request's `tools` array (already validated by the request parser). Throws RequestError
// (invalid) naming `tools[i].function.parameters…` when a parameter's schema cannot be constrained.
std::vector<ToolGrammar> compile_tool_grammars(const rapidjson::Value& tools);

// response_format (or llama.cpp's top-level json_schema) → the schema; nullopt for text. Throws
// RequestError (invalid) naming the field and the unsupported keyword.
std::optional<JsonSchema> compile_response_format(const rapidjson::Value* response_format,
                                                  const rapidjson::Value* json_schema);

}  // namespace tandem
