// Chat templates: a Jinja template, then (after a NUL) the variables JSON, through text/jinja's lexer,
// parser and evaluator (tandem::ChatTemplate). Without a NUL the template renders a fixed conversation
// with a tool call, as a server would.
#include "fuzz_util.h"
#include "tandem/text/chat_template.h"

namespace {

const char* kVariables = R"({"messages": [
  {"role": "system", "content": "You are terse."},
  {"role": "user", "content": "What is 2+2?"},
  {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]},
  {"role": "tool", "content": "4"},
  {"role": "assistant", "content": "<think>sum</think>4"}],
 "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}],
 "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>", "eos_token": "</s>"})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz::run_one([&] {
    auto [source, variables] = tandem::fuzz::split_at_nul(data, size);
    tandem::ChatTemplate t(source, "fuzz.jinja");
    tandem::ChatRenderOptions options;
    options.now_unix = 1700000000;  // strftime_now() the same on every run
    t.render(variables.empty() ? kVariables : variables, options);
  });
}
