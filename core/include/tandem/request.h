// What a request asks of the engine, what it got back, and how it can fail — in the engine's own
// terms. The text library and the slot scheduler report with these; the HTTP layer maps them to
// status codes and OpenAI bodies (server/openai_json.h), so nothing below the server speaks HTTP.
// Owner: value types. Thread: any. Sync: none.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/backend.h"

namespace tandem {

// A request that cannot be served. Thrown by value (like the server's ApiError, not a
// std::exception), so a catch-all for internal errors never swallows it.
struct RequestError {
  enum class Kind {
    invalid,          // a field is wrong: the client must change the request
    not_implemented,  // the model or this build lacks what it needs (message: what is missing)
    queue_timeout,    // it waited longer than the queue allows for a slot
    shutting_down,    // the engine is draining and will not start it
    internal,         // generation failed after it was accepted
  };
  Kind kind = Kind::invalid;
  std::string code;     // machine-readable: invalid_value, missing_field, …
  std::string param;    // the request field it names; "" when none
  std::string message;  // one line for people
};

inline RequestError invalid_request(std::string code, std::string param, std::string message) {
  return RequestError{RequestError::Kind::invalid, std::move(code), std::move(param), std::move(message)};
}

inline RequestError not_available(std::string what) {
  return RequestError{RequestError::Kind::not_implemented, "not_implemented", "", std::move(what)};
}

// Sampling and limits of one generation request (chat and completions alike).
struct RequestParams {
  std::optional<int> max_tokens;       // absent → the server default
  SamplingParams sampling;             // defaults filled in by the caller before parsing
  bool has_seed = false;
  float presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  int min_tokens = 0;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;  // of completion_tokens: sampled inside the reasoning span
  int64_t cached_tokens = 0;     // of prompt_tokens: restored from a prefix checkpoint
};

struct Timings {
  int64_t prompt_n = 0, predicted_n = 0;  // prompt_n: prompt tokens prefilled (cache_n more were restored)
  int64_t cache_n = 0;
  double prompt_ms = 0, predicted_ms = 0;
  int64_t steps = 0;
  int64_t draft_tokens = 0, accepted_tokens = 0;  // drafted requests: drafts verified, and accepted
};

}  // namespace tandem
