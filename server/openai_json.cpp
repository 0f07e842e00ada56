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

// {head…, "choices": [{"index": 0, <body>, "logprobs": null, "finish_reason": …}], <tail>}: the
// shape of every response and chunk that carries a choice.
template <class Body, class Tail>
std::string one_choice(const ResponseHead& h, const char* object, Body body, const char* finish_reason, Tail tail) {
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  head(w, h, object);
  key(w, "choices");
  w.StartArray();
  w.StartObject();
  key(w, "index"), w.Int(0);
  body(w);
  key(w, "logprobs"), w.Null();
  key(w, "finish_reason");
  if (finish_reason) w.String(finish_reason);
  else w.Null();
  w.EndObject();
  w.EndArray();
  tail(w);
  w.EndObject();
  return done(b);
}

// Chat chunk with one choice whose delta is written by `delta`.
template <class F>
std::string chat_chunk(const ResponseHead& h, F delta, const char* finish_reason, bool with_usage_null) {
  return one_choice(
      h, "chat.completion.chunk",
      [&](JsonWriter& w) {
        key(w, "delta");
        w.StartObject();
        delta(w);
        w.EndObject();
      },
      finish_reason, [&](JsonWriter& w) { usage_null(w, with_usage_null); });
}

// One text_completion object: a whole response (`u` and `t` given) or a stream chunk.
std::string completion_object(const ResponseHead& h, const std::string& text, const std::vector<int32_t>* tokens,
                              const char* finish_reason, const Usage* u, const Timings* t, bool with_usage_null) {
  return one_choice(
      h, "text_completion",
      [&](JsonWriter& w) {
        key(w, "text"), str(w, text);
        tokens_field(w, tokens);
      },
      finish_reason,
      [&](JsonWriter& w) {
        if (u) usage(w, *u);
        if (t) timings(w, *t);
        usage_null(w, with_usage_null);
      });
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

std::string chat_response(const ResponseHead& h, const ChatMessage& m, const std::string& finish_reason,
                          const Usage& u, const Timings& t) {
  auto message = [&](JsonWriter& w) {
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
  };
  return one_choice(h, "chat.completion", message, finish_reason.c_str(), [&](JsonWriter& w) {
    usage(w, u);
    timings(w, t);
  });
}

std::string completion_response(const ResponseHead& h, const std::string& text, const std::vector<int32_t>* tokens,
                                const std::string& finish_reason, const Usage& u, const Timings& t) {
  return completion_object(h, text, tokens, finish_reason.c_str(), &u, &t, false);
}

std::string chat_chunk_role(const ResponseHead& h, bool with_usage_null) {
  return chat_chunk(
      h, [](JsonWriter& w) { key(w, "role"), w.String("assistant"), key(w, "content"), w.String(""); }, nullptr,
      with_usage_null);
}

std::string chat_chunk_delta(const ResponseHead& h, const ChatDelta& d, bool with_usage_null) {
  return chat_chunk(
      h,
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
      nullptr, with_usage_null);
}

std::string chat_chunk_finish(const ResponseHead& h, const std::string& finish_reason, bool with_usage_null) {
  return chat_chunk(h, [](JsonWriter&) {}, finish_reason.c_str(), with_usage_null);
}

std::string completion_chunk(const ResponseHead& h, const std::string& text, const std::vector<int32_t>* tokens,
                             const char* finish_reason, bool with_usage_null) {
  return completion_object(h, text, tokens, finish_reason, nullptr, nullptr, with_usage_null);
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
