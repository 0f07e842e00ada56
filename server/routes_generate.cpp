// /v1/chat/completions and /v1/completions: validate, build the prompt, queue a Job, then either
// collect its output into one body or stream it as SSE, cancelling the job when the client leaves.
#include <random>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "routes.h"
#include "tandem/text/chat_output.h"
#include "tandem/text/text_codec.h"

namespace tandem::server {

namespace {

// How often a waiting request looks at its socket for a client that left.
constexpr auto kPollInterval = std::chrono::milliseconds(100);

// Counts a generation request from its arrival to its last byte, so the drain knows when to stop.
struct ActiveRequest {
  std::atomic<int>& n;
  explicit ActiveRequest(std::atomic<int>& c) : n(c) { ++n; }
  ~ActiveRequest() { --n; }
};

std::vector<int32_t> build_prompt(const ServerState& s, const rapidjson::Document& doc, const GenRequest& g,
                                  bool& starts_in_reasoning) {
  const TextCodec& codec = *s.loaded.codec;
  if (g.chat) {
    if (auto m = codec.missing_chat_template(); !m.empty()) throw not_implemented(m);
    if (auto m = codec.missing_tokenizer(); !m.empty()) throw not_implemented(m);
    // The template's own special tokens are parsed; user and tool text stays text.
    ChatPrompt p = codec.render_chat(doc, true);
    starts_in_reasoning = p.starts_in_reasoning;
    return codec.encode_prompt(p);
  }
  if (g.prompt_text) {
    if (auto m = codec.missing_tokenizer(); !m.empty())
      throw not_implemented(m + "; send 'prompt' as a list of token ids");
    return codec.encode(*g.prompt_text, true, true);
  }
  return g.prompt_ids;
}

bool model_matches(const ServerState& s, const std::string& name) {
  if (name.empty() || name == s.model_name) return true;
  for (const auto& a : s.options.aliases)
    if (a == name) return true;
  return false;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

net::awaitable<bool> route_generate(ServerState& s, Connection& c, const Request& req, bool chat,
                                    const std::string& request_id) {
  ActiveRequest active(s.active_requests);
  const Model& model = *s.loaded.model;
  const int vocab = model.desc().vocab;
  rapidjson::Document doc = parse_body(req.body());
  GenRequest g = chat ? parse_chat_request(doc, s.options.sampling, vocab, s.options.strict_fields)
                      : parse_completion_request(doc, s.options.sampling, vocab, s.options.strict_fields);
  if (!model_matches(s, g.model))
    throw ApiError{404, "not_found_error", "model_not_found", "model",
                   "model '" + g.model + "' is not served here; this server serves '" + s.model_name + "'", {}};
  const bool has_text = s.loaded.codec->missing_tokenizer().empty();
  if (!g.params.stop.empty() && !has_text)
    throw not_implemented(s.loaded.codec->missing_tokenizer() + "; 'stop' strings need one");

  if (chat) apply_chat_defaults(s, doc);
  bool starts_in_reasoning = false;
  std::vector<int32_t> prompt = build_prompt(s, doc, g, starts_in_reasoning);
  const char* prompt_param = chat ? "messages" : "prompt";
  if (prompt.empty()) throw bad_request("invalid_value", prompt_param, std::string("'") + prompt_param + "' is empty");
  const int64_t window = s.scheduler->options().context;
  if (int64_t(prompt.size()) >= window)
    throw bad_request("context_length_exceeded", prompt_param,
                      "the prompt has " + std::to_string(prompt.size()) + " tokens; the context window is " +
                          std::to_string(window) + " and must leave room for at least one generated token");
  // Clamped so that prompt + generated tokens fit the window, like tandem::generate requires.
  int64_t max_tokens = std::min<int64_t>(g.params.max_tokens.value_or(s.options.default_max_tokens),
                                         window - int64_t(prompt.size()));

  auto job = std::make_shared<Job>();
  job->request_id = request_id;
  job->prompt = std::move(prompt);
  job->max_tokens = int(max_tokens);
  job->params = g.params;
  job->want_text = has_text;
  if (chat) {
    job->chat = true;
    job->starts_in_reasoning = starts_in_reasoning;
    job->tools = g.tools;
    job->rules = g.rules;
    job->rules.reasoning_budget = g.reasoning_budget.value_or(s.options.reasoning_budget);
    job->rules.reasoning_budget_message = s.options.reasoning_budget_message;
  }
  if (!g.params.has_seed && g.params.sampling.temperature > 0) job->params.sampling.seed = std::random_device{}();
  auto executor = co_await net::this_coro::executor;
  auto signal = std::make_shared<net::steady_timer>(executor);
  // The engine thread must not touch the timer: it posts the cancel to the io thread instead.
  job->wake = [signal, executor] { net::post(executor, [signal] { signal->cancel(); }); };

  switch (s.scheduler->submit(job)) {
    case SlotScheduler::Admission::accepted: break;
    case SlotScheduler::Admission::queue_full:
      s.metrics.refused("queue_full");
      throw unavailable("queue_full", "all slots are busy and the queue is full; retry later", 5);
    case SlotScheduler::Admission::draining:
      s.metrics.refused("draining");
      throw unavailable("draining", "the server is shutting down", 30);
  }

  ResponseHead head{random_id(chat ? "chatcmpl-" : "cmpl-"), unix_now(), g.model.empty() ? s.model_name : g.model,
                    s.fingerprint};
  // Without a tokenizer the ids are the only output, so they are always sent.
  const bool send_tokens = g.return_tokens || !has_text;
  // Chat text goes through the output parser (reasoning, content, tool calls) on this thread.
  ChatOutputOptions po;
  po.starts_in_reasoning = starts_in_reasoning;
  po.tools = g.tools;
  po.id_seed = std::hash<std::string>{}(request_id);
  ChatOutputParser parser(po);
  auto parse = [&](const std::string& text) {
    if (!g.raw_output) return parser.feed(text);
    std::vector<ChatDelta> raw;
    if (!text.empty()) {
      raw.emplace_back();
      raw.back().text = text;
    }
    return raw;
  };
  auto cause = [](const JobOutput& o) { return o.finish_reason == "length" ? FinishCause::length : FinishCause::stop; };
  // request_success_total counts the reason the client is told; the scheduler counted abort/error.
  auto count_finish = [&](const JobOutput& o, const std::string& reason) {
    if (o.done && !o.error && o.finish_reason != "abort") s.metrics.request_finished(reason);
  };
  auto wait = [&]() -> net::awaitable<void> {
    signal->expires_after(kPollInterval);
    beast::error_code ec;
    co_await signal->async_wait(net::redirect_error(net::use_awaitable, ec));
  };

  if (!g.stream) {
    std::string text;
    std::vector<int32_t> tokens;
    JobOutput out;
    for (;;) {
      out = job->take();
      text += out.text;
      tokens.insert(tokens.end(), out.tokens.begin(), out.tokens.end());
      if (out.done) break;
      if (c.peer_closed()) {
        job->cancel(Job::Cancel::client_gone);
        co_return false;
      }
      co_await wait();
    }
    if (out.error) throw api_error(*out.error);
    std::string body;
    if (chat) {
      ChatMessage raw;
      raw.content = text;
      std::string reason = out.finish_reason;
      if (!g.raw_output) {
        parser.feed(text);
        reason = parser.finish(cause(out));
      }
      body = chat_response(head, g.raw_output ? raw : parser.message(), reason, out.usage, out.timings);
      count_finish(out, reason);
    } else {
      body = completion_response(head, text, send_tokens ? &tokens : nullptr, out.finish_reason, out.usage, out.timings);
      count_finish(out, out.finish_reason);
    }
    Reply reply = json_reply(std::move(body));
    co_return co_await c.send(req, reply, request_id);
  }

  const bool usage_null = g.include_usage;
  // Every chunk is built into `event` first: no temporaries inside co_await expressions (GCC 12).
  std::string event;
  bool ok = co_await c.start_sse(req, request_id);
  if (ok && chat) {
    event = chat_chunk_role(head, usage_null);
    ok = co_await c.sse_data(event);
  }
  auto last_write = Clock::now();
  const auto ping = std::chrono::milliseconds(int64_t(s.options.sse_ping_interval_s * 1000));
  JobOutput out;
  while (ok) {
    out = job->take();
    if (chat) {
      for (const ChatDelta& d : parse(out.text)) {
        event = chat_chunk_delta(head, d, usage_null);
        if (!(ok = co_await c.sse_data(event))) break;
        last_write = Clock::now();
      }
    } else if (!out.text.empty() || (send_tokens && !out.tokens.empty())) {
      event = completion_chunk(head, out.text, send_tokens ? &out.tokens : nullptr, nullptr, usage_null);
      ok = co_await c.sse_data(event);
      last_write = Clock::now();
    }
    if (!ok || out.done) break;
    if (c.peer_closed()) ok = false;
    else if (ping.count() > 0 && Clock::now() - last_write >= ping) {
      // Keeps proxies and clients from timing out while the request waits for a slot or prefills.
      ok = co_await c.sse_raw(": keep-alive\n\n");
      last_write = Clock::now();
    }
    if (ok) co_await wait();
  }
  if (!ok) {
    count_finish(out, out.finish_reason);  // the end came, but the client left before reading it
    job->cancel(Job::Cancel::client_gone);
    co_return false;
  }
  if (out.error) {
    // The status line is gone; the error travels as an event and the stream ends without [DONE].
    event = error_body(api_error(*out.error));
    co_await c.sse_data(event);
    co_await c.end_sse();
    co_return false;
  }
  std::string reason = out.finish_reason;
  if (chat && !g.raw_output) {
    std::vector<ChatDelta> tail;
    reason = parser.finish(cause(out), &tail);
    for (const ChatDelta& d : tail) {
      event = chat_chunk_delta(head, d, usage_null);
      if (!(ok = co_await c.sse_data(event))) break;
    }
  }
  count_finish(out, reason);
  event = chat ? chat_chunk_finish(head, reason, usage_null)
               : completion_chunk(head, "", nullptr, reason.c_str(), usage_null);
  if (ok) ok = co_await c.sse_data(event);
  if (ok && g.include_usage) {
    event = usage_chunk(head, chat, out.usage, out.timings);
    ok = co_await c.sse_data(event);
  }
  if (ok) ok = co_await c.sse_raw("data: [DONE]\n\n");
  if (ok) ok = co_await c.end_sse();
  co_return ok && req.keep_alive();
}

}  // namespace tandem::server
