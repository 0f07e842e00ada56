// Chat request → template variables → prompt text.
#include "tandem/text/chat_prompt.h"

#include <ctime>
#include <optional>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "tandem/request.h"
#include "tandem/text/chat_output.h"
#include "tandem/text/chat_template.h"

namespace tandem {

namespace rj = rapidjson;

namespace {

const rj::Value* member(const rj::Value& obj, const char* name) {
  if (!obj.IsObject()) return nullptr;
  auto it = obj.FindMember(name);
  return it == obj.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

std::optional<bool> bool_member(const rj::Value* obj, const char* name) {
  if (!obj) return std::nullopt;
  const rj::Value* v = member(*obj, name);
  if (!v) return std::nullopt;
  if (!v->IsBool()) throw invalid_request("invalid_type", std::string("chat_template_kwargs.") + name,
                                      std::string("'chat_template_kwargs.") + name + "' must be a boolean");
  return v->GetBool();
}

void set(rj::Document& d, const char* name, rj::Value v) {
  auto& a = d.GetAllocator();
  if (auto it = d.FindMember(name); it != d.MemberEnd()) it->value = std::move(v);
  else d.AddMember(rj::Value(name, a), std::move(v), a);
}

// The output of a marked render as segments, or nullopt when its marks do not pair up or, taken
// out, do not give back the unmarked output (the template treated the marked text differently).
std::optional<std::vector<TextSegment>> split_marked(const std::string& marked, const std::string& unmarked) {
  std::vector<TextSegment> out;
  std::string cur, joined;
  bool in_user = false;
  for (char c : marked) {
    if (c != kUserTextOpen && c != kUserTextClose) {
      cur += c;
      continue;
    }
    if ((c == kUserTextOpen) == in_user) return std::nullopt;
    joined += cur;
    if (!cur.empty()) out.push_back({std::move(cur), in_user});
    cur.clear();
    in_user = !in_user;
  }
  if (in_user) return std::nullopt;
  joined += cur;
  if (!cur.empty()) out.push_back({std::move(cur), false});
  if (joined != unmarked) return std::nullopt;
  return out;
}

// Where user text holds an added-token string, for the error when it cannot be kept as text.
std::string first_added_text(const rj::Value* messages, const std::vector<std::string>& added) {
  if (!messages || !messages->IsArray()) return "";
  for (rj::SizeType i = 0; i < messages->Size(); ++i) {
    const rj::Value& m = (*messages)[i];
    const rj::Value* role = member(m, "role");
    const rj::Value* content = member(m, "content");
    if (!role || !role->IsString() || !content) continue;
    if (std::string r = role->GetString(); r != "user" && r != "tool") continue;
    std::vector<std::string> texts;
    if (content->IsString()) texts.emplace_back(content->GetString(), content->GetStringLength());
    else if (content->IsArray())
      for (const auto& part : content->GetArray())
        if (const rj::Value* t = member(part, "text"); t && t->IsString()) texts.emplace_back(t->GetString(), t->GetStringLength());
    for (const std::string& text : texts)
      for (const std::string& a : added)
        if (!a.empty() && text.find(a) != std::string::npos)
          return "messages[" + std::to_string(i) + "].content holds '" + a + "'";
  }
  return "";
}

bool ends_with(const std::string& s, const char* tail) {
  std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const rj::Value& request, bool add_generation_prompt,
                              const std::vector<std::pair<std::string, std::string>>& defaults,
                              const UserTextRule& rule) {
  rj::Document vars(rj::kObjectType);
  auto& a = vars.GetAllocator();
  const rj::Value* messages = member(request, "messages");
  if (!messages) throw invalid_request("missing_field", "messages", "'messages' is required");
  set(vars, "messages", rj::Value(*messages, a));
  // tool_choice "none" renders the prompt without tools (TandemLLM does the same).
  const rj::Value* choice = member(request, "tool_choice");
  bool tools_off = choice && choice->IsString() && std::string(choice->GetString()) == "none";
  if (const rj::Value* tools = member(request, "tools"); tools && !tools_off) set(vars, "tools", rj::Value(*tools, a));
  set(vars, "add_generation_prompt", rj::Value(add_generation_prompt));

  const rj::Value* kwargs = member(request, "chat_template_kwargs");
  std::optional<std::string> effort;
  if (const rj::Value* e = member(request, "reasoning_effort"); e && e->IsString()) effort = e->GetString();
  ThinkingSettings th;
  try {
    th = resolve_thinking(effort, bool_member(kwargs, "enable_thinking"), bool_member(kwargs, "medium_effort"),
                          chat_template.reads_variable("medium_effort"));
  } catch (const Error& e) {
    throw invalid_request("invalid_value", "reasoning_effort", e.what());
  }
  // The switches are always passed: template copies disagree on their defaults (spec §10.1).
  set(vars, "enable_thinking", rj::Value(th.enable_thinking));
  if (th.medium_effort) set(vars, "medium_effort", rj::Value(true));
  if (kwargs && kwargs->IsObject())
    for (auto it = kwargs->MemberBegin(); it != kwargs->MemberEnd(); ++it) {
      std::string k = it->name.GetString();
      if (k == "enable_thinking" || k == "medium_effort") continue;  // resolved above
      set(vars, k.c_str(), rj::Value(it->value, a));
    }

  rj::StringBuffer b;
  rj::Writer<rj::StringBuffer> w(b);
  vars.Accept(w);
  ChatRenderOptions o;
  o.default_strings = defaults;
  o.now_unix = static_cast<int64_t>(std::time(nullptr));  // one clock for both renders below
  const std::string_view json(b.GetString(), b.GetSize());
  std::string unmarked;
  try {
    unmarked = chat_template.render(json, o);
  } catch (const Error& e) {
    throw invalid_request("invalid_value", "messages", std::string("the chat template cannot render this request: ") + e.what());
  }
  ChatPrompt p;
  p.starts_in_reasoning = ends_with(unmarked, "<think>\n") || ends_with(unmarked, "<think>");
  if (rule.user_special_tokens) {
    p.segments.push_back({std::move(unmarked), false});
    return p;
  }
  // Render again with user text bracketed, to find it in the output; a template that trims or
  // compares content makes the whole-content brackets change the output, and then only the
  // added-token strings in it are bracketed.
  for (auto marks : {ChatRenderOptions::Marks::whole, ChatRenderOptions::Marks::occurrences}) {
    o.content_marks = marks;
    o.marked_texts = marks == ChatRenderOptions::Marks::occurrences ? rule.added_texts : std::vector<std::string>{};
    std::optional<std::vector<TextSegment>> segments;
    try {
      segments = split_marked(chat_template.render(json, o), unmarked);
    } catch (const Error&) {
      // The brackets made the template fail where the plain text did not: as a changed output.
    }
    if (segments) {
      p.segments = std::move(*segments);
      return p;
    }
  }
  std::string where = first_added_text(messages, rule.added_texts);
  throw invalid_request("invalid_value", "messages",
                        (where.empty() ? std::string("user content holds added-token text") : where) +
                            ", and the chat template rewrites user content so that this text cannot be told from "
                            "its own control tokens; remove it, or set 'server.special_tokens_in_user_content: true' "
                            "in the profile to let user text carry control tokens");
}

std::string ChatPrompt::text() const {
  std::string out;
  for (const TextSegment& s : segments) out += s.text;
  return out;
}

}  // namespace tandem
