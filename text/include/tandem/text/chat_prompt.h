// The prompt of a chat request: the request's messages, tools and template switches rendered by the
// model's chat template (tandem/text/chat_template.h), with thinking resolved as spec/server.md §10.3 says.
// Owner: free function. Thread: any. Sync: none.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <rapidjson/document.h>

#include "tandem/text/tokenizer.h"

namespace tandem {
class ChatTemplate;
}

namespace tandem {

// The prompt as segments: the template's own text (its <|im_start|>, <|im_end|>, <think> are control
// tokens) and, marked `plain`, the text of user and tool messages, in which the same strings are
// ordinary text, so that a user cannot close their turn and open a system one.
struct ChatPrompt {
  std::vector<TextSegment> segments;
  bool starts_in_reasoning = false;  // the prompt ends inside an open <think> block
  std::string text() const;          // the segments joined: the template's output
};

// How user and tool content is treated. `added_texts`: the tokenizer's added-token strings, to be
// found in user text when the template transforms content. `user_special_tokens` (the profile's
// server.special_tokens_in_user_content): the whole prompt is one segment that is not plain.
struct UserTextRule {
  bool user_special_tokens = false;
  std::vector<std::string> added_texts;
};

// `request`: a validated chat request (or an /apply-template or /tokenize body). `defaults`: template
// variables the request does not set (bos_token, eos_token). A template error is a 400 naming it, and
// so is user text with added-token strings that the template rewrites beyond telling them apart.
ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const rapidjson::Value& request,
                              bool add_generation_prompt,
                              const std::vector<std::pair<std::string, std::string>>& defaults = {},
                              const UserTextRule& rule = {});

}  // namespace tandem
