// Byte-for-byte conformance: every fixture case rendered by tandem::ChatTemplate must equal the render
// of Python's Jinja2 with transformers' settings, and that of @huggingface/jinja unless the case says
// why the two references differ (hf_differs). Fixtures: tests/fixtures/chat_template/.
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tandem/text/chat_template.h"
#include "tandem/error.h"
#include "test_util.h"

namespace {

rapidjson::Document load_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  rapidjson::Document d;
  d.Parse(ss.str().c_str());
  EXPECT_FALSE(d.HasParseError()) << path << ": invalid JSON at offset " << d.GetErrorOffset();
  return d;
}

// Shared variables with the case's laid over them, as JSON text.
std::string variables_json(const rapidjson::Value& spec, const rapidjson::Value& c) {
  rapidjson::Document vars;
  vars.SetObject();
  auto& alloc = vars.GetAllocator();
  auto overlay = [&](const rapidjson::Value& src) {
    for (const auto& m : src.GetObject()) {
      rapidjson::Value key(m.name, alloc);
      rapidjson::Value val(m.value, alloc);
      if (vars.HasMember(key)) vars.RemoveMember(key);
      vars.AddMember(key, val, alloc);
    }
  };
  if (spec.HasMember("variables")) overlay(spec["variables"]);
  if (c.HasMember("variables")) overlay(c["variables"]);
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  vars.Accept(w);
  return buf.GetString();
}

tandem::ChatRenderOptions options_of(const rapidjson::Value& c) {
  tandem::ChatRenderOptions o;
  if (!c.HasMember("options")) return o;
  const auto& opt = c["options"];
  if (opt.HasMember("join_text_parts")) o.join_text_parts = opt["join_text_parts"].GetBool();
  if (opt.HasMember("parse_tool_arguments")) o.parse_tool_arguments = opt["parse_tool_arguments"].GetBool();
  return o;
}

std::string first_difference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  std::ostringstream os;
  os << "first difference at byte " << i << " (expected " << want.size() << " bytes, got " << got.size()
     << ")\n  expected: ..." << want.substr(from, 80) << "\n  got:      ..." << got.substr(from, 80);
  return os.str();
}

struct Tally {
  int jinja2_same = 0, jinja2_total = 0, hf_same = 0, hf_total = 0;
};

// Renders every case of `<stem>_cases.json`; compares with `<stem>_expected_jinja2.json` and, when it
// exists, `<stem>_expected.json` (@huggingface/jinja).
Tally check_fixture(const std::string& stem, bool with_hf) {
  const auto spec = load_json(tandem::test::data_path("chat_template/" + stem + "_cases.json"));
  const auto py = load_json(tandem::test::data_path("chat_template/" + stem + "_expected_jinja2.json"));
  rapidjson::Document hf;
  if (with_hf) hf = load_json(tandem::test::data_path("chat_template/" + stem + "_expected.json"));
  std::unique_ptr<tandem::ChatTemplate> file_template;
  if (spec.HasMember("template"))
    file_template = std::make_unique<tandem::ChatTemplate>(
        tandem::ChatTemplate::from_file(tandem::test::shared_data(std::string("chat_templates/") + spec["template"].GetString())));
  Tally t;
  for (const auto& c : spec["cases"].GetArray()) {
    const std::string name = c["name"].GetString();
    SCOPED_TRACE(stem + " / " + name);
    std::string got, error;
    try {
      const auto vars = variables_json(spec, c);
      if (c.HasMember("source")) {
        got = tandem::ChatTemplate(c["source"].GetString(), name).render(vars, options_of(c));
      } else {
        got = file_template->render(vars, options_of(c));
      }
    } catch (const tandem::Error& e) {
      error = e.what();
    }
    auto compare = [&](const rapidjson::Value& renders, const char* who, int& same, int& total) {
      ASSERT_TRUE(renders.HasMember(name.c_str())) << who << " has no render for " << name;
      const auto& r = renders[name.c_str()];
      ++total;
      if (r.HasMember("error")) {
        EXPECT_FALSE(error.empty()) << who << " failed (" << r["error"].GetString() << ") but we rendered:\n" << got;
        same += !error.empty();
        return;
      }
      const std::string want(r["text"].GetString(), r["text"].GetStringLength());
      EXPECT_TRUE(error.empty()) << "we failed: " << error;
      EXPECT_TRUE(got == want) << "differs from " << who << ": " << first_difference(want, got);
      same += error.empty() && got == want;
    };
    compare(py["renders"], "Jinja2", t.jinja2_same, t.jinja2_total);
    if (with_hf && !c.HasMember("hf_differs")) compare(hf["renders"], "@huggingface/jinja", t.hf_same, t.hf_total);
  }
  std::cout << "[ conform  ] " << stem << ": " << t.jinja2_same << "/" << t.jinja2_total
            << " identical to Jinja2";
  if (with_hf) std::cout << ", " << t.hf_same << "/" << t.hf_total << " to @huggingface/jinja";
  std::cout << "\n";
  return t;
}

TEST(ChatTemplateConformance, Nemotron3MatchesReferences) {
  const Tally t = check_fixture("nemotron3", true);
  EXPECT_GE(t.jinja2_total, 20);
  EXPECT_GE(t.hf_total, 20);
}

TEST(ChatTemplateConformance, NemotronNanoV2MatchesReferences) { check_fixture("nemotron_nano_v2", true); }

// The interpreter feature table (expressions, filters, tests, methods, whitespace, loops, macros).
TEST(ChatTemplateConformance, InterpreterCasesMatchJinja2) { check_fixture("jinja", false); }

}  // namespace
