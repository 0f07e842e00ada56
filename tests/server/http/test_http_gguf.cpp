// A GGUF model's text comes from the file itself: the tokenizer and chat template the GGUF reader
// synthesizes as side files (tokenizer.json, tokenizer_config.json), and the profile's overrides win.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "server_fixture.h"
#include "tests/formats/gguf/gguf_test_util.h"

namespace tandem::test {
namespace {

TEST(HttpGguf, TokenizerAndTemplateComeFromTheFile) {
  gguf::test::TempDir dir;
  gguf::test::TinyModel m;
  m.build();
  // Its 32 tokens hold no bytes, so only added tokens can be written; no merges, and a template
  // without the newline.
  m.metadata.set("tokenizer.ggml.merges", gguf::Value::strs({}));
  m.metadata.set("tokenizer.chat_template", gguf::Value::str("{% for m in messages %}{{ m.content }}{% endfor %}"));
  gguf::write_gguf(dir.file("tiny.gguf"), m.metadata, m.tensors);
  Profile p;
  p.load.path = dir.file("tiny.gguf");
  p.load.threads = 1;
  auto o = tiny_options(1);
  o.served_model_name = "tiny-gguf";
  auto srv = start_profile_server(o, p);
  wait_ready(srv->port());
  // Token 12 is "<tool>" (user-defined), 2 is "</s>" (control, parsed as special here).
  auto tk = parse_json(http_request(srv->port(), "POST", "/tokenize", R"({"content":"<tool></s><tool>"})", auth()).body);
  EXPECT_EQ(int_array(tk["tokens"]), (std::vector<int32_t>{12, 2, 12}));
  // The file's template: every message's content.
  auto at = http_request(srv->port(), "POST", "/apply-template", R"({"messages":[{"role":"user","content":"hi"}]})", auth());
  ASSERT_EQ(at.status, 200) << at.body;
  EXPECT_STREQ(parse_json(at.body)["prompt"].GetString(), "hi");
  // A chat prompt is that template's text, and a user's "<tool>" in it is text, not token 12
  // (test_http_prompt_text.cpp); /tokenize counts the same prompt.
  const std::string messages = R"("messages":[{"role":"user","content":"<tool><tool>"}])";
  auto r = http_request(srv->port(), "POST", "/v1/chat/completions",
                        "{" + messages + R"(,"max_tokens":4,"temperature":0})", auth());
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<int32_t> chat_ids =
      int_array(parse_json(http_request(srv->port(), "POST", "/tokenize", "{" + messages + "}", auth()).body)["tokens"]);
  EXPECT_EQ(parse_json(r.body)["usage"]["prompt_tokens"].GetInt(), int(chat_ids.size()));
  EXPECT_EQ(std::count(chat_ids.begin(), chat_ids.end(), 12), 0);
  EXPECT_GT(chat_ids.size(), 2u);
  srv->drain();
  EXPECT_EQ(srv->wait(), 0);

  // The profile's chat_template replaces the file's.
  std::ofstream(dir.file("mine.jinja")) << "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}";
  p.chat_template = dir.file("mine.jinja");
  auto srv2 = start_profile_server(o, p);
  wait_ready(srv2->port());
  auto at2 = http_request(srv2->port(), "POST", "/apply-template", R"({"messages":[{"role":"user","content":"hi"}]})", auth());
  EXPECT_STREQ(parse_json(at2.body)["prompt"].GetString(), "[user] hi");
  srv2->drain();
  EXPECT_EQ(srv2->wait(), 0);
}

}  // namespace
}  // namespace tandem::test
