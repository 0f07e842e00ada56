// The server's view of text: the tokenizer and the chat template behind one small interface, so
// the HTTP layer does not depend on which of them a model ships. A model folder without
// tokenizer.json (or without a chat template) makes the routes that need it answer 501 naming it.
// Owner: shared (std::shared_ptr) by the HTTP thread and the engine thread. Thread: any; every
// method is const and must be safe to call concurrently. Sync: none inside.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "chat_prompt.h"
#include "tandem/profile.h"

namespace tandem::server {

class TextCodec {
 public:
  virtual ~TextCodec() = default;

  // What is missing for the tokenizer, e.g. "tokenizer (tandem/tokenizer.h)"; "" when present.
  virtual std::string missing_tokenizer() const = 0;
  // What is missing for chat prompts; "" when a chat template is present.
  virtual std::string missing_chat_template() const = 0;

  // Text → ids. `parse_special`: special-token text becomes its id (never for user text in chat).
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special, bool parse_special) const = 0;
  // The raw bytes a token stands for (may be part of a UTF-8 character); "" for control tokens
  // that are not text (EOS, BOS), so they never reach a response.
  virtual std::string token_bytes(int32_t id) const = 0;
  // Ids that end generation besides the model's EOS ids (e.g. <|im_end|>).
  virtual std::vector<int32_t> end_ids() const { return {}; }

  // The prompt text of a chat request (its `messages`, `tools`, `chat_template_kwargs`, …).
  // Throws ApiError (openai_json.h) for messages the template cannot render.
  virtual ChatPrompt render_chat(const rapidjson::Value& request, bool add_generation_prompt) const = 0;
};

// The codec for a loaded profile: the real components where this build has them.
std::shared_ptr<TextCodec> make_text_codec(const Profile& profile);

}  // namespace tandem::server
