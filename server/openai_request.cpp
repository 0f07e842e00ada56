// Request bodies of /v1/chat/completions and /v1/completions: every OpenAI field is honoured,
// accepted without effect, or refused by name (spec/server.md §2, §5).
#include <cmath>
#include <cstring>
#include <regex>
#include <set>

#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "openai_json.h"
#include "tandem/text/text_stream.h"

namespace tandem::server {

namespace rj = rapidjson;

rj::Document parse_body(const std::string& body) {
  rj::Document d;
  d.Parse<rj::kParseValidateEncodingFlag>(body.data(), body.size());
  if (d.HasParseError()) {
    if (d.GetParseError() == rj::kParseErrorStringInvalidEncoding || !is_valid_utf8(body))
      throw bad_request("invalid_json", "", "request body is not valid UTF-8 (at byte " +
                                               std::to_string(d.GetErrorOffset()) + ")");
    throw bad_request("invalid_json", "", std::string("request body is not valid JSON: ") +
                                              rj::GetParseError_En(d.GetParseError()) + " (at byte " +
                                              std::to_string(d.GetErrorOffset()) + ")");
  }
  return d;
}

namespace {

const char* type_name(const rj::Value& v) {
  switch (v.GetType()) {
    case rj::kNullType: return "null";
    case rj::kFalseType:
    case rj::kTrueType: return "boolean";
    case rj::kObjectType: return "object";
    case rj::kArrayType: return "array";
    case rj::kStringType: return "string";
    default: return v.IsInt64() || v.IsUint64() ? "integer" : "number";
  }
}

ApiError wrong_type(const std::string& param, const char* expected, const rj::Value& v) {
  return bad_request("invalid_type", param, "'" + param + "' must be " + expected + ", found " + type_name(v));
}

ApiError out_of_range(const std::string& param, const std::string& range, double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", v);
  return bad_request("invalid_value", param, "'" + param + "' must be " + range + ", found " + b);
}

// Reads fields of one JSON object and remembers which were looked at, for --strict-fields.
// A field whose value is null counts as absent (clients send explicit nulls for unset options).
class Fields {
 public:
  explicit Fields(const rj::Value& obj) : obj_(obj) {
    if (!obj.IsObject()) throw bad_request("invalid_type", "", std::string("request body must be a JSON object, found ") +
                                                                   type_name(obj));
  }
  const rj::Value* get(const char* name) {
    seen_.insert(name);
    auto it = obj_.FindMember(name);
    return it == obj_.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
  }
  void accept(std::initializer_list<const char*> names) {
    for (const char* n : names) seen_.insert(n);
  }
  void refuse(std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (get(n)) throw bad_request("unsupported_parameter", n, std::string("'") + n + "' is not supported by tandem");
  }
  void check_unknown(bool strict) {
    if (!strict) return;
    for (auto it = obj_.MemberBegin(); it != obj_.MemberEnd(); ++it)
      if (!seen_.count(it->name.GetString()))
        throw bad_request("unsupported_parameter", it->name.GetString(),
                          std::string("unknown field '") + it->name.GetString() + "' (strict field checking is on)");
  }

  std::optional<bool> boolean(const char* name) {
    const rj::Value* v = get(name);
    if (!v) return std::nullopt;
    if (!v->IsBool()) throw wrong_type(name, "a boolean", *v);
    return v->GetBool();
  }
  std::optional<double> number(const char* name, double lo, double hi, bool lo_open = false) {
    const rj::Value* v = get(name);
    if (!v) return std::nullopt;
    if (!v->IsNumber()) throw wrong_type(name, "a number", *v);
    double x = v->GetDouble();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
      char r[96];
      std::snprintf(r, sizeof r, "in %s%g, %g]", lo_open ? "(" : "[", lo, hi);
      throw out_of_range(name, r, x);
    }
    return x;
  }
  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) {
    const rj::Value* v = get(name);
    if (!v) return std::nullopt;
    if (!v->IsInt64()) {
      if (v->IsUint64()) throw out_of_range(name, "at most " + std::to_string(hi), double(v->GetUint64()));
      throw wrong_type(name, "an integer", *v);
    }
    int64_t x = v->GetInt64();
    if (x < lo || x > hi)
      throw out_of_range(name, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", double(x));
    return x;
  }
  std::optional<std::string> string(const char* name) {
    const rj::Value* v = get(name);
    if (!v) return std::nullopt;
    if (!v->IsString()) throw wrong_type(name, "a string", *v);
    return std::string(v->GetString(), v->GetStringLength());
  }
  const rj::Value* object(const char* name) {
    const rj::Value* v = get(name);
    if (v && !v->IsObject()) throw wrong_type(name, "an object", *v);
    return v;
  }
  const rj::Value* array(const char* name) {
    const rj::Value* v = get(name);
    if (v && !v->IsArray()) throw wrong_type(name, "an array", *v);
    return v;
  }

 private:
  const rj::Value& obj_;
  std::set<std::string> seen_;
};

void parse_stop(Fields& f, GenParams& p) {
  const rj::Value* v = f.get("stop");
  if (!v) return;
  if (v->IsString()) {
    if (v->GetStringLength()) p.stop.emplace_back(v->GetString(), v->GetStringLength());
    return;
  }
  if (!v->IsArray()) throw wrong_type("stop", "a string or an array of strings", *v);
  if (v->Size() > 16) throw bad_request("invalid_value", "stop", "'stop' holds at most 16 strings, found " +
                                                                   std::to_string(v->Size()));
  for (const auto& s : v->GetArray()) {
    if (!s.IsString()) throw wrong_type("stop", "a string or an array of strings", s);
    if (s.GetStringLength()) p.stop.emplace_back(s.GetString(), s.GetStringLength());
  }
}

void parse_logit_bias(Fields& f, GenParams& p, int vocab) {
  const rj::Value* v = f.object("logit_bias");
  if (!v) return;
  for (auto it = v->MemberBegin(); it != v->MemberEnd(); ++it) {
    std::string key = it->name.GetString();
    char* end = nullptr;
    long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end || id < 0 || id >= vocab)
      throw bad_request("invalid_value", "logit_bias",
                        "'logit_bias' key '" + key + "' is not a token id in [0, " + std::to_string(vocab) + ")");
    if (!it->value.IsNumber()) throw wrong_type("logit_bias", "a map of token id to number", it->value);
    double b = it->value.GetDouble();
    if (b < -100 || b > 100) throw out_of_range("logit_bias", "in [-100, 100]", b);
    p.logit_bias.emplace_back(int32_t(id), float(b));
  }
}

// Fields shared by both routes: sampling, limits, stream switches.
// `min_tokens_out`: the least max_tokens may be (0 for completions that echo: the prompt alone is scored).
void parse_common(Fields& f, GenRequest& r, const SamplingParams& defaults, int vocab, int min_tokens_out = 1) {
  GenParams& p = r.params;
  p.sampling = defaults;
  if (auto m = f.string("model")) r.model = *m;
  // max_completion_tokens wins over the older max_tokens (chat); completions know only max_tokens.
  auto mct = f.integer("max_completion_tokens", 1, INT32_MAX);
  auto mt = f.integer("max_tokens", min_tokens_out, INT32_MAX);
  if (mct) p.max_tokens = int(*mct);
  else if (mt) p.max_tokens = int(*mt);
  if (auto t = f.number("temperature", 0, 2)) p.sampling.temperature = float(*t);
  if (auto t = f.number("top_p", 0, 1, true)) p.sampling.top_p = float(*t);
  if (auto k = f.integer("top_k", -1, INT32_MAX)) p.sampling.top_k = *k < 0 ? 0 : int(*k);  // -1 = off (vLLM)
  if (auto m = f.number("min_p", 0, 1)) p.sampling.min_p = float(*m);
  if (auto s = f.get("seed")) {
    if (!s->IsInt64() && !s->IsUint64()) throw wrong_type("seed", "an integer", *s);
    p.sampling.seed = s->IsInt64() ? uint64_t(s->GetInt64()) : s->GetUint64();
    p.has_seed = true;
  }
  if (auto v = f.number("presence_penalty", -2, 2)) p.presence_penalty = float(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) p.frequency_penalty = float(*v);
  if (auto v = f.number("repetition_penalty", 0, 10, true)) p.repetition_penalty = float(*v);
  parse_logit_bias(f, p, vocab);
  parse_stop(f, p);
  if (auto n = f.integer("n", 1, kMaxChoices)) r.n = int(*n);
  if (auto b = f.boolean("ignore_eos")) p.ignore_eos = *b;
  if (auto m = f.integer("min_tokens", 0, INT32_MAX)) p.min_tokens = int(*m);
  if (auto s = f.boolean("stream")) r.stream = *s;
  if (const rj::Value* so = f.object("stream_options")) {
    if (!r.stream)
      throw bad_request("invalid_value", "stream_options", "'stream_options' can only be given when 'stream' is true");
    Fields sf(*so);
    if (auto u = sf.boolean("include_usage")) r.include_usage = *u;
    if (auto c = sf.boolean("continuous_usage_stats"); c && *c)
      throw bad_request("unsupported_parameter", "stream_options.continuous_usage_stats",
                        "'stream_options.continuous_usage_stats' is not supported by tandem");
  }
  if (auto rt = f.boolean("return_tokens")) r.return_tokens = *rt;
  f.accept({"user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"});
}

void parse_content(const rj::Value& content, const std::string& param) {
  if (content.IsString()) return;
  if (!content.IsArray()) throw wrong_type(param, "a string, null or an array of content parts", content);
  for (rj::SizeType i = 0; i < content.Size(); ++i) {
    const rj::Value& part = content[i];
    std::string pp = param + "[" + std::to_string(i) + "]";
    if (!part.IsObject()) throw wrong_type(pp, "an object", part);
    auto t = part.FindMember("type");
    if (t == part.MemberEnd() || !t->value.IsString()) throw bad_request("missing_field", pp + ".type", "'" + pp + ".type' is required");
    std::string type = t->value.GetString();
    if (type == "image_url" || type == "input_audio" || type == "file" || type == "image")
      throw bad_request("unsupported_content", pp + ".type", "content part type '" + type + "' is not supported (text only)");
    if (type != "text") throw bad_request("invalid_value", pp + ".type", "unknown content part type '" + type + "'");
    auto tx = part.FindMember("text");
    if (tx == part.MemberEnd() || !tx->value.IsString()) throw bad_request("missing_field", pp + ".text", "'" + pp + ".text' must be a string");
  }
}

void parse_messages(Fields& f) {
  const rj::Value* m = f.array("messages");
  if (!m) throw bad_request("missing_field", "messages", "'messages' is required");
  if (m->Empty()) throw bad_request("invalid_value", "messages", "'messages' must not be empty");
  static const std::set<std::string> roles = {"system", "developer", "user", "assistant", "tool"};
  for (rj::SizeType i = 0; i < m->Size(); ++i) {
    const rj::Value& msg = (*m)[i];
    std::string p = "messages[" + std::to_string(i) + "]";
    if (!msg.IsObject()) throw wrong_type(p, "an object", msg);
    auto role = msg.FindMember("role");
    if (role == msg.MemberEnd()) throw bad_request("missing_field", p + ".role", "'" + p + ".role' is required");
    if (!role->value.IsString()) throw wrong_type(p + ".role", "a string", role->value);
    if (!roles.count(role->value.GetString()))
      throw bad_request("invalid_value", p + ".role", "'" + p + ".role' must be one of system, developer, user, assistant, tool; found '" +
                                                          std::string(role->value.GetString()) + "'");
    auto content = msg.FindMember("content");
    bool has_calls = msg.HasMember("tool_calls") && msg["tool_calls"].IsArray() && !msg["tool_calls"].Empty();
    if (content == msg.MemberEnd() || content->value.IsNull()) {
      if (!(std::string(role->value.GetString()) == "assistant" && has_calls))
        throw bad_request("missing_field", p + ".content", "'" + p + ".content' is required");
    } else {
      parse_content(content->value, p + ".content");
    }
  }
}

void parse_tools(Fields& f, GenRequest& r) {
  std::set<std::string> names;
  std::vector<ToolSpec> specs;
  if (const rj::Value* tools = f.array("tools")) {
    static const std::regex name_re("^[A-Za-z0-9_-]{1,64}$");
    for (rj::SizeType i = 0; i < tools->Size(); ++i) {
      const rj::Value& t = (*tools)[i];
      std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.IsObject()) throw wrong_type(p, "an object", t);
      auto ty = t.FindMember("type");
      if (ty == t.MemberEnd() || !ty->value.IsString() || std::string(ty->value.GetString()) != "function")
        throw bad_request("invalid_value", p + ".type", "'" + p + ".type' must be \"function\"");
      auto fn = t.FindMember("function");
      if (fn == t.MemberEnd() || !fn->value.IsObject())
        throw bad_request("missing_field", p + ".function", "'" + p + ".function' must be an object");
      auto nm = fn->value.FindMember("name");
      if (nm == fn->value.MemberEnd() || !nm->value.IsString() || !std::regex_match(nm->value.GetString(), name_re))
        throw bad_request("invalid_value", p + ".function.name", "'" + p + ".function.name' must match ^[A-Za-z0-9_-]{1,64}$");
      if (!names.insert(nm->value.GetString()).second)
        throw bad_request("invalid_value", p + ".function.name", std::string("tool name '") + nm->value.GetString() + "' appears twice");
      auto params = fn->value.FindMember("parameters");
      ToolSpec spec{nm->value.GetString(), ""};
      if (params != fn->value.MemberEnd() && !params->value.IsNull()) {
        if (!params->value.IsObject()) throw wrong_type(p + ".function.parameters", "a JSON-schema object", params->value);
        rj::StringBuffer b;
        rj::Writer<rj::StringBuffer> w(b);
        params->value.Accept(w);
        spec.parameters_json.assign(b.GetString(), b.GetSize());
      }
      specs.push_back(std::move(spec));
    }
  }
  OutputRules& rules = r.rules;
  std::string named;
  if (const rj::Value* tc = f.get("tool_choice")) {
    if (tc->IsString()) {
      std::string s = tc->GetString();
      if (s == "none") rules.tool_choice = ToolChoice::none;
      else if (s == "required") rules.tool_choice = ToolChoice::required;
      else if (s != "auto")
        throw bad_request("invalid_value", "tool_choice", "'tool_choice' must be none, auto, required or a function, found '" + s + "'");
    } else if (tc->IsObject()) {
      auto fn = tc->FindMember("function");
      if (fn == tc->MemberEnd() || !fn->value.IsObject() || !fn->value.HasMember("name") || !fn->value["name"].IsString())
        throw bad_request("missing_field", "tool_choice.function.name", "'tool_choice.function.name' is required");
      named = fn->value["name"].GetString();
      if (!names.count(named))
        throw bad_request("invalid_value", "tool_choice", "'tool_choice' names function '" + named + "', which is not in 'tools'");
      rules.tool_choice = ToolChoice::named;
    } else {
      throw wrong_type("tool_choice", "a string or an object", *tc);
    }
  }
  if (auto p = f.boolean("parallel_tool_calls")) rules.parallel_tool_calls = *p;
  if (rules.tool_choice == ToolChoice::none) return;
  if (rules.tool_choice == ToolChoice::required && specs.empty())
    throw bad_request("invalid_value", "tool_choice", "'tool_choice' is required, but 'tools' declares no function");
  r.tools = std::move(specs);
  if (r.tools.empty()) return;
  const rj::Value& tools = *f.get("tools");
  if (rules.tool_choice == ToolChoice::auto_) {
    // The lazy grammar is a help, not a promise: a schema it cannot follow leaves calls unconstrained.
    try {
      rules.tools = compile_tool_grammars(tools);
    } catch (const RequestError&) {
      rules.tools.clear();
    }
    return;
  }
  rules.tools = compile_tool_grammars(tools);
  if (rules.tool_choice == ToolChoice::named)
    std::erase_if(rules.tools, [&](const ToolGrammar& g) { return g.name != named; });
}

void parse_chat_extras(Fields& f, GenRequest& r) {
  const rj::Value* rf = f.object("response_format");
  const rj::Value* js = f.get("json_schema");
  r.rules.json = compile_response_format(rf, js);
  if (r.rules.json && (r.rules.tool_choice == ToolChoice::required || r.rules.tool_choice == ToolChoice::named))
    throw bad_request("invalid_value", "response_format",
                      "'response_format' asks for JSON content, but 'tool_choice' asks for a tool call");
  if (auto e = f.string("reasoning_effort")) {
    static const std::set<std::string> ok = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (!ok.count(*e)) throw bad_request("invalid_value", "reasoning_effort", "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max; found '" + *e + "'");
  }
  f.object("chat_template_kwargs");
  // Every name other servers use; the first one given wins. -1 = unlimited.
  for (const char* b : {"thinking_token_budget", "reasoning_budget_tokens", "thinking_budget_tokens", "max_reasoning_tokens"})
    if (auto v = f.integer(b, -1, INT32_MAX); v && !r.reasoning_budget) r.reasoning_budget = *v;
  if (auto rf = f.string("reasoning_format")) {
    if (*rf != "reasoning_content" && *rf != "none")
      throw bad_request("invalid_value", "reasoning_format", "'reasoning_format' must be reasoning_content or none; found '" + *rf + "'");
    r.raw_output = *rf == "none";
  }
  if (const rj::Value* mods = f.array("modalities"))
    for (const auto& m : mods->GetArray())
      if (!m.IsString() || std::string(m.GetString()) != "text")
        throw bad_request("unsupported_parameter", "modalities", "'modalities' may only hold \"text\"");
}

// Chat: `logprobs` (bool) and `top_logprobs` (0–20, only with logprobs); completions: `logprobs` (0–20).
void parse_logprobs(Fields& f, GenRequest& r) {
  if (r.chat) {
    auto lp = f.boolean("logprobs");
    auto top = f.integer("top_logprobs", 0, kMaxTopLogprobs);
    if (top && !(lp && *lp))
      throw bad_request("invalid_value", "top_logprobs", "'top_logprobs' requires 'logprobs': true");
    if (lp && *lp) r.logprobs = int(top.value_or(0));
  } else if (auto n = f.integer("logprobs", 0, kMaxTopLogprobs)) {
    r.logprobs = int(*n);
  }
}

}  // namespace

std::vector<int32_t> parse_token_ids(const rj::Value& v, int vocab, const std::string& param) {
  if (!v.IsArray()) throw wrong_type(param, "an array of token ids", v);
  std::vector<int32_t> ids;
  ids.reserve(v.Size());
  for (rj::SizeType i = 0; i < v.Size(); ++i) {
    const rj::Value& t = v[i];
    if (!t.IsInt64()) throw wrong_type(param + "[" + std::to_string(i) + "]", "an integer token id", t);
    int64_t id = t.GetInt64();
    if (id < 0 || id >= vocab)
      throw bad_request("invalid_value", param, "'" + param + "[" + std::to_string(i) + "]' = " + std::to_string(id) +
                                                    " is not a token id in [0, " + std::to_string(vocab) + ")");
    ids.push_back(int32_t(id));
  }
  return ids;
}

GenRequest parse_chat_request(const rj::Value& body, const SamplingParams& defaults, int vocab, bool strict) {
  Fields f(body);
  GenRequest r;
  r.chat = true;
  f.refuse({"audio", "functions", "function_call", "web_search_options", "prediction", "verbosity"});
  parse_messages(f);
  parse_common(f, r, defaults, vocab);
  parse_tools(f, r);
  parse_chat_extras(f, r);
  parse_logprobs(f, r);
  f.check_unknown(strict);
  return r;
}

GenRequest parse_completion_request(const rj::Value& body, const SamplingParams& defaults, int vocab, bool strict) {
  Fields f(body);
  GenRequest r;
  if (auto e = f.boolean("echo")) r.echo = *e;
  if (auto s = f.string("suffix"); s && !s->empty())
    throw bad_request("unsupported_parameter", "suffix", "'suffix' is not supported by tandem");
  if (auto b = f.integer("best_of", INT64_MIN, INT64_MAX); b && *b != 1)
    throw bad_request("unsupported_parameter", "best_of", "'best_of' must be 1");
  const rj::Value* p = f.get("prompt");
  if (!p) throw bad_request("missing_field", "prompt", "'prompt' is required");
  // One prompt per request: a string, a list of ids, or a list holding exactly one of those.
  if (p->IsArray() && p->Size() == 1 && ((*p)[0].IsString() || (*p)[0].IsArray())) p = &(*p)[0];
  if (p->IsString()) {
    r.prompt_text = std::string(p->GetString(), p->GetStringLength());
  } else if (p->IsArray()) {
    if (!p->Empty() && ((*p)[0].IsString() || (*p)[0].IsArray()))
      throw bad_request("unsupported_parameter", "prompt", "'prompt' must be one prompt; lists of prompts are not supported");
    r.prompt_ids = parse_token_ids(*p, vocab, "prompt");
  } else {
    throw wrong_type("prompt", "a string or an array of token ids", *p);
  }
  parse_common(f, r, defaults, vocab, r.echo ? 0 : 1);
  parse_logprobs(f, r);
  f.check_unknown(strict);
  return r;
}

}  // namespace tandem::server
