// The tool-call matcher: alternatives of fixed text matched token by token, then parameter values.
#include "tandem/text/tool_constraint.h"

#include <algorithm>

#include "tandem/error.h"
#include "tandem/text/text_codec.h"
#include "tandem/text/utf8.h"

namespace tandem {

namespace {

std::vector<std::string> token_bytes(const TextCodec& codec, int vocab) {
  std::vector<std::string> out(static_cast<size_t>(vocab));
  for (int id = 0; id < vocab; ++id) {
    try {
      out[size_t(id)] = codec.token_bytes(id);
    } catch (const std::exception&) {
      // Ids past the tokenizer's vocabulary (padded embedding rows) are never text.
    }
  }
  return out;
}

// A string value is whole UTF-8 characters (utf8_step: 0 between characters) and no controls.
int utf8_next(int state, uint8_t b) {
  if (state == 0 && (b < 0x20 || b == 0x7F)) return -1;
  return utf8_step(uint8_t(state), b);
}

}  // namespace

// The state after a token's bytes (-1: not valid there) and the characters it starts.
std::pair<int, int> ToolCallConstraint::text_step(int32_t tok) const {
  int st = utf8_, chars = 0;
  for (unsigned char b : v_.bytes[size_t(tok)]) {
    chars += st == 0;
    if ((st = utf8_next(st, b)) < 0) return {-1, 0};
  }
  return {st, chars};
}

OutputVocab::OutputVocab(const TextCodec& c, int n, std::vector<int32_t> ends)
    : codec(c), vocab(n), end_ids(std::move(ends)), bytes(token_bytes(c, n)), json(bytes, end_ids) {
  is_end.assign(size_t(vocab), 0);
  for (int32_t e : end_ids)
    if (e >= 0 && e < vocab) is_end[size_t(e)] = 1;
  plain.assign(size_t(vocab), 0);
  for (int id = 0; id < vocab; ++id) {
    const std::string& b = bytes[size_t(id)];
    plain[size_t(id)] = !b.empty() && !is_end[size_t(id)] && b.find_first_of("\n<") == std::string::npos;
  }
  if (auto t = encode("<tool_call>"); t.size() == 1) tool_call_token = t[0];
}

std::vector<int32_t> OutputVocab::encode(const std::string& text) const { return codec.encode(text, false, true); }

ToolCallConstraint::ToolCallConstraint(const OutputVocab& vocab, const std::vector<ToolGrammar>& tools, bool end_after)
    : v_(vocab), tools_(tools), end_after_(end_after), close_(vocab.encode("\n</parameter>\n")) {
  check(!tools_.empty(), "tool-call constraint: no tools");
  std::vector<Alt> alts;
  for (size_t i = 0; i < tools_.size(); ++i)
    alts.push_back({v_.encode("<tool_call>\n<function=" + tools_[i].name + ">\n"), Action::tool, int(i)});
  choose(std::move(alts));
}

void ToolCallConstraint::choose(std::vector<Alt> alts, size_t matched) {
  phase_ = Phase::choose;
  alts_ = std::move(alts);
  matched_ = matched;
}

void ToolCallConstraint::offer_params() {
  const ToolGrammar& g = tools_[size_t(tool_)];
  std::vector<Alt> alts;
  bool all_required = true;
  for (size_t i = 0; i < g.params.size(); ++i) {
    if (written_[i]) continue;
    const ToolParam& p = g.params[i];
    all_required &= !p.required;
    const std::string open = "<parameter=" + p.name + ">\n";
    if (p.kind == ToolParam::Kind::choice) {
      for (const std::string& c : p.choices) alts.push_back({v_.encode(open + c + "\n</parameter>\n"), Action::param_and_value, int(i)});
    } else {
      alts.push_back({v_.encode(open), Action::param, int(i)});
    }
  }
  if (all_required) alts.push_back({v_.encode("</function>\n</tool_call>"), Action::call_closed, 0});
  choose(std::move(alts));
}

void ToolCallConstraint::after(const Alt& a) {
  switch (a.action) {
    case Action::tool:
      tool_ = a.arg;
      written_.assign(tools_[size_t(tool_)].params.size(), 0);
      offer_params();
      return;
    case Action::param_and_value:
      written_[size_t(a.arg)] = 1;
      offer_params();
      return;
    case Action::param: {
      param_ = a.arg;
      written_[size_t(param_)] = 1;
      const ToolParam& p = tools_[size_t(tool_)].params[size_t(param_)];
      if (p.kind == ToolParam::Kind::json) {
        value_.emplace(*p.schema, v_.json);
        phase_ = Phase::json;
      } else {
        value_chars_ = 0;
        utf8_ = 0;
        phase_ = Phase::text;
      }
      return;
    }
    case Action::value_closed: offer_params(); return;
    case Action::call_closed:
      if (!end_after_) {
        phase_ = Phase::done;
        return;
      }
      {
        std::vector<Alt> ends;
        for (int32_t e : v_.end_ids) ends.push_back({{e}, Action::end, 0});
        choose(std::move(ends));
      }
      return;
    case Action::end: phase_ = Phase::done; return;
  }
}

void ToolCallConstraint::close_value(size_t matched) {
  value_.reset();
  Alt a{close_, Action::value_closed, 0};
  if (matched == close_.size()) return after(a);
  choose({a}, matched);
}

void ToolCallConstraint::allowed(std::vector<uint8_t>& mask) const {
  mask.assign(size_t(v_.vocab), 0);
  switch (phase_) {
    case Phase::choose:
      for (const Alt& a : alts_)
        if (matched_ < a.tokens.size()) mask[size_t(a.tokens[matched_])] = 1;
      return;
    case Phase::text: {
      const ToolParam& p = tools_[size_t(tool_)].params[size_t(param_)];
      for (int id = 0; id < v_.vocab; ++id) {
        if (!v_.plain[size_t(id)]) continue;
        auto [st, chars] = text_step(id);
        mask[size_t(id)] = st >= 0 && (p.max_length < 0 || value_chars_ + chars <= p.max_length);
      }
      if (utf8_ == 0 && value_chars_ >= p.min_length) mask[size_t(close_[0])] = 1;
      return;
    }
    case Phase::json: {
      value_->allowed(mask);
      mask.resize(size_t(v_.vocab), 0);
      for (int32_t e : v_.end_ids) mask[size_t(e)] = 0;
      if (value_->complete()) mask[size_t(close_[0])] = 1;
      return;
    }
    case Phase::done: return;
  }
}

bool ToolCallConstraint::accept(int32_t tok) {
  if (tok < 0 || tok >= v_.vocab) return false;
  switch (phase_) {
    case Phase::choose: {
      std::vector<Alt> keep;
      for (Alt& a : alts_)
        if (matched_ < a.tokens.size() && a.tokens[matched_] == tok) keep.push_back(std::move(a));
      if (keep.empty()) return false;
      ++matched_;
      // Alternatives never end inside one another (each ends in text no other one continues with),
      // so a complete one is the only one left.
      for (const Alt& a : keep)
        if (a.tokens.size() == matched_) {
          Alt done = a;
          after(done);
          return true;
        }
      alts_ = std::move(keep);
      return true;
    }
    case Phase::text: {
      const ToolParam& p = tools_[size_t(tool_)].params[size_t(param_)];
      if (tok == close_[0] && utf8_ == 0 && value_chars_ >= p.min_length) {
        close_value(1);
        return true;
      }
      if (!v_.plain[size_t(tok)]) return false;
      auto [st, chars] = text_step(tok);
      if (st < 0 || (p.max_length >= 0 && value_chars_ + chars > p.max_length)) return false;
      utf8_ = st;
      value_chars_ += chars;
      return true;
    }
    case Phase::json:
      if (tok == close_[0] && value_->complete()) {
        close_value(1);
        return true;
      }
      if (v_.is_end[size_t(tok)]) return false;
      return value_->accept(tok);
    case Phase::done: return false;
  }
  return false;
}

}  // namespace tandem
