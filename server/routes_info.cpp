// Routes that answer at once: health, models, metrics, tokenize/detokenize, apply-template, slots,
// props (spec/server.md §5).
#include <cstdio>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "routes.h"
#include "tandem/text/text_codec.h"
#include "tandem/text/text_stream.h"

namespace tandem::server {

namespace rj = rapidjson;
using JsonWriter = rj::Writer<rj::StringBuffer>;

namespace {

void str(JsonWriter& w, const std::string& s) { w.String(s.data(), rj::SizeType(s.size())); }
std::string text(const rj::StringBuffer& b) { return std::string(b.GetString(), b.GetSize()); }

const TextCodec& tokenizer(const ServerState& s) {
  if (auto m = s.loaded.codec->missing_tokenizer(); !m.empty()) throw not_implemented(m);
  return *s.loaded.codec;
}

bool flag(const rj::Value& body, const char* name, bool def) {
  auto it = body.FindMember(name);
  if (it == body.MemberEnd() || it->value.IsNull()) return def;
  if (!it->value.IsBool()) throw bad_request("invalid_type", name, std::string("'") + name + "' must be a boolean");
  return it->value.GetBool();
}

}  // namespace

void apply_chat_defaults(const ServerState& s, rj::Document& d) {
  if (s.options.reasoning_effort.empty() || !d.IsObject()) return;
  // Explicit chat_template_kwargs win over reasoning_effort anyway (chat_prompt.cpp), so the
  // default can always be added.
  rj::Value v(s.options.reasoning_effort.c_str(), d.GetAllocator());
  auto it = d.FindMember("reasoning_effort");
  if (it == d.MemberEnd()) d.AddMember("reasoning_effort", v, d.GetAllocator());
  else if (it->value.IsNull()) it->value = v;
}

Reply route_health(ServerState& s) {
  Reply r;
  switch (s.phase.load()) {
    case Phase::ready: r.body = R"({"status":"ok"})"; break;
    case Phase::loading: {
      // llama-server's body plus a progress field, the fraction of layers loaded.
      char progress[32];
      std::snprintf(progress, sizeof progress, "%.3f", s.load_progress.load());
      r.status = 503;
      r.body = std::string(R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"},"progress":)") +
               progress + "}";
      r.headers.emplace_back("Retry-After", "5");
      break;
    }
    case Phase::draining:
      r.status = 503;
      r.body = R"({"status":"draining"})";
      r.headers.emplace_back("Retry-After", "30");
      break;
    case Phase::failed:
      r.status = 503;
      r.body = R"({"status":"failed"})";
      break;
  }
  return r;
}

namespace {

std::vector<std::string> served_names(const ServerState& s) {
  std::vector<std::string> names{s.model_name};
  names.insert(names.end(), s.options.aliases.begin(), s.options.aliases.end());
  return names;
}

void model_object(JsonWriter& w, const ServerState& s, const std::string& id) {
  w.StartObject();
  w.Key("id"), str(w, id);
  w.Key("object"), w.String("model");
  w.Key("created"), w.Int64(s.created);
  w.Key("owned_by"), w.String("tandem");
  w.Key("max_model_len"), w.Int64(s.options.scheduler.context);
  w.EndObject();
}

}  // namespace

Reply route_models(ServerState& s) {
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  w.Key("object"), w.String("list");
  w.Key("data");
  w.StartArray();
  for (const auto& n : served_names(s)) model_object(w, s, n);
  w.EndArray();
  w.EndObject();
  return json_reply(text(b));
}

Reply route_model(ServerState& s, const std::string& id) {
  for (const auto& n : served_names(s))
    if (n == id) {
      rj::StringBuffer b;
      JsonWriter w(b);
      model_object(w, s, n);
      return json_reply(text(b));
    }
  return error_reply(ApiError{404, "not_found_error", "model_not_found", "model",
                              "The model '" + id + "' does not exist; this server serves '" + s.model_name + "'", {}});
}

Reply route_metrics(ServerState& s) {
  Reply r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = s.metrics.render(s.scheduler ? s.scheduler->gauges() : EngineGauges{});
  return r;
}

Reply route_tokenize(ServerState& s, const std::string& body) {
  rj::Document d = parse_body(body);
  if (!d.IsObject()) throw bad_request("invalid_type", "", "request body must be a JSON object");
  std::vector<int32_t> ids;
  if (d.HasMember("messages")) {
    // Same path as a chat request, so `count` equals the chat's usage.prompt_tokens.
    if (auto m = s.loaded.codec->missing_chat_template(); !m.empty()) throw not_implemented(m);
    apply_chat_defaults(s, d);
    ids = tokenizer(s).encode_prompt(s.loaded.codec->render_chat(d, flag(d, "add_generation_prompt", true)));
  } else {
    const char* field = d.HasMember("content") ? "content" : "prompt";
    auto it = d.FindMember(field);
    if (it == d.MemberEnd()) throw bad_request("missing_field", "content", "'content' (or 'prompt' or 'messages') is required");
    if (!it->value.IsString()) throw bad_request("invalid_type", field, std::string("'") + field + "' must be a string");
    // llama-server's defaults: no BOS, special-token text parsed.
    ids = tokenizer(s).encode(it->value.GetString(), flag(d, "add_special", false), flag(d, "parse_special", true));
  }
  const bool pieces = flag(d, "with_pieces", false);
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  w.Key("tokens");
  w.StartArray();
  for (int32_t id : ids) {
    if (!pieces) {
      w.Int(id);
      continue;
    }
    w.StartObject();
    w.Key("id"), w.Int(id);
    w.Key("piece");
    std::string bytes = s.loaded.codec->token_bytes(id);
    if (is_valid_utf8(bytes)) {
      str(w, bytes);
    } else {
      // Part of a character: the bytes themselves, as llama-server does.
      w.StartArray();
      for (unsigned char c : bytes) w.Int(c);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.Key("count"), w.Int64(int64_t(ids.size()));
  w.Key("max_model_len"), w.Int64(s.options.scheduler.context);
  w.EndObject();
  return json_reply(text(b));
}

Reply route_detokenize(ServerState& s, const std::string& body) {
  rj::Document d = parse_body(body);
  if (!d.IsObject()) throw bad_request("invalid_type", "", "request body must be a JSON object");
  auto it = d.FindMember("tokens");
  if (it == d.MemberEnd()) throw bad_request("missing_field", "tokens", "'tokens' is required");
  std::vector<int32_t> ids = parse_token_ids(it->value, s.loaded.model->desc().vocab, "tokens");
  const TextCodec& codec = tokenizer(s);
  std::string bytes;
  for (int32_t id : ids) bytes += codec.token_bytes(id);
  std::string out = utf8_lossy(bytes);
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  w.Key("content"), str(w, out);
  w.Key("prompt"), str(w, out);
  w.EndObject();
  return json_reply(text(b));
}

Reply route_apply_template(ServerState& s, const std::string& body) {
  rj::Document d = parse_body(body);
  if (!d.IsObject() || !d.HasMember("messages"))
    throw bad_request("missing_field", "messages", "'messages' is required");
  if (auto m = s.loaded.codec->missing_chat_template(); !m.empty()) throw not_implemented(m);
  apply_chat_defaults(s, d);
  std::string prompt = s.loaded.codec->render_chat(d, true).text();
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  w.Key("prompt"), str(w, prompt);
  w.EndObject();
  return json_reply(text(b));
}

Reply route_slots(ServerState& s, const std::string& query) {
  std::vector<SlotInfo> slots = s.scheduler->slots();
  bool all_busy = true;
  for (const auto& i : slots) all_busy &= std::string(i.state) != "idle";
  if (all_busy && query.find("fail_on_no_slot=1") != std::string::npos)
    return error_reply(unavailable("no_slot_available", "every slot is busy", 1));
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartArray();
  for (const auto& i : slots) {
    w.StartObject();
    w.Key("id"), w.Int(i.id);
    w.Key("state"), w.String(i.state);
    w.Key("n_ctx"), w.Int64(s.options.scheduler.context);
    w.Key("n_past"), w.Int64(i.n_past);
    w.Key("bytes"), w.Int64(i.bytes);
    w.Key("request_id");
    if (i.request_id.empty()) w.Null();
    else str(w, i.request_id);
    w.Key("drafter");
    if (i.drafter.empty()) w.Null();
    else str(w, i.drafter);
    w.EndObject();
  }
  w.EndArray();
  return json_reply(text(b));
}

Reply route_props(ServerState& s) {
  const ServerOptions& o = s.options;
  rj::StringBuffer b;
  JsonWriter w(b);
  w.StartObject();
  w.Key("default_generation_settings");
  w.StartObject();
  w.Key("temperature"), w.Double(o.sampling.temperature);
  w.Key("top_p"), w.Double(o.sampling.top_p);
  w.Key("top_k"), w.Int(o.sampling.top_k);
  w.Key("min_p"), w.Double(o.sampling.min_p);
  w.Key("max_tokens"), w.Int(o.default_max_tokens);
  w.EndObject();
  w.Key("model"), str(w, s.model_name);
  w.Key("model_path"), str(w, s.loaded.path);
  w.Key("n_ctx"), w.Int64(o.scheduler.context);
  w.Key("total_slots"), w.Int(o.scheduler.slots);
  w.Key("max_queue"), w.Int(o.scheduler.max_queue);
  w.Key("tokenizer"), w.Bool(s.loaded.codec->missing_tokenizer().empty());
  w.Key("chat_template"), w.Bool(s.loaded.codec->missing_chat_template().empty());
  // Thinking (spec §10.3, §10.4): medium falls back to high when the template has no medium_effort.
  w.Key("thinking");
  w.StartObject();
  w.Key("default_reasoning_effort");
  if (o.reasoning_effort.empty()) w.Null();
  else str(w, o.reasoning_effort);
  w.Key("medium_effort_supported"), w.Bool(s.loaded.codec->template_reads("medium_effort"));
  w.Key("reasoning_budget"), w.Int64(o.reasoning_budget);
  w.EndObject();
  w.Key("build_info"), str(w, std::string("tandem ") + TANDEM_VERSION);
  w.EndObject();
  return json_reply(text(b));
}

}  // namespace tandem::server
