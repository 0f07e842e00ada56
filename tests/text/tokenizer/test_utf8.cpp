// One UTF-8 repair for every path: the server's TextStream (which `tandem generate` prints through
// too), the tokenizer's StreamDecoder and Tokenizer::decode give the same text for the same tokens,
// the Unicode maximal-subpart rule's text.
#include <gtest/gtest.h>

#include "tandem/request.h"
#include "tandem/text/text_codec.h"
#include "tandem/text/text_stream.h"
#include "tandem/text/tokenizer.h"
#include "tandem/text/utf8.h"
#include "vocab_util.h"

namespace tandem {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

// The gpt-2 vocabulary as the server sees it (a token's bytes; no chat template).
class VocabCodec final : public TextCodec {
 public:
  explicit VocabCodec(const Tokenizer& t) : t_(t) {}
  std::string missing_tokenizer() const override { return ""; }
  std::string missing_chat_template() const override { return "chat template (none in this test)"; }
  std::vector<int32_t> encode(const std::string& text, bool, bool parse_special) const override {
    return t_.encode(text, parse_special);
  }
  std::string token_bytes(int32_t id) const override { return t_.token_bytes(id); }
  ChatPrompt render_chat(const rapidjson::Value&, bool) const override { throw not_available(missing_chat_template()); }

 private:
  const Tokenizer& t_;
};

// The token that stands for exactly `bytes` (gpt-2 has one for every single byte).
int32_t token(const Tokenizer& t, const std::string& bytes) {
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    if (t.token_bytes(id) == bytes) return id;
  ADD_FAILURE() << "no gpt-2 token for the bytes";
  return 0;
}

struct Case {
  const char* what;
  std::vector<std::string> tokens;  // each token's bytes
  std::string want;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"a two-byte character split across tokens", {"na", "\xC3", "\xA9", "ve"}, "na\xC3\xA9ve"},
      {"a four-byte character byte by byte", {"\xF0", "\x9F", "\x98", "\x81", "!"}, "\xF0\x9F\x98\x81!"},
      {"bytes that start nothing", {"a", "\xFF", "b", "\x80", "\x80"}, "a" + R + "b" + R + R},
      {"a sequence cut by the end of the stream", {"x", "\xE2", "\x82"}, "x" + R},
      {"a sequence cut by the next token", {"\xE2", "\x82", "A"}, R + "A"},
      {"a four-byte start cut by a letter", {"\xF0", "\x9F", "\x98", "A"}, R + "A"},
      {"overlong two-byte form", {"\xC0", "\xAF"}, R + R},
      {"overlong three-byte form", {"\xE0", "\x80", "\xAF"}, R + R + R},
      {"overlong four-byte form", {"\xF0", "\x80", "\x80", "\xAF"}, R + R + R + R},
      {"a surrogate", {"\xED", "\xA0", "\x80"}, R + R + R},
      {"past U+10FFFF", {"\xF4", "\x90", "\x80", "\x80"}, R + R + R + R},
      {"a valid start, then a bad second byte", {"\xE2", "\x28", "\xA1"}, R + "(" + R},
  };
  return c;
}

TEST(Utf8Paths, ServerAndTokenizerGiveTheSameText) {
  const Tokenizer& t = test::vocab("gpt-2");
  const VocabCodec codec(t);
  for (const Case& c : cases()) {
    std::vector<int32_t> ids;
    std::string bytes;
    for (const std::string& b : c.tokens) ids.push_back(token(t, b)), bytes += b;

    TextStream server(codec, {});
    StreamDecoder tokenizer(t);
    std::string from_server, from_tokenizer;
    for (int32_t id : ids) {
      std::string piece = server.push(id);
      EXPECT_TRUE(is_valid_utf8(piece)) << c.what << ": a push returned broken text";
      from_server += piece;
      from_tokenizer += tokenizer.push(id);
    }
    from_server += server.flush();
    from_tokenizer += tokenizer.flush();
    EXPECT_EQ(from_server, c.want) << c.what;
    EXPECT_EQ(from_tokenizer, c.want) << c.what;
    EXPECT_EQ(t.decode(ids), c.want) << c.what;
    EXPECT_EQ(utf8_lossy(bytes), c.want) << c.what;
  }
}

TEST(Utf8Paths, StopStringCutsACharacter) {
  // Text before a stop string is final: a character the stop string interrupts is one U+FFFD.
  const Tokenizer& t = test::vocab("gpt-2");
  const VocabCodec codec(t);
  TextStream s(codec, {"A"});
  EXPECT_EQ(s.push(token(t, "\xE2")), "");
  EXPECT_EQ(s.push(token(t, "\x82")), "");
  EXPECT_EQ(s.push(token(t, "A")), R);
  EXPECT_TRUE(s.stopped());
}

TEST(Utf8Decoder, HoldsBackOnlyWhatMayStillBecomeACharacter) {
  Utf8Decoder d;
  EXPECT_EQ(d.push("ab\xE2"), "ab");
  EXPECT_EQ(d.pending_bytes(), 1u);
  EXPECT_EQ(d.push("\x82"), "");
  EXPECT_EQ(d.push("\xAC" "c\xED"), "\xE2\x82\xAC" "c");  // € whole, then a start held
  EXPECT_EQ(d.push("\xA0"), R + R);                       // ED A0 is a surrogate's start: never valid
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.push("\xF4\x8F"), "");
  EXPECT_EQ(d.flush(), R);
  EXPECT_EQ(d.pending_bytes(), 0u);
}

}  // namespace
}  // namespace tandem
