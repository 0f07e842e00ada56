// The JSON line of one drafted step, for --trace-drafts.
#include "draft_trace.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace tandem::cli {

std::string draft_step_json(int64_t step, const DraftStep& s) {
  rapidjson::StringBuffer b;
  rapidjson::Writer<rapidjson::StringBuffer> w(b);
  auto tokens = [&](const int32_t* t, size_t n) {
    w.StartArray();
    for (size_t i = 0; i < n; ++i) w.Int(t[i]);
    w.EndArray();
  };
  w.StartObject();
  w.Key("step"), w.Int64(step);
  w.Key("committed"), w.Int64(s.committed);
  w.Key("proposals"), w.StartObject();
  for (const auto& [name, p] : s.proposals) w.Key(name.c_str()), tokens(p.data(), p.size());
  w.EndObject();
  w.Key("chain");
  if (s.chain.empty()) w.Null();
  else w.String(s.chain.c_str());
  w.Key("extended_by");
  if (s.extended_by.empty()) w.Null();
  else w.String(s.extended_by.c_str());
  w.Key("k_chain"), w.Int(s.extended_by.empty() ? s.k : s.k_chain);
  w.Key("k"), w.Int(s.k);
  w.Key("accepted"), w.Int(s.accepted);
  w.Key("accepted_tokens"), tokens(s.tokens.data(), size_t(s.accepted));
  w.Key("bonus");
  if (s.has_bonus) w.Int(s.bonus());
  else w.Null();
  w.EndObject();
  return b.GetString();
}

}  // namespace tandem::cli
