// Chat request → template variables → prompt text.
#include "tandem/text/chat_prompt.h"

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

bool ends_with(const std::string& s, const char* tail) {
  std::string t(tail);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const rj::Value& request, bool add_generation_prompt,
                              const std::vector<std::pair<std::string, std::string>>& defaults) {
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
  ChatPrompt p;
  try {
    p.text = chat_template.render(std::string_view(b.GetString(), b.GetSize()), o);
  } catch (const Error& e) {
    throw invalid_request("invalid_value", "messages", std::string("the chat template cannot render this request: ") + e.what());
  }
  p.starts_in_reasoning = ends_with(p.text, "<think>\n") || ends_with(p.text, "<think>");
  return p;
}

}  // namespace tandem
