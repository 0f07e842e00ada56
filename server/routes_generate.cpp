// /v1/chat/completions and /v1/completions: validate, build the prompt, queue a Job, then either
// collect its output into one body or stream it as SSE, cancelling the job when the client leaves.
#include <algorithm>
#include <cstdio>
#include <random>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "routes.h"
#include "tandem/text/chat_output.h"
#include "tandem/text/text_codec.h"
#include "tandem/text/text_stream.h"

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

int64_t code_points(const std::string& bytes) {
  return std::count_if(bytes.begin(), bytes.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

LogprobPiece piece(const TextCodec& codec, bool has_text, int32_t id) {
  if (!has_text) return {"token_id:" + std::to_string(id), std::nullopt};
  std::string b = codec.token_bytes(id);
  if (is_valid_utf8(b)) return {b, b};
  std::string t = "bytes:";
  for (unsigned char c : b) {
    char x[8];
    std::snprintf(x, sizeof x, "\\x%02x", c);
    t += x;
  }
  return {t, b};
}

// One choice of a request: its job and what came back of it that is not sent yet.
struct Choice {
  std::shared_ptr<Job> job;
  std::unique_ptr<ChatOutputParser> parser;
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<LogprobEntry> logprobs;
  JobOutput out;              // the last take
  std::string reason;         // finish_reason once done
  int64_t offset = 0;         // completions: code points of the choice's text so far (text_offset)
  std::vector<TokenLogprobs> prompt_logprobs;  // echo: the prompt's, gathered over the prefill chunks
  bool echoed = false;        // completions with echo: the prompt went out
};

// The response's view of a choice's logprobs (completions also list the taken token among the
// alternatives, as OpenAI's legacy API does: up to logprobs + 1 entries).
struct LogprobWriter {
  const TextCodec& codec;
  bool has_text;
  bool completions;
  LogprobEntry entry(const TokenLogprobs& lp, int64_t& offset) const {
    LogprobEntry e;
    e.piece = piece(codec, has_text, lp.token);
    e.logprob = lp.logprob;
    bool listed = false;
    for (const auto& [id, l] : lp.top) {
      e.top.emplace_back(piece(codec, has_text, id), l);
      listed |= id == lp.token;
    }
    if (completions && !listed) e.top.emplace_back(e.piece, lp.logprob);
    e.text_offset = offset;
    offset += code_points(e.piece.bytes.value_or(""));
    return e;
  }
  // Echo: the first prompt token has nothing before it, so no logprob (null, as OpenAI).
  LogprobEntry first(int32_t token, int64_t& offset) const {
    LogprobEntry e;
    e.piece = piece(codec, has_text, token);
    e.text_offset = offset;
    offset += code_points(e.piece.bytes.value_or(""));
    return e;
  }
};

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
  const TextCodec& codec = *s.loaded.codec;
  const bool has_text = codec.missing_tokenizer().empty();
  if (!g.params.stop.empty() && !has_text)
    throw not_implemented(codec.missing_tokenizer() + "; 'stop' strings need one");
  const int capacity = s.scheduler->options().slots + s.scheduler->options().max_queue;
  if (g.n > capacity)
    throw bad_request("invalid_value", "n", "'n' = " + std::to_string(g.n) + " choices do not fit this server's " +
                                                 std::to_string(capacity) + " places (slots + max_queue)");

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
  const bool want_logprobs = g.logprobs >= 0;
  // Echo: the prompt leads each choice's text (as sent, or decoded from ids) and its logprobs.
  std::string echo_text;
  if (g.echo) {
    if (g.prompt_text) {
      echo_text = *g.prompt_text;
    } else if (has_text) {
      TextStream ts(codec, {});
      for (int32_t t : prompt) echo_text += ts.push(t);
      echo_text += ts.flush();
    }
  }

  // Choice i is a job of its own with seed + i (mod 2^64): the same tokens as a request with n = 1
  // and that seed. Without a seed, sampled choices start from one random seed.
  if (!g.params.has_seed && g.params.sampling.temperature > 0) g.params.sampling.seed = std::random_device{}();
  auto executor = co_await net::this_coro::executor;
  auto signal = std::make_shared<net::steady_timer>(executor);
  std::vector<Choice> choices(size_t(g.n));
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < g.n; ++i) {
    auto job = std::make_shared<Job>();
    job->request_id = request_id;
    job->prompt = prompt;
    job->max_tokens = int(max_tokens);
    job->params = g.params;
    job->params.sampling.seed = g.params.sampling.seed + uint64_t(i);
    job->want_text = has_text;
    job->logprobs = g.logprobs;
    job->prompt_logprobs = g.echo && want_logprobs;
    if (chat) {
      job->chat = true;
      job->starts_in_reasoning = starts_in_reasoning;
      job->tools = g.tools;
      job->rules = g.rules;
      job->rules.reasoning_budget = g.reasoning_budget.value_or(s.options.reasoning_budget);
      job->rules.reasoning_budget_message = s.options.reasoning_budget_message;
    }
    // The engine thread must not touch the timer: it posts the cancel to the io thread instead.
    job->wake = [signal, executor] { net::post(executor, [signal] { signal->cancel(); }); };
    jobs.push_back(job);
    Choice& ch = choices[size_t(i)];
    ch.job = job;
    // Chat text goes through the output parser (reasoning, content, tool calls) on this thread.
    ChatOutputOptions po;
    po.starts_in_reasoning = starts_in_reasoning;
    po.tools = g.tools;
    po.id_seed = std::hash<std::string>{}(request_id) + size_t(i);
    ch.parser = std::make_unique<ChatOutputParser>(po);
  }

  switch (s.scheduler->submit(jobs)) {
    case SlotScheduler::Admission::accepted: break;
    case SlotScheduler::Admission::queue_full:
      s.metrics.refused("queue_full");
      throw unavailable("queue_full", "all slots are busy and the queue is full; retry later", 5);
    case SlotScheduler::Admission::draining:
      s.metrics.refused("draining");
      throw unavailable("draining", "the server is shutting down", 30);
  }
  auto cancel_all = [&] {
    for (auto& ch : choices) ch.job->cancel(Job::Cancel::client_gone);
  };
  // A client that leaves cancels its jobs at once, so the engine frees the slot at its next step
  // boundary (after at most the prefill chunk or decode step that is running), queued or not.
  c.watch_close([jobs, signal] {
    for (auto& j : jobs) j->cancel(Job::Cancel::client_gone);
    signal->cancel();
  });
  struct Unwatch {
    Connection& c;
    ~Unwatch() { c.unwatch(); }
  } unwatch{c};

  ResponseHead head{random_id(chat ? "chatcmpl-" : "cmpl-"), unix_now(), g.model.empty() ? s.model_name : g.model,
                    s.fingerprint};
  // Without a tokenizer the ids are the only output, so they are always sent.
  const bool send_tokens = g.return_tokens || !has_text;
  const LogprobWriter lpw{codec, has_text, !chat};
  auto parse = [&](Choice& ch, const std::string& text) {
    if (!g.raw_output) return ch.parser->feed(text);
    std::vector<ChatDelta> raw;
    if (!text.empty()) {
      raw.emplace_back();
      raw.back().text = text;
    }
    return raw;
  };
  // What a take brought: its logprobs join the choice's unsent ones (with echo, the prompt's first).
  auto collect = [&](Choice& ch) {
    ch.out = ch.job->take();
    ch.prompt_logprobs.insert(ch.prompt_logprobs.end(), ch.out.prompt_logprobs.begin(), ch.out.prompt_logprobs.end());
    if (g.echo && !ch.echoed && (ch.out.done || !ch.out.tokens.empty() || !want_logprobs)) {
      // The echo goes out once the whole prompt's logprobs are in: before the first token or at the end.
      ch.echoed = true;
      ch.text = echo_text + ch.text;
      if (want_logprobs) {
        std::vector<LogprobEntry> lead{lpw.first(prompt[0], ch.offset)};
        for (const auto& lp : ch.prompt_logprobs) lead.push_back(lpw.entry(lp, ch.offset));
        ch.logprobs.insert(ch.logprobs.begin(), lead.begin(), lead.end());
      }
    }
    ch.text += ch.out.text;
    ch.tokens.insert(ch.tokens.end(), ch.out.tokens.begin(), ch.out.tokens.end());
    for (const auto& lp : ch.out.logprobs) ch.logprobs.push_back(lpw.entry(lp, ch.offset));
  };
  auto cause = [](const JobOutput& o) { return o.finish_reason == "length" ? FinishCause::length : FinishCause::stop; };
  // request_success_total counts the reason the client is told (choice 0's); the scheduler counted
  // abort/error.
  auto count_finish = [&](const JobOutput& o, const std::string& reason) {
    if (o.done && !o.error && o.finish_reason != "abort") s.metrics.request_finished(reason);
  };
  // One usage for the request: the prompt once, every choice's tokens.
  auto total_usage = [&] {
    Usage u = choices[0].out.usage;
    Timings t = choices[0].out.timings;
    for (size_t i = 1; i < choices.size(); ++i) {
      const JobOutput& o = choices[i].out;
      u.completion_tokens += o.usage.completion_tokens;
      u.reasoning_tokens += o.usage.reasoning_tokens;
      t.predicted_n += o.timings.predicted_n;
      t.predicted_ms = std::max(t.predicted_ms, o.timings.predicted_ms);
      t.steps += o.timings.steps;
      t.draft_tokens += o.timings.draft_tokens;
      t.accepted_tokens += o.timings.accepted_tokens;
    }
    return std::pair{u, t};
  };
  auto wait = [&]() -> net::awaitable<void> {
    signal->expires_after(kPollInterval);
    beast::error_code ec;
    co_await signal->async_wait(net::redirect_error(net::use_awaitable, ec));
  };
  auto all_done = [&] {
    return std::all_of(choices.begin(), choices.end(), [](const Choice& ch) { return ch.out.done; });
  };

  if (!g.stream) {
    for (;;) {
      for (Choice& ch : choices)
        if (!ch.out.done) collect(ch);
      if (all_done()) break;
      if (c.peer_closed()) {
        cancel_all();
        co_return false;
      }
      co_await wait();
    }
    for (const Choice& ch : choices)
      if (ch.out.error) {
        cancel_all();
        throw api_error(*ch.out.error);
      }
    auto [u, t] = total_usage();
    std::string body;
    if (chat) {
      std::vector<ChatChoice> out;
      for (Choice& ch : choices) {
        ChatChoice cc;
        cc.message.content = ch.text;
        cc.finish_reason = ch.out.finish_reason;
        if (!g.raw_output) {
          ch.parser->feed(ch.text);
          cc.finish_reason = ch.parser->finish(cause(ch.out));
          cc.message = ch.parser->message();
        }
        cc.logprobs = want_logprobs ? &ch.logprobs : nullptr;
        out.push_back(std::move(cc));
      }
      body = chat_response(head, out, u, t);
      count_finish(choices[0].out, out[0].finish_reason);
    } else {
      std::vector<CompletionChoice> out;
      for (Choice& ch : choices)
        out.push_back({ch.text, send_tokens ? &ch.tokens : nullptr, ch.out.finish_reason,
                       want_logprobs ? &ch.logprobs : nullptr});
      body = completion_response(head, out, u, t);
      count_finish(choices[0].out, choices[0].out.finish_reason);
    }
    Reply reply = json_reply(std::move(body));
    co_return co_await c.send(req, reply, request_id);
  }

  const bool usage_null = g.include_usage;
  // Every chunk is built into `event` first: no temporaries inside co_await expressions (GCC 12).
  std::string event;
  bool ok = co_await c.start_sse(req, request_id);
  if (chat)
    for (int i = 0; ok && i < g.n; ++i) {
      event = chat_chunk_role(head, i, usage_null);
      ok = co_await c.sse_data(event);
    }
  auto last_write = Clock::now();
  const auto ping = std::chrono::milliseconds(int64_t(s.options.sse_ping_interval_s * 1000));
  // Logprobs go out with the first chunk that shows their text, or with the finish chunk.
  auto unsent = [&](Choice& ch) { return want_logprobs && !ch.logprobs.empty() ? &ch.logprobs : nullptr; };
  const RequestError* failed = nullptr;
  while (ok) {
    for (int i = 0; ok && i < g.n; ++i) {
      Choice& ch = choices[size_t(i)];
      if (ch.out.done) continue;
      ch.text.clear();
      ch.tokens.clear();
      collect(ch);
      if (ch.out.error) {
        failed = &*ch.out.error;
        break;
      }
      if (chat) {
        for (const ChatDelta& d : parse(ch, ch.text)) {
          event = chat_chunk_delta(head, i, d, unsent(ch), usage_null);
          ch.logprobs.clear();
          if (!(ok = co_await c.sse_data(event))) break;
          last_write = Clock::now();
        }
      } else if (!ch.text.empty() || (send_tokens && !ch.tokens.empty()) || unsent(ch)) {
        event = completion_chunk(head, i, ch.text, send_tokens ? &ch.tokens : nullptr, unsent(ch), nullptr, usage_null);
        ch.logprobs.clear();
        ok = co_await c.sse_data(event);
        last_write = Clock::now();
      }
      if (!ok || !ch.out.done || ch.out.finish_reason == "abort") continue;
      ch.reason = ch.out.finish_reason;
      if (chat && !g.raw_output) {
        std::vector<ChatDelta> tail;
        ch.reason = ch.parser->finish(cause(ch.out), &tail);
        for (const ChatDelta& d : tail) {
          event = chat_chunk_delta(head, i, d, unsent(ch), usage_null);
          ch.logprobs.clear();
          if (!(ok = co_await c.sse_data(event))) break;
        }
      }
      event = chat ? chat_chunk_finish(head, i, ch.reason, unsent(ch), usage_null)
                   : completion_chunk(head, i, "", nullptr, unsent(ch), ch.reason.c_str(), usage_null);
      ch.logprobs.clear();
      if (ok) ok = co_await c.sse_data(event);
    }
    if (!ok || failed || all_done()) break;
    if (c.peer_closed()) ok = false;
    else if (ping.count() > 0 && Clock::now() - last_write >= ping) {
      // Keeps proxies and clients from timing out while the request waits for a slot or prefills.
      ok = co_await c.sse_raw(": keep-alive\n\n");
      last_write = Clock::now();
    }
    if (ok) co_await wait();
  }
  if (!ok) {
    count_finish(choices[0].out, choices[0].out.finish_reason);  // the end came, but the client left before reading it
    cancel_all();
    co_return false;
  }
  if (!failed)
    for (const Choice& ch : choices)
      if (ch.out.error) failed = &*ch.out.error;
  if (failed) {
    // The status line is gone; the error travels as an event and the stream ends without [DONE].
    cancel_all();
    event = error_body(api_error(*failed));
    co_await c.sse_data(event);
    co_await c.end_sse();
    co_return false;
  }
  count_finish(choices[0].out, choices[0].reason);
  if (ok && g.include_usage) {
    auto [u, t] = total_usage();
    event = usage_chunk(head, chat, u, t);
    ok = co_await c.sse_data(event);
  }
  if (ok) ok = co_await c.sse_raw("data: [DONE]\n\n");
  if (ok) ok = co_await c.end_sse();
  co_return ok && req.keep_alive();
}

}  // namespace tandem::server
