// The server's view of text: the tokenizer and the chat template behind one small interface, so
// the HTTP layer does not depend on which of them a model ships. They come from the checkpoint's
// side files (an HF folder's tokenizer.json, or what a GGUF file synthesizes) unless the profile
// names its own; a model without them makes the routes that need them answer 501 naming them.
// Owner: shared (std::shared_ptr) by the HTTP thread and the engine thread. Thread: any; every
// method is const and must be safe to call concurrently. Sync: none inside.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rapidjson/document.h>

#include "tandem/text/chat_prompt.h"
#include "tandem/profile.h"

namespace tandem {
class Checkpoint;
}

namespace tandem {

class TextCodec {
 public:
  virtual ~TextCodec() = default;

  // What is missing for the tokenizer, e.g. "tokenizer (tandem/text/tokenizer.h)"; "" when present.
  virtual std::string missing_tokenizer() const = 0;
  // What is missing for chat prompts; "" when a chat template is present.
  virtual std::string missing_chat_template() const = 0;

  // Text → ids. `parse_special`: special-token text becomes its id (never for user text in chat).
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special, bool parse_special) const = 0;
  // A rendered chat prompt → ids, each segment by its own rule: the template's text with its control
  // tokens, user text (segments marked plain) as ordinary text. This default encodes the segments one
  // by one (plain ones with parse_special false); the tokenizer's codec reads them as one text.
  virtual std::vector<int32_t> encode_prompt(const ChatPrompt& prompt) const {
    std::vector<int32_t> ids;
    for (const TextSegment& s : prompt.segments) {
      std::vector<int32_t> part = encode(s.text, false, !s.plain);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
  }
  // The raw bytes a token stands for (may be part of a UTF-8 character); "" for control tokens
  // that are not text (EOS, BOS), so they never reach a response.
  virtual std::string token_bytes(int32_t id) const = 0;
  // Ids that end generation besides the model's EOS ids (e.g. <|im_end|>).
  virtual std::vector<int32_t> end_ids() const { return {}; }
  // The text that closes a reasoning block in this model's template (tandem::reasoning_close_text).
  virtual std::string reasoning_close() const { return "\n</think>\n"; }
  // Whether the chat template reads this variable (e.g. "medium_effort"), for /props.
  virtual bool template_reads(const std::string& variable) const {
    (void)variable;
    return false;
  }

  // The prompt of a chat request (its `messages`, `tools`, `chat_template_kwargs`, …), its user and
  // tool text marked plain unless the profile sets server.special_tokens_in_user_content.
  // Throws RequestError (tandem/request.h) for messages the template cannot render.
  virtual ChatPrompt render_chat(const rapidjson::Value& request, bool add_generation_prompt) const = 0;
};

// The codec of a model: tokenizer.json / tokenizer_config.json / chat_template.jinja from the
// checkpoint's side files, replaced by the profile's `tokenizer:` and `chat_template:` files when set.
// A file that is named but unreadable or malformed is an error naming it.
std::shared_ptr<TextCodec> make_text_codec(const Profile& profile, const Checkpoint& checkpoint);

}  // namespace tandem
