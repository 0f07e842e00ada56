// OpenAI-shaped JSON for `tandem serve`: the error type and body, request parsing with the field
// rules of spec/server.md §2 and §5, and the bodies of responses and stream chunks (§3, §4).
// Owner: value types and free functions. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rapidjson/document.h>

#include "tandem/text/output_rules.h"
#include "tandem/backend.h"
#include "tandem/request.h"
#include "tandem/text/chat_output.h"

namespace tandem::server {

// A request that cannot be served, with the OpenAI error body fields (§7).
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string code;      // "" → null
  std::string param;     // "" → null
  std::string message;
  std::vector<std::pair<std::string, std::string>> headers;  // e.g. Retry-After
};

ApiError bad_request(const std::string& code, const std::string& param, const std::string& message);
// A piece of the server that this build lacks: 501, and `x-should-retry: false` so SDKs do not retry.
ApiError not_implemented(const std::string& what);
ApiError unavailable(const std::string& code, const std::string& message, int retry_after_s);
std::string error_body(const ApiError& e);
// The HTTP form of an error the text library or the engine reported in its own terms.
ApiError api_error(const RequestError& e);

// Parses a request body: 400 invalid_json for bad JSON, naming the offset; invalid UTF-8 is its own message.
rapidjson::Document parse_body(const std::string& body);

using GenParams = RequestParams;

// The most choices one request may ask for (`n`); each is a job of its own in the queue.
constexpr int kMaxChoices = 16;
// The most alternatives per position (`top_logprobs`, completions' `logprobs`), as OpenAI allows.
constexpr int kMaxTopLogprobs = 20;

struct GenRequest {
  bool chat = false;
  std::string model;                   // "" when absent
  // completions: the prompt as text or as ids (exactly one is set)
  std::optional<std::string> prompt_text;
  std::vector<int32_t> prompt_ids;
  GenParams params;
  bool stream = false;
  bool include_usage = false;
  bool return_tokens = false;          // llama-server's `return_tokens`: ids beside the text
  bool raw_output = false;             // chat `reasoning_format: none`: thinking tags stay in content
  std::vector<ToolSpec> tools;         // chat: the declared tools (empty with tool_choice none)
  OutputRules rules;                   // chat: what decoding enforces (reasoning budget filled in by the route)
  std::optional<int64_t> reasoning_budget;  // chat: the request's budget, if it set one
  int n = 1;                           // choices
  int logprobs = -1;                   // alternatives per token (chat top_logprobs, completions logprobs); -1 = none
  bool echo = false;                   // completions: the prompt leads the text (and the logprobs)
};

// Field checks for /v1/chat/completions and /v1/completions. `defaults` is the server's sampling;
// `vocab` bounds token ids. `strict`: unknown fields are a 400 instead of being ignored.
GenRequest parse_chat_request(const rapidjson::Value& body, const SamplingParams& defaults, int vocab, bool strict);
GenRequest parse_completion_request(const rapidjson::Value& body, const SamplingParams& defaults, int vocab,
                                    bool strict);
// A list of token ids in [0, vocab); `param` names the field in errors.
std::vector<int32_t> parse_token_ids(const rapidjson::Value& v, int vocab, const std::string& param);

// Facts every response carries.
struct ResponseHead {
  std::string id;                  // chatcmpl-… / cmpl-…
  int64_t created = 0;
  std::string model;
  std::string fingerprint;
};

// How a token shows in logprobs: `token` is its text when its bytes are valid UTF-8, else
// "bytes:\\xNN…" (as OpenAI and vLLM write partial characters), or "token_id:N" without a tokenizer,
// where `bytes` is null.
struct LogprobPiece {
  std::string token;
  std::optional<std::string> bytes;
};

// One position of a choice's logprobs.
struct LogprobEntry {
  LogprobPiece piece;
  std::optional<double> logprob;  // null: the first echoed prompt token (nothing before it)
  std::vector<std::pair<LogprobPiece, double>> top;
  int64_t text_offset = 0;        // completions: where the token's text starts in the choice's text
};

struct ChatChoice {
  ChatMessage message;
  std::string finish_reason;
  const std::vector<LogprobEntry>* logprobs = nullptr;  // null → "logprobs": null
};

struct CompletionChoice {
  std::string text;
  const std::vector<int32_t>* tokens = nullptr;  // `tokens` (ids) beside the text when set
  std::string finish_reason;
  const std::vector<LogprobEntry>* logprobs = nullptr;
};

// Non-streamed bodies, choices[i] with index i. `content` is null when empty and tool calls were
// made (OpenAI's rule); reasoning_content appears when a reasoning span was opened. Chat logprobs
// are {content: [{token, logprob, bytes, top_logprobs}], refusal: null}; completions' are
// {tokens, token_logprobs, top_logprobs (dicts), text_offset}.
std::string chat_response(const ResponseHead& h, const std::vector<ChatChoice>& choices, const Usage& u,
                          const Timings& t);
std::string completion_response(const ResponseHead& h, const std::vector<CompletionChoice>& choices, const Usage& u,
                                const Timings& t);

// Stream chunks (the JSON after `data: `). `with_usage_null`: include_usage was asked, so every chunk
// but the last carries `"usage": null`.
// Each chunk carries one choice, `index`, and the logprobs of the tokens it is the first to show
// (null: "logprobs": null).
std::string chat_chunk_role(const ResponseHead& h, int index, bool with_usage_null);
// One parsed piece: delta.reasoning_content, delta.content or delta.tool_calls[0].
std::string chat_chunk_delta(const ResponseHead& h, int index, const ChatDelta& d, const std::vector<LogprobEntry>* lp,
                             bool with_usage_null);
std::string chat_chunk_finish(const ResponseHead& h, int index, const std::string& finish_reason,
                              const std::vector<LogprobEntry>* lp, bool with_usage_null);
std::string completion_chunk(const ResponseHead& h, int index, const std::string& text,
                             const std::vector<int32_t>* tokens, const std::vector<LogprobEntry>* lp,
                             const char* finish_reason, bool with_usage_null);
// The usage chunk: `choices: []`, usage and timings.
std::string usage_chunk(const ResponseHead& h, bool chat, const Usage& u, const Timings& t);

// "<prefix><24 alphanumerics>", random per call.
std::string random_id(const std::string& prefix);

}  // namespace tandem::server
