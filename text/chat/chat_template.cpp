// ChatTemplate: JSON variables in (RapidJSON), our Jinja interpreter in between, prompt text out.
#include "tandem/text/chat_template.h"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <sstream>

#include "jinja/jinja_ast.h"
#include "jinja/jinja_eval.h"
#include "tandem/error.h"

namespace tandem {

struct ChatTemplate::Impl {
  std::unique_ptr<jinja::Program> program;
};

namespace {

using jinja::Value;
constexpr unsigned kParseFlags = rapidjson::kParseValidateEncodingFlag | rapidjson::kParseFullPrecisionFlag;

const char* json_type(const rapidjson::Value& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType: return "null";
    case rapidjson::kFalseType:
    case rapidjson::kTrueType: return "a boolean";
    case rapidjson::kObjectType: return "an object";
    case rapidjson::kArrayType: return "an array";
    case rapidjson::kStringType: return "a string";
    case rapidjson::kNumberType: return "a number";
  }
  return "?";
}

Value convert(const rapidjson::Value& v) {
  switch (v.GetType()) {
    case rapidjson::kNullType: return Value::none();
    case rapidjson::kFalseType: return Value::boolean(false);
    case rapidjson::kTrueType: return Value::boolean(true);
    case rapidjson::kStringType: return Value::string(std::string(v.GetString(), v.GetStringLength()));
    case rapidjson::kNumberType:
      if (v.IsInt64()) return Value::integer(v.GetInt64());
      return Value::number(v.GetDouble());
    case rapidjson::kArrayType: {
      jinja::Array a;
      a.reserve(v.Size());
      for (const auto& x : v.GetArray()) a.push_back(convert(x));
      return Value::array(std::move(a));
    }
    case rapidjson::kObjectType: {
      jinja::Object o;
      o.items.reserve(v.MemberCount());
      for (const auto& m : v.GetObject())
        o.set(std::string(m.name.GetString(), m.name.GetStringLength()), convert(m.value));
      return Value::object(std::move(o));
    }
  }
  return Value();
}

// Turns OpenAI wire forms into what templates expect (ChatRenderOptions says which and why).
class MessageConverter {
 public:
  MessageConverter(const std::string& name, const ChatRenderOptions& opt) : name_(name), opt_(opt) {}

  Value messages(const rapidjson::Value& list) {
    jinja::Array out;
    out.reserve(list.Size());
    for (rapidjson::SizeType i = 0; i < list.Size(); ++i) out.push_back(message(list[i], i));
    return Value::array(std::move(out));
  }

 private:
  Value message(const rapidjson::Value& m, size_t i) {
    if (!m.IsObject()) return convert(m);
    jinja::Object o;
    const auto role = m.FindMember("role");
    const bool user_text = opt_.content_marks != ChatRenderOptions::Marks::none && role != m.MemberEnd() &&
                           role->value.IsString() &&
                           (std::string_view(role->value.GetString()) == "user" ||
                            std::string_view(role->value.GetString()) == "tool");
    for (const auto& member : m.GetObject()) {
      const std::string key(member.name.GetString(), member.name.GetStringLength());
      const rapidjson::Value& v = member.value;
      if (key == "content" && opt_.join_text_parts && text_parts(v)) {
        std::string joined;
        for (rapidjson::SizeType k = 0; k < v.Size(); ++k) {
          if (k) joined += '\n';
          joined.append(v[k]["text"].GetString(), v[k]["text"].GetStringLength());
        }
        o.set(key, Value::string(user_text ? mark(joined) : std::move(joined)));
      } else if (key == "content" && user_text && v.IsString()) {
        o.set(key, Value::string(mark(std::string(v.GetString(), v.GetStringLength()))));
      } else if (key == "content" && user_text && v.IsArray()) {
        o.set(key, marked_parts(v));
      } else if (key == "tool_calls" && opt_.parse_tool_arguments && v.IsArray()) {
        jinja::Array calls;
        for (rapidjson::SizeType j = 0; j < v.Size(); ++j) calls.push_back(tool_call(v[j], i, j));
        o.set(key, Value::array(std::move(calls)));
      } else {
        o.set(key, convert(v));
      }
    }
    return Value::object(std::move(o));
  }

  std::string mark(const std::string& text) const {
    if (opt_.content_marks == ChatRenderOptions::Marks::whole)
      return text.empty() ? text : kUserTextOpen + text + kUserTextClose;
    // Every byte covered by some occurrence of a marked text, then each covered run bracketed.
    std::vector<bool> covered(text.size());
    for (const std::string& t : opt_.marked_texts)
      for (size_t at = t.empty() ? std::string::npos : text.find(t); at != std::string::npos; at = text.find(t, at + 1))
        std::fill(covered.begin() + at, covered.begin() + at + t.size(), true);
    std::string out;
    for (size_t k = 0; k < text.size(); ++k) {
      if (covered[k] && (k == 0 || !covered[k - 1])) out += kUserTextOpen;
      out += text[k];
      if (covered[k] && (k + 1 == text.size() || !covered[k + 1])) out += kUserTextClose;
    }
    return out;
  }

  // Content given as parts: each part's `text` marked, everything else as sent.
  Value marked_parts(const rapidjson::Value& parts) const {
    jinja::Array out;
    for (const auto& p : parts.GetArray()) {
      if (!p.IsObject()) {
        out.push_back(convert(p));
        continue;
      }
      jinja::Object o;
      for (const auto& member : p.GetObject()) {
        std::string key(member.name.GetString(), member.name.GetStringLength());
        if (key == "text" && member.value.IsString())
          o.set(key, Value::string(mark(std::string(member.value.GetString(), member.value.GetStringLength()))));
        else o.set(key, convert(member.value));
      }
      out.push_back(Value::object(std::move(o)));
    }
    return Value::array(std::move(out));
  }

  static bool text_parts(const rapidjson::Value& v) {
    if (!v.IsArray() || v.Empty()) return false;
    for (const auto& p : v.GetArray()) {
      if (!p.IsObject()) return false;
      const auto type = p.FindMember("type");
      const auto text = p.FindMember("text");
      if (type == p.MemberEnd() || !type->value.IsString() || std::string_view(type->value.GetString()) != "text" ||
          text == p.MemberEnd() || !text->value.IsString())
        return false;
    }
    return true;
  }

  Value tool_call(const rapidjson::Value& call, size_t i, size_t j) {
    if (!call.IsObject()) return convert(call);
    const auto fn = call.FindMember("function");
    const bool nested = fn != call.MemberEnd() && fn->value.IsObject();
    const std::string where = "messages[" + std::to_string(i) + "].tool_calls[" + std::to_string(j) + "]" +
                              (nested ? ".function" : "") + ".arguments";
    return with_parsed_arguments(call, nested, where);
  }

  Value with_parsed_arguments(const rapidjson::Value& obj, bool descend, const std::string& where) {
    jinja::Object o;
    for (const auto& member : obj.GetObject()) {
      const std::string key(member.name.GetString(), member.name.GetStringLength());
      if (descend && key == "function" && member.value.IsObject()) {
        o.set(key, with_parsed_arguments(member.value, false, where));
      } else if (!descend && key == "arguments" && member.value.IsString()) {
        o.set(key, arguments(member.value, where));
      } else {
        o.set(key, convert(member.value));
      }
    }
    return Value::object(std::move(o));
  }

  Value arguments(const rapidjson::Value& s, const std::string& where) {
    const std::string_view text(s.GetString(), s.GetStringLength());
    if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) return Value::object(jinja::Object{});
    rapidjson::Document d;
    d.Parse<kParseFlags>(text.data(), text.size());
    if (d.HasParseError())
      fail(name_, ": ", where, ": not valid JSON (", rapidjson::GetParseError_En(d.GetParseError()), " at offset ",
           d.GetErrorOffset(), ")");
    if (!d.IsObject()) fail(name_, ": ", where, ": expected a JSON object, found ", json_type(d));
    return convert(d);
  }

  const std::string& name_;
  const ChatRenderOptions& opt_;
};

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string name) {
  auto impl = std::make_shared<Impl>();
  impl->program = jinja::parse(jinja::Source(std::move(name), source));
  impl_ = std::move(impl);
}

ChatTemplate ChatTemplate::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("chat template file '", path, "': cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  const size_t slash = path.find_last_of('/');
  return ChatTemplate(ss.str(), slash == std::string::npos ? path : path.substr(slash + 1));
}

const std::string& ChatTemplate::name() const { return impl_->program->source.name; }

bool ChatTemplate::reads_variable(std::string_view name) const {
  return impl_->program->names_read.find(name) != impl_->program->names_read.end();
}

std::string ChatTemplate::render(std::string_view variables_json, const ChatRenderOptions& options) const {
  const std::string& tname = name();
  rapidjson::Document doc;
  doc.Parse<kParseFlags>(variables_json.data(), variables_json.size());
  if (doc.HasParseError())
    fail(tname, ": variables: not valid JSON (", rapidjson::GetParseError_En(doc.GetParseError()), " at offset ",
         doc.GetErrorOffset(), ")");
  if (!doc.IsObject()) fail(tname, ": variables: expected a JSON object, found ", json_type(doc));

  auto builtins = std::make_shared<jinja::Scope>(nullptr);
  jinja::add_globals(*builtins);
  auto vars = std::make_shared<jinja::Scope>(builtins);
  MessageConverter messages(tname, options);
  for (const auto& m : doc.GetObject()) {
    std::string key(m.name.GetString(), m.name.GetStringLength());
    vars->set(key, key == "messages" && m.value.IsArray() ? messages.messages(m.value) : convert(m.value));
  }
  for (const auto& [k, v] : options.default_strings)
    if (!doc.HasMember(k.c_str())) vars->set(k, Value::string(v));

  jinja::Evaluator ev(*impl_->program, options.now_unix.value_or(static_cast<int64_t>(std::time(nullptr))));
  return ev.render(vars);
}

}  // namespace tandem
