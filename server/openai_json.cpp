// Error bodies and response/chunk bodies in OpenAI's shapes.
#include "openai_json.h"

#include <chrono>
#include <random>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace tandem::server {

namespace rj = rapidjson;
using JsonWriter = rj::Writer<rj::StringBuffer>;

ApiError bad_request(const std::string& code, const std::string& param, const std::string& message) {
  ApiError e;
  e.status = 400;
  e.code = code;
  e.param = param;
  e.message = message;
  return e;
}

ApiError not_implemented(const std::string& what) {
  ApiError e;
  e.status = 501;
  e.type = "not_implemented_error";
  e.code = "not_implemented";
  e.message = "this build of tandem has no " + what;
  e.headers.emplace_back("x-should-retry", "false");
  return e;
}

ApiError unavailable(const std::string& code, const std::string& message, int retry_after_s) {
  ApiError e;
  e.status = 503;
  e.type = "unavailable_error";
  e.code = code;
  e.message = message;
  e.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return e;
}

ApiError api_error(const RequestError& e) {
  switch (e.kind) {
    case RequestError::Kind::invalid: return bad_request(e.code, e.param, e.message);
    case RequestError::Kind::not_implemented: return not_implemented(e.message);
    case RequestError::Kind::queue_timeout:
      return ApiError{429, "rate_limit_error", e.code, e.param, e.message, {{"Retry-After", "10"}}};
    case RequestError::Kind::shutting_down: return unavailable(e.code, e.message, 30);
    case RequestError::Kind::internal: break;
  }
  return ApiError{500, "server_error", e.code, e.param, e.message, {{"x-should-retry", "false"}}};
}

namespace {

void str(JsonWriter& w, const std::string& s) { w.String(s.data(), rj::SizeType(s.size())); }
void key(JsonWriter& w, const char* k) { w.Key(k); }
void str_or_null(JsonWriter& w, const std::string& s) {
  if (s.empty()) w.Null();
  else str(w, s);
}

void error_object(JsonWriter& w, const ApiError& e) {
  w.StartObject();
  key(w, "message"), str(w, e.message);
  key(w, "type"), str(w, e.type);
  key(w, "param"), str_or_null(w, e.param);
  key(w, "code"), str_or_null(w, e.code);
  w.EndObject();
}

void head(JsonWriter& w, const ResponseHead& h, const char* object) {
  key(w, "id"), str(w, h.id);
  key(w, "object"), w.String(object);
  key(w, "created"), w.Int64(h.created);
  key(w, "model"), str(w, h.model);
  key(w, "system_fingerprint"), str(w, h.fingerprint);
}

void usage(JsonWriter& w, const Usage& u) {
  key(w, "usage");
  w.StartObject();
  key(w, "prompt_tokens"), w.Int64(u.prompt_tokens);
  key(w, "completion_tokens"), w.Int64(u.completion_tokens);
  key(w, "total_tokens"), w.Int64(u.prompt_tokens + u.completion_tokens);
  key(w, "prompt_tokens_details");
  w.StartObject(), key(w, "cached_tokens"), w.Int64(u.cached_tokens), w.EndObject();
  key(w, "completion_tokens_details");
  w.StartObject(), key(w, "reasoning_tokens"), w.Int64(u.reasoning_tokens), w.EndObject();
  w.EndObject();
}

void timings(JsonWriter& w, const Timings& t) {
  auto per_s = [](int64_t n, double ms) { return ms > 0 ? double(n) * 1000.0 / ms : 0.0; };
  key(w, "timings");
  w.StartObject();
  key(w, "prompt_n"), w.Int64(t.prompt_n);
  key(w, "prompt_ms"), w.Double(t.prompt_ms);
  key(w, "prompt_per_second"), w.Double(per_s(t.prompt_n, t.prompt_ms));
  key(w, "predicted_n"), w.Int64(t.predicted_n);
  key(w, "predicted_ms"), w.Double(t.predicted_ms);
  key(w, "predicted_per_second"), w.Double(per_s(t.predicted_n, t.predicted_ms));
  key(w, "cache_n"), w.Int64(t.cache_n);
  key(w, "steps"), w.Int64(t.steps);
  key(w, "tokens_per_step"), w.Double(t.steps ? double(t.predicted_n) / double(t.steps) : 0.0);
  key(w, "draft_tokens"), w.Int64(t.draft_tokens);
  key(w, "accepted_tokens"), w.Int64(t.accepted_tokens);
  w.EndObject();
}

void tokens_field(JsonWriter& w, const std::vector<int32_t>* tokens) {
  if (!tokens) return;
  key(w, "tokens");
  w.StartArray();
  for (int32_t t : *tokens) w.Int(t);
  w.EndArray();
}

void usage_null(JsonWriter& w, bool with) {
  if (with) key(w, "usage"), w.Null();
}

std::string done(rj::StringBuffer& b) { return std::string(b.GetString(), b.GetSize()); }

// OpenAI's chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}],
// "refusal": null}.
void chat_logprobs(JsonWriter& w, const std::vector<LogprobEntry>* lp) {
  key(w, "logprobs");
  if (!lp) {
    w.Null();
    return;
  }
  auto token = [&](const LogprobPiece& p, double logprob) {
    key(w, "token"), str(w, p.token);
    key(w, "logprob"), w.Double(logprob);
    key(w, "bytes");
    if (!p.bytes) {
      w.Null();
      return;
    }
    w.StartArray();
    for (unsigned char c : *p.bytes) w.Int(c);
    w.EndArray();
  };
  w.StartObject();
  key(w, "content");
  w.StartArray();
  for (const LogprobEntry& e : *lp) {
    w.StartObject();
    token(e.piece, e.logprob.value_or(0));
    key(w, "top_logprobs");
    w.StartArray();
    for (const auto& [p, l] : e.top) {
      w.StartObject();
      token(p, l);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  key(w, "refusal"), w.Null();
  w.EndObject();
}

// The legacy completions shape: {"tokens", "token_logprobs", "top_logprobs" (dicts), "text_offset"},
// null where the first echoed prompt token has no logprob.
void completion_logprobs(JsonWriter& w, const std::vector<LogprobEntry>* lp) {
  key(w, "logprobs");
  if (!lp) {
    w.Null();
    return;
  }
  w.StartObject();
  key(w, "tokens");
  w.StartArray();
  for (const LogprobEntry& e : *lp) str(w, e.piece.token);
  w.EndArray();
  key(w, "token_logprobs");
  w.StartArray();
  for (const LogprobEntry& e : *lp)
    if (e.logprob) w.Double(*e.logprob);
    else w.Null();
  w.EndArray();
  key(w, "top_logprobs");
  w.StartArray();
  for (const LogprobEntry& e : *lp) {
    if (!e.logprob) {
      w.Null();
      continue;
    }
    w.StartObject();
    for (const auto& [p, l] : e.top) w.Key(p.token.data(), rj::SizeType(p.token.size())), w.Double(l);
    w.EndObject();
  }
  w.EndArray();
  key(w, "text_offset");
  w.StartArray();
  for (const LogprobEntry& e : *lp) w.Int64(e.text_offset);
  w.EndArray();
  w.EndObject();
}

// {"index": i, <body>, "logprobs": …, "finish_reason": …}: every choice of a response or chunk.
template <class Body>
void choice(JsonWriter& w, int index, Body body, bool chat, const std::vector<LogprobEntry>* lp,
            const char* finish_reason) {
  w.StartObject();
  key(w, "index"), w.Int(index);
  body(w);
  if (chat) chat_logprobs(w, lp);
  else completion_logprobs(w, lp);
  key(w, "finish_reason");
  if (finish_reason) w.String(finish_reason);
  else w.Null();
  w.EndObject();
}

// {head…, "choices": [<choices>], <tail>}: the shape of every response and chunk that carries choices.
template <class Choices, class Tail>
std::string with_choices(const ResponseHead& h, const char* object, Choices choices, Tail tail) {
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  head(w, h, object);
  key(w, "choices");
  w.StartArray();
  choices(w);
  w.EndArray();
  tail(w);
  w.EndObject();
  return done(b);
}

// Chat chunk with one choice whose delta is written by `delta`.
template <class F>
std::string chat_chunk(const ResponseHead& h, int index, F delta, const std::vector<LogprobEntry>* lp,
                       const char* finish_reason, bool with_usage_null) {
  return with_choices(
      h, "chat.completion.chunk",
      [&](JsonWriter& w) {
        choice(
            w, index,
            [&](JsonWriter& w) {
              key(w, "delta");
              w.StartObject();
              delta(w);
              w.EndObject();
            },
            true, lp, finish_reason);
      },
      [&](JsonWriter& w) { usage_null(w, with_usage_null); });
}

void completion_body(JsonWriter& w, const std::string& text, const std::vector<int32_t>* tokens) {
  key(w, "text"), str(w, text);
  tokens_field(w, tokens);
}

void message_body(JsonWriter& w, const ChatMessage& m) {
  key(w, "message");
  w.StartObject();
  key(w, "role"), w.String("assistant");
  key(w, "content");
  if (m.content.empty() && !m.tool_calls.empty()) w.Null();
  else str(w, m.content);
  if (m.had_reasoning) key(w, "reasoning_content"), str(w, m.reasoning);
  if (!m.tool_calls.empty()) {
    key(w, "tool_calls");
    w.StartArray();
    for (const auto& c : m.tool_calls) {
      w.StartObject();
      key(w, "id"), str(w, c.id);
      key(w, "type"), w.String("function");
      key(w, "function");
      w.StartObject();
      key(w, "name"), str(w, c.name);
      key(w, "arguments"), str(w, c.arguments);
      w.EndObject();
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
}

}  // namespace

std::string error_body(const ApiError& e) {
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  key(w, "error");
  error_object(w, e);
  w.EndObject();
  return done(b);
}

// The tail of a whole response: usage, then timings.
auto usage_tail(const Usage& u, const Timings& t) {
  return [&u, &t](JsonWriter& w) {
    usage(w, u);
    timings(w, t);
  };
}

std::string chat_response(const ResponseHead& h, const std::vector<ChatChoice>& choices, const Usage& u,
                          const Timings& t) {
  return with_choices(
      h, "chat.completion",
      [&](JsonWriter& w) {
        for (size_t i = 0; i < choices.size(); ++i)
          choice(w, int(i), [&](JsonWriter& w) { message_body(w, choices[i].message); }, true, choices[i].logprobs,
                 choices[i].finish_reason.c_str());
      },
      usage_tail(u, t));
}

std::string completion_response(const ResponseHead& h, const std::vector<CompletionChoice>& choices, const Usage& u,
                                const Timings& t) {
  return with_choices(
      h, "text_completion",
      [&](JsonWriter& w) {
        for (size_t i = 0; i < choices.size(); ++i)
          choice(w, int(i), [&](JsonWriter& w) { completion_body(w, choices[i].text, choices[i].tokens); }, false,
                 choices[i].logprobs, choices[i].finish_reason.c_str());
      },
      usage_tail(u, t));
}

std::string chat_chunk_role(const ResponseHead& h, int index, bool with_usage_null) {
  return chat_chunk(
      h, index, [](JsonWriter& w) { key(w, "role"), w.String("assistant"), key(w, "content"), w.String(""); }, nullptr,
      nullptr, with_usage_null);
}

std::string chat_chunk_delta(const ResponseHead& h, int index, const ChatDelta& d, const std::vector<LogprobEntry>* lp,
                             bool with_usage_null) {
  return chat_chunk(
      h, index,
      [&](JsonWriter& w) {
        switch (d.kind) {
          case ChatDelta::Kind::reasoning: key(w, "reasoning_content"), str(w, d.text); break;
          case ChatDelta::Kind::content: key(w, "content"), str(w, d.text); break;
          case ChatDelta::Kind::tool_call:
            // The first delta of a call names it; later ones carry argument fragments only.
            key(w, "tool_calls");
            w.StartArray();
            w.StartObject();
            key(w, "index"), w.Int(d.tool_index);
            if (!d.tool_id.empty()) key(w, "id"), str(w, d.tool_id), key(w, "type"), w.String("function");
            key(w, "function");
            w.StartObject();
            if (!d.tool_name.empty()) key(w, "name"), str(w, d.tool_name);
            key(w, "arguments"), str(w, d.text);
            w.EndObject();
            w.EndObject();
            w.EndArray();
            break;
        }
      },
      lp, nullptr, with_usage_null);
}

std::string chat_chunk_finish(const ResponseHead& h, int index, const std::string& finish_reason,
                              const std::vector<LogprobEntry>* lp, bool with_usage_null) {
  return chat_chunk(h, index, [](JsonWriter&) {}, lp, finish_reason.c_str(), with_usage_null);
}

std::string completion_chunk(const ResponseHead& h, int index, const std::string& text,
                             const std::vector<int32_t>* tokens, const std::vector<LogprobEntry>* lp,
                             const char* finish_reason, bool with_usage_null) {
  return with_choices(
      h, "text_completion",
      [&](JsonWriter& w) { choice(w, index, [&](JsonWriter& w) { completion_body(w, text, tokens); }, false, lp, finish_reason); },
      [&](JsonWriter& w) { usage_null(w, with_usage_null); });
}

std::string usage_chunk(const ResponseHead& h, bool chat, const Usage& u, const Timings& t) {
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  head(w, h, chat ? "chat.completion.chunk" : "text_completion");
  key(w, "choices");
  w.StartArray();
  w.EndArray();
  usage(w, u);
  timings(w, t);
  w.EndObject();
  return done(b);
}

std::string random_id(const std::string& prefix) {
  static const char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 g(std::random_device{}() ^
                                 uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += kAlnum[g() % 62];
  return s;
}

}  // namespace tandem::server
