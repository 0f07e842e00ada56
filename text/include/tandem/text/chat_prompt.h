// The prompt of a chat request: the request's messages, tools and template switches rendered by the
// model's chat template (tandem/text/chat_template.h), with thinking resolved as spec/server.md §10.3 says.
// Owner: free function. Thread: any. Sync: none.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <rapidjson/document.h>

namespace tandem {
class ChatTemplate;
}

namespace tandem {

struct ChatPrompt {
  std::string text;
  bool starts_in_reasoning = false;  // the prompt ends inside an open <think> block
};

// `request`: a validated chat request (or an /apply-template or /tokenize body). `defaults`: template
// variables the request does not set (bos_token, eos_token). A template error is a 400 naming it.
ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const rapidjson::Value& request,
                              bool add_generation_prompt,
                              const std::vector<std::pair<std::string, std::string>>& defaults = {});

}  // namespace tandem
