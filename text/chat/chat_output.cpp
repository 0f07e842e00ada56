// Streaming parser from generated text to reasoning / content / tool-call deltas (server spec §4,
// §10.4, §10.5). It is a small state machine over a buffer of unconsumed text; a state consumes
// only what no later byte can change, so any split of the same text yields the same message.
#include "tandem/text/chat_output.h"

#include <initializer_list>
#include <utility>

#include "chat_output_tools.h"

namespace tandem {
namespace {

using chat::json_quote;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";
constexpr std::string_view kFuncOpen = "<function=";
constexpr std::string_view kFuncClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

// Names longer than this are not a tag: the text goes back to content.
constexpr size_t kMaxNameBytes = 256;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t leading_ws(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && is_ws(s[n])) ++n;
  return n;
}

std::string_view rstrip_ws(std::string_view s) {
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// Earliest position where a marker occurs whole (marker = its index) or where the rest of `s` is
// a proper prefix of one (marker = -1: wait for more text). pos == s.size() when neither.
struct Hit {
  size_t pos;
  int marker;
};

Hit scan(std::string_view s, std::initializer_list<std::string_view> markers) {
  for (size_t i = s.find('<'); i != std::string_view::npos; i = s.find('<', i + 1)) {
    std::string_view rest = s.substr(i);
    int k = 0;
    for (std::string_view m : markers) {
      if (!m.empty() && rest.starts_with(m)) return {i, k};
      ++k;
    }
    for (std::string_view m : markers)
      if (rest.size() < m.size() && m.starts_with(rest)) return {i, -1};
  }
  return {s.size(), -1};
}

// `s` is one of the markers, or a proper prefix of one of them.
bool prefix_of_any(std::string_view s, std::initializer_list<std::string_view> markers) {
  for (std::string_view m : markers)
    if (s.size() < m.size() && m.starts_with(s)) return true;
  return false;
}

std::string_view drop_one_trailing_newline(std::string_view s) {
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

enum class State { reasoning, content, call_open, call_json, func_name, func_body, param_name, param_value, after_func };

}  // namespace

struct ChatOutputParser::Impl {
  ChatOutputOptions options;
  chat::ToolTable tools;
  State state;
  std::string buf;  // text not yet consumed starts at head
  size_t head = 0;
  ChatMessage msg;
  std::vector<ChatDelta>* out = nullptr;

  bool content_started = false;  // content text was emitted (leading whitespace is dropped)
  bool strip_newline = false;    // drop one '\n' at the start of this reasoning span / value
  size_t calls_closed = 0;

  std::string raw;  // text of a call not yet committed; becomes content if the call fails
  const chat::Tool* tool = nullptr;
  bool args_open = false;  // '{' of the open call's arguments was sent
  std::string key;
  uint32_t key_types = 0;
  std::string value;  // a typed value, held until its end

  explicit Impl(ChatOutputOptions o)
      : options(std::move(o)), tools(options.tools),
        state(options.starts_in_reasoning ? State::reasoning : State::content) {
    msg.had_reasoning = options.starts_in_reasoning;
  }

  std::string_view view() const { return std::string_view(buf).substr(head); }
  void consume(size_t n) { head += n; }
  // Drops whitespace at the front; true when there was some.
  bool drop_ws(std::string_view v) {
    size_t n = leading_ws(v);
    consume(n);
    return n > 0;
  }

  void push(ChatDelta::Kind kind, std::string_view text, int index = -1) {
    if (!out->empty()) {
      ChatDelta& last = out->back();
      if (last.kind == kind && last.tool_index == index && last.tool_name.empty()) {
        last.text += text;
        return;
      }
    }
    ChatDelta d;
    d.kind = kind;
    d.text = std::string(text);
    d.tool_index = index;
    out->push_back(std::move(d));
  }
  void emit_reasoning(std::string_view t) {
    if (t.empty()) return;
    msg.reasoning += t;
    push(ChatDelta::Kind::reasoning, t);
  }
  void emit_content(std::string_view t) {
    if (t.empty()) return;
    msg.content += t;
    content_started = true;
    push(ChatDelta::Kind::content, t);
  }
  void emit_args(std::string_view t) {
    int index = int(msg.tool_calls.size()) - 1;
    msg.tool_calls.back().arguments += t;
    push(ChatDelta::Kind::tool_call, t, index);
  }

  // A tag that may open a call was seen; `ws` is the whitespace before it, kept for the fallback.
  void begin_call(std::string_view ws, std::string_view marker) {
    raw.assign(content_started ? ws : std::string_view());
    raw += marker;
  }
  // The call text is not a call after all: it is content, and scanning resumes after it.
  void fail_call() {
    emit_content(raw);
    raw.clear();
    state = State::content;
  }
  void commit_call(const chat::Tool* t) {
    tool = t;
    args_open = false;
    raw.clear();
    size_t index = msg.tool_calls.size();
    msg.tool_calls.push_back({chat::make_call_id(options.id_seed, index), t->name, ""});
    ChatDelta d;
    d.kind = ChatDelta::Kind::tool_call;
    d.tool_index = int(index);
    d.tool_id = msg.tool_calls.back().id;
    d.tool_name = t->name;
    out->push_back(std::move(d));
  }
  void close_call() {
    emit_args(args_open ? "}" : "{}");
    ++calls_closed;
    tool = nullptr;
  }
  void start_param() {
    key_types = tool->types_of(key);
    if (chat::streams_raw(key_types)) {
      std::string head_text = args_open ? "," : "{";
      head_text += json_quote(key) + ":\"";
      emit_args(head_text);
      args_open = true;
    } else {
      value.clear();
    }
    strip_newline = true;
    state = State::param_value;
  }
  void add_value(std::string_view t) {
    if (t.empty()) return;
    if (chat::streams_raw(key_types)) {
      std::string esc;
      chat::append_json_escaped(esc, t);
      emit_args(esc);
    } else {
      value += t;
    }
  }
  void end_param() {
    if (chat::streams_raw(key_types)) {
      emit_args("\"");
      return;
    }
    std::string piece = args_open ? "," : "{";
    piece += json_quote(key) + ":" + chat::typed_value_json(value, key_types);
    emit_args(piece);
    args_open = true;
  }

  // One move of the state machine; false when it needs more text.
  bool step(bool final) {
    std::string_view v = view();
    switch (state) {
      case State::reasoning: return step_reasoning(v, final);
      case State::content: return step_content(v, final);
      case State::call_open: return step_call_open(v, final);
      case State::call_json: return step_call_json(v, final);
      case State::func_name: return step_name(v, final, /*param=*/false);
      case State::param_name: return step_name(v, final, /*param=*/true);
      case State::func_body: return step_func_body(v, final);
      case State::param_value: return step_param_value(v, final);
      case State::after_func: return step_after_func(v, final);
    }
    return false;
  }

  // Reasoning ends at `</think>`, or at `<tool_call>` (llama.cpp's thinking_end_tags, §10.4).
  // One '\n' before the tag belongs to the tag: history renders `<think>\n{r}\n</think>\n`.
  bool step_reasoning(std::string_view v, bool final) {
    if (v.empty()) return false;
    if (strip_newline) {
      strip_newline = false;
      if (v[0] == '\n') consume(1);
      return true;
    }
    Hit h = scan(v, {kThinkClose, kToolOpen});
    if (h.marker >= 0) {
      emit_reasoning(drop_one_trailing_newline(v.substr(0, h.pos)));
      if (h.marker == 0) {
        consume(h.pos + kThinkClose.size());
        state = State::content;
      } else {
        consume(h.pos + kToolOpen.size());
        begin_call("", kToolOpen);
        state = State::call_open;
      }
      return true;
    }
    size_t keep = final ? v.size() : h.pos;
    if (!final && keep > 0 && v[keep - 1] == '\n') --keep;
    if (keep == 0) return false;
    emit_reasoning(v.substr(0, keep));
    consume(keep);
    return true;
  }

  // Content drops leading whitespace, whitespace right before a call and trailing whitespace at
  // the end; a model-written `<think>` opens reasoning only before any content.
  bool step_content(std::string_view v, bool final) {
    if (!content_started && drop_ws(v)) return true;
    if (v.empty()) return false;
    const bool think_allowed = !content_started && !msg.had_reasoning;
    Hit h = scan(v, {kToolOpen, kFuncOpen, think_allowed ? kThinkOpen : std::string_view()});
    if (h.marker == 2) {
      if (h.pos > 0) {  // text came first: the tag is text too
        emit_content(v.substr(0, h.pos + kThinkOpen.size()));
        consume(h.pos + kThinkOpen.size());
        return true;
      }
      consume(kThinkOpen.size());
      msg.had_reasoning = true;
      strip_newline = true;
      state = State::reasoning;
      return true;
    }
    if (h.marker >= 0) {
      std::string_view before = v.substr(0, h.pos);
      std::string_view text = rstrip_ws(before);
      std::string_view marker = h.marker == 0 ? kToolOpen : kFuncOpen;
      emit_content(text);
      begin_call(before.substr(text.size()), marker);
      consume(h.pos + marker.size());
      state = h.marker == 0 ? State::call_open : State::func_name;
      return true;
    }
    size_t keep = rstrip_ws(v.substr(0, final ? v.size() : h.pos)).size();
    if (keep == 0) return false;
    emit_content(v.substr(0, keep));
    consume(keep);
    return true;
  }

  // After `<tool_call>`: `<function=NAME>` (Nemotron's XML) or a JSON body.
  bool step_call_open(std::string_view v, bool final) {
    size_t n = leading_ws(v);
    if (n) {
      raw += v.substr(0, n);
      consume(n);
      return true;
    }
    if (v.starts_with(kFuncOpen)) {
      raw += kFuncOpen;
      consume(kFuncOpen.size());
      state = State::func_name;
      return true;
    }
    if (!v.empty() && v[0] == '{') {
      state = State::call_json;
      return true;
    }
    if (!final && (v.empty() || prefix_of_any(v, {kFuncOpen}))) return false;
    fail_call();
    return true;
  }

  bool step_call_json(std::string_view v, bool final) {
    Hit h = scan(v, {kToolClose});
    if (h.marker < 0) {
      if (!final) return false;
      raw += v;
      consume(v.size());
      fail_call();
      return true;
    }
    std::string_view body = v.substr(0, h.pos);
    raw += body;
    raw += kToolClose;
    consume(h.pos + kToolClose.size());
    std::optional<chat::JsonCall> call = chat::parse_json_call(body, tools);
    if (!call) {
      fail_call();
      return true;
    }
    commit_call(tools.find(call->name));
    emit_args(call->arguments);
    ++calls_closed;
    tool = nullptr;
    state = State::content;
    return true;
  }

  // `NAME>` of `<function=NAME>` or `<parameter=NAME>`.
  bool step_name(std::string_view v, bool final, bool param) {
    for (size_t i = 0; i < v.size(); ++i) {
      char c = v[i];
      if (c == '>') {
        std::string_view name = v.substr(0, i);
        consume(i + 1);
        if (param) {
          key.assign(name);
          start_param();
          return true;
        }
        raw += name;
        raw += '>';
        const chat::Tool* t = tools.find(name);
        if (!t) {
          fail_call();
        } else {
          commit_call(t);
          state = State::func_body;
        }
        return true;
      }
      if (c == '<' || c == '\n' || i >= kMaxNameBytes) break;  // not a tag
    }
    if (!final && v.find_first_of("<\n") == std::string_view::npos && v.size() < kMaxNameBytes) return false;
    if (param) {  // the call ends; `<parameter=` and what follows are content
      close_call();
      raw.assign(kParamOpen);
    }
    fail_call();
    return true;
  }

  bool step_func_body(std::string_view v, bool final) {
    if (drop_ws(v)) return true;
    if (v.starts_with(kParamOpen)) {
      consume(kParamOpen.size());
      state = State::param_name;
      return true;
    }
    if (v.starts_with(kFuncClose)) {
      consume(kFuncClose.size());
      close_call();
      state = State::after_func;
      return true;
    }
    if (!final && (v.empty() || prefix_of_any(v, {kParamOpen, kFuncClose}))) return false;
    if (v.empty()) {  // final: the call was cut off
      close_call();
      state = State::content;
      return false;
    }
    close_call();  // stray text: the call ends here and the text is content
    state = State::content;
    return true;
  }

  // One '\n' after `<parameter=K>` and one before `</parameter>` belong to the format (§10.5).
  // `</function>` also ends a value whose `</parameter>` the model forgot.
  bool step_param_value(std::string_view v, bool final) {
    if (strip_newline && !v.empty()) {
      strip_newline = false;
      if (v[0] == '\n') consume(1);
      return true;
    }
    Hit h = scan(v, {kParamClose, kFuncClose});
    if (h.marker >= 0) {
      add_value(drop_one_trailing_newline(v.substr(0, h.pos)));
      end_param();
      if (h.marker == 0) {
        consume(h.pos + kParamClose.size());
        state = State::func_body;
      } else {
        consume(h.pos + kFuncClose.size());
        close_call();
        state = State::after_func;
      }
      return true;
    }
    size_t keep = final ? v.size() : h.pos;
    if (!final && keep > 0 && v[keep - 1] == '\n') --keep;
    add_value(v.substr(0, keep));
    consume(keep);
    if (final) {
      end_param();
      close_call();
      state = State::content;
      return true;
    }
    return keep > 0;
  }

  bool step_after_func(std::string_view v, bool final) {
    if (drop_ws(v)) return true;
    if (v.starts_with(kToolClose)) {
      consume(kToolClose.size());
      state = State::content;
      return true;
    }
    if (!final && (v.empty() || prefix_of_any(v, {kToolClose}))) return false;
    state = State::content;
    return !v.empty();
  }

  void run(bool final) {
    while (step(final)) {
    }
    if (head > 4096 || head == buf.size()) {
      buf.erase(0, head);
      head = 0;
    }
  }
};

ChatOutputParser::ChatOutputParser(ChatOutputOptions options) : impl_(new Impl(std::move(options))) {}
ChatOutputParser::~ChatOutputParser() { delete impl_; }
ChatOutputParser::ChatOutputParser(ChatOutputParser&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
ChatOutputParser& ChatOutputParser::operator=(ChatOutputParser&& o) noexcept {
  std::swap(impl_, o.impl_);
  return *this;
}

std::vector<ChatDelta> ChatOutputParser::feed(std::string_view text) {
  std::vector<ChatDelta> out;
  impl_->out = &out;
  impl_->buf += text;
  impl_->run(false);
  impl_->out = nullptr;
  return out;
}

std::string ChatOutputParser::finish(FinishCause cause, std::vector<ChatDelta>* tail) {
  std::vector<ChatDelta> out;
  impl_->out = &out;
  impl_->run(true);
  impl_->out = nullptr;
  if (tail) *tail = std::move(out);
  if (impl_->state == State::reasoning || cause == FinishCause::length) return "length";
  return impl_->msg.tool_calls.empty() ? "stop" : "tool_calls";
}

const ChatMessage& ChatOutputParser::message() const { return impl_->msg; }
bool ChatOutputParser::in_reasoning() const { return impl_->state == State::reasoning; }
size_t ChatOutputParser::tool_calls_closed() const { return impl_->calls_closed; }

ChatMessage ChatOutputParser::parse(std::string_view text, const ChatOutputOptions& options, FinishCause cause,
                                    std::string* finish_reason) {
  ChatOutputParser p(options);
  p.feed(text);
  std::string reason = p.finish(cause);
  if (finish_reason) *finish_reason = reason;
  return p.message();
}

}  // namespace tandem
